"""torch.distributed.checkpoint folders: metadata, storage reads and the optimizer inside."""
