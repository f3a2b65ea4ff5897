"""The run timeline on run folders of loose torch files: one file per part per step
(``model_N.pt``, ``ema_N.pt``, ``optim_N.pt``, as guided-diffusion and many research loops
save) and timm's ``checkpoint-<epoch>.pth.tar`` naming. The runs are real torch loops here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.timeline import build_timeline
from ckpt_explorer.timeline.discover import discover, name_step

LOUD = ("error", "warning")
EVERY = 3


def _loud(t: Any) -> list[tuple[Any, str, str]]:
    return [(a.step, a.kind, a.message) for a in t.anomalies if a.severity in LOUD]


def _net() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))


def _train(model: Any, opt: Any, ema: Any, first: int, last: int, run: Path) -> None:
    """Steps ``first..last``; saves model, EMA and optimizer as three files every EVERY."""
    import torch

    g = torch.Generator().manual_seed(first)
    for step in range(first, last + 1):
        x = torch.randn(16, 8, generator=g)
        loss = (model(x) - x[:, :4]).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema.update_parameters(model)
        if step % EVERY == 0:
            torch.save(model.state_dict(), run / f"model_{step}.pt")
            torch.save(ema.state_dict(), run / f"ema_{step}.pt")
            torch.save(opt.state_dict(), run / f"optim_{step}.pt")


def _parts(model: Any) -> tuple[Any, Any]:
    import torch
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return opt, AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))


@pytest.fixture(scope="module")
def part_run(tmp_path_factory: Any) -> Path:
    """Steps 1..12, a save every 3; the process stops after step 6 and a new one resumes
    from the step-6 files (the three parts loaded back)."""
    import torch

    run = tmp_path_factory.mktemp("parts") / "run"
    run.mkdir()
    model = _net()
    opt, ema = _parts(model)
    _train(model, opt, ema, 1, 6, run)
    model = _net()  # the resumed process
    opt, ema = _parts(model)
    model.load_state_dict(torch.load(run / "model_6.pt"))
    ema.load_state_dict(torch.load(run / "ema_6.pt"))
    opt.load_state_dict(torch.load(run / "optim_6.pt"))
    _train(model, opt, ema, 7, 12, run)
    return run


def test_per_part_files_are_one_checkpoint_per_step(part_run: Path) -> None:
    t = build_timeline(part_run)
    assert _loud(t) == [] and not t.has_error
    assert [c.step for c in t.checkpoints] == [3, 6, 9, 12]
    assert [c.opt_step for c in t.checkpoints] == [3, 6, 9, 12]
    assert all(c.step_source == "optimizer step" for c in t.checkpoints)
    for c in t.checkpoints:
        s = c.step
        assert c.files == {
            f"ema_{s}.pt": "EMA of the model",
            f"model_{s}.pt": "model",
            f"optim_{s}.pt": "optimizer",
        }
        assert c.parts == ["model", "optimizer", "ema"]
        ema = [n for n, f in c.tensors.items() if f.role == "ema"]
        assert ema and all(n.startswith("ema/") for n in ema)
    # model paired with model (never with the EMA), optimizer moments followed
    for p in t.pairs:
        assert p.ratios and all(n.startswith("model/") for n in p.ratios)
        assert set(p.layers) == {"0", "1", "3"} and all(v > 0 for v in p.layers.values())
        assert set(p.moments["group 0"]) == {"exp_avg", "exp_avg_sq"}
        assert all(v > 0 for v in p.moments["group 0"].values())
        assert not (p.only_a or p.only_b)
    assert all(set(c.moments["group 0"]) == {"exp_avg", "exp_avg_sq"} for c in t.checkpoints)


def test_ema_told_by_content_whatever_its_name(part_run: Path, tmp_path: Path) -> None:
    """AveragedModel's state (``n_averaged``) is the EMA even in a file not named so."""
    run = tmp_path / "run"
    run.mkdir()
    for f in part_run.iterdir():
        shutil.copy2(f, run / f.name.replace("ema_", "shadow_"))
    t = build_timeline(run)
    assert _loud(t) == []
    assert t.checkpoints[0].files["shadow_3.pt"] == "EMA of the model"
    assert all(n.startswith("model/") for p in t.pairs for n in p.ratios)


def test_fresh_optimizer_saved_at_one_step_is_a_reset(part_run: Path, tmp_path: Path) -> None:
    import torch

    run = tmp_path / "run"
    shutil.copytree(part_run, run)
    fresh = torch.optim.AdamW(_net().parameters(), lr=1e-2)
    st = (run / "optim_9.pt").stat()
    torch.save(fresh.state_dict(), run / "optim_9.pt")
    os.utime(run / "optim_9.pt", ns=(st.st_atime_ns, st.st_mtime_ns))
    t = build_timeline(run)
    assert [(a.step, a.kind) for a in t.anomalies if a.severity in LOUD] == [(9, "optimizer_reset")]
    assert "optim_9.pt = optimizer" in " ".join(t.anomalies[0].evidence)
    assert [c.step for c in t.checkpoints] == [3, 6, 9, 12]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (  # guided-diffusion
            ["model000010.pt", "ema_0.9999_000010.pt", "opt000010.pt", "model000020.pt"],
            [(10, ("ema_0.9999/", "model/", "opt/")), (20, ("model/",))],
        ),
        (  # one series: each file its own checkpoint, as before
            ["ckpt_2.pt", "ckpt_4.pt", "last.pt"],
            [(2, ()), (4, ()), (None, ())],
        ),
        (  # Lightning's "name taken" copy is no second part
            ["epoch=1-step=12.ckpt", "epoch=1-step=12-v1.ckpt"],
            [(12, ()), (12, ())],
        ),
    ],
)
def test_parts_grouped_by_name(tmp_path: Path, names: list[str], expected: list[Any]) -> None:
    for n in names:
        (tmp_path / n).write_bytes(b"")
    got = [(c.name_step, tuple(label for label, _ in c.parts)) for c in discover(tmp_path)]
    assert got == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("checkpoint-7.pth.tar", (7, "file")),
        ("last.pth.tar", (None, "content")),
        ("model_best.pth.tar", (None, "content")),
        ("recovery-1-40.pth.tar", (None, "content")),  # epoch 1, batch 40: not a step
        ("model_300.tar", (300, "file")),
    ],
)
def test_timm_names(name: str, expected: Any) -> None:
    assert name_step(name, False) == expected


