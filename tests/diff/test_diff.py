"""The diff engine on checkpoints written by real tools, figures checked in float64."""

from __future__ import annotations

import itertools
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import CkptExplorerError, DiffResult, diff_checkpoints, open_checkpoint
from ckpt_explorer.contracts import Progress
from ckpt_explorer.diff.rows import TensorDiff


def reference(a: torch.Tensor, b: torch.Tensor, atol: float = 0.0, rtol: float = 0.0) -> dict:
    """The figures, computed independently with numpy in float64 over the whole tensors."""
    x = a.detach().to(torch.float64).numpy().ravel()
    y = b.detach().to(torch.float64).numpy().ravel()
    fin = np.isfinite(x) & np.isfinite(y)
    xf, yf = x[fin], y[fin]
    d = np.abs(yf - xf)
    na, nb = float(np.sqrt(np.sum(xf * xf))), float(np.sqrt(np.sum(yf * yf)))
    with np.errstate(invalid="ignore"):
        close = (np.abs(y - x) <= atol + rtol * np.abs(x)) | (x == y) | (np.isnan(x) & np.isnan(y))
    return {
        "max_abs": float(d.max()) if d.size else 0.0,
        "mean_abs": float(d.mean()) if d.size else 0.0,
        "rel_l2": float(np.sqrt(np.sum((yf - xf) ** 2))) / na,
        "cosine": float(np.dot(xf, yf)) / (na * nb),
        "n_outside": int((~close).sum()),
        "nan_a": int(np.isnan(x).sum()),
        "nan_b": int(np.isnan(y).sum()),
        "inf_a": int(np.isinf(x).sum()),
        "inf_b": int(np.isinf(y).sum()),
        "norm_a": na,
        "norm_b": nb,
    }


def assert_figures(row: TensorDiff, ref: dict, rel: float = 1e-12) -> None:
    for key, want in ref.items():
        got = getattr(row, key)
        if isinstance(want, int):
            assert got == want, (row.name, key, got, want)
        else:
            assert got == pytest.approx(want, rel=rel, abs=1e-300), (row.name, key, got, want)


def rows(result: DiffResult) -> dict[str, TensorDiff]:
    return {r.name: r for r in result.tensors}


# ---- a tiny transformers model written by three tools --------------------------------------
@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("llama")
    cfg = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(root / "hf")
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    torch.save(sd, root / "sd.bin")
    import torch.distributed.checkpoint as dcp

    dcp.save({k: v.clone() for k, v in sd.items()}, checkpoint_id=str(root / "dcp"), no_dist=True)
    return {"root": root, "sd": sd}


def test_same_weights_written_by_three_tools_compare_identical(llama: dict[str, Any]) -> None:
    root = llama["root"]
    for other in ("sd.bin", "dcp"):
        result = diff_checkpoints(root / "hf", root / other)
        s = result.summary()
        assert result.equal, (other, result.format_text())
        assert s["identical"] == len(llama["sd"]) == s["compared"]
        assert s["changed"] == s["only_in_a"] == s["only_in_b"] == 0
        assert all(r.max_abs == 0.0 and r.n_outside == 0 for r in result.tensors)


def test_planted_weight_difference_exact_figures(llama: dict[str, Any], tmp_path: Path) -> None:
    sd = llama["sd"]
    changed = {k: v.clone() for k, v in sd.items()}
    name = "model.layers.1.mlp.down_proj.weight"
    g = torch.Generator().manual_seed(1)
    changed[name] = changed[name] + 1e-3 * torch.randn(changed[name].shape, generator=g)
    changed["model.norm.weight"][3] += 0.5
    save_file(changed, str(tmp_path / "changed.safetensors"))
    for atol, rtol in ((0.0, 0.0), (1e-3, 1e-2)):
        result = diff_checkpoints(
            llama["root"] / "hf", tmp_path / "changed.safetensors", atol=atol, rtol=rtol
        )
        by = rows(result)
        assert by[name].status == "changed"
        assert_figures(by[name], reference(sd[name], changed[name], atol, rtol))
        assert_figures(
            by["model.norm.weight"],
            reference(sd["model.norm.weight"], changed["model.norm.weight"], atol, rtol),
        )
        assert by["model.norm.weight"].max_abs == pytest.approx(0.5, rel=1e-6)
        assert {r.name for r in result.tensors if r.status != "identical"} == {
            name,
            "model.norm.weight",
        }
        assert not result.equal
        first, second = result.changed()[0].rel_l2, result.changed()[1].rel_l2
        assert first is not None and second is not None and first >= second
    # per-layer aggregate: layer 1 has one changed tensor, layer 0 none
    layers = {g["layer"]: g for g in result.by_layer() if g["part"] == ""}
    assert layers[1]["changed"] == 1 and layers[0]["changed"] == 0
    assert layers[1]["max_abs"] == by[name].max_abs
    modules = {g["module"]: g for g in result.by_module()}
    assert modules["model.layers.1.mlp.down_proj"]["changed"] == 1


