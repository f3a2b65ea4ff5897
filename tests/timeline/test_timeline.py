"""The run timeline on real runs (tests/fixture_makers/timeline_maker.py): HF Trainer runs,
clean and resumed with planted faults, and a DeepSpeed run; the cache; the CLI; ``--watch``."""

from __future__ import annotations

import io
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.cli import main
from ckpt_explorer.timeline import build_timeline
from ckpt_explorer.timeline.spikes import update_outliers
from ckpt_explorer.timeline.summaries import PairSummary

LOUD = ("error", "warning")


@pytest.fixture(scope="module")
def runs(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints("timeline")
    return root, manifest["cases"]


def _copy_run(src: Path, dst: Path, steps: list[int]) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for s in steps:
        shutil.copytree(src / f"checkpoint-{s}", dst / f"checkpoint-{s}")  # keeps mtimes
    return dst


def _loud(t: Any) -> list[tuple[Any, str, str]]:
    return [(a.step, a.kind, a.message) for a in t.anomalies if a.severity in LOUD]


SOURCES = {
    "hf_clean": "trainer_state.json global_step",
    "hf_resumed": "trainer_state.json global_step",
    "ds_run": "global_steps",
    "cai_run": "running_states.json step",
}


@pytest.mark.parametrize("case", list(SOURCES))
def test_clean_runs_give_no_warning(runs: Any, case: str) -> None:
    root, cases = runs
    t = build_timeline(root / cases[case]["path"])
    assert _loud(t) == []
    assert not t.has_error
    steps = [c.step for c in t.checkpoints]
    assert steps == ([2, 4, 6, 8, 10, 12] if case.startswith("hf") else [2, 4, 6, 8])
    source = SOURCES[case]
    assert all(source in c.step_source for c in t.checkpoints)
    assert [c.opt_step for c in t.checkpoints] == steps
    # every pair has update ratios per layer, every checkpoint its moment norms
    assert all(p.layers and all(v > 0 for v in p.layers.values()) for p in t.pairs)
    assert all(c.moments and c.complete for c in t.checkpoints)
    series = t.series()
    assert series["steps"] == steps and len(series["update_ratio"]["steps"]) == len(steps) - 1


@pytest.mark.parametrize(
    "case", ["hf_no_scheduler", "hf_no_optimizer", "hf_lr_changed", "cai_no_scheduler"]
)
def test_planted_fault_found_at_its_step(runs: Any, case: str) -> None:
    root, cases = runs
    t = build_timeline(root / cases[case]["path"])
    found = {(a.step, a.kind) for a in t.anomalies}
    for step, kind in cases[case]["expected"]:
        assert (step, kind) in found, (case, step, kind, _loud(t))
    # nothing loud before the fault: the checkpoints written before the resume are clean
    assert not [a for a in t.anomalies if a.severity in LOUD and (a.step or 0) < 6]
    if case == "hf_lr_changed":
        jump = next(a for a in t.anomalies if a.kind == "lr_jump")
        assert any("base_lrs" in e and "0.01" in e for e in jump.evidence)
        assert not t.has_error  # a deliberate-looking change is a warning, not an error
    elif case == "cai_no_scheduler":  # ColossalAI #5151: the booster did not load lr_scheduler
        assert t.has_error and [a.kind for a in t.anomalies if a.severity in LOUD] == ["lr_restart"]
    else:
        assert t.has_error
        missing = "scheduler" if case == "hf_no_scheduler" else "optimizer"
        assert (6, "part_missing") in found
        assert any(missing in a.message for a in t.anomalies if a.kind == "part_missing")


def test_restart_at_a_checkpoint_saved_without_scheduler(runs: Any) -> None:
    """Resumed from checkpoint-4, which lost scheduler.pt: at step 6 the scheduler has taken 2
    steps, the same count as checkpoint-2's, so "went back" cannot see it; the restart at the
    checkpoint without a scheduler does, and says the count there was projected."""
    root, cases = runs
    t = build_timeline(root / cases["hf_no_scheduler_at_4"]["path"])
    found = {(a.step, a.kind) for a in t.anomalies}
    for step, kind in cases["hf_no_scheduler_at_4"]["expected"]:
        assert (step, kind) in found, _loud(t)
    restart = next(a for a in t.anomalies if a.kind == "lr_restart")
    assert any("checkpoint-4" in e and "saved no scheduler" in e for e in restart.evidence)
    assert not [a for a in t.anomalies if a.severity == "error" and (a.step or 0) < 6]


def test_frozen_by_mistake_but_not_by_design(runs: Any) -> None:
    root, cases = runs
    t = build_timeline(root / cases["hf_frozen"]["path"])
    assert [(a.step, a.kind) for a in t.anomalies if a.severity in LOUD] == [(4, "frozen")]
    ev = " ".join(t.anomalies[0].evidence)
    # wpe has Adam state (its group's lr is 0); h.0.ln_1.weight has requires_grad=False
    assert "transformer.wpe.weight" in ev and "step 2 to step 12" in ev
    assert "ln_1" not in ev
    unchanged = t.pairs[0].unchanged
    assert "model/transformer.h.0.ln_1.weight" in unchanged


def test_cache_reused_and_new_checkpoint_reads_only_its_pair(runs: Any, tmp_path: Path) -> None:
    root, cases = runs
    run = _copy_run(root / cases["hf_clean"]["path"], tmp_path / "run", [2, 4, 6, 8, 10])
    cache = tmp_path / "cache"
    first = build_timeline(run, cache)
    assert first.stats["opened"] == 5 and first.stats["pair_passes"] == 4
    second = build_timeline(run, cache)
    assert second.stats == {"opened": 0, "pair_passes": 0, "value_passes": 0, "cached": 5}
    assert [a.to_dict() for a in second.anomalies] == [a.to_dict() for a in first.anomalies]
    assert second.to_json(detail=True)["pairs"] == first.to_json(detail=True)["pairs"]
    shutil.copytree(root / cases["hf_clean"]["path"] / "checkpoint-12", run / "checkpoint-12")
    third = build_timeline(run, cache)
    assert third.stats["pair_passes"] == 1 and third.stats["cached"] == 5
    assert third.stats["opened"] <= 2  # the new checkpoint and its predecessor (the pair)
    assert [c.step for c in third.checkpoints] == [2, 4, 6, 8, 10, 12]
    assert not list(run.rglob("*.json.tmp")) and not (run / ".cache").exists()
    # a changed file gets a new identity: that checkpoint is read again
    state = run / "checkpoint-6" / "trainer_state.json"
    os.utime(state, ns=(state.stat().st_atime_ns, state.stat().st_mtime_ns + 10**9))
    fourth = build_timeline(run, cache)
    assert fourth.stats["opened"] >= 1 and fourth.stats["cached"] == 5


def test_mixed_runs_duplicates_and_renamed(runs: Any, tmp_path: Path) -> None:
    root, cases = runs
    src = root / cases["hf_clean"]["path"]
    run = _copy_run(src, tmp_path / "run", [2, 4, 6, 8, 10, 12])
    # checkpoint-12 left over from an earlier run: older than checkpoint-10
    old = (run / "checkpoint-10").stat().st_mtime - 3600
    for f in (run / "checkpoint-12").iterdir():
        os.utime(f, (old, old))
    shutil.copytree(src / "checkpoint-4", run / "checkpoint-5")  # records step 4
    t = build_timeline(run)
    kinds = {(a.step, a.kind) for a in t.anomalies}
    assert (12, "mixed_runs") in kinds
    assert (4, "duplicate_step") in kinds
    assert (4, "step_name_mismatch") in kinds
    assert not t.has_error


def test_copied_folder_times_in_name_order_are_not_mixed_runs(runs: Any, tmp_path: Path) -> None:
    root, cases = runs
    run = _copy_run(root / cases["hf_clean"]["path"], tmp_path / "run", [2, 4, 6, 8, 10, 12])
    base = time.time() - 3600
    for i, folder in enumerate(sorted(run.iterdir())):  # cp -r: checkpoint-10 first
        for f in folder.iterdir():
            os.utime(f, (base + 60 * i, base + 60 * i))
    t = build_timeline(run)
    assert _loud(t) == []
    assert [a.kind for a in t.anomalies] == ["mtime_order_unused"]


def test_nan_appearing(runs: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    root, cases = runs
    run = _copy_run(root / cases["hf_clean"]["path"], tmp_path / "run", [2, 4, 6, 8])
    f = run / "checkpoint-8" / "model.safetensors"
    sd = load_file(f)
    name = "transformer.h.1.mlp.c_fc.weight"
    sd[name][0, :3] = float("nan")
    save_file(sd, f, metadata={"format": "pt"})
    t = build_timeline(run)
    nan = [a for a in t.anomalies if a.kind == "nan_inf"]
    assert [(a.step, a.severity) for a in nan] == [(8, "error")]
    assert any(name in e and "3 NaN" in e for e in nan[0].evidence)


def test_update_spike_rule() -> None:
    def pairs(spike: float) -> list[PairSummary]:
        out = []
        for i in range(8):
            lr = 1.0 if i > 1 else 0.3 * (i + 1)  # a schedule moves every layer together
            layers = {f"h.{k}": lr * (0.01 + 0.002 * k) for k in range(4)}
            if i == 5:
                layers["h.2"] *= spike
            out.append(PairSummary("a", "b", 2 * i, 2 * i + 2, layers=layers))
        return out

    assert update_outliers([], pairs(1.0)) == []
    assert update_outliers([], pairs(3.0)) == []  # not 10x off: not claimed
    found = update_outliers([], pairs(50.0))
    assert [(a.step, a.kind) for a in found] == [(12, "update_spike")]
    assert [(a.step, a.kind) for a in update_outliers([], pairs(0.01))] == [(12, "update_collapse")]
    assert update_outliers([], pairs(50.0)[:4]) == []  # too few pairs to judge


def test_cli_json_and_exit_codes(runs: Any, tmp_path: Path, capsys: Any) -> None:
    root, _ = runs
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["timeline", str(root / "hf_no_scheduler"), "--json", "--no-cache"])
    assert code == 1
    doc = json.loads(buf.getvalue())
    assert set(doc) >= {"checkpoints", "anomalies", "series"}
    assert doc["checkpoints"][0]["step"] == 2 and "path" in doc["checkpoints"][0]
    a = next(x for x in doc["anomalies"] if x["kind"] == "lr_restart")
    assert a["step"] == 8 and a["severity"] == "error" and a["evidence"]
    assert main(["timeline", str(root / "hf_clean"), "--cache", str(tmp_path / "c")]) == 0
    assert "no anomaly found" in capsys.readouterr().out
    assert main(["timeline", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "expected a run folder" in err
    assert main(["timeline", str(root / "hf_clean" / "checkpoint-2")]) == 2
    assert "one checkpoint" in capsys.readouterr().err


def test_watch_picks_up_a_new_checkpoint(runs: Any, tmp_path: Path) -> None:
    root, cases = runs
    src = root / cases["hf_clean"]["path"]
    run = _copy_run(src, tmp_path / "run", [2, 4])
    cmd = [sys.executable, "-m", "ckpt_explorer", "timeline", str(run), "--watch"]
    cmd += ["--interval", "0.3", "--cache", str(tmp_path / "cache")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()

    def wait_for(text: str, timeout: float = 240.0) -> list[str]:
        seen, end = [], time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                assert proc.poll() is None, f"watch exited {proc.returncode}: {seen}"
                continue
            seen.append(line)
            if text in line:
                return seen
        raise AssertionError(f"{text!r} not printed; got {seen}")

    try:
        wait_for("checkpoint-4")
        shutil.copytree(src / "checkpoint-6", run / "checkpoint-6")
        got = wait_for("checkpoint-6", timeout=60.0)
        assert any(line.startswith("checkpoint") and "checkpoint-6" in line for line in got)
    finally:
        proc.terminate()  # by PID: only the child this test started
        proc.wait(timeout=30)


@pytest.mark.parametrize(
    ("name", "is_dir", "expected"),
    [
        ("checkpoint-500", True, (500, "hf")),
        ("tmp-checkpoint-500", True, None),  # a save in progress
        ("epoch-2_step-3000", True, (3000, "colossalai")),
        ("global_step120", True, (120, "deepspeed")),
        ("step-40", True, (40, "step")),
        ("step_40", True, (40, "step")),
        ("checkpoint_3", True, (3, "save_count")),  # accelerate: counts saves
        ("ckpt_1000.pt", False, (1000, "file")),
        ("epoch=1-step=12.ckpt", False, (12, "file")),  # Lightning ModelCheckpoint
        ("epoch=1-step=12-v1.ckpt", False, (12, "file")),  # its "name taken" suffix
        ("epoch=3.ckpt", False, (None, "content")),  # counts epochs, not steps
        ("epoch=3-val_loss=0.25.ckpt", False, (None, "content")),
        ("last-v1.ckpt", False, (None, "content")),
        ("model_step_1000.pt", False, (1000, "file")),
        ("last.pt", False, (None, "content")),
        ("model-00001-of-00002.safetensors", False, None),
        ("logs", True, None),
        ("training_args.bin", False, None),
    ],
)
def test_checkpoint_names(name: str, is_dir: bool, expected: Any) -> None:
    from ckpt_explorer.timeline.discover import name_step

    assert name_step(name, is_dir) == expected


def test_unreadable_checkpoint_is_reported_not_guessed(runs: Any, tmp_path: Path) -> None:
    root, cases = runs
    run = _copy_run(root / cases["hf_clean"]["path"], tmp_path / "run", [2, 4, 6, 8])
    f = run / "checkpoint-6" / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])  # a save cut short
    t = build_timeline(run)
    bad = [a for a in t.anomalies if a.kind == "unreadable"]
    assert len(bad) == 1 and bad[0].severity == "error" and "checkpoint-6" in bad[0].path
    assert [c.step for c in t.checkpoints if c.error is None] == [2, 4, 8]
    assert [(p.step_a, p.step_b) for p in t.pairs] == [(2, 4), (4, 8)]


def test_unreadable_part_shows_in_part_missing_evidence(runs: Any, tmp_path: Path) -> None:
    root, cases = runs
    run = _copy_run(root / cases["hf_clean"]["path"], tmp_path / "run", [2, 4, 6, 8])
    f = run / "checkpoint-6" / "optimizer.pt"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    t = build_timeline(run)
    missing = [a for a in t.anomalies if a.kind == "part_missing"]
    assert [(a.step, a.severity) for a in missing] == [(6, "warning")]
    assert "optimizer.pt" in missing[0].evidence[0]


@pytest.mark.parametrize(("case", "recorded"), [("dcp_run", "step"), ("pt_run", "step")])
def test_plain_loop_runs_dcp_and_torch_files(runs: Any, case: str, recorded: str) -> None:
    """torchtitan-style DCP step-N folders and loose ckpt_{step}.pt files: ordered by the step
    the files record, optimizer states tied to their parameters and groups, nothing loud (the
    OneCycleLR run cycles the betas: the schedule's, not a changed setting)."""
    root, cases = runs
    t = build_timeline(root / cases[case]["path"])
    assert _loud(t) == [] and not t.has_error
    steps = [c.step for c in t.checkpoints]
    assert steps == [2, 4, 6, 8] and [c.opt_step for c in t.checkpoints] == steps
    assert all(c.step_source == f"{Path(c.path).name} {recorded}" for c in t.checkpoints)
    assert [c.sched_step for c in t.checkpoints] == steps
    first = t.checkpoints[0]
    assert [g["weight_decay"] for g in first.groups] == [0.1, 0.0]
    assert set(first.moments) == {"group 0", "group 1"}
    assert all(set(m) == {"exp_avg", "exp_avg_sq"} for m in first.moments.values())
    model = sorted(n for n, f in first.tensors.items() if f.state is None)
    assert first.trainable == model  # every weight has Adam state, named as the model tensor
    # update ratios over model layers only, never over optimizer states
    assert all(set(p.layers) == {"model.0", "model.1", "model.3", "model.4"} for p in t.pairs)
    assert all(all(v > 0 for v in p.layers.values()) for p in t.pairs)


@pytest.mark.parametrize("case", ["dcp_no_optimizer", "pt_no_scheduler"])
def test_plain_loop_resume_fault_at_its_step(runs: Any, case: str) -> None:
    root, cases = runs
    t = build_timeline(root / cases[case]["path"])
    expected = [tuple(e) for e in cases[case]["expected"]]
    assert [(a.step, a.kind) for a in t.anomalies if a.severity in LOUD] == expected
    assert t.has_error
    ev = " ".join(t.anomalies[0].evidence)
    assert "A = step 4" in ev and "B = step 6" in ev


def test_torch_file_without_step_in_its_name(runs: Any, tmp_path: Path) -> None:
    """last.pt beside ckpt_N.pt: its step comes from its content, not its name. A copy of
    ckpt_8.pt is no warning; a last.pt of another run recording step 8 is."""
    root, cases = runs
    src = root / cases["pt_run"]["path"]
    run = tmp_path / "run"
    run.mkdir()
    for step in (2, 4, 6):
        shutil.copy2(src / f"ckpt_{step}.pt", run / f"ckpt_{step}.pt")
    shutil.copy2(src / "ckpt_8.pt", run / "last.pt")
    t = build_timeline(run)
    assert [(c.step, Path(c.path).name) for c in t.checkpoints][-1] == (8, "last.pt")
    assert t.checkpoints[-1].step_source == "last.pt step" and _loud(t) == []
    shutil.copy2(src / "ckpt_8.pt", run / "ckpt_8.pt")
    t = build_timeline(run)
    assert _loud(t) == [] and [c.step for c in t.checkpoints] == [2, 4, 6, 8, 8]
    dup = [a for a in t.anomalies if a.kind == "duplicate_step"]
    assert [(a.step, a.severity) for a in dup] == [(8, "info")]
    other = root / cases["pt_no_scheduler"]["path"] / "ckpt_8.pt"
    shutil.copy2(other, run / "last.pt")  # same step, other weights
    t = build_timeline(run)
    dup = [a for a in t.anomalies if a.kind == "duplicate_step"]
    assert [(a.step, a.severity) for a in dup] == [(8, "warning")]
