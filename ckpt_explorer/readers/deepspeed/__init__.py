"""DeepSpeed checkpoints: tag folders, their parts, ZeRO partitions and universal checkpoints."""
