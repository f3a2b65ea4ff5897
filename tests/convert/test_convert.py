"""Conversions of real-tool checkpoints, checked by the real clients that read the outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import torch
from _convert_helpers import snapshot

from ckpt_explorer import open_checkpoint, plan_conversion, run_conversion
from ckpt_explorer.convert import parse_size

ROOT = Path(__file__).resolve().parent.parent.parent


def convert(src: Path, dst: Path, to: str, **kw: Any) -> Any:
    """Convert and assert it verified and the source did not change."""
    before = snapshot(src)
    plan = plan_conversion(src, dst, to, **kw)
    result = run_conversion(plan)
    assert result.verified, result.mismatches
    assert snapshot(src) == before, "the source changed"
    assert dst.exists()
    assert not list(dst.parent.glob(f".{dst.name}.tmp-*")), "temp folder left behind"
    return plan, result


def source_tensors(path: Path) -> dict[str, torch.Tensor]:
    view = open_checkpoint(path)
    return {r.name: view.load(r.name).clone() for r in view.tensors}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), k


def test_parse_size() -> None:
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("500MB") == 500 * 10**6
    assert parse_size("2GiB") == 2 * 2**30
    assert parse_size("10kb") == 10_000
    assert parse_size(1234) == 1234
    with pytest.raises(Exception, match="size"):
        parse_size("lots")


# ------------------------------------------------------------------------- .bin <-> safetensors


@pytest.mark.parametrize("case", ["model_pt", "legacy", "dtypes", "shared_storage", "parameters"])
def test_torch_file_to_safetensors(real_checkpoints: Any, tmp_path: Path, case: str) -> None:
    from safetensors.torch import load_file

    folder, manifest = real_checkpoints("torch")
    src = folder / manifest["cases"][case]["path"]
    _, result = convert(src, tmp_path / "out.safetensors", "safetensors")
    want = {k: v.contiguous() for k, v in torch.load(src, weights_only=True).items()}
    assert_same(load_file(tmp_path / "out.safetensors"), want)
    if case == "model_pt":
        assert result.fast_path_bytes == result.bytes  # every tensor copied as bytes


def test_safetensors_to_bin_loads_with_torch(real_checkpoints: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder, manifest = real_checkpoints("torch")
    src = folder / manifest["cases"]["safetensors"]["path"]
    convert(src, tmp_path / "pytorch_model.bin", "bin")
    got = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    assert_same(got, load_file(src))


def test_reshard_hf_names_index_and_merge_back(real_checkpoints: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder, manifest = real_checkpoints("hf")
    src = folder / manifest["cases"]["gpt2_sharded"]["path"]
    plan, _ = convert(src, tmp_path / "sharded", "safetensors", max_shard_size="30KB")
    n = len(plan.files)
    assert n > 2
    names = sorted(p.name for p in (tmp_path / "sharded").glob("*.safetensors"))
    assert names == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    sizes = 0
    for name in names:
        shard = load_file(tmp_path / "sharded" / name)
        sizes += sum(t.numel() * t.element_size() for t in shard.values())
        assert all(index["weight_map"][k] == name for k in shard)
        assert (
            sum(t.numel() * t.element_size() for t in shard.values()) <= 30_000 or len(shard) == 1
        )
    assert index["metadata"]["total_size"] == sizes and isinstance(sizes, int)
    # merge the shards back into one file
    convert(tmp_path / "sharded", tmp_path / "merged.safetensors", "safetensors")
    assert_same(load_file(tmp_path / "merged.safetensors"), source_tensors(src))


def test_split_one_file_to_bin_shards(real_checkpoints: Any, tmp_path: Path) -> None:
    folder, manifest = real_checkpoints("hf")
    src = folder / manifest["cases"]["llama_single"]["path"]
    convert(src, tmp_path / "out", "bin", max_shard_size="20KB")
    index = json.loads((tmp_path / "out" / "pytorch_model.bin.index.json").read_text())
    got: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        assert "-of-" in shard
        got.update(torch.load(tmp_path / "out" / shard, weights_only=True))
    assert_same(got, source_tensors(src))


def _from_pretrained(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_hf_bin_sharded_to_hf_loads_in_transformers(real_checkpoints: Any, tmp_path: Path) -> None:
    folder, manifest = real_checkpoints("hf")
    src = folder / manifest["cases"]["gpt2_bin_sharded"]["path"]
    convert(src, tmp_path / "hf", "hf", max_shard_size="40KB")
    assert (tmp_path / "hf" / "config.json").read_bytes() == (src / "config.json").read_bytes()
    loaded = _from_pretrained(tmp_path / "hf")
    for name, t in source_tensors(src).items():
        assert torch.equal(loaded[name], t), name


@pytest.mark.parametrize("case", ["hybrid_sharded_model", "pipeline_sharded_model"])
def test_colossalai_model_to_hf_loads_in_transformers(
    real_checkpoints: Any, tmp_path: Path, case: str
) -> None:
    folder, manifest = real_checkpoints("colossalai")
    src = folder / manifest["cases"][case]["path"]
    convert(src, tmp_path / "hf", "hf")
    for side in ("config.json", "generation_config.json"):
        assert (tmp_path / "hf" / side).read_bytes() == (src / side).read_bytes()
    loaded = _from_pretrained(tmp_path / "hf")
    for name, t in source_tensors(src).items():
        assert torch.equal(loaded[name], t), name


@pytest.mark.parametrize(
    "case", ["general_sharded_prefix_bin", "general_sharded_safetensors", "ddp_training_state"]
)
def test_colossalai_model_to_hf_shards(real_checkpoints: Any, tmp_path: Path, case: str) -> None:
    from safetensors.torch import load_file

    folder, manifest = real_checkpoints("colossalai")
    src = folder / manifest["cases"][case]["path"]
    plan, _ = convert(src, tmp_path / "hf", "hf", max_shard_size="30KB")
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    got: dict[str, torch.Tensor] = {}
    for shard in set(index["weight_map"].values()):
        got.update(load_file(tmp_path / "hf" / shard))
    want = source_tensors(src)
    if case == "ddp_training_state":  # the model part only; optimizer etc. dropped
        want = {
            k.removeprefix("modeling/"): v for k, v in want.items() if k.startswith("modeling/")
        }
        assert any("optimizer" in d for d in plan.dropped)
    assert_same(got, want)


def test_converted_model_loads_with_colossalai(tmp_path: Path) -> None:
    pytest.importorskip("colossalai")
    from colossalai.checkpoint_io import GeneralCheckpointIO

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128))
    model.append(torch.nn.Linear(128, 32))
    torch.save(model.state_dict(), tmp_path / "model.bin")
    convert(tmp_path / "model.bin", tmp_path / "sharded", "safetensors", max_shard_size="20KB")
    convert(tmp_path / "model.bin", tmp_path / "one.safetensors", "safetensors")
    for out in (
        tmp_path / "sharded" / "model.safetensors.index.json",
        tmp_path / "one.safetensors",
    ):
        fresh = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128))
        fresh.append(torch.nn.Linear(128, 32))
        GeneralCheckpointIO().load_model(fresh, str(out))
        assert_same(fresh.state_dict(), model.state_dict())


def test_dtype_cast_only_when_asked(real_checkpoints: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder, manifest = real_checkpoints("torch")
    src = folder / manifest["cases"]["dtypes"]["path"]
    convert(src, tmp_path / "bf16.safetensors", "safetensors", dtype="bf16")
    want = torch.load(src, weights_only=True)
    got = load_file(tmp_path / "bf16.safetensors")
    for k, v in want.items():
        expected = v.to(torch.bfloat16) if v.is_floating_point() else v
        assert got[k].dtype == expected.dtype and torch.equal(got[k], expected), k


# --------------------------------------------------------------------------------- optimizers


def _load_sharded_optimizer(folder: Path) -> dict[str, Any]:
    index_path = next(folder.glob("*.index*.json"))
    index = json.loads(index_path.read_text())
    groups = torch.load(folder / index["metadata"]["param_groups"], weights_only=True)
    state: dict[int, Any] = {}
    for shard in dict.fromkeys(index["weight_map"].values()):
        state.update(torch.load(folder / shard, weights_only=True))
    return {"state": state, "param_groups": groups}


def _assert_same_optimizer(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert list(a["state"]) == list(b["state"]) and all(isinstance(k, int) for k in a["state"])
    for pid, st in a["state"].items():
        assert list(st) == list(b["state"][pid])
        for name, v in st.items():
            w = b["state"][pid][name]
            if isinstance(v, torch.Tensor):
                assert v.dtype == w.dtype and torch.equal(v, w), (pid, name)
            else:
                assert v == w and type(v) is type(w), (pid, name)


@pytest.mark.parametrize("case", ["general_optimizer_sharded", "ddp_sharded_optimizer"])
def test_colossalai_sharded_optimizer_to_one_file(
    real_checkpoints: Any, tmp_path: Path, case: str
) -> None:
    folder, manifest = real_checkpoints("colossalai")
    src = folder / manifest["cases"][case]["path"]
    convert(src, tmp_path / "optim.pt", "torch")
    merged = torch.load(tmp_path / "optim.pt", weights_only=True)
    _assert_same_optimizer(merged, _load_sharded_optimizer(src))
    want_ids = [g["params"] for g in manifest["cases"][case]["param_groups"]]
    assert [g["params"] for g in merged["param_groups"]] == want_ids


def test_optimizer_file_to_colossalai_shards_and_back(
    real_checkpoints: Any, tmp_path: Path
) -> None:
    folder, manifest = real_checkpoints("colossalai")
    src = folder / manifest["cases"]["general_optimizer_file"]["path"]
    original = torch.load(src, weights_only=True)
    convert(src, tmp_path / "sharded", "bin", max_shard_size="40KB")
    out = tmp_path / "sharded"
    assert open_checkpoint(out).family == "colossalai-sharded-optimizer"
    shards = sorted(p.name for p in out.glob("pytorch_optim-*.bin"))
    assert len(shards) > 1 and shards[0] == "pytorch_optim-00001.bin"
    index = json.loads((out / "pytorch_optim.bin.index.json").read_text())
    assert isinstance(index["metadata"]["total_size"], float)
    _assert_same_optimizer(_load_sharded_optimizer(out), original)
    convert(out, tmp_path / "again.bin", "torch")
    _assert_same_optimizer(torch.load(tmp_path / "again.bin", weights_only=True), original)


def test_flat_async_optimizer_keeps_int_steps(real_checkpoints: Any, tmp_path: Path) -> None:
    folder, manifest = real_checkpoints("colossalai")
    case = manifest["cases"]["async_save_nested_optimizer_int_step"]
    convert(folder / case["path"], tmp_path / "optim.pt", "torch")
    merged = torch.load(tmp_path / "optim.pt", weights_only=True)
    assert merged["state"][0]["step"] == 3 and isinstance(merged["state"][0]["step"], int)
    assert merged["param_groups"][0]["params"] == case["param_groups"][0]["params"]
    for name, entry in case["tensors"].items():
        _, pid, sname = name.split(".")
        t = merged["state"][int(pid)][sname]
        assert list(t.shape) == entry["shape"] and float(t.double().sum()) == entry["sum"]


# ---------------------------------------------------------------------------------------- DCP


def test_dcp_to_hf_and_to_torch(real_checkpoints: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder, manifest = real_checkpoints("dcp")
    src = folder / manifest["cases"]["dcp_model"]["path"]
    convert(src, tmp_path / "hf", "hf")
    convert(src, tmp_path / "model.pt", "torch")
    dcp_to_torch_save(src, tmp_path / "reference.pt")  # torch's own converter
    ref = torch.load(tmp_path / "reference.pt", weights_only=True)
    assert_same(load_file(tmp_path / "hf" / "model.safetensors"), ref)
    assert_same(torch.load(tmp_path / "model.pt", weights_only=True), ref)


def test_dcp_training_state_model_only(real_checkpoints: Any, tmp_path: Path) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder, manifest = real_checkpoints("dcp")
    src = folder / manifest["cases"]["dcp_training_state"]["path"]
    plan, result = convert(src, tmp_path / "model.pt", "torch", model_only=True)
    dcp_to_torch_save(src, tmp_path / "reference.pt")
    ref = torch.load(tmp_path / "reference.pt", weights_only=False)["model"]
    assert_same(torch.load(tmp_path / "model.pt", weights_only=True), ref)
    assert plan.dropped == [
        "optim.state.* (18 tensor(s), 616 B)",
        "optim.param_groups.* (24 value(s))",
    ]
    assert result.left_out == plan.dropped


def _same_tree(a: Any, b: Any, where: str = "") -> None:
    """``a`` and ``b`` are the same object: container types, key order, values, tensors."""
    assert type(a) is type(b), where
    if isinstance(b, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(b, dict):
        assert list(a) == list(b), where
        for k in b:
            _same_tree(a[k], b[k], f"{where}.{k}")
    elif isinstance(b, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_tree(x, y, f"{where}.{i}")
    else:
        assert a == b, where


def test_dcp_training_state_to_torch_keeps_everything(
    real_checkpoints: Any, tmp_path: Path
) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder, manifest = real_checkpoints("dcp")
    src = folder / manifest["cases"]["dcp_training_state"]["path"]
    plan, result = convert(src, tmp_path / "state.pt", "torch")
    assert plan.dropped == [] and result.left_out == []
    dcp_to_torch_save(src, tmp_path / "reference.pt")  # torch's own converter
    ref = torch.load(tmp_path / "reference.pt", weights_only=True)
    got = torch.load(tmp_path / "state.pt", weights_only=True)
    _same_tree(got, ref)
    assert set(got["optim"]["state"]) == {str(i) for i in range(6)}
    assert [g["params"] for g in got["optim"]["param_groups"]] == [[0, 1], [2, 3, 4, 5]]


def test_whole_state_verification_catches_changes(real_checkpoints: Any, tmp_path: Path) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from ckpt_explorer.convert.verify import verify_output

    folder, manifest = real_checkpoints("dcp")
    src = folder / manifest["cases"]["dcp_training_state"]["path"]
    plan = plan_conversion(src, tmp_path / "state.pt", "torch")
    dcp_to_torch_save(src, tmp_path / "reference.pt")
    assert verify_output(plan, tmp_path / "reference.pt") == []  # torch's own output passes
    state = torch.load(tmp_path / "reference.pt", weights_only=True)
    state["optim"]["param_groups"][1]["lr"] = 0.5
    state["optim"]["state"]["4"]["exp_avg"][0, 0] += 1
    del state["model"]["3.bias"]
    torch.save(state, tmp_path / "changed.pt")
    found = verify_output(plan, tmp_path / "changed.pt")
    assert len(found) == 3, found
    assert found[0].startswith("model: keys")
    assert found[1] == "optim.state.4.exp_avg: bytes differ from the source"
    assert found[2].startswith("optim.param_groups.1.lr: 0.5 written, 0.01")


def test_dcp_get_state_dict_state_to_torch(tmp_path: Path) -> None:
    """A torchtitan-style state: get_state_dict's FQN-keyed optimizer and a plain step."""
    import torch.distributed.checkpoint as dcp
    from torch import nn
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from torch.distributed.checkpoint.state_dict import get_state_dict

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    decay = [model[0].weight, model[2].weight]
    no_decay = [model[0].bias, model[1].weight, model[1].bias, model[2].bias]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    src = tmp_path / "step-1"
    dcp.save({"model": msd, "optim": osd, "step": 1}, checkpoint_id=str(src), no_dist=True)
    plan, _ = convert(src, tmp_path / "state.pt", "torch")
    assert plan.dropped == []
    dcp_to_torch_save(src, tmp_path / "reference.pt")
    got = torch.load(tmp_path / "state.pt", weights_only=True)
    _same_tree(got, torch.load(tmp_path / "reference.pt", weights_only=True))
    assert got["optim"]["param_groups"][0]["params"] == ["0.weight", "2.weight"]
    plan, _ = convert(src, tmp_path / "model.safetensors", "safetensors", model_only=True)
    assert plan.dropped == [
        "optim.state.* (18 tensor(s), 616 B)",
        "optim.param_groups.* (24 value(s))",
        "step (1 value(s))",
    ]


