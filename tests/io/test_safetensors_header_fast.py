"""The column-wise header checks accept exactly what the entry-by-entry checks accept."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.io import safetensors_fast as fast
from ckpt_explorer.io import safetensors_header as sh
from ckpt_explorer.io.safetensors_fast import checked_entries


def _slow(raw: bytes) -> tuple[list[sh.HeaderEntry], dict[str, str]]:
    """The entry-by-entry path alone (what parse_header did before the fast path)."""
    doc = json.loads(raw.decode(), object_pairs_hook=sh._no_duplicates)
    metadata = doc.pop("__metadata__", None) or {}
    entries = [sh._entry("t", k, v) for k, v in doc.items()]
    sh._check_coverage("t", entries)
    return entries, metadata


def _agree(raw: bytes) -> None:
    text = raw.decode("utf-8", "replace")
    try:
        slow = _slow(raw)
    except (CkptExplorerError, ValueError, TypeError, RecursionError, UnicodeDecodeError):
        slow = None
    found = checked_entries(raw, text, sh.DTYPES)
    # each way in on its own too: the compact split and the parsed columns
    compact = None if b"\\" in raw or any(b < 32 for b in raw) else fast._compact(text, sh.DTYPES)
    parsed = None if b"\\" in raw else fast._parsed(raw, text, sh.DTYPES)
    for got in (found, compact, parsed):
        if got is not None:  # accepted here only if accepted there, with the same entries
            entries = got[0] if isinstance(got[0], list) else got[0].entries()
            assert slow is not None, raw
            assert entries == slow[0] and got[1] == slow[1]


def _header(entries: list[tuple[str, str, list[int], int, int]], sep: str = ",") -> str:
    doc: dict = {"__metadata__": {"format": "pt"}}
    for name, dtype, shape, b, e in entries:
        doc[name] = {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}
    return json.dumps(doc, separators=(sep, ":"))


GOOD = _header(
    [
        ("w", "F32", [2, 3], 0, 24),
        ("b:x", "BF16", [3], 24, 30),
        ("z", "F8_E4M3", [0, 5], 30, 30),
        ("f4", "F4", [4], 30, 32),
        ("s", "I64", [], 32, 40),
    ]
)

CASES = [
    GOOD,
    "{}",
    '{"__metadata__":{"a":"b:c"}}',
    '{"__metadata__":null,"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    # duplicates: top level, inside an entry, inside metadata, and hidden by an extra ':'
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
    '"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":{"a":"1","a":"2"}}',
    '{"__metadata__":{"a":"1","a":"2:"}}',
    '{"w":5,"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    # escapes, wrong types, gaps, overlaps, wrong sizes, extra keys
    '{"w\\u003a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[true],"data_offsets":[0,1]}}',
    '{"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
    '"v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}',
    '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}',
    '{"w":{"dtype":["F32"],"shape":[1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":{"a":1}}',
    '{"__metadata__":[]}',
    "[]",
    # the compact split: padding, metadata forms, numbers JSON rejects, names, separators
    GOOD + "    ",
    GOOD + " \n",
    GOOD + " x",
    '{"__metadata__":{},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":{"a":"b","a":"c"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":["ab"],"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":{"a":{"b":"c"}},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":{"a":"b"} ,"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":{"a":"b"},"__metadata__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"__metadata__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[00,4]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,04]}}',
    '{"w":{"dtype":"F32","shape":[1,],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[,1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[2,,2],"data_offsets":[0,16]}}',
    '{"w":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}',
    '{"w\tx":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"w\u0001":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]};'
    '"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
    '"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    '{"w":{"shape":[1],"dtype":"F32","data_offsets":[0,4]}}',
    '{"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},'
    '"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
    '"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},'
    '"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"é:ü":{"dtype":"U8","shape":[3],'
    '"data_offsets":[4,7]}}',
]


@pytest.mark.parametrize("text", CASES)
def test_cases_agree(text: str) -> None:
    _agree(text.encode())


def test_good_header_takes_the_fast_path() -> None:
    for sep in (",", ", "):
        raw = _header([("w", "F32", [2, 3], 0, 24), ("b", "BF16", [3], 24, 30)], sep).encode()
        fast = checked_entries(raw, raw.decode(), sh.DTYPES)
        assert fast is not None and fast == _slow(raw)
        header = sh.parse_header("t", raw, 8 + len(raw) + 30)
        assert list(header.entries) == _slow(raw)[0]


def test_the_writers_header_takes_the_compact_path(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    arrays = {
        "b": np.zeros((2, 3), np.float32),
        "a:1": np.zeros(5, np.uint8),
        "s": np.zeros((), np.int64),
    }
    save_file(arrays, str(tmp_path / "w.safetensors"), metadata={"format": "np", "k": "v:w"})
    data = (tmp_path / "w.safetensors").read_bytes()
    raw = data[8 : 8 + int.from_bytes(data[:8], "little")]
    assert raw.endswith(b" ") or len(raw) % 8 == 0  # the writer pads to 8 bytes
    compact = fast._compact(raw.decode(), sh.DTYPES)
    assert compact is not None and compact[0].entries() == _slow(raw)[0]
    assert compact[1] == {"format": "np", "k": "v:w"}
    _mutate(raw, 2000, seed=1)


ALPHABET = b'{}[]":,0123456789 -\\ufFIBE_'
WIDER = ALPHABET + b"\t\x01.e"  # whitespace and control characters, floats


def _mutate(base: bytes, rounds: int, seed: int, alphabet: bytes = WIDER) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        raw = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(raw))
            op = rng.random()
            if op < 0.4:
                raw[i] = rng.choice(alphabet)
            elif op < 0.7:
                del raw[i]
            else:
                raw[i:i] = bytes([rng.choice(alphabet)])
        _agree(bytes(raw))


def test_random_mutations_agree() -> None:
    _mutate(GOOD.encode(), 3000, seed=0, alphabet=ALPHABET)
    _mutate(GOOD.encode(), 3000, seed=3)
    _mutate((GOOD[:-1] + ',"z":{"dtype":"F4","shape":[2,2],"data_offsets":[40,42]}}').encode(),
            2000, seed=2)  # fmt: skip