def _timm_like(run: Path, adam: bool) -> Path:
    """A plain loop saving ``{"epoch", "state_dict", "optimizer"}`` after each epoch as
    ``checkpoint-<epoch>.pth.tar`` (3 steps per epoch), and ``last.pth.tar`` copied."""
    import torch

    run.mkdir()
    model = _net()
    if adam:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    else:  # keeps no step count
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for epoch in range(4):
        for _ in range(3):
            x = torch.randn(16, 8, generator=g)
            loss = (model(x) - x[:, :4]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        state = {"epoch": epoch, "state_dict": model.state_dict(), "optimizer": opt.state_dict()}
        torch.save(state, run / f"checkpoint-{epoch}.pth.tar")
    shutil.copy2(run / "checkpoint-3.pth.tar", run / "last.pth.tar")
    return run


@pytest.fixture(scope="module")
def timm_like_run(tmp_path_factory: Any) -> Path:
    return _timm_like(tmp_path_factory.mktemp("timm") / "run", adam=True)


def test_names_by_epoch_are_no_step_mismatch(timm_like_run: Path, tmp_path: Path) -> None:
    t = build_timeline(timm_like_run)
    assert _loud(t) == []
    got = [(Path(c.path).name, c.epoch) for c in t.checkpoints]
    assert [c.name_step for c in t.checkpoints] == [0, 1, 2, 3, None]
    assert [c.epoch for c in t.checkpoints] == [0, 1, 2, 3, 3], got
    assert [c.step for c in t.checkpoints] == [3, 6, 9, 12, 12]
    run = tmp_path / "run"
    shutil.copytree(timm_like_run, run)
    (run / "checkpoint-2.pth.tar").rename(run / "checkpoint-5.pth.tar")  # renamed
    t = build_timeline(run)
    assert [(a.step, a.kind) for a in t.anomalies if a.severity in LOUD] == [
        (9, "step_name_mismatch")
    ]
    assert "epoch: 2" in t.anomalies[0].evidence


def test_epoch_names_without_any_step_recorded(tmp_path: Path) -> None:
    """SGD keeps no step: the name's epoch orders the run, said so, nothing loud."""
    t = build_timeline(_timm_like(tmp_path / "run", adam=False))
    assert _loud(t) == []
    assert [c.step for c in t.checkpoints][:4] == [0, 1, 2, 3]
    notes = [a.message for a in t.anomalies if a.kind == "step_from_name"]
    assert len(notes) == 5 and "numbers the epoch" in notes[0]


def test_dashboard_compares_a_per_part_pair_by_its_model_files(part_run: Path) -> None:
    """Clicking a pair in the dashboard opens Compare on files that exist: the model file of
    each side (a per-part checkpoint's own path joins its files' names)."""
    from ckpt_explorer import open_checkpoint
    from ckpt_explorer.ui.paths import RootGuard
    from ckpt_explorer.ui.timeline_state import TimelineState

    state = TimelineState(RootGuard(part_run.parent), run_dir=part_run.name)
    state.build(wait=True, cache_dir=part_run.parent / "ui-cache")
    a, b = state.pair_paths(0)
    assert (a, b) == (f"{part_run.name}/model_3.pt", f"{part_run.name}/model_6.pt")
    for rel in (a, b):
        assert open_checkpoint(part_run.parent / rel).kind == "model"


def test_watch_waits_for_the_rest_of_a_per_part_save(part_run: Path, tmp_path: Path) -> None:
    """A live run has written model_12.pt and ema_12.pt but not yet optim_12.pt: a watching
    build lists step 12 as pending (no part_missing), and reads it once the file lands."""
    run = shutil.copytree(part_run, tmp_path / "live")
    late = (run / "optim_12.pt").read_bytes()
    (run / "optim_12.pt").unlink()
    t = build_timeline(run, settle_s=1e-6)
    assert [c.step for c in t.checkpoints] == [3, 6, 9]
    assert len(t.pending) == 1 and "model_12.pt" in t.pending[0], t.pending
    assert not [a for a in t.anomalies if a.kind == "part_missing"]
    (run / "optim_12.pt").write_bytes(late)
    t = build_timeline(run, settle_s=1e-6)
    assert [c.step for c in t.checkpoints] == [3, 6, 9, 12] and not t.pending
    assert _loud(t) == []