def test_dcp_training_state_elsewhere_needs_model_only(
    real_checkpoints: Any, tmp_path: Path
) -> None:
    from ckpt_explorer.cli import main

    folder, manifest = real_checkpoints("dcp")
    src = folder / manifest["cases"]["dcp_training_state"]["path"]
    for to in ("safetensors", "bin", "dcp"):
        with pytest.raises(Exception, match="--model-only") as e:
            plan_conversion(src, tmp_path / f"out.{to}", to)
        assert "optim.state.* (18 tensor(s)" in str(e.value)
    assert not list(tmp_path.iterdir())
    out = tmp_path / "model.safetensors"
    args = ["convert", str(src), str(out), "--to", "safetensors", "--model-only"]
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", *args], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "verified" in proc.stdout
    assert "left out: optim.state.* (18 tensor(s), 616 B)" in proc.stdout
    assert "left out: optim.param_groups.* (24 value(s))" in proc.stdout
    buf = StringIO()
    again = ["convert", str(src), str(tmp_path / "again.safetensors"), *args[3:], "--json"]
    with redirect_stdout(buf):
        assert main(again) == 0
    doc = json.loads(buf.getvalue())
    assert doc["result"]["left_out"] == doc["plan"]["dropped"]
    assert len(doc["result"]["left_out"]) == 2


