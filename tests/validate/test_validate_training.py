"""Optimizer, scheduler and bundle rules on real torch runs saved in ColossalAI's layout
(ckpt_explorer.demo.save_training_state: torch.save shards + index in MiB) and on edited
ColossalAI Booster outputs."""

from __future__ import annotations

import json

import torch
from validate_util import copy_case, fired, train_tiny

from ckpt_explorer.demo import save_training_state
from ckpt_explorer.validate import validate_checkpoint


def _params(model):
    return list(model.parameters())


def test_clean_tiny_run(tmp_path):
    model, opt, sched = train_tiny(6)
    save_training_state(tmp_path / "s", model, opt, sched, 6)
    report = validate_checkpoint(tmp_path / "s")
    assert not report.by_severity("error") and not report.by_severity("warning"), report.findings


def test_optimizer_built_with_a_permuted_param_order(tmp_path):
    model, opt, sched = train_tiny(3, permute=True)
    save_training_state(tmp_path / "s", model, opt, sched, 3)
    report = validate_checkpoint(tmp_path / "s", numeric=False)
    params = _params(model)
    order = params[::-1]
    expected = {k for k in range(len(params)) if order[k].shape != params[k].shape}
    flagged = {f.param_id for f in fired(report, "optimizer.state_shape")}
    assert flagged and flagged <= expected
    first = min(expected)
    (f,) = fired(report, "optimizer.state_shape", param_id=first)
    assert "different param order" in f.hint
    assert f.tensor == f"optimizer/state.{first}.exp_avg"


def test_optimizer_alone_with_model_argument(tmp_path):
    model, opt, _sched = train_tiny(2, permute=True)
    torch.save(opt.state_dict(), tmp_path / "optim.pt")
    torch.save(model.state_dict(), tmp_path / "model.pt")
    alone = validate_checkpoint(tmp_path / "optim.pt", numeric=False)
    assert not fired(alone, "optimizer.state_shape")
    report = validate_checkpoint(tmp_path / "optim.pt", model=tmp_path / "model.pt")
    assert fired(report, "optimizer.state_shape")


def test_fresh_scheduler_saved_next_to_a_trained_optimizer(tmp_path):
    model, opt, _ = train_tiny(6)
    other = torch.optim.AdamW(model.parameters(), lr=3e-4)
    fresh = torch.optim.lr_scheduler.LambdaLR(other, lambda s: min(1.0, (s + 1) / 10))
    save_training_state(tmp_path / "s", model, opt, fresh, 6)
    report = validate_checkpoint(tmp_path / "s", numeric=False)
    (f,) = fired(report, "scheduler.optimizer_step", file="lr_scheduler")
    assert "freshly built" in f.message
    assert fired(report, "scheduler.last_lr", file="lr_scheduler")


def test_unequal_step_across_params(tmp_path):
    model, opt, sched = train_tiny(4)
    victim = _params(model)[5]
    opt.state[victim]["step"] = torch.tensor(1.0)
    save_training_state(tmp_path / "s", model, opt, sched, 4)
    report = validate_checkpoint(tmp_path / "s", numeric=False)
    (f,) = fired(report, "optimizer.step_mismatch", param_id=5)
    assert "step 1" in f.message and "step 4" in f.message


def test_negative_exp_avg_sq(tmp_path):
    model, opt, sched = train_tiny(3)
    opt.state[_params(model)[7]]["exp_avg_sq"][0] = -1.0
    save_training_state(tmp_path / "s", model, opt, sched, 3)
    report = validate_checkpoint(tmp_path / "s")
    (f,) = fired(report, "optimizer.negative_exp_avg_sq", param_id=7)
    assert f.severity == "error" and f.tensor == "optimizer/state.7.exp_avg_sq"


def test_missing_initial_lr_with_a_scheduler(tmp_path):
    model, opt, sched = train_tiny(3)
    for group in opt.param_groups:
        del group["initial_lr"]
    save_training_state(tmp_path / "s", model, opt, sched, 3)
    report = validate_checkpoint(tmp_path / "s", numeric=False)
    assert fired(report, "optimizer.initial_lr_missing", severity="error")


def test_param_group_membership(tmp_path):
    _model, opt, _ = train_tiny(2, scheduler=False)
    sd = opt.state_dict()
    sd["param_groups"][0]["params"].append(0)  # id 0 twice
    sd["param_groups"][0]["params"].remove(3)  # state 3 in no group
    torch.save(sd, tmp_path / "optim.pt")
    report = validate_checkpoint(tmp_path / "optim.pt", numeric=False)
    assert fired(report, "optimizer.duplicate_id", param_id=0)
    assert fired(report, "optimizer.orphan_state", param_id=3)


def test_bundle_missing_running_state(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "ddp_training_state", tmp_path)
    (folder / "running_states.json").unlink()
    report = validate_checkpoint(folder, numeric=False)
    assert fired(report, "bundle.missing_run_state")


def test_bundle_missing_rng_meta(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "ddp_training_state_meta", tmp_path)
    assert not fired(validate_checkpoint(folder, numeric=False), "bundle.missing_run_state")
    (folder / "meta.pt").unlink()
    assert fired(validate_checkpoint(folder, numeric=False), "bundle.missing_run_state")


def test_bundle_with_disagreeing_steps(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "ddp_training_state", tmp_path)
    path = folder / "running_states.json"
    doc = json.loads(path.read_text())
    doc["step"] = 5
    path.write_text(json.dumps(doc))
    report = validate_checkpoint(folder, numeric=False)
    (f,) = fired(report, "bundle.step_mismatch")
    assert "= 3" in f.message and "= 5" in f.message
    assert not report.ok


def test_scheduler_with_too_few_groups(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "ddp_training_state", tmp_path)
    sched = torch.load(folder / "lr_scheduler", weights_only=True)
    sched["_last_lr"] = sched["_last_lr"] * 2
    torch.save(sched, folder / "lr_scheduler")
    report = validate_checkpoint(folder, numeric=False)
    assert fired(report, "scheduler.group_count", file="lr_scheduler")


def test_truncated_part_of_a_bundle(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "ddp_training_state", tmp_path)
    data = (folder / "lr_scheduler").read_bytes()
    (folder / "lr_scheduler").write_bytes(data[: len(data) // 2])
    report = validate_checkpoint(folder, numeric=False)
    assert fired(report, "integrity.truncated", file="lr_scheduler", severity="error")