def test_tolerance_makes_small_changes_equal(tmp_path: Path) -> None:
    a = torch.linspace(-1, 1, 1000, dtype=torch.float64)
    b = a + 1e-9
    save_file({"x": a}, str(tmp_path / "a.safetensors"))
    save_file({"x": b}, str(tmp_path / "b.safetensors"))
    loose = diff_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors", atol=1e-8)
    assert loose.equal and loose.tensors[0].status == "equal"
    strict = diff_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert not strict.equal and strict.tensors[0].n_outside == 1000


def test_bf16_figures_are_float64_exact(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(2)
    a = (torch.randn(300, 257, generator=g) * 100).to(torch.bfloat16)
    b = (a.float() + torch.randn(300, 257, generator=g) * 0.01).to(torch.bfloat16)
    save_file({"w": a}, str(tmp_path / "a.safetensors"))
    torch.save({"w": b}, tmp_path / "b.pt")
    row = diff_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.pt").tensors[0]
    assert row.dtype_a == row.dtype_b == "bfloat16"
    assert_figures(row, reference(a, b))


def test_large_tensor_is_chunked(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(1000, 333, generator=g)
    b = a.clone()
    b[::97, ::5] += 0.25
    b[999, 332] = -7.0
    same = torch.randn(2000, 50, generator=g)
    save_file({"big": a, "same": same}, str(tmp_path / "a.safetensors"))
    torch.save({"big": b, "same": same.clone()}, tmp_path / "b.bin")
    calls: list[tuple[int, int]] = []
    result = diff_checkpoints(
        tmp_path / "a.safetensors",
        tmp_path / "b.bin",
        chunk_bytes=4096,  # 1024 float32 per chunk: hundreds of chunks per tensor
        progress=lambda e: calls.append((e.done, e.total)),
    )
    by = rows(result)
    assert_figures(by["big"], reference(a, b))
    assert by["same"].status == "identical"
    total = 2 * (a.numel() + same.numel()) * 4
    assert calls[-1] == (total, total)
    assert all(d1 <= d2 for (d1, _), (d2, _) in itertools.pairwise(calls))
    whole = diff_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.bin")
    assert rows(whole)["big"].n_outside == by["big"].n_outside


def test_shape_dtype_and_missing_names(tmp_path: Path) -> None:
    x = torch.arange(16, dtype=torch.float32)
    save_file(
        {"shape": x.reshape(4, 4).clone(), "dtype": x.clone(), "only_a": x.clone(), "same": x},
        str(tmp_path / "a.safetensors"),
    )
    torch.save(
        {
            "shape": x.reshape(2, 8).clone(),
            "dtype": x.half(),
            "only_b": x.clone(),
            "same": x.clone(),
        },
        tmp_path / "b.pt",
    )
    result = diff_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.pt")
    by = rows(result)
    assert by["shape"].status == "shape_mismatch"
    assert (by["shape"].shape_a, by["shape"].shape_b) == ([4, 4], [2, 8])
    assert by["dtype"].status == "dtype_mismatch"
    assert (by["dtype"].dtype_a, by["dtype"].dtype_b) == ("float32", "float16")
    assert by["dtype"].max_abs == 0.0 and by["dtype"].n_outside == 0  # values exact in fp16
    assert by["only_a"].status == "only_in_a" and by["only_b"].status == "only_in_b"
    assert by["same"].status == "identical"
    s = result.summary()
    assert (s["only_in_a"], s["only_in_b"], s["shape_mismatch"], s["dtype_mismatch"]) == (
        1,
        1,
        1,
        1,
    )
    assert not result.equal


def test_nan_and_inf_counts(tmp_path: Path) -> None:
    a = torch.linspace(-3, 3, 500)
    b = a * 1.001
    a[[3, 10, 20]] = float("nan")
    b[[10, 30]] = float("nan")
    a[40] = b[40] = float("inf")  # the same Inf on both sides: not outside
    b[50] = float("-inf")
    save_file({"t": a}, str(tmp_path / "a.safetensors"))
    save_file({"t": b}, str(tmp_path / "b.safetensors"))
    row = diff_checkpoints(
        tmp_path / "a.safetensors", tmp_path / "b.safetensors", chunk_bytes=256
    ).tensors[0]
    assert (row.nan_a, row.nan_b, row.inf_a, row.inf_b) == (3, 2, 1, 2)
    assert_figures(row, reference(a, b))


def test_wrapper_prefix_and_rename_alignment(llama: dict[str, Any], tmp_path: Path) -> None:
    sd = llama["sd"]
    torch.save({f"module.{k}": v for k, v in sd.items()}, tmp_path / "ddp.pt")
    result = diff_checkpoints(tmp_path / "ddp.pt", llama["root"] / "hf")
    assert result.equal
    assert {r.match for r in result.tensors} == {"prefix"}
    assert all(r.name_b == r.name.removeprefix("module.") for r in result.tensors)
    torch.save({k.replace("mlp.", "ffn."): v for k, v in sd.items()}, tmp_path / "renamed.pt")
    plain = diff_checkpoints(tmp_path / "renamed.pt", llama["root"] / "hf")
    assert plain.summary()["only_in_a"] == plain.summary()["only_in_b"] == 6
    mapped = diff_checkpoints(
        tmp_path / "renamed.pt", llama["root"] / "hf", rename={"ffn.": "mlp."}
    )
    assert mapped.equal and "rename" in {r.match for r in mapped.tensors}


def _many(tmp_path: Path) -> tuple[Path, Path]:
    g = torch.Generator().manual_seed(4)
    sd = {f"layers.{i}.w": torch.randn(64, 64, generator=g) for i in range(40)}
    save_file(sd, str(tmp_path / "a.safetensors"))
    save_file({k: v + 1 for k, v in sd.items()}, str(tmp_path / "b.safetensors"))
    return tmp_path / "a.safetensors", tmp_path / "b.safetensors"


def test_cancel_returns_partial_result(tmp_path: Path) -> None:
    a, b = _many(tmp_path)
    stop = threading.Event()
    seen: list[int] = []

    def progress(e: Progress) -> None:
        seen.append(e.done)
        if e.done > e.total // 4:
            stop.set()

    result = diff_checkpoints(a, b, progress=progress, cancel=stop, chunk_bytes=2048)
    s = result.summary()
    assert result.cancelled and s["cancelled"] and not result.equal
    assert 0 < s["changed"] < 40 and s["not_compared"] == 40 - s["changed"]
    assert max(seen) < 2 * 40 * 64 * 64 * 4

    # any object with is_set() cancels (the contract's Cancel), not only threading.Event
    class HalfWay:
        def __init__(self) -> None:
            self.done, self.total = 0, 1

        def is_set(self) -> bool:
            return self.done >= self.total // 2

    half = HalfWay()

    def track(e: Progress) -> None:
        half.done, half.total = e.done, e.total

    result = diff_checkpoints(a, b, progress=track, cancel=half, chunk_bytes=2048)
    assert result.cancelled and result.summary()["not_compared"] > 0


def test_optimizer_states_and_scheduler_fields(llama: dict[str, Any], tmp_path: Path) -> None:
    def train(steps: int, lr_scale: float = 1.0) -> tuple[Any, Any]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3 * lr_scale)
        sched = torch.optim.lr_scheduler.StepLR(opt, 2)
        for _ in range(steps):
            model(torch.randn(5, 8)).sum().backward()
            opt.step()
            sched.step()
            opt.zero_grad()
        return model, (opt, sched)

    model, (opt, sched) = train(3)
    torch.save(model.state_dict(), tmp_path / "model.bin")
    state_a = opt.state_dict()
    torch.save(state_a, tmp_path / "opt_a.bin")
    torch.save(sched.state_dict(), tmp_path / "sched_a.bin")
    state_b = opt.state_dict()
    state_b = {
        "state": {k: dict(v) for k, v in state_b["state"].items()},
        "param_groups": state_b["param_groups"],
    }
    exp_b = state_b["state"][2]["exp_avg"].clone()
    exp_b[0, :3] *= 2.0
    state_b["state"][2]["exp_avg"] = exp_b
    state_b["param_groups"] = [dict(g, lr=5e-4) for g in state_b["param_groups"]]
    torch.save(state_b, tmp_path / "opt_b.bin")
    sched_b = dict(sched.state_dict(), last_epoch=1)
    torch.save(sched_b, tmp_path / "sched_b.bin")

    va = open_checkpoint(tmp_path / "opt_a.bin", model=tmp_path / "model.bin")
    vb = open_checkpoint(tmp_path / "opt_b.bin", model=tmp_path / "model.bin")
    result = diff_checkpoints(va, vb)
    by = rows(result)
    row = by["state.2.exp_avg"]
    assert row.status == "changed" and row.param == "2.weight" and row.state == "exp_avg"
    assert_figures(row, reference(state_a["state"][2]["exp_avg"], exp_b))
    assert by["state.2.exp_avg_sq"].status == "identical"
    assert by["state.0.step"].status == "identical"
    values = {v.key: v for v in result.values}
    assert values["param_groups.0.lr"].status == "changed"
    assert (values["param_groups.0.lr"].a, values["param_groups.0.lr"].b) == (
        state_a["param_groups"][0]["lr"],
        5e-4,
    )
    assert values["param_groups.0.betas"].status == "equal"

    sched_diff = diff_checkpoints(tmp_path / "sched_a.bin", tmp_path / "sched_b.bin")
    v = {v.key: v for v in sched_diff.values}["last_epoch"]
    assert (v.status, v.a, v.b) == ("changed", 3, 1)
    assert not sched_diff.equal


def test_two_training_state_folders_in_one_call(tmp_path: Path) -> None:
    from ckpt_explorer.demo import make_demo

    root = make_demo(tmp_path / "demo")
    result = diff_checkpoints(root / "resumed_from", root / "after_resume")
    values = {v.key: v for v in result.values}
    last = values["lr_scheduler/last_epoch"]
    assert (last.status, last.a, last.b) == ("changed", 6, 2)
    assert values["lr_scheduler/_step_count"].status == "changed"
    assert values["running_states.json/step"].status == "changed"
    by = rows(result)
    assert by["optimizer/state.0.exp_avg"].param == "embed_tokens.weight"
    assert by["optimizer/state.0.exp_avg"].status == "changed"
    assert by["modeling/embed_tokens.weight"].status == "changed"
    assert {r.part for r in result.tensors} == {"modeling", "optimizer"}
    layers = {(g["part"], g["state"], g["layer"]) for g in result.by_layer()}
    assert ("optimizer", "exp_avg", 1) in layers and ("modeling", None, 0) in layers
    df = result.to_frame()
    assert len(df) == len(result.tensors) and {"rel_l2", "max_abs", "param"} <= set(df.columns)
    same = diff_checkpoints(root / "resumed_from", root / "resumed_from")
    assert same.equal and same.summary()["identical"] == len(same.tensors)


@pytest.mark.cuda  # runs everywhere; on a GPU machine it also takes the cuda path
def test_devices(tmp_path: Path) -> None:
    a, b = _many(tmp_path)
    auto = diff_checkpoints(a, b, device="auto")
    cpu = diff_checkpoints(a, b, device="cpu")
    assert [r.to_dict() for r in auto.tensors] == [
        r.to_dict() for r in cpu.tensors
    ] or torch.cuda.is_available()
    if not torch.cuda.is_available():
        with pytest.raises(CkptExplorerError, match="CUDA"):
            diff_checkpoints(a, b, device="cuda")
    with pytest.raises(CkptExplorerError):
        diff_checkpoints(a, b, device="tpu")


def test_two_process_torchrun_gives_the_same_rows(tmp_path: Path) -> None:
    from ckpt_explorer.demo import make_demo

    root = make_demo(tmp_path / "demo")
    one = diff_checkpoints(root / "resumed_from", root / "after_resume")
    two = diff_checkpoints(root / "resumed_from", root / "after_resume", nproc=2)
    assert two.options["nproc"] == 2
    assert [r.to_dict() for r in two.tensors] == [r.to_dict() for r in one.tensors]
    assert [v.to_dict() for v in two.values] == [v.to_dict() for v in one.values]
    assert two.summary() == one.summary()


def test_json_report_is_plain(tmp_path: Path) -> None:
    import json

    a, b = _many(tmp_path)
    data = diff_checkpoints(a, b).to_json()
    text = json.dumps(data, allow_nan=False)
    back = DiffResult.from_json(json.loads(text))
    assert back.summary() == diff_checkpoints(a, b).summary()
    assert math.isclose(data["tensors"][0]["max_abs"], 1.0, rel_tol=1e-6)


def test_rows_stream_while_the_diff_runs(tmp_path: Path) -> None:
    a, b = _many(tmp_path)
    streamed: list[TensorDiff] = []
    seen_progress: list[int] = []

    def progress(e: Progress) -> None:
        seen_progress.append(len(streamed))

    result = diff_checkpoints(a, b, on_row=streamed.append, progress=progress)
    assert [r.name for r in streamed] == [r.name for r in result.tensors]
    assert any(0 < n < len(streamed) for n in seen_progress)  # rows arrived during the run
