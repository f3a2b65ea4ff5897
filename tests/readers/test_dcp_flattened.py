"""DCP states whose optimizer is saved flattened (``flatten_optimizer_state_dict=True``, as
torchtitan saves it): groups rebuilt from the per-parameter settings, names recorded, steps read.

Made with the real torch.distributed.checkpoint in a plain loop (one process, no process
group): ``get_state_dict(model, optimizer, options=StateDictOptions(flatten_optimizer_state_dict
=True))`` then ``dcp.save({"model", "optimizer", "lr_scheduler", "train_state"})`` every 3 steps,
and a resume that loads the model but forgets the optimizer (a fault made the way it happens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer import open_checkpoint, resume_doctor, validate_checkpoint
from ckpt_explorer.timeline import build_timeline


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.attention_norm = torch.nn.LayerNorm(width)
        self.wq = torch.nn.Linear(width, width, bias=False)
        self.w2 = torch.nn.Linear(width, width)


class Tiny(torch.nn.Module):
    def __init__(self, width: int = 8, layers: int = 2) -> None:
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(16, width)
        self.layers = torch.nn.ModuleDict({str(i): Block(width) for i in range(layers)})
        self.output = torch.nn.Linear(width, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x)
        for block in self.layers.values():
            h = h + block.w2(torch.relu(block.wq(block.attention_norm(h))))
        return self.output(h)


def _build(width: int = 8) -> tuple[Tiny, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = Tiny(width)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    return model, opt, sched


def _options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _train(model: Tiny, opt: Any, sched: Any, steps: range, save: Path | None) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    g = torch.Generator().manual_seed(steps.start)
    for step in steps:
        x = torch.randint(0, 16, (4, 6), generator=g)
        torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        if save is not None and step % 3 == 0:
            msd, osd = get_state_dict(model, opt, options=_options())
            state = {"model": msd, "optimizer": osd, "lr_scheduler": sched.state_dict()}
            state["train_state"] = {"step": step}
            dcp.save(state, checkpoint_id=str(save / f"step-{step}"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = tmp_path_factory.mktemp("flat")
    model, opt, sched = _build()
    _train(model, opt, sched, range(1, 7), root / "run")
    groups = [
        [n for p in g["params"] for n, q in model.named_parameters() if q is p]
        for g in opt.param_groups
    ]
    # the resume forgets the optimizer: model weights loaded, a fresh AdamW and scheduler
    model2, opt2, sched2 = _build()
    msd, _ = get_state_dict(model2, opt2, options=_options())
    dcp.load({"model": msd}, checkpoint_id=str(root / "run" / "step-3"))
    model2.load_state_dict(msd)
    _train(model2, opt2, sched2, range(4, 7), root / "resumed")
    return {"root": root, "groups": groups}


def test_groups_and_names_recorded(runs: dict[str, Any]) -> None:
    view = open_checkpoint(runs["root"] / "run" / "step-6")
    info = view.optimizer
    assert info is not None
    shown = [[info.param_names[i] for i in g["params"]] for g in info.param_groups]
    assert [sorted(g) for g in shown] == [sorted(g) for g in runs["groups"]]
    assert {pn.how for pn in info.names.values()} == {"recorded"}
    assert [g["weight_decay"] for g in info.param_groups] == [0.1, 0.0]


def test_clean_run_has_no_false_finding(runs: dict[str, Any]) -> None:
    for step in (3, 6):
        report = validate_checkpoint(runs["root"] / "run" / f"step-{step}")
        loud = [(f.rule, f.message) for f in report.findings if f.severity != "info"]
        assert not loud, loud
    t = build_timeline(runs["root"] / "run", cache_dir=runs["root"] / "cache")
    assert [(c.step, c.opt_step) for c in t.checkpoints] == [(3, 3), (6, 6)]
    assert not [a for a in t.anomalies if a.severity != "info"]
    assert all(k.startswith("model.") for k in t.pairs[0].ratios), t.pairs[0].ratios
    report = resume_doctor(runs["root"] / "run" / "step-3", runs["root"] / "run" / "step-6")
    assert report.facts["optimizer step"] == (3, 6)
    assert not [c for c in report.causes if c.score >= 0.5], report.causes


def test_optimizer_not_restored_is_found(runs: dict[str, Any]) -> None:
    """Both were built afresh (the resume loaded the model alone): both causes are true."""
    report = resume_doctor(runs["root"] / "run" / "step-3", runs["root"] / "resumed" / "step-6")
    strong = {c.cause for c in report.causes if c.score >= 0.5}
    assert {"optimizer_moments_reset", "scheduler_not_restored"} <= strong, report.causes
    assert report.top is not None and report.top.cause in strong


def test_states_of_another_model_width_are_a_shape_finding(tmp_path: Path) -> None:
    """The model saved beside an optimizer made for a wider model: every state mismatches."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, opt, sched = _build(width=8)
    _train(model, opt, sched, range(1, 3), None)
    wide, wide_opt, wide_sched = _build(width=12)
    _train(wide, wide_opt, wide_sched, range(1, 3), None)
    msd, _ = get_state_dict(model, opt, options=_options())
    _, wide_osd = get_state_dict(wide, wide_opt, options=_options())
    dcp.save({"model": msd, "optimizer": wide_osd}, checkpoint_id=str(tmp_path / "mixed"))
    rules = {
        f.rule for f in validate_checkpoint(tmp_path / "mixed").findings if f.severity == "error"
    }
    assert "optimizer.state_shape" in rules, rules