def test_torch_to_dcp_loads_with_dcp(real_checkpoints: Any, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    folder, manifest = real_checkpoints("torch")
    src = folder / manifest["cases"]["model_pt"]["path"]
    convert(src, tmp_path / "dcp", "dcp")
    want = torch.load(src, weights_only=True)
    got = {k: torch.zeros_like(v) for k, v in want.items()}
    dcp.load(got, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    assert_same(got, want)


# ----------------------------------------------------------------------------------- DeepSpeed

DS_CASES = ["ds_zero0", "ds_zero1", "ds_zero2", "ds_zero3", "ds_zero2_bf16"]


@pytest.fixture(scope="module")
def deepspeed_hf(real_checkpoints: Any, tmp_path_factory: Any) -> tuple[Path, dict, Path]:
    folder, manifest = real_checkpoints("deepspeed")
    out = tmp_path_factory.mktemp("ds_hf")
    for case in DS_CASES:
        convert(folder / manifest["cases"][case]["path"], out / case, "hf")
    return folder, manifest, out


@pytest.mark.parametrize("case", DS_CASES)
def test_deepspeed_to_hf_equals_fp32_weights(deepspeed_hf: Any, case: str) -> None:
    from safetensors.torch import load_file

    _, manifest, out = deepspeed_hf
    got = load_file(out / case / "model.safetensors")
    fp32 = manifest["cases"][case]["fp32_weights"]
    for name, entry in fp32.items():
        t = got[name]
        assert str(t.dtype).removeprefix("torch.") == entry["dtype"] == "float32"
        assert list(t.shape) == entry["shape"]
        assert float(t.double().sum()) == entry["sum"], name
    buffers = {k for k in got if k not in fp32}
    module = {k.removeprefix("model/") for k in manifest["cases"][case]["tensors"]}
    assert buffers <= module  # buffers come from the module as saved


def test_deepspeed_to_hf_bit_equal_to_zero_to_fp32(deepspeed_hf: Any) -> None:
    """DeepSpeed's own zero_to_fp32 (in a subprocess) gives the same bytes."""
    folder, manifest, out = deepspeed_hf
    script = (
        "import sys, json, torch\n"
        "from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint\n"
        "from safetensors.torch import load_file\n"
        "bad = []\n"
        "for src, got in json.loads(sys.argv[1]):\n"
        "    ref = get_fp32_state_dict_from_zero_checkpoint(src)\n"
        "    mine = load_file(got)\n"
        "    for k, v in ref.items():\n"
        "        if not torch.equal(v.contiguous().view(torch.uint8) if v.dim() else v,"
        " mine[k].contiguous().view(torch.uint8) if v.dim() else mine[k]): bad.append(k)\n"
        "print(json.dumps(bad))\n"
    )
    pairs = [
        [str(folder / manifest["cases"][c]["path"]), str(out / c / "model.safetensors")]
        for c in DS_CASES
        if c != "ds_zero0"
    ]
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(pairs)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_deepspeed_bf16_on_request(real_checkpoints: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder, manifest = real_checkpoints("deepspeed")
    case = manifest["cases"]["ds_zero3"]
    convert(folder / case["path"], tmp_path / "bf16", "hf", dtype="bf16")
    convert(folder / case["path"], tmp_path / "fp32", "hf")
    a = load_file(tmp_path / "bf16" / "model.safetensors")
    b = load_file(tmp_path / "fp32" / "model.safetensors")
    for k in case["fp32_weights"]:
        assert a[k].dtype == torch.bfloat16 and torch.equal(a[k], b[k].to(torch.bfloat16))


def test_deepspeed_never_imported(real_checkpoints: Any, tmp_path: Path) -> None:
    folder, manifest = real_checkpoints("deepspeed")
    src = folder / manifest["cases"]["ds_zero2"]["path"]
    code = (
        "import sys\nfrom ckpt_explorer import plan_conversion, run_conversion\n"
        f"r = run_conversion(plan_conversion({str(src)!r}, {str(tmp_path / 'o')!r}, 'hf'))\n"
        "assert r.verified\nassert 'deepspeed' not in sys.modules, 'deepspeed imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
