"""Frontier-shaped listing: the sparse bench maker's folders read as real ones, and the
streamed ``inspect --json`` is the report ``json.dump`` wrote."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open

from ckpt_explorer import open_checkpoint
from ckpt_explorer.inspect_report import inspect_report, tensor_entry
from ckpt_explorer.io.gc_pause import gc_paused
from ckpt_explorer.json_stream import tensor_lines, write_json
from ckpt_explorer.types import TensorRecord

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import frontier_maker  # noqa: E402

TINY = {"hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 128}
TINY |= {"n_routed_experts": 4, "q_lora_rank": 64, "kv_lora_rank": 32, "vocab_size": 1000}
TINY |= {"num_attention_heads": 2, "first_k_dense_replace": 1}


def _tiny_deepseek(tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    info = frontier_maker.make("deepseek-v3", out, layers=3, **TINY)
    assert info["tensors"] == 3 + 20 + 2 * (2 + 12 + 2 + 4 * 6 + 6)  # embed/norm/head, layers
    return out


def test_sparse_deepseek_lists_as_safe_open_reads_it(tmp_path: Path) -> None:
    folder = _tiny_deepseek(tmp_path)
    expected = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), "numpy") as f:  # the reference parser accepts every header
            for k in f.keys():  # noqa: SIM118 (safe_open is no dict)
                expected[k] = (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype())
    view = open_checkpoint(folder)
    # DeepSeek-V3 is FP8 with 128 x 128 block scales (quantization_config): each weight is
    # listed once, its weight_scale_inv folded into it as a part
    assert view.family == "hf-quantized" and not view.warnings
    scales = {k for k in expected if k.endswith(".weight_scale_inv")}
    assert scales and {r.name: r.shape for r in view.tensors} == {
        k: s for k, (s, _) in expected.items() if k not in scales
    }
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    in_order = [k for k in index["weight_map"] if k not in scales]
    assert [r.name for r in view.tensors] == in_order  # the index's order
    dtypes = {r.dtype for r in view.tensors}
    assert dtypes == {"fp8_e4m3/block128x128", "float32", "bfloat16"}
    stored = {k for k, (_, dt) in expected.items() if dt == "F8_E4M3"}
    assert {r.name for r in view.tensors if r.dtype.startswith("fp8")} == stored
    assert {k.removesuffix("_scale_inv") for k in scales} == stored  # 256 x 256: 2 x 2 blocks
    assert all(expected[k][0] == (2, 2) for k in scales if "o_proj" in k)


def test_streamed_json_is_the_report(tmp_path: Path) -> None:
    folder = _tiny_deepseek(tmp_path)
    view = open_checkpoint(folder)
    buf = io.StringIO()
    write_json(inspect_report(view, tensors=False), buf, {"tensors": tensor_lines(view.tensors)})
    assert json.loads(buf.getvalue()) == json.loads(json.dumps(inspect_report(view)))
    out = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", "inspect", "--json", str(folder)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)["tensors"] == [tensor_entry(r) for r in view.tensors]


def test_tensor_lines_are_json_dumps_of_each_entry() -> None:
    records = [
        TensorRecord('é"\\x', "bfloat16", (), 0, "f", None),
        TensorRecord("a", "float32", (3, 0), 0, "sub/g.bin", 5, "7"),
        TensorRecord("b", "int8", (2,), 2, "g", 9),
    ]
    assert list(tensor_lines(records)) == [json.dumps(tensor_entry(r)) for r in records]
    assert list(tensor_lines([])) == []
    buf = io.StringIO()
    write_json({"a": [1, {"b": float("nan")}], "t": []}, buf, {"t": iter([])})
    assert buf.getvalue() == json.dumps({"a": [1, {"b": float("nan")}], "t": []}, indent=2) + "\n"


def test_gc_paused_nests_and_restores() -> None:
    import gc

    assert gc.isenabled()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()


def test_listing_imports_neither_numba_nor_torch(tmp_path: Path) -> None:
    folder = _tiny_deepseek(tmp_path)
    code = (
        "import sys; from ckpt_explorer.cli import main; "
        f"code = main(['inspect', '--json', {str(folder)!r}]); "
        "assert not {'numba', 'torch'} & set(sys.modules), sorted(sys.modules); sys.exit(code)"
    )
    subprocess.run(
        [sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=120, check=True
    )
