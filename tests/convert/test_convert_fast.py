"""The byte-copy conversion path: bit-exact outputs, no torch import, verification that bites.

Sources are made with ``torch.save`` the way training code saves a state_dict: several dtypes
(bfloat16 included), a tied weight (two names, one storage), a slice that is a contiguous view
into another tensor's storage, a transposed (non-contiguous) view, an empty and a 0-d tensor.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _convert_helpers import snapshot

from ckpt_explorer import plan_conversion, run_conversion
from ckpt_explorer.convert.verify import verify_output

ROOT = Path(__file__).resolve().parent.parent.parent

# runs the CLI in a fresh interpreter and fails when torch (or numpy) was imported
NO_TORCH_CLI = """
import sys
from ckpt_explorer.cli import main
code = main(sys.argv[1:])
heavy = [m for m in ("torch", "numpy") if m in sys.modules]
if heavy:
    print("imported: " + ", ".join(heavy), file=sys.stderr)
    sys.exit(99)
sys.exit(code)
"""


def _state_dict(contiguous_only: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    embed = torch.randn(48, 16, generator=g)
    base = torch.randn(64, 32, generator=g)
    sd: dict[str, torch.Tensor] = {
        "embed.weight": embed,
        "lm_head.weight": embed,  # tied: one storage, two names
        "layers.0.w_fp32": torch.randn(33, 17, generator=g),
        "layers.0.w_fp16": torch.randn(8, 8, generator=g).half(),
        "layers.1.w_fp16": torch.randn(8, 8, generator=g).half(),
        "layers.0.w_bf16": torch.randn(5, 7, generator=g).bfloat16(),
        "layers.0.w_fp64": torch.randn(3, generator=g).double(),
        "layers.0.steps": torch.arange(10, dtype=torch.int64),
        "layers.0.mask": torch.rand(9, generator=g) > 0.5,
        "layers.0.codes": torch.randint(-128, 127, (11,), generator=g, dtype=torch.int8),
        "layers.0.slice": base[10:20],  # contiguous view at an offset of base's storage
        "layers.0.base": base,
        "layers.0.empty": torch.empty(0, 4),
        "layers.0.scalar": torch.tensor(3.5, dtype=torch.bfloat16),
    }
    if not contiguous_only:
        sd["layers.0.transposed"] = base.t()  # non-contiguous view of base's storage
    return sd


@pytest.fixture(scope="module")
def sources(tmp_path_factory: Any) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fastsrc")
    torch.save(_state_dict(False), folder / "mixed.bin")
    torch.save(_state_dict(True), folder / "dense.bin")
    return {"mixed": folder / "mixed.bin", "dense": folder / "dense.bin"}


def _bits(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _assert_bit_equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        assert _bits(g) == _bits(w), name


def test_bin_to_safetensors_bit_exact(sources: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file

    src = sources["mixed"]
    before = snapshot(src)
    plan = plan_conversion(src, tmp_path / "out.safetensors", "safetensors")
    result = run_conversion(plan)
    assert result.verified, result.mismatches
    assert snapshot(src) == before and not list(tmp_path.glob(".*"))
    want = torch.load(src, weights_only=True)
    _assert_bit_equal(load_file(tmp_path / "out.safetensors"), want)
    # everything but the transposed view is copied as bytes; that one is loaded and laid out
    slow = [t.name for t in plan.tensors if not t.fast]
    assert slow == ["layers.0.transposed"]
    assert result.fast_path_bytes == result.bytes - want["layers.0.transposed"].nbytes


def _cli_without_torch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH_CLI, *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip


def test_byte_copy_conversions_never_import_torch(sources: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file

    src = sources["dense"]
    one = tmp_path / "one.safetensors"
    proc = _cli_without_torch("convert", str(src), str(one), "--to", "safetensors")
    assert proc.returncode == 0, proc.stderr
    assert "verified" in proc.stdout and "NOT" not in proc.stdout
    want = torch.load(src, weights_only=True)
    _assert_bit_equal(load_file(one), want)
    # safetensors -> safetensors resharding, a folder with an index: also torch-free
    shards = tmp_path / "shards"
    proc = _cli_without_torch(
        "convert", str(one), str(shards), "--to", "safetensors", "--max-shard-size", "4KB"
    )
    assert proc.returncode == 0, proc.stderr
    index = json.loads((shards / "model.safetensors.index.json").read_text())
    got: dict[str, torch.Tensor] = {}
    for name in sorted(set(index["weight_map"].values())):
        got.update(load_file(shards / name))
    assert len(set(index["weight_map"].values())) > 2
    _assert_bit_equal(got, want)


def test_hf_folder_byte_copy_loads_in_transformers(real_checkpoints: Any, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from ckpt_explorer import open_checkpoint

    folder, manifest = real_checkpoints("hf")
    src = folder / manifest["cases"]["gpt2_bin_sharded"]["path"]
    proc = _cli_without_torch("convert", str(src), str(tmp_path / "hf"), "--to", "hf")
    assert proc.returncode == 0, proc.stderr
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    loaded = model.state_dict()
    view = open_checkpoint(src)
    for r in view.tensors:
        assert _bits(loaded[r.name]) == _bits(view.load(r.name)), r.name


def _data_range(path: Path, name: str) -> tuple[int, int]:
    """Absolute [begin, end) of tensor ``name`` in a safetensors file."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    begin, end = json.loads(raw[8 : 8 + n])[name]["data_offsets"]
    return 8 + n + begin, 8 + n + end


def test_a_byte_corrupted_after_writing_fails_the_job(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ckpt_explorer.convert.runner as jobs

    write_extras = jobs.write_extras

    def write_then_corrupt(plan: Any, root: Path) -> None:
        write_extras(plan, root)
        out = root / "out.safetensors"
        begin, end = _data_range(out, "layers.0.w_bf16")
        with open(out, "r+b") as f:
            f.seek((begin + end) // 2)
            byte = f.read(1)
            f.seek((begin + end) // 2)
            f.write(bytes([byte[0] ^ 0x01]))

    monkeypatch.setattr(jobs, "write_extras", write_then_corrupt)
    result = run_conversion(
        plan_conversion(sources["mixed"], tmp_path / "out.safetensors", "safetensors")
    )
    assert not result.verified
    assert result.mismatches == ["layers.0.w_bf16: bytes differ from the source"]
    assert not list(tmp_path.iterdir()), "nothing installed, no temp folder left"


def test_verifier_parses_the_header_itself(sources: dict[str, Path], tmp_path: Path) -> None:
    """Two same-sized tensors whose header entries are swapped: every byte of the data is
    still the source's, but each name now points at the other tensor's bytes."""
    src = sources["dense"]
    out = tmp_path / "out.safetensors"
    plan = plan_conversion(src, out, "safetensors")
    assert run_conversion(plan).verified
    raw = bytearray(out.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    a, b = "layers.0.w_fp16", "layers.1.w_fp16"
    header[a]["data_offsets"], header[b]["data_offsets"] = (
        header[b]["data_offsets"],
        header[a]["data_offsets"],
    )
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n
    raw[8 : 8 + n] = text + b" " * (n - len(text))
    out.write_bytes(bytes(raw))
    assert verify_output(plan, out) == [
        f"{a}: bytes differ from the source",
        f"{b}: bytes differ from the source",
    ]
