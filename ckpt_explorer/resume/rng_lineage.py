"""Does B's torch RNG state continue A's? Told by stepping the Mersenne Twister.

torch's CPU generator state (``torch.get_rng_state()``, 5056 bytes) holds the seed it was
seeded with and the 624-word Mersenne Twister array, which changes only by the twist (one twist
per 624 draws). A state restored from A and advanced is A's array twisted ``t`` times; a run that
re-seeded at the resume and did not restore A's state holds its seed's array twisted fewer times
than A's (it is behind A), or another seed. Both are told without running anything but the twist
on the two arrays (up to :data:`MAX_TWISTS` twists; further apart, nothing is said).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

TORCH_CPU_STATE_BYTES = 5056
N, M = 624, 397
MAX_TWISTS = 4096  # about 2.5 million draws
_UPPER, _LOWER, _MAG = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)


@dataclass(frozen=True)
class TorchRng:
    """The parts of torch's CPU generator state that tell its lineage."""

    seed: int
    left: int
    array: np.ndarray  # 624 uint32 words


def parse(raw: bytes) -> TorchRng | None:
    """torch's ``CPUGeneratorImplState`` (its legacy THGeneratorState head): seed (u64),
    left (i32), seeded (i32), next (u64), state[624] (u64 each)."""
    if len(raw) != TORCH_CPU_STATE_BYTES:
        return None
    seed, left, seeded = struct.unpack_from("<QiI", raw, 0)
    words = np.frombuffer(raw, dtype="<u8", count=N, offset=24)
    if seeded not in (0, 1) or not 1 <= left <= N or int(words.max()) >> 32:
        return None
    return TorchRng(seed, left, words.astype(np.uint32))


def seeded_array(seed: int) -> np.ndarray:
    """The array ``torch.manual_seed(seed)`` leaves (MT19937's 32-bit initialisation)."""
    mt = np.zeros(N, dtype=np.uint64)
    mt[0] = seed & 0xFFFFFFFF
    for j in range(1, N):
        prev = int(mt[j - 1])
        mt[j] = (1812433253 * (prev ^ (prev >> 30)) + j) & 0xFFFFFFFF
    return mt.astype(np.uint32)


def twist(mt: np.ndarray) -> np.ndarray:
    """One Mersenne Twister regeneration of the 624 words (vectorised in the four stretches
    whose inputs are all ready)."""
    mt = mt.copy()
    for lo, hi in ((0, N - M), (N - M, 2 * (N - M)), (2 * (N - M), N - 1)):
        i = np.arange(lo, hi)
        y = (mt[i] & _UPPER) | (mt[i + 1] & _LOWER)
        mt[i] = mt[(i + M) % N] ^ (y >> np.uint32(1)) ^ np.where(y & 1, _MAG, np.uint32(0))
    y = (mt[N - 1] & _UPPER) | (mt[0] & _LOWER)
    mt[N - 1] = mt[M - 1] ^ (y >> np.uint32(1)) ^ (_MAG if y & 1 else np.uint32(0))
    return mt


def twists_to(start: np.ndarray, goal: np.ndarray, limit: int = MAX_TWISTS) -> int | None:
    """How many twists take ``start`` to ``goal`` (None: not within ``limit``)."""
    mt = start
    for t in range(limit + 1):
        if np.array_equal(mt, goal):
            return t
        mt = twist(mt)
    return None


def _behind(ta: int | None, a: TorchRng, tb: int, b: TorchRng) -> bool:
    """B's position (draws from the common start) is before A's (``ta`` None: A is further
    than the search went)."""
    return ta is None or tb * N - b.left < ta * N - a.left


def not_restored(a: TorchRng, b: TorchRng) -> str | None:
    """Why B's RNG state does not continue A's (None: it does, or it cannot be told).

    A restored RNG only moves forward from A's; B behind A on its seed's sequence (or seeded
    with another seed) was not restored. B ahead of A on the same sequence is a continuation
    as far as the RNG can tell (a fresh start that ran longer than A looks the same)."""
    if a.seed != b.seed:
        return (
            f"B's torch RNG was seeded with {b.seed}, A's with {a.seed}: B's RNG state is not "
            "A's restored one"
        )
    t = twists_to(a.array, b.array)
    if t is not None:
        if not _behind(0, a, t, b):
            return None  # B continues A
        return (
            f"B's torch RNG state is {a.left - b.left - t * N} draws before A's: an RNG "
            "restored from A only moves forward, so B's was not restored"
        )
    origin = seeded_array(a.seed)
    tb = twists_to(origin, b.array)
    if tb is None:
        return None  # too far apart to tell
    ta = twists_to(origin, a.array)
    if not _behind(ta, a, tb, b):
        return None
    where = f"{ta * N} draws" if ta is not None else f"more than {MAX_TWISTS * N} draws"
    return (
        f"B's torch RNG state is seed {b.seed}'s after about {tb * N} draws, A's after "
        f"{where}: B's RNG started again from the seed at the resume (A's RNG state was not "
        "restored, so data order, augmentation and dropout differ from the run's)"
    )
