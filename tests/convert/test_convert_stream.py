"""Verification of many copied tensors as one stream per file: a whole output file's ranges
against its sources' in place, tensor by tensor only to name the ones that differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer import plan_conversion, run_conversion
from ckpt_explorer.convert import bytecheck
from ckpt_explorer.convert.plan_types import Piece
from ckpt_explorer.convert.verify import verify_output


@pytest.fixture(scope="module")
def many(tmp_path_factory: Any) -> Path:
    """A ``torch.save`` file of 2,000 small bf16/fp32 tensors (storages 64-byte aligned in
    the zip, so the output's ranges and the sources' never line up)."""
    g = torch.Generator().manual_seed(3)
    sd = {
        f"layers.{i // 8}.experts.{i % 8}.w": torch.randn(7 + i % 5, 9, generator=g).to(
            torch.bfloat16 if i % 3 else torch.float32
        )
        for i in range(2000)
    }
    path = tmp_path_factory.mktemp("many") / "many.bin"
    torch.save(sd, path)
    return path


def _corrupt(out: Path, name: str) -> None:
    raw = out.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    begin, end = json.loads(raw[8 : 8 + n])[name]["data_offsets"]
    at = 8 + n + (begin + end) // 2
    with open(out, "r+b") as f:
        f.seek(at)
        f.write(bytes([raw[at] ^ 0x80]))


def test_stream_verification_names_the_one_changed_tensor(
    many: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.safetensors"
    plan = plan_conversion(many, out, "safetensors")
    result = run_conversion(plan)
    assert result.verified, result.mismatches
    streams: list[int] = []
    equal = bytecheck.MappedComparer.equal

    def spy(self: Any, left: list[Piece], right: list[Piece]) -> bool:
        streams.append(len(right))
        return equal(self, left, right)

    monkeypatch.setattr(bytecheck.MappedComparer, "equal", spy)
    assert verify_output(plan, out) == []
    # one stream for the file's 2,000 tensors: the output side merged into one range
    assert len(streams) == 1 and streams[0] >= 1000
    _corrupt(out, "layers.100.experts.3.w")
    _corrupt(out, "layers.249.experts.7.w")
    assert verify_output(plan, out) == [
        "layers.100.experts.3.w: bytes differ from the source",
        "layers.249.experts.7.w: bytes differ from the source",
    ]


def test_mapped_comparer_against_buffered(tmp_path: Path) -> None:
    """Ranges of any lengths and offsets: the in-place comparison agrees with the buffered
    one, equal or not, and a range past a file's end is never equal."""
    a, b = tmp_path / "a", tmp_path / "b"
    data = bytes(range(256)) * 40_000
    a.write_bytes(data)
    b.write_bytes(data[5:] + b"xyzab")
    left = [Piece(str(a), 5, 3_000_001), Piece(str(a), 3_000_006, 4_000_000)]
    right = [Piece(str(b), 0, 7_000_001)]
    with bytecheck.MappedComparer() as mapped, bytecheck.OpenFiles() as files:
        buffered = bytecheck.RangeComparer(files)
        mapped.STEP = 1_000_003  # steps that cut through the ranges
        assert mapped.equal(left, right) and buffered.equal(left, right)
        shifted = [Piece(str(b), 1, 7_000_001)]
        assert not mapped.equal(left, shifted) and not buffered.equal(left, shifted)
        past = [Piece(str(b), len(data) - 10, 7_000_001)]
        assert not mapped.equal(left, past)
