"""The byte path of a many-tensor conversion: kernel copy with its buffered fallback, output
in source byte order, mapped pages dropped per span."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer import plan_conversion, run_conversion
from ckpt_explorer.convert import bytecheck, fastpath
from ckpt_explorer.convert.verify import verify_output
from ckpt_explorer.errors import TruncatedFileError


@pytest.fixture(scope="module")
def many(tmp_path_factory: Any) -> Path:
    """A ``torch.save`` file of 300 bf16/fp32 tensors: its zip stores the storages in key
    order as text ("0", "1", "10", "100" ...), not in the order of the names."""
    g = torch.Generator().manual_seed(5)
    sd = {
        f"layers.{i}.w": torch.randn(40 + i % 7, 33, generator=g).to(
            torch.float32 if i % 4 == 0 else torch.bfloat16
        )
        for i in range(300)
    }
    path = tmp_path_factory.mktemp("many") / "many.bin"
    torch.save(sd, path)
    return path


def _header(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    doc: dict[str, Any] = json.loads(raw[8 : 8 + n])
    doc.pop("__metadata__", None)
    return doc


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _same_values(out: Path, src: Path) -> None:
    from safetensors.torch import load_file

    got = load_file(out)
    want = torch.load(src, weights_only=True)
    assert set(got) == set(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype and _bits(got[name]) == _bits(t), name


@pytest.fixture(scope="module")
def folder(tmp_path_factory: Any) -> Path:
    """An HF folder of two ``save_file`` shards (each stores its tensors sorted by dtype width,
    then name as text: layers.1, layers.10, layers.11 ...) with an index that lists them in
    the model's order, as many writers do."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(6)
    out = tmp_path_factory.mktemp("folder")
    weight_map: dict[str, str] = {}
    for s in range(2):
        name = f"model-0000{s + 1}-of-00002.safetensors"
        sd = {
            f"layers.{i}.w": torch.randn(20 + i % 5, 16, generator=g).to(
                torch.float32 if i % 4 == 0 else torch.bfloat16
            )
            for i in range(s * 60, (s + 1) * 60)
        }
        save_file(sd, str(out / name), metadata={"format": "pt"})
        weight_map.update({n: name for n in sd})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


def _source_order(out: Path, plan: Any) -> tuple[list[str], dict[str, tuple[str, int]]]:
    header = _header(out)
    at = {
        t.name: (os.path.basename(str(t.pieces[0].file)), t.pieces[0].offset) for t in plan.tensors
    }
    return sorted(header, key=lambda n: header[n]["data_offsets"][0]), at


def test_output_follows_the_source_bytes(folder: Path, tmp_path: Path) -> None:
    """Within a dtype width the output holds the tensors in the order of their bytes in the
    sources (each source read front to back, its tensors copied as one range), wider dtypes
    first; the values are the source's, bit for bit."""
    from safetensors.torch import load_file

    out = tmp_path / "out.safetensors"
    plan = plan_conversion(folder, out, "safetensors")
    assert run_conversion(plan).verified
    got = load_file(out)
    for f in sorted(folder.glob("*.safetensors")):
        for name, t in load_file(f).items():
            assert _bits(got[name]) == _bits(t), name
    header = _header(out)
    by_output, at = _source_order(out, plan)
    widths = [header[n]["dtype"] for n in by_output]
    assert widths == sorted(widths, key=lambda d: d != "F32"), "fp32 first, then bf16"
    for dtype in ("F32", "BF16"):
        names = [n for n in by_output if header[n]["dtype"] == dtype]
        assert [at[n] for n in names] == sorted(at[n] for n in names)
    assert [t.name for t in plan.tensors] != by_output, "the plan's order is another"
    runs: list[Any] = []
    for n in by_output:
        fastpath.add_pieces(runs, next(t.pieces for t in plan.tensors if t.name == n))
    assert len(runs) == 4  # per shard: its fp32 block, its bf16 block


def test_a_torch_zip_is_read_front_to_back(many: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.safetensors"
    plan = plan_conversion(many, out, "safetensors")
    assert run_conversion(plan).verified
    _same_values(out, many)
    header = _header(out)
    by_output, at = _source_order(out, plan)
    for dtype in ("F32", "BF16"):
        names = [n for n in by_output if header[n]["dtype"] == dtype]
        assert [at[n] for n in names] == sorted(at[n] for n in names)


def test_the_same_plan_writes_the_same_bytes(many: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.safetensors", tmp_path / "two.safetensors"
    assert run_conversion(plan_conversion(many, one, "safetensors")).verified
    assert run_conversion(plan_conversion(many, two, "safetensors")).verified
    assert one.read_bytes() == two.read_bytes()


def test_kernel_copy_refused_falls_back_to_the_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Page-aligned ranges go to ``copy_file_range``; a kernel that refuses it between two
    filesystems: the range goes through the buffer, later ranges between the same
    filesystems go there directly, and the bytes are the same."""
    data = os.urandom(5 * 4096 + 100)
    src = tmp_path / "src"
    src.write_bytes(data)
    calls: list[int] = []

    def refuse(*args: Any) -> int:
        calls.append(1)
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    monkeypatch.setattr(fastpath, "_NO_KERNEL_COPY", set())
    pieces = (fastpath.Piece(str(src), 4096, 8192), fastpath.Piece(str(src), 3 * 4096, 2000))
    fd = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert fastpath.copy_pieces(fd, 0, pieces) == 10192
        assert fastpath.copy_pieces(fd, 10192, (fastpath.Piece(str(src), 100, 300),)) == 300
    finally:
        os.close(fd)
    assert len(calls) == 1
    got = (tmp_path / "dst").read_bytes()
    assert got[:8192] == data[4096:12288]
    assert got[8192:10192] == data[12288:14288]
    assert got[10192:] == data[100:400]


def test_a_source_shorter_than_its_ranges_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"x" * 100)
    fd = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(TruncatedFileError):
            fastpath.copy_pieces(fd, 0, (fastpath.Piece(str(src), 50, 80),))
    finally:
        os.close(fd)


def test_compared_pages_are_dropped_per_span(
    many: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verification drops the mapped pages it compared in a few calls per step (not two per
    tensor), and still names a changed tensor."""
    out = tmp_path / "out.safetensors"
    plan = plan_conversion(many, out, "safetensors")
    assert run_conversion(plan).verified
    drops: list[int] = []
    release = bytecheck._release

    def spy(m: Any, offset: int, n: int) -> None:
        drops.append(n)
        release(m, offset, n)

    monkeypatch.setattr(bytecheck, "_release", spy)
    monkeypatch.setattr(bytecheck.MappedComparer, "STEP", 256 * 1024)
    assert verify_output(plan, out) == []
    total = sum(t.nbytes for t in plan.tensors)
    assert 0 < len(drops) < len(plan.tensors) / 4
    assert sum(drops) >= total  # both sides' pages, less the spans left to the unmapping
    name = "layers.123.w"
    begin, end = _header(out)[name]["data_offsets"]
    at = 8 + int.from_bytes(out.read_bytes()[:8], "little") + (begin + end) // 2
    with open(out, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))
    assert verify_output(plan, out) == [f"{name}: bytes differ from the source"]
