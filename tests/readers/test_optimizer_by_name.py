"""Optimizers keyed by parameter name: ``torch.distributed.checkpoint.state_dict``'s
``get_state_dict`` / ``get_optimizer_state_dict(full_state_dict=True)`` (what FSDP
FULL_STATE_DICT, accelerate's FSDP ``optimizer.bin`` and Trainer FSDP write), ``torch.save``d
beside the model. Real tools only: a tiny HF Llama, AdamW with decay / no-decay groups;
accelerate's own FSDP ``save_state`` (forced on CPU, two gloo ranks) runs under ``slow``."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from validate_util import fired

from ckpt_explorer import open_checkpoint
from ckpt_explorer.diff.api import diff_checkpoints
from ckpt_explorer.validate import validate_checkpoint
from ckpt_explorer.validate.parts import collect

STEPS = 2


def _config(hidden: int = 16) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )


def _adamw(model: torch.nn.Module) -> torch.optim.AdamW:
    decay = [p for _, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3,
    )


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, forward: bool = True) -> None:
    if forward:
        ids = torch.randint(0, 64, (2, 8))
        model(input_ids=ids, labels=ids).loss.backward()
    else:  # a model whose parameter was re-created: no forward, gradients of its shapes
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-2
    opt.step()
    opt.zero_grad()


def _live_groups(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[list[str]]:
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [[name_of[id(p)] for p in g["params"]] for g in opt.param_groups]


def _name_keyed(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _, osd = get_state_dict(model, opt)
    return osd


def _full_optimizer(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    return get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))


def _save_folder(dest: Path, model: Any, osd: dict[str, Any], sched: Any) -> Path:
    """The HF Trainer layout: save_pretrained weights, optimizer.pt, scheduler.pt, RNG."""
    import random

    import numpy as np

    model.save_pretrained(dest)
    torch.save(osd, dest / "optimizer.pt")
    torch.save(sched.state_dict(), dest / "scheduler.pt")
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.get_rng_state(),
    }
    torch.save(rng, dest / "rng_state.pth")
    return dest


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from transformers import LlamaForCausalLM

    root = tmp_path_factory.mktemp("by_name")
    torch.manual_seed(0)
    model = LlamaForCausalLM(_config())
    opt = _adamw(model)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    for _ in range(STEPS):
        _step(model, opt)
        sched.step()
    out: dict[str, Any] = {"groups": _live_groups(model, opt), "step": STEPS, "root": root}
    out["folder"] = _save_folder(root / "hf", model, _name_keyed(model, opt), sched)
    model.save_pretrained(root / "ids")  # the same optimizer, id-keyed (optimizer.state_dict())
    torch.save(opt.state_dict(), root / "ids" / "optimizer.pt")
    one = {
        "model": model.state_dict(),
        "optimizer": _full_optimizer(model, opt),
        "lr_scheduler": sched.state_dict(),
        "step": STEPS,
    }
    torch.save(one, root / "one.pt")
    out["one"] = root / "one.pt"
    _step(model, opt)
    sched.step()
    out["later"] = _save_folder(root / "hf3", model, _name_keyed(model, opt), sched)

    # Planted: the optimizer of a copy whose lm_head was re-created with another shape,
    # saved beside the original weights.
    other = copy.deepcopy(model)
    other.lm_head.weight = torch.nn.Parameter(torch.zeros(72, 16))
    bad = _adamw(other)
    for _ in range(STEPS):
        _step(other, bad, forward=False)
    model.save_pretrained(root / "reshaped")
    torch.save(_name_keyed(other, bad), root / "reshaped" / "optimizer.pt")
    # Planted: the optimizer of another (wider) model, same names.
    wide = LlamaForCausalLM(_config(hidden=32))
    wrong = _adamw(wide)
    for _ in range(STEPS):
        _step(wide, wrong)
    torch.save(
        {"model": model.state_dict(), "optimizer": _name_keyed(wide, wrong)}, root / "wrong.pt"
    )
    return out


def _optimizer_view(view: Any) -> Any:
    (part,) = [p for p in view.parts.values() if p.kind == "optimizer"]
    return part


@pytest.mark.parametrize("case", ["folder", "one"])
def test_groups_states_and_names_as_recorded(run: dict[str, Any], case: str) -> None:
    info = _optimizer_view(open_checkpoint(run[case])).optimizer
    assert info is not None
    groups = [[info.names[pid].name for pid in g["params"]] for g in info.param_groups]
    assert groups == run["groups"]
    assert {n.how for n in info.names.values()} == {"recorded"}
    count = sum(len(g) for g in run["groups"])
    assert info.state_ids == tuple(range(count))
    assert all(info.state_names[pid] == ("step", "exp_avg", "exp_avg_sq") for pid in info.state_ids)
    assert info.param_names == {pid: n.name for pid, n in info.names.items()}


@pytest.mark.parametrize("case", ["folder", "one"])
def test_step_is_the_live_step(run: dict[str, Any], case: str) -> None:
    from ckpt_explorer.timeline.discover import Candidate
    from ckpt_explorer.timeline.facts import summarize_view

    view = open_checkpoint(run[case])
    (opt,) = collect(view).optimizers
    assert set(opt.steps().values()) == {float(STEPS)}
    summary = summarize_view(Candidate(run[case], None, "content"), view, 0.0)
    assert summary.opt_step == STEPS
    moments = {f.state for n, f in summary.tensors.items() if ".state." in n or "/state." in n}
    assert moments == {"step", "exp_avg", "exp_avg_sq"}  # optimizer states, not weights
    head = next(f for n, f in summary.tensors.items() if n.endswith("state.lm_head.weight.exp_avg"))
    assert head.param is not None and head.param.endswith("lm_head.weight")


def test_doctor_reads_both_steps(run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from ckpt_explorer.cli import main

    main(["doctor", str(run["folder"]), str(run["later"])])
    assert f"optimizer step: A {STEPS}  B {STEPS + 1}" in capsys.readouterr().out


@pytest.mark.parametrize("numeric", [True, False])
@pytest.mark.parametrize("case", ["folder", "one"])
def test_clean_save_validates_clean(run: dict[str, Any], case: str, numeric: bool) -> None:
    report = validate_checkpoint(run[case], numeric=numeric)
    bad = report.by_severity("error") + report.by_severity("warning")
    assert not bad, bad
    assert not [f for f in report.findings if f.rule.startswith("optimizer.")]


def test_inspect_lists_states_per_parameter(run: dict[str, Any], capsys: Any) -> None:
    from ckpt_explorer.cli import main

    assert main(["inspect", str(run["folder"])]) == 0
    out = capsys.readouterr().out
    count = sum(len(g) for g in run["groups"])
    assert f"2 group(s), {count} param id(s) with state" in out
    assert f"{count} recorded" in out


def test_listing_imports_no_torch(run: dict[str, Any]) -> None:
    """Recorded names need no model order: no meta-device model, so no torch."""
    child = (
        "import sys\nfrom ckpt_explorer.cli import main\n"
        "for p in sys.argv[1:]:\n"
        "    assert main(['inspect', p]) == 0 and main(['validate', p, '--no-numeric']) == 0\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    cmd = [sys.executable, "-c", child, str(run["folder"]), str(run["one"])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[]"


def test_reshaped_parameter_gives_the_shape_finding(run: dict[str, Any]) -> None:
    folder = run["root"] / "reshaped"
    for report in (
        validate_checkpoint(folder, numeric=False),
        validate_checkpoint(folder / "optimizer.pt", model=folder / "model.safetensors"),
    ):
        (f,) = fired(report, "optimizer.state_shape")
        assert f.severity == "error"
        assert f.tensor.endswith("state.lm_head.weight.exp_avg")
        assert "[72, 16]" in f.message and "lm_head.weight (recorded in the file)" in f.message
        assert f.param_id == run["groups"][0].index("lm_head.weight")


def test_states_of_a_wrong_model_give_shape_findings(run: dict[str, Any]) -> None:
    report = validate_checkpoint(run["root"] / "wrong.pt", numeric=False)
    found = fired(report, "optimizer.state_shape")
    assert found and all("(recorded in the file)" in f.message for f in found)
    assert all(f.tensor.startswith("optimizer.state.") for f in found)


def test_state_of_no_group_is_an_orphan(run: dict[str, Any], tmp_path: Path) -> None:
    osd = torch.load(run["folder"] / "optimizer.pt", weights_only=True)
    osd["state"]["model.extra.weight"] = osd["state"]["lm_head.weight"]  # merged by hand
    torch.save(osd, tmp_path / "optimizer.pt")
    model = run["folder"] / "model.safetensors"
    for report in (
        validate_checkpoint(tmp_path / "optimizer.pt", numeric=False),
        validate_checkpoint(tmp_path / "optimizer.pt", model=model),
    ):
        (f,) = fired(report, "optimizer.orphan_state")
        assert "(model.extra.weight)" in f.message
        assert f.tensor.startswith("state.model.extra.weight.")
        assert not fired(report, "optimizer.state_shape")


def test_diff_pairs_states_by_parameter(run: dict[str, Any]) -> None:
    later = diff_checkpoints(run["folder"], run["later"])
    states = [r for r in later.tensors if "/state." in r.name]
    assert len(states) == 3 * sum(len(g) for g in run["groups"])
    assert {r.status for r in states} == {"changed"}  # one more step: every state moved
    # the same optimizer saved by id (optimizer.state_dict()): paired by parameter name
    same = diff_checkpoints(run["folder"], run["root"] / "ids")
    pairs = {r.name: r.name_b for r in same.tensors if "/state." in r.name}
    assert len(pairs) == len(states)
    assert {r.status for r in same.tensors if r.name in pairs} == {"identical"}
    assert {r.match for r in same.tensors if r.name in pairs} == {"param_name"}
    assert pairs["optimizer.pt/state.lm_head.weight.exp_avg"] == (
        f"optimizer.pt/state.{run['groups'][0].index('lm_head.weight')}.exp_avg"
    )


def test_a_state_names_its_parameter_only_when_recorded(run: dict[str, Any]) -> None:
    state = open_checkpoint(run["one"])
    (part,) = [n for n, p in state.parts.items() if p.kind == "optimizer"]
    view = state.parts[part]
    assert view.slot_param("state.model.norm.weight.exp_avg") == "model.norm.weight"
    slot = view.slot("state.model.norm.weight.exp_avg")
    assert slot is not None and slot.state == "exp_avg"
    assert state.slot_param(f"{part}/state.lm_head.weight.step") == "lm_head.weight"
    assert view.slot_param("state.model.other.weight.exp_avg") is None  # no such state
    assert view.slot_param("model.norm.weight") is None and view.slot("model.norm.weight") is None


def _accelerate_fsdp_main(out: str) -> None:
    """Rank body (run by torchrun below): accelerate FSDP2 FULL_STATE_DICT ``save_state``.

    accelerate turns FSDP on only for GPU-like devices; on CPU its state is forced to FSDP
    (gloo) so its real FSDP prepare / ``save_state`` code runs. That is the only way found to
    make accelerate write its name-keyed ``optimizer.bin`` on CPU, hence the ``slow`` mark.
    """
    from accelerate import Accelerator, FullyShardedDataParallelPlugin
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType
    from transformers import LlamaForCausalLM

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        state_dict_type="FULL_STATE_DICT",
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
        reshard_after_forward=True,
    )
    acc = Accelerator(cpu=True, fsdp_plugin=plugin, project_dir=out)
    PartialState().distributed_type = DistributedType.FSDP
    state = AcceleratorState()
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    torch.manual_seed(0)
    model = LlamaForCausalLM(_config())
    opt = _adamw(model)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    model, opt, sched = acc.prepare(model, opt, sched)
    for _ in range(STEPS):
        ids = torch.randint(0, 64, (2, 8))
        acc.backward(model(input_ids=ids, labels=ids).loss)
        opt.step()
        sched.step()
        opt.zero_grad()
    acc.save_state(f"{out}/checkpoint-{STEPS}")
    if acc.is_main_process:
        live = {"groups": _live_groups(model, opt), "step": STEPS}
        Path(out, "live.json").write_text(json.dumps(live))
    acc.wait_for_everyone()
    acc.end_training()


@pytest.mark.slow
def test_accelerate_fsdp_save_state(tmp_path: Path) -> None:
    from ckpt_explorer.io.ports import free_port

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    # the script imports the helper modules at tests/ (validate_util)
    tests = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", str(free_port()), __file__, str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    live = json.loads((tmp_path / "live.json").read_text())
    state = tmp_path / f"checkpoint-{STEPS}"
    part = open_checkpoint(state).parts["optimizer.bin"]
    info = part.optimizer
    assert info is not None  # name-keyed, as FSDP FULL_STATE_DICT writes it
    assert "state.lm_head.weight.exp_avg" in {r.name for r in part.tensors}
    assert [[info.names[p].name for p in g["params"]] for g in info.param_groups] == live["groups"]
    for numeric in (True, False):
        report = validate_checkpoint(state, numeric=numeric)
        assert not report.by_severity("error") + report.by_severity("warning"), report.findings
    (opt,) = collect(open_checkpoint(state)).optimizers
    assert set(opt.steps().values()) == {float(live["step"])}


if __name__ == "__main__":
    _accelerate_fsdp_main(sys.argv[1])
