"""The torch-free diff path (raw numpy views of mapped bytes) gives every figure of the torch
path bit for bit: every dtype the raw path reads, same-dtype and mixed pairs, NaN, ±Inf,
-0.0, subnormals, every bfloat16 and float8 bit pattern; and a safetensors diff in a fresh
process never imports torch."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import open_checkpoint
from ckpt_explorer.diff import engine as engine_mod
from ckpt_explorer.diff import kernel
from ckpt_explorer.diff.engine import Engine, plan_pairs
from ckpt_explorer.diff.raw_arrays import fp8_table

pytest.importorskip("numba")

FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
INTS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
UINTS = (torch.uint16, torch.uint32, torch.uint64)


@pytest.fixture(autouse=True)
def numba_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CKPT_EXPLORER_KERNEL", raising=False)
    monkeypatch.setattr(kernel, "_loaded", False)
    assert kernel.have_numba()


def _specials(dtype: torch.dtype) -> torch.Tensor:
    """NaN, ±Inf, ±0, subnormal and extreme values of a float dtype (float64 values)."""
    info = torch.finfo(dtype)
    vals = [math.nan, math.inf, -math.inf, 0.0, -0.0, info.tiny, -info.tiny / 2, info.max]
    vals += [-info.max, info.eps, 1.0, -1.0, 3.0]
    return torch.tensor(vals, dtype=torch.float64)


def _all_patterns(dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every bit pattern of an 8- or 16-bit float on side A, a shuffle of them on side B."""
    bits = 8 * torch.tensor([], dtype=dtype).element_size()
    raw = torch.arange(2**bits, dtype=torch.int32)
    raw = raw.to(torch.uint8) if bits == 8 else raw.to(torch.int16)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(raw.numel(), generator=g)
    return raw.view(dtype), raw[perm].view(dtype)


