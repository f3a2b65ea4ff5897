"""What judging a run of bytes yields: the pickle streams a loader would unpickle, the doubts
that keep the bytes from being judged completely, and the per-file budgets (see :mod:`.views`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from .pickle_machine import Budget, PickleWalk, anon_memory, walk_pickle

MAX_INFLATED = 256 * 2**20  # bytes inflated or decompressed per file, in all
MAX_FILE_OPS = 100_000_000  # opcodes walked per file, over all its pickles
# A hostile file is answered (unverified, naming the limit) within these: the walks and
# decoders of one file stop when this thread has spent FILE_SECONDS of CPU on it (CPU time, so
# a loaded machine or a slow remote read does not change the verdict), and when the process holds more anonymous memory than it did
# when the file was opened plus MAX_FILE_MEMORY (decompressed bytes count too). A very large
# benign pickle (millions of objects) can reach the time limit on a slow machine: the
# environment variables raise both.
SECONDS_ENV = "CKPT_EXPLORER_SCAN_SECONDS"
MEMORY_ENV = "CKPT_EXPLORER_SCAN_MEMORY_MIB"


def _env_number(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


FILE_SECONDS = _env_number(SECONDS_ENV, 8.0)
MAX_FILE_MEMORY = int(_env_number(MEMORY_ENV, 512) * 2**20)


@dataclass
class Stream:
    """One pickle a loader unpickles: where it is, how it walked, and whether
    ``torch.load(weights_only=True)`` reads it (for torch's own verdict)."""

    where: str
    walk: PickleWalk
    buf: Any
    torch_loads: bool = False
    findings: list[Any] | None = None  # judged while the bytes are still mapped
    only_code: bool = False  # bytes that merely look like a pickle: only code found counts


@dataclass
class Judged:
    """What the loaders would unpickle from one run of bytes, and what could not be judged."""

    streams: list[Stream] = field(default_factory=list)
    doubts: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)  # code a consumer imports or runs on request
    unsafe: list[str] = field(default_factory=list)  # code a plain load runs (not a pickle's)
    formats: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, other: Judged) -> None:
        self.streams += other.streams
        self.doubts += other.doubts
        self.code += other.code
        self.unsafe += other.unsafe
        self.formats += other.formats
        self.notes += other.notes


@dataclass
class Scope:
    """Budgets shared by everything judged inside one file."""

    inflated: int = 0
    archives: int = 0
    explained: bool = False  # a DCP data file: not being one canonical archive is expected
    torch_suffix: bool = True  # torch's weights_only verdict applies to its top-level pickle
    name: str = ""  # the file's name (pandas.read_pickle picks its decompression by it)
    ops: int = field(default_factory=lambda: MAX_FILE_OPS)  # opcodes left to walk in this file
    seconds: float = field(default_factory=lambda: FILE_SECONDS)
    memory: int = field(default_factory=lambda: MAX_FILE_MEMORY)
    budget: Budget = field(init=False)

    def __post_init__(self) -> None:
        base = anon_memory()
        self.budget = Budget(
            deadline=time.thread_time() + self.seconds,
            memory=None if base is None else base + self.memory,
            seconds=self.seconds,
            seconds_words=f"{self.seconds:g} CPU seconds per file ({SECONDS_ENV} raises it)",
            memory_words=f"{self.memory / 2**20:g} MiB per file ({MEMORY_ENV} raises it)",
        )

    def walk(self, buf: Any, start: int = 0, end: int | None = None, **kw: Any) -> PickleWalk:
        """:func:`walk_pickle` within the file's budgets (opcodes, time, memory)."""
        walk = walk_pickle(buf, start, end, max_ops=max(self.ops, 1), budget=self.budget, **kw)
        self.ops -= walk.ops
        return walk

    def take(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` of the inflation budget (False: over it)."""
        if self.inflated + nbytes > MAX_INFLATED:
            return False
        self.inflated += nbytes
        return True
