"""One module per checkpoint family; each returns a CheckpointView and knows nothing of UI."""
