"""The engines' one contract (``ckpt_explorer.contracts``): every engine that reports progress
sends :class:`Progress` events, cancellation is one ``is_set()`` flag, every report the CLI or
the dashboard shows is a :class:`Report`, and ``as_view`` is the one way from a path to a view.
Checked on real checkpoints (torch.save, safetensors, transformers, the demo's ColossalAI-style
training states)."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import (
    as_view,
    diff_checkpoints,
    plan_conversion,
    resume_doctor,
    run_conversion,
    validate_checkpoint,
)
from ckpt_explorer.contracts import Meter, Progress, Report, is_cancelled
from ckpt_explorer.convert import ConversionCancelled
from ckpt_explorer.convert.progress import ProgressBar
from ckpt_explorer.demo import make_demo
from ckpt_explorer.errors import Cancelled
from ckpt_explorer.fit import Layout, fit_checkpoint
from ckpt_explorer.loadable import loader_table
from ckpt_explorer.repair import plan_repair
from ckpt_explorer.security import scan_paths
from ckpt_explorer.timeline import build_timeline


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("contracts") / "demo")


def _pair(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    g = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.w": torch.randn(64, 64, generator=g) for i in range(12)}
    save_file(sd, str(tmp_path / "a.safetensors"))
    save_file({k: v + 0.5 for k, v in sd.items()}, str(tmp_path / "b.safetensors"))
    return tmp_path / "a.safetensors", tmp_path / "b.safetensors", list(sd)


def _one_stage(events: list[Progress], stage: str, unit: str) -> None:
    """Events of one stage and unit, ``done`` never going back, ending at the total."""
    assert events, "no progress event"
    assert {e.stage for e in events} == {stage} and {e.unit for e in events} == {unit}
    done = [e.done for e in events]
    assert done == sorted(done)
    assert len({e.total for e in events}) == 1 and events[-1].total > 0
    assert events[-1].done == events[-1].total and events[-1].fraction == 1.0


def test_progress_fraction_and_units() -> None:
    assert Progress("write", 3, 4).fraction == 0.75
    assert Progress("write", 5, 0).fraction == 0.0  # total not known yet
    assert Progress("pair", 9, 4, "pairs").fraction == 1.0
    with pytest.raises(ValueError, match="unit"):
        Progress("write", 1, 2, unit="bits")
    stop = threading.Event()
    assert not is_cancelled(stop) and not is_cancelled(None)
    stop.set()
    assert is_cancelled(stop)


def test_meter_throttles_and_always_sends_the_end() -> None:
    events: list[Progress] = []
    m = Meter(events.append, "write", 100, every=30, every_s=0.0)
    for _ in range(10):
        m.advance(10)
    assert [e.done for e in events] == [30, 60, 90, 100]
    assert all(e.eta_s is not None for e in events) and events[-1].eta_s == 0.0
    slow: list[Progress] = []
    m = Meter(slow.append, "write", 100, every_s=3600.0)
    m.advance(10)  # the first event goes out at once
    m.advance(10)
    assert [e.done for e in slow] == [10]  # the next ones wait for the time to pass
    m.start("model-00001.safetensors")  # except a new item, which is always said
    m.advance(80)  # and the end
    assert [(e.done, e.item) for e in slow[1:]] == [
        (20, "model-00001.safetensors"),
        (100, "model-00001.safetensors"),
    ]
    Meter(None, "write", 10).advance(10)  # no sink: nothing to do


def test_diff_progress_names_the_tensor_being_compared(tmp_path: Path) -> None:
    a, b, names = _pair(tmp_path)
    events: list[Progress] = []
    result = diff_checkpoints(a, b, progress=events.append)
    _one_stage(events, "compare", "bytes")
    assert events[0].done == 0  # the total is said before the first byte
    assert events[-1].total == result.summary()["bytes_compared"] == 2 * 12 * 64 * 64 * 4
    seen = {e.item for e in events if e.item}
    assert seen and seen <= set(names)


def test_validate_progress_is_its_numeric_scan(demo: Path) -> None:
    events: list[Progress] = []
    report = validate_checkpoint(demo / "resumed_from", progress=events.append)
    _one_stage(events, "scan", "bytes")
    assert report.stats and any(e.item in report.stats for e in events)
    quiet: list[Progress] = []
    validate_checkpoint(demo / "resumed_from", numeric=False, progress=quiet.append)
    assert quiet == []  # headers only: nothing is streamed


def test_doctor_progress_is_its_weight_diff(demo: Path) -> None:
    events: list[Progress] = []
    report = resume_doctor(demo / "resumed_from", demo / "after_resume", progress=events.append)
    _one_stage(events, "compare", "bytes")
    assert report.top is not None and report.top.cause == "scheduler_not_restored"
    quiet: list[Progress] = []
    resume_doctor(
        demo / "resumed_from", demo / "after_resume", compare_weights=False, progress=quiet.append
    )
    assert quiet == []


def test_timeline_progress_counts_checkpoints_then_pairs(demo: Path) -> None:
    events: list[Progress] = []
    t = build_timeline(demo / "run", progress=events.append)
    opened = [e for e in events if e.stage == "open"]
    paired = [e for e in events if e.stage == "pair"]
    assert events == opened + paired
    assert {e.unit for e in opened} == {"checkpoints"} and {e.unit for e in paired} == {"pairs"}
    assert [e.done for e in opened] == list(range(1, len(t.checkpoints) + 1))
    assert {e.total for e in opened} == {len(t.checkpoints)}
    assert [e.done for e in paired] == list(range(1, len(t.pairs) + 1))
    assert {e.item for e in opened} == {Path(c.path).name for c in t.checkpoints}


def test_timeline_build_stops_when_cancelled(demo: Path) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        build_timeline(demo / "run", cancel=stop)
    stop.clear()
    seen: list[Progress] = []

    def first_pair_then_stop(e: Progress) -> None:
        seen.append(e)
        if e.stage == "pair":
            stop.set()

    with pytest.raises(Cancelled, match="cancel request"):
        build_timeline(demo / "run", progress=first_pair_then_stop, cancel=stop)
    assert [e.done for e in seen if e.stage == "pair"] == [1]  # stopped before the second


def test_cli_bar_draws_every_unit() -> None:
    out = io.StringIO()
    bar = ProgressBar(out)
    bar(Progress("write", 512, 1024, item="model-00001-of-00002.safetensors", eta_s=3.0))
    bar(Progress("pair", 2, 5, "pairs", "checkpoint-20"))
    bar(Progress("verify", 1024, 1024, message="(verifying)"))
    bar.close()
    text = out.getvalue()
    assert " 50.0%  512 B/1.0 KiB  model-00001-of-00002.safetensors  ETA 3s" in text
    assert " 40.0%  2/5 pairs  checkpoint-20" in text
    assert "100.0%  1.0 KiB/1.0 KiB  (verifying)" in text and text.endswith("\n")


def test_every_report_keeps_the_report_contract(
    tmp_path: Path, demo: Path, real_checkpoints: Any
) -> None:
    a, b, _ = _pair(tmp_path)
    hf_root, manifest = real_checkpoints("hf")
    gpt2 = hf_root / manifest["cases"]["gpt2_sharded"]["path"]
    plan = plan_conversion(a, tmp_path / "out", "hf", max_shard_size="20KB")
    result = run_conversion(plan)
    fit = fit_checkpoint(gpt2, Layout(tp=2, gpu_mem=2**30))
    reports: dict[str, tuple[Any, int]] = {}
    diff = diff_checkpoints(a, b)
    reports["diff"] = (diff, len(diff.tensors))
    val = validate_checkpoint(demo / "after_resume")  # a resume that lost its scheduler
    reports["validate"] = (val, len(val.findings))
    doc = resume_doctor(demo / "resumed_from", demo / "after_resume")
    reports["doctor"] = (doc, len(doc.causes))
    reports["plan"] = (plan, len(plan.files))
    reports["result"] = (result, len(result.files) + len(result.notes) + len(result.left_out))
    t = build_timeline(demo / "run")
    reports["timeline"] = (t, len(t.checkpoints))
    reports["fit"] = (fit, len(fit.checks) + 1)  # + memory per GPU: a GPU memory was given
    table = loader_table(gpt2)
    reports["loaders"] = (table, len(table.verdicts) + len(table.conflicts))
    reports["repair"] = (plan_repair(gpt2), 1)  # nothing lost: one "refused" row
    scan = scan_paths([tmp_path])
    reports["scan"] = (scan, scan.files_seen)
    for name, (report, rows) in reports.items():
        assert isinstance(report, Report), name
        frame = report.to_frame()
        assert isinstance(frame, pd.DataFrame) and len(frame) == rows > 0, name
        doc_json = report.to_json()
        assert isinstance(doc_json, dict) and json.loads(json.dumps(doc_json, default=str)), name
    assert list(reports["diff"][0].to_frame()["name"])[:2] == ["layers.0.w", "layers.1.w"]
    assert reports["doctor"][0].to_frame()["cause"].iloc[0] == "scheduler_not_restored"
    assert list(reports["plan"][0].to_frame()["file"]) == [f.name for f in plan.files]
    assert reports["repair"][0].to_frame()["kind"].tolist() == ["refused"]
    assert set(reports["scan"][0].to_frame()["verdict"]) == {"data"}  # safetensors only


def test_as_view_opens_paths_and_keeps_views(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    torch.save(model.state_dict(), tmp_path / "model.pt")
    torch.save(opt.state_dict(), tmp_path / "optim.pt")
    view = as_view(tmp_path / "optim.pt")
    assert as_view(view) is view and view.path == tmp_path / "optim.pt"
    assert view.optimizer is not None and view.optimizer.param_names == {}
    truth = {0: "0.weight", 1: "0.bias", 2: "2.weight", 3: "2.bias"}
    by_path = as_view(tmp_path / "optim.pt", model=tmp_path / "model.pt")
    by_view = as_view(view, model=as_view(tmp_path / "model.pt"))
    assert by_path.optimizer is not None and by_view.optimizer is not None
    assert by_path.optimizer.param_names == by_view.optimizer.param_names == truth


def test_torchrun_jobs_relay_their_ranks_progress(tmp_path: Path) -> None:
    """``--nproc 2`` jobs: the ranks' events reach the caller while they run (the launcher's
    own events name no tensor or file); a cancel before the start stops the job."""
    a, b, names = _pair(tmp_path)
    events: list[Progress] = []
    result = diff_checkpoints(a, b, nproc=2, progress=events.append)
    assert result.options["nproc"] == 2 and not result.equal
    _one_stage(events, "compare", "bytes")
    assert any(e.item in names for e in events)  # from the ranks

    plan = plan_conversion(a, tmp_path / "out", "hf", max_shard_size="20KB")
    written: list[Progress] = []
    assert run_conversion(plan, nproc=2, progress=written.append).verified
    stages = [e.stage for e in written]
    assert stages[0] == "launch" and stages[-1] == "verify" and "write" in stages
    files = {f.name for f in plan.files}
    assert len(files) == 12 and any(e.item in files for e in written if e.stage == "write")
    assert written[-1].done == written[-1].total == plan.total_bytes

    stop = threading.Event()

    def stop_at_launch(e: Progress) -> None:
        if e.stage == "launch":
            stop.set()

    later = plan_conversion(a, tmp_path / "stopped", "hf", max_shard_size="20KB")
    with pytest.raises(ConversionCancelled):
        run_conversion(later, nproc=2, progress=stop_at_launch, cancel=stop)
    assert not (tmp_path / "stopped").exists()
