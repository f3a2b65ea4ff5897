"""Megatron-LM checkpoints: legacy per-rank files and megatron-core dist folders, their names, ids and HF view."""
