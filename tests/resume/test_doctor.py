"""The resume doctor ranks the planted cause first, on real torch runs and ColossalAI outputs."""

from __future__ import annotations

import torch
from validate_util import copy_case, run_steps, train_tiny

from ckpt_explorer import resume_doctor
from ckpt_explorer.demo import make_demo, save_training_state


def _resumed_from(tmp_path):
    model, opt, sched = train_tiny(6)
    save_training_state(tmp_path / "a", model, opt, sched, 6)
    return model, opt, sched


def test_demo_scheduler_not_restored(tmp_path):
    root = make_demo(tmp_path / "demo")
    report = resume_doctor(root / "resumed_from", root / "after_resume")
    top = report.top
    assert top is not None and top.cause == "scheduler_not_restored"
    assert any("went back: A 6, B 2" in e for e in top.evidence)
    assert report.facts["scheduler steps"] == (6, 2)
    assert "scheduler_not_restored" in report.format_text()
    assert report.to_frame()["cause"].iloc[0] == "scheduler_not_restored"


def test_optimizer_moments_reset(tmp_path):
    model, _opt, sched = _resumed_from(tmp_path)
    fresh = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    restored = torch.optim.lr_scheduler.LambdaLR(fresh, lambda s: min(1.0, (s + 1) / 10))
    restored.load_state_dict(sched.state_dict())
    run_steps(model, fresh, restored, 2)
    save_training_state(tmp_path / "b", model, fresh, restored, 8)
    report = resume_doctor(tmp_path / "a", tmp_path / "b")
    assert report.top.cause == "optimizer_moments_reset"
    assert any("A 6, B 2" in e for e in report.top.evidence)


def test_moments_all_zero_right_after_resume(tmp_path):
    model, _opt, sched = _resumed_from(tmp_path)
    fresh = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    for p in model.parameters():  # state initialised but never stepped: zero moments, step 0
        fresh.state[p] = {
            "step": torch.tensor(0.0),
            "exp_avg": torch.zeros_like(p),
            "exp_avg_sq": torch.zeros_like(p),
        }
    save_training_state(tmp_path / "b", model, fresh, sched, 6)
    report = resume_doctor(tmp_path / "a", tmp_path / "b")
    assert report.top.cause == "optimizer_moments_reset"
    assert any("exp_avg tensors in B are zero" in e for e in report.top.evidence)


def test_param_order_changed(tmp_path):
    model, _opt, sched = _resumed_from(tmp_path)
    permuted = torch.optim.AdamW(list(model.parameters())[::-1], lr=3e-4, weight_decay=0.01)
    restored = torch.optim.lr_scheduler.LambdaLR(permuted, lambda s: min(1.0, (s + 1) / 10))
    restored.load_state_dict(sched.state_dict())
    run_steps(model, permuted, restored, 2)
    save_training_state(tmp_path / "b", model, permuted, restored, 8)
    report = resume_doctor(tmp_path / "a", tmp_path / "b")
    assert report.top.cause == "param_order_changed"
    assert any(e.startswith("state 1: shape") for e in report.top.evidence)


def test_rng_state_missing(real_checkpoints, tmp_path):
    a = copy_case(real_checkpoints, "colossalai", "ddp_training_state_meta", tmp_path / "a")
    b = copy_case(real_checkpoints, "colossalai", "ddp_training_state_meta", tmp_path / "b")
    (b / "meta.pt").unlink()
    report = resume_doctor(a, b)
    assert report.top.cause == "rng_state_missing"
    assert any("B has no RNG state" in e for e in report.top.evidence)


def test_identical_states_have_no_strong_cause(real_checkpoints, tmp_path):
    a = copy_case(real_checkpoints, "colossalai", "ddp_training_state_meta", tmp_path / "a")
    report = resume_doctor(a, a)
    assert all(c.score < 0.5 for c in report.causes), report.causes


def test_weights_changed_at_the_same_step_and_dtype(tmp_path):
    model, opt, sched = _resumed_from(tmp_path)
    with torch.no_grad():
        model.layers[0].linear1.weight.add_(0.5)
        model.norm.weight.data = model.norm.weight.data.double()
    save_training_state(tmp_path / "b", model, opt, sched, 6)
    report = resume_doctor(tmp_path / "a", tmp_path / "b")
    causes = {c.cause: c for c in report.causes}
    assert "weights_changed_unexpectedly" in causes
    assert any(
        "layers.0.linear1.weight" in e for e in causes["weights_changed_unexpectedly"].evidence
    )
    assert any("norm.weight: float32 → float64" in e for e in causes["dtype_changed"].evidence)


def test_evidence_numbers_read_as_people_write_them(tmp_path):
    """The demo's scheduler evidence shows ``_last_lr`` at 6 digits, never a float's full repr."""
    root = make_demo(tmp_path / "demo")
    report = resume_doctor(root / "resumed_from", root / "after_resume")
    lines = [e for c in report.causes for e in c.evidence if e.startswith("_last_lr")]
    assert lines, "the demo's scheduler restart shows _last_lr as evidence"
    assert all(len(tok.strip("[],")) <= 12 for line in lines for tok in line.split()), lines


def test_readable_pair_never_shows_two_different_values_alike():
    from ckpt_explorer.readable import readable, readable_pair

    assert readable(0.00020999999999999998) == "0.00021"
    assert readable(6.0) == "6" and readable([1e-8, 2.0]) == "[1e-08, 2]"
    a, b = readable_pair(0.0001, 0.00010000001)
    assert a != b and len(a) < 20
    assert readable_pair(3e-4, 3e-4) == ("0.0003", "0.0003")
