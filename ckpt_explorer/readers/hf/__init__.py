"""Hugging Face folder layouts: unsharded weights, sharded indexes, PEFT adapters, diffusers configs."""