def _float_pair(dtype: torch.dtype, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=g, dtype=torch.float64) * 0.02
    b = a + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64)
    s = _specials(dtype)
    a[: s.numel()] = s
    b[: s.numel()] = s.flip(0)
    b[n // 2 : n // 2 + 1000] = a[n // 2 : n // 2 + 1000]  # some chunks hold equal bytes
    return a.to(dtype), b.to(dtype)


def _tensors(seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Same-named pairs of every dtype, plus mixed-dtype pairs."""
    a: dict[str, torch.Tensor] = {}
    b: dict[str, torch.Tensor] = {}
    for i, dt in enumerate((torch.bfloat16, torch.float16, torch.float32, torch.float64)):
        a[f"f.{dt}"], b[f"f.{dt}"] = _float_pair(dt, 70_001, seed + i)
        same = _float_pair(dt, 3_001, seed + 10 + i)[0]
        a[f"same.{dt}"], b[f"same.{dt}"] = same, same.clone()
    for dt in (torch.bfloat16, torch.float16):
        a[f"all.{dt}"], b[f"all.{dt}"] = _all_patterns(dt, seed)
    for name in FP8:
        dt = getattr(torch, name)
        x, y = _all_patterns(dt, seed)
        a[f"all.{name}"], b[f"all.{name}"] = x, y
        a[f"mix.{name}"], b[f"mix.{name}"] = x.clone(), torch.randn(256).bfloat16()
    g = torch.Generator().manual_seed(seed)
    for dt in INTS + UINTS:
        hi = 100 if dt in (torch.int8, torch.uint8) else 2**15 - 1
        x = torch.randint(0, hi, (20_000,), generator=g, dtype=torch.int64)
        y = x.clone()
        y[::7] += 1
        if dt in (torch.int64, torch.uint64):
            x[:4] = torch.tensor([2**53 + 1, 2**62 + 3, 2**63 - 1, 12345])
        a[f"i.{dt}"], b[f"i.{dt}"] = x.to(dt), y.to(dt)
    x = torch.rand(5_000, generator=g) > 0.5
    a["bool"], b["bool"] = x, x.roll(3)
    c = torch.randn(4_000, generator=g, dtype=torch.complex64)
    a["complex"], b["complex"] = c, c * (1 + 1e-3j)
    # mixed dtypes: the kernels widen both sides
    base = _float_pair(torch.float32, 9_000, seed + 50)
    a["mix.bf16.f32"], b["mix.bf16.f32"] = base[0].bfloat16(), base[1]
    a["mix.f16.bf16"], b["mix.f16.bf16"] = base[0].half(), base[1].bfloat16()
    a["mix.f32.f64"], b["mix.f32.f64"] = base[0], base[1].double()
    a["mix.i32.f32"], b["mix.i32.f32"] = (base[0] * 100).int(), base[1]
    a["mix.bool.bf16"], b["mix.bool.bf16"] = base[0] > 0, base[1].bfloat16()
    a["mix.c64.f32"], b["mix.c64.f32"] = c.clone(), torch.view_as_real(c).reshape(-1)[:4_000]
    a["mix.f8.f16"], b["mix.f8.f16"] = base[0].to(torch.float8_e4m3fn), base[1].half()
    return {k: v.clone() for k, v in a.items()}, {k: v.clone() for k, v in b.items()}


def _bits(v: Any) -> Any:
    if isinstance(v, str) and v.lower().lstrip("+-") in ("inf", "infinity", "nan"):
        v = float(v.lower().replace("infinity", "inf"))  # JSON's spelling of non-finite
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v).hex()
    return v


def _rows(a: Path, b: Path, raw: bool, threads: int, chunk: int) -> list[dict[str, Any]]:
    va, vb = open_checkpoint(a), open_checkpoint(b)
    eng = Engine(va, vb, chunk_bytes=chunk, threads=threads, readahead=False)
    if not raw:
        eng._raw_pair = lambda *args: None  # type: ignore[method-assign]
    else:
        real = eng._raw_pair
        taken: list[bool] = []

        def spy(*args: Any) -> Any:
            out = real(*args)
            taken.append(out is not None)
            return out

        eng._raw_pair = spy  # type: ignore[method-assign]
    rows = eng.run(plan_pairs(va, vb))
    if raw:
        assert all(taken), "every pair should take the raw path"
    return [{k: _bits(v) for k, v in r.to_dict().items()} for r in rows]


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
@pytest.mark.parametrize(("threads", "chunk"), [(1, 32 * 2**20), (3, 4096)])
def test_raw_path_equals_torch_path(tmp_path: Path, fmt: str, threads: int, chunk: int) -> None:
    ta, tb = _tensors(seed=threads)
    if fmt == "safetensors":
        pa, pb = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
        save_file(ta, str(pa))
        save_file(tb, str(pb))
    else:
        pa, pb = tmp_path / "a.bin", tmp_path / "b.bin"
        torch.save(ta, pa)
        torch.save(tb, pb)
    new = _rows(pa, pb, True, threads, chunk)
    old = _rows(pa, pb, False, threads, chunk)
    assert len(new) == len(ta)
    for n, o in zip(new, old, strict=True):
        assert n == o, n["name"]
    statuses = {r["name"]: r["status"] for r in new}
    assert statuses["same.torch.bfloat16"] == "identical"
    assert statuses["f.torch.float32"] == "changed"
    assert statuses["mix.bf16.f32"] == "dtype_mismatch"
    # complex against real of one shape: no element-wise figures (the flat views differ)
    complex_row = next(r for r in new if r["name"] == "mix.c64.f32")
    assert complex_row["status"] == "dtype_mismatch" and complex_row["max_abs"] is None


def test_fp8_tables_are_torchs() -> None:
    for name in FP8:
        ours = torch.from_numpy(fp8_table(name).copy())
        theirs = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(getattr(torch, name))
        theirs = theirs.to(torch.float32)
        assert torch.equal(torch.isnan(ours), torch.isnan(theirs)), name
        fin = ~torch.isnan(ours)
        assert torch.equal(ours[fin].view(torch.int32), theirs[fin].view(torch.int32)), name


def _unpadded(path: Path, w: torch.Tensor) -> None:
    """A safetensors file whose bfloat16 tensor starts at an odd byte (3 int8 before it)."""
    data = bytes([1, 2, 3]) + w.view(torch.int16).numpy().tobytes()
    header = {
        "a": {"dtype": "I8", "shape": [3], "data_offsets": [0, 3]},
        "w": {"dtype": "BF16", "shape": [w.numel()], "data_offsets": [3, len(data)]},
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_unaligned_bytes_take_an_aligned_copy(tmp_path: Path) -> None:
    """Unpadded tensors start at any byte; the kernels still see aligned arrays and the
    figures equal the torch path's."""
    pa, pb = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    _unpadded(pa, torch.randn(1001).bfloat16())
    _unpadded(pb, torch.randn(1001).bfloat16())
    view = open_checkpoint(pa)
    raw = view.record("w").read_values.dense_bytes()  # type: ignore[union-attr]
    assert raw is not None
    assert np.frombuffer(raw, np.uint8).ctypes.data % 2 == 1
    rows = _rows(pa, pb, True, 1, 2**20)
    assert rows == _rows(pa, pb, False, 1, 2**20)
    assert {r["name"]: r["status"] for r in rows}["w"] == "changed"


CHILD = r"""
import json, sys
from ckpt_explorer.cli import main
code = main(["diff", sys.argv[1], sys.argv[2], "--json"])
print(json.dumps({"code": code, "torch": "torch" in sys.modules}), file=sys.stderr)
"""


@pytest.mark.parametrize("layout", ["file", "folder"])
def test_safetensors_diff_does_not_import_torch(tmp_path: Path, layout: str) -> None:
    ta, tb = _tensors(seed=0)
    for side, tensors in (("a", ta), ("b", tb)):
        if layout == "file":
            save_file(tensors, str(tmp_path / f"{side}.safetensors"))
        else:
            folder = tmp_path / side
            folder.mkdir()
            names = list(tensors)
            half = len(names) // 2
            shards = {"model-00001-of-00002.safetensors": names[:half]}
            shards["model-00002-of-00002.safetensors"] = names[half:]
            for shard, keys in shards.items():
                save_file({k: tensors[k] for k in keys}, str(folder / shard))
            index = {"metadata": {}, "weight_map": {k: s for s, ks in shards.items() for k in ks}}
            (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    a = tmp_path / ("a.safetensors" if layout == "file" else "a")
    b = tmp_path / ("b.safetensors" if layout == "file" else "b")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parent.parent.parent,
    )
    child = json.loads(proc.stderr.strip().splitlines()[-1])
    assert child == {"code": 1, "torch": False}, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    # the child's figures are the in-process torch path's
    rows = {r["name"]: r for r in out["tensors"]}
    old = engine_mod.Engine(open_checkpoint(a), open_checkpoint(b))
    old._raw_pair = lambda *args: None  # type: ignore[method-assign]
    for r in old.run(plan_pairs(old.view_a, old.view_b)):
        mine = rows[r.name]
        for key in ("max_abs", "mean_abs", "rel_l2", "diff_l2", "n_outside", "nan_a", "inf_b"):
            theirs = getattr(r, key)
            assert _bits(mine[key]) == _bits(theirs), (r.name, key)
