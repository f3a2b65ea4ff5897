"""The parallel layout asked about: sizes, plugin, ZeRO stage, dtype, GPU memory."""

from __future__ import annotations

from dataclasses import dataclass

PLUGINS = ("hybrid", "gemini", "lowlevelzero", "ddp", "fsdp")
# the ZeRO stage each plugin runs when none is asked (ColossalAI defaults; FSDP FULL_SHARD)
DEFAULT_ZERO = {"hybrid": 0, "gemini": 3, "lowlevelzero": 1, "ddp": 0, "fsdp": 3}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Layout:
    """``gpus`` None: the smallest world (tp * pp * ep); ``zero`` None: the plugin's default."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    zero: int | None = None
    plugin: str = "hybrid"
    gpus: int | None = None
    gpu_mem: int | None = None
    dtype: str = "bf16"

    @property
    def stage(self) -> int:
        """The ZeRO stage in effect."""
        return DEFAULT_ZERO[self.plugin] if self.zero is None else self.zero

    @property
    def world(self) -> int:
        return self.gpus if self.gpus is not None else self.tp * self.pp * self.ep

    @property
    def dp(self) -> int:
        """Data-parallel size (0 when tp * pp does not divide the world)."""
        model = self.tp * self.pp
        return self.world // model if self.world % model == 0 else 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]
