"""Conversion jobs: atomicity under SIGKILL, 2-process runs, CLI, progress, cancellation."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _convert_helpers import snapshot, tree_bytes

from ckpt_explorer import plan_conversion, run_conversion
from ckpt_explorer.contracts import Progress
from ckpt_explorer.convert import ConversionCancelled
from ckpt_explorer.convert.atomic import clean_stale, temp_dir_for
from ckpt_explorer.convert.verify import verify_output

ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "test-artifacts"
KILL_POINTS = int(os.environ.get("CKPT_KILL_POINTS", "3"))


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def big_bin(tmp_path_factory: Any) -> Path:
    """A ~48 MB torch.save model file of 24 tensors (fresh, made with torch.save)."""
    folder = tmp_path_factory.mktemp("big")
    gen = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(512, 1024, generator=gen) for i in range(24)}
    sd["layers.0.bias"] = torch.randn(7, generator=gen).to(torch.bfloat16)
    torch.save(sd, folder / "pytorch_model.bin")
    return folder / "pytorch_model.bin"


def test_two_processes_match_one(big_bin: Path, tmp_path: Path) -> None:
    one = run_conversion(plan_conversion(big_bin, tmp_path / "one", "hf", max_shard_size="8MB"))
    two = run_conversion(
        plan_conversion(big_bin, tmp_path / "two", "hf", max_shard_size="8MB"), nproc=2
    )
    assert one.verified and two.verified and two.nproc == 2
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")
    assert len(one.files) > 3


def test_distributed_optimizer_split_matches(real_checkpoints: Any, tmp_path: Path) -> None:
    folder, manifest = real_checkpoints("colossalai")
    src = folder / manifest["cases"]["general_optimizer_file"]["path"]
    plan = plan_conversion(src, tmp_path / "one", "bin", max_shard_size="40KB")
    assert run_conversion(plan).verified
    plan2 = plan_conversion(src, tmp_path / "two", "bin", max_shard_size="40KB")
    assert run_conversion(plan2, nproc=2).verified
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")


@pytest.fixture(scope="module")
def big_colossal(tmp_path_factory: Any) -> Path:
    """A ~48 MB sharded model folder written by ColossalAI's GeneralCheckpointIO (.bin shards)."""
    pytest.importorskip("colossalai")
    from colossalai.checkpoint_io import GeneralCheckpointIO

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(1024, 512) for _ in range(24)))
    folder = tmp_path_factory.mktemp("colossal") / "model"
    GeneralCheckpointIO().save_model(model, str(folder), shard=True, size_per_shard=8)
    return folder


def _same_tensors(a: Path, b: Path) -> bool:
    """Every tensor of ``a`` has the same name, dtype, shape and bytes in ``b``."""
    from ckpt_explorer import open_checkpoint

    va, vb = open_checkpoint(a), open_checkpoint(b)
    if sorted(r.name for r in va.tensors) != sorted(r.name for r in vb.tensors):
        return False
    for r in va.tensors:
        x, y = va.load(r.name), vb.load(r.name)
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.contiguous().reshape(-1).view(torch.uint8).tolist() != (
            y.contiguous().reshape(-1).view(torch.uint8).tolist()
        ):
            return False
    return True


def _outcome(dst: Path, new: dict[str, bytes], old: dict[str, bytes] | None) -> str:
    """``absent``, ``complete`` (the new output), ``old`` (the replaced one intact) or
    ``partial`` (anything else: must never happen)."""
    if not dst.exists():
        return "absent" if old is None else "partial"
    got = tree_bytes(dst)
    if got == new:
        return "complete"
    return "old" if old is not None and got == old else "partial"


KILL_KINDS = {
    # kind: (source fixture, --to, shard size)
    "bin_to_hf": ("big_bin", "hf", "8MB"),
    "colossalai_to_hf": ("big_colossal", "hf", "8MB"),
}


@pytest.mark.parametrize("kind", sorted(KILL_KINDS))
def test_sigkill_leaves_no_partial_destination(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SIGKILL a CLI conversion at random moments, three in four inside the write window
    (after its temp folder appeared) (``CKPT_KILL_POINTS`` per kind, seed
    ``CKPT_KILL_SEED``). One run in three replaces an existing output (``--overwrite``).
    After each kill: the destination is absent, the old output intact or the new one
    complete (same bytes as a clean run, opens, verifies, tensors equal the source's); the
    source is byte for byte unchanged; at most the dead job's temp folder is left, and the
    next job removes it."""
    from ckpt_explorer import open_checkpoint

    fixture, to, shard = KILL_KINDS[kind]
    src: Path = request.getfixturevalue(fixture)
    reference_dst = tmp_path / "reference"
    plan = plan_conversion(src, reference_dst, to, max_shard_size=shard)
    assert run_conversion(plan).verified
    new = tree_bytes(reference_dst)
    assert _same_tensors(src, reference_dst)
    old_dst = tmp_path / "old"
    assert run_conversion(plan_conversion(src, old_dst, to, max_shard_size="16MB")).verified
    old = tree_bytes(old_dst)
    assert old != new
    source_before = snapshot(src)
    args = ["convert", str(src), "DST", "--to", to, "--max-shard-size", shard, "--overwrite"]

    def start(dst: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "ckpt_explorer", *[str(dst) if a == "DST" else a for a in args]],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def wait_for_temp(proc: subprocess.Popen[bytes], dst: Path, limit: float) -> float | None:
        """Seconds until the job's temp folder appears (None: the job ended first)."""
        t0 = time.perf_counter()
        tmp = temp_dir_for(dst, proc.pid)
        while time.perf_counter() - t0 < limit and proc.poll() is None:
            if tmp.exists():
                return time.perf_counter() - t0
            time.sleep(0.002)
        return None

    # a timed run: when the temp folder appears and goes (writing, verifying, installing)
    (tmp_path / "timed").mkdir()
    t0 = time.perf_counter()
    timed = start(tmp_path / "timed" / "out")
    to_tmp = wait_for_temp(timed, tmp_path / "timed" / "out", 600)
    assert to_tmp is not None
    while temp_dir_for(tmp_path / "timed" / "out", timed.pid).exists():
        time.sleep(0.002)
    window = time.perf_counter() - t0 - to_tmp
    assert timed.wait(600) == 0
    full = time.perf_counter() - t0
    rng = random.Random(int(os.environ.get("CKPT_KILL_SEED", "0")))
    report: dict[str, Any] = {
        "kind": kind, "full_run_s": round(full, 2), "write_window_s": round(window, 2), "kills": []
    }  # fmt: skip
    for i in range(KILL_POINTS):
        work = tmp_path / f"k{i}"
        work.mkdir()
        dst = work / "out"
        replacing = i % 3 == 1
        if replacing:
            shutil.copytree(old_dst, dst)
        proc = start(dst)
        if i % 4 == 2:  # anywhere from the start (import, planning, writing)
            phase, at = "from start", rng.uniform(0.1, full * 1.1)
            time.sleep(at)
        else:  # inside the write window: after the temp folder appeared
            phase, at = "writing", rng.uniform(0.0, window * 1.1)
            waited = wait_for_temp(proc, dst, 600)
            time.sleep(at)
            at += waited or 0.0
        temp_at_kill = temp_dir_for(dst, proc.pid).exists()
        exited_before = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        outcome = _outcome(dst, new, old if replacing else None)
        left = sorted(p.name for p in work.iterdir() if p.name != "out")
        report["kills"].append(
            {"phase": phase, "at_s": round(at, 2), "replacing": replacing, "outcome": outcome,
             "temp_at_kill": temp_at_kill, "exited_before_kill": exited_before, "left": left}
        )  # fmt: skip
        assert outcome != "partial", report["kills"][-1]
        if outcome == "complete":
            assert verify_output(plan, dst) == [] and _same_tensors(src, dst)
            assert open_checkpoint(dst).tensors
        assert snapshot(src) == source_before, "the source changed"
        assert set(left) <= {f".out.tmp-{proc.pid}"}, left
        # a new job cleans the dead job's temp folder and succeeds
        result = run_conversion(plan_conversion(src, dst, to, max_shard_size=shard, overwrite=True))
        assert result.verified and tree_bytes(dst) == new
        assert [p.name for p in work.iterdir()] == ["out"]
    outcomes = [k["outcome"] for k in report["kills"]]
    report["summary"] = {o: outcomes.count(o) for o in sorted(set(outcomes))}
    report["summary"]["killed_while_temp_existed"] = sum(k["temp_at_kill"] for k in report["kills"])
    report["summary"]["partial"] = outcomes.count("partial")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"kill-report-{kind}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nkill outcomes ({kind}):", report["summary"])


def test_overwrite_and_dry_run_and_exists(big_bin: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out.safetensors"
    r = _cli("convert", str(big_bin), str(dst), "--to", "safetensors", "--dry-run")
    assert r.returncode == 0 and "tensors" in r.stdout and not dst.exists()
    assert not list(tmp_path.iterdir())
    r = _cli("convert", str(big_bin), str(dst), "--to", "safetensors", "--dry-run", "--json")
    plan = json.loads(r.stdout)["plan"]
    assert plan["tensors"] == 25 and plan["fast_path_bytes"] == plan["total_bytes"]
    r = _cli("convert", str(big_bin), str(dst), "--to", "safetensors", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["result"]["verified"] is True
    first = dst.read_bytes()
    r = _cli("convert", str(big_bin), str(dst), "--to", "safetensors")
    assert r.returncode == 2 and "--overwrite" in r.stderr and len(r.stderr.splitlines()) == 1
    assert dst.read_bytes() == first
    r = _cli(
        "convert", str(big_bin), str(dst), "--to", "safetensors", "--overwrite", "--dtype", "bf16"
    )
    assert r.returncode == 0, r.stderr
    assert dst.stat().st_size < len(first)


def test_bad_input_exit_2(tmp_path: Path) -> None:
    (tmp_path / "junk.bin").write_bytes(b"not a checkpoint")
    r = _cli(
        "convert",
        str(tmp_path / "junk.bin"),
        str(tmp_path / "o.safetensors"),
        "--to",
        "safetensors",
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    r = _cli("convert", str(tmp_path / "missing"), str(tmp_path / "o"), "--to", "hf")
    assert r.returncode == 2


def test_overwrite_folder_replaced_whole(big_bin: Path, tmp_path: Path) -> None:
    dst = tmp_path / "hf"
    dst.mkdir()
    (dst / "stale.txt").write_text("old")
    result = run_conversion(
        plan_conversion(big_bin, dst, "hf", max_shard_size="8MB", overwrite=True)
    )
    assert result.verified and not (dst / "stale.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_failed_verification_installs_nothing(
    big_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ckpt_explorer.convert.runner as jobs

    monkeypatch.setattr(jobs, "verify_output", lambda plan, out: ["x: bytes differ"])
    result = run_conversion(plan_conversion(big_bin, tmp_path / "o.safetensors", "safetensors"))
    assert not result.verified and result.mismatches == ["x: bytes differ"]
    assert not (tmp_path / "o.safetensors").exists() and not list(tmp_path.iterdir())


def test_verification_catches_a_changed_byte(big_bin: Path, tmp_path: Path) -> None:
    plan = plan_conversion(big_bin, tmp_path / "o.safetensors", "safetensors")
    assert run_conversion(plan).verified
    data = bytearray((tmp_path / "o.safetensors").read_bytes())
    data[-5] ^= 1
    (tmp_path / "o.safetensors").write_bytes(bytes(data))
    problems = verify_output(plan, tmp_path / "o.safetensors")
    assert len(problems) == 1 and "bytes differ" in problems[0]


def test_progress_events_and_cancel(big_bin: Path, tmp_path: Path) -> None:
    events: list[Progress] = []
    plan = plan_conversion(big_bin, tmp_path / "a", "hf", max_shard_size="8MB")
    assert run_conversion(plan, progress=events.append).verified
    done = [e.done for e in events]
    assert done == sorted(done) and done[-1] == plan.total_bytes
    assert {e.total for e in events} == {plan.total_bytes}
    assert {e.unit for e in events} == {"bytes"}
    assert [e.stage for e in events] == ["write"] * (len(events) - 1) + ["verify"]
    assert any(e.item.startswith("model-0000") for e in events)
    assert any(e.eta_s is not None for e in events)

    cancel = threading.Event()

    def stop_half_way(e: Progress) -> None:
        if e.done > plan.total_bytes // 2:
            cancel.set()

    plan_b = plan_conversion(big_bin, tmp_path / "b", "hf", max_shard_size="8MB")
    with pytest.raises(ConversionCancelled):
        run_conversion(plan_b, progress=stop_half_way, cancel=cancel)
    assert not (tmp_path / "b").exists()
    assert not list(tmp_path.glob(".b.tmp-*"))


def test_stale_temp_folders_of_dead_jobs_are_removed(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that no longer runs
    stale = temp_dir_for(tmp_path / "out", proc.pid)
    stale.mkdir()
    (stale / "half.safetensors").write_bytes(b"x")
    live = temp_dir_for(tmp_path / "out", os.getppid())
    live.mkdir()
    assert clean_stale(tmp_path / "out") == [stale]
    assert live.exists() and not stale.exists()


def test_optimizer_to_safetensors_is_refused(real_checkpoints: Any, tmp_path: Path) -> None:
    folder, manifest = real_checkpoints("torch")
    src = folder / manifest["cases"]["optimizer"]["path"]
    r = _cli("convert", str(src), str(tmp_path / "o"), "--to", "hf")
    assert r.returncode == 2 and "--to torch" in r.stderr


def test_colossalai_engine_gather(real_checkpoints: Any, tmp_path: Path) -> None:
    """Booster(TorchDDPPlugin) on CPU/gloo loads the sharded checkpoint and saves it whole.

    HybridParallel (tp/pp on CPU) is tested in test_colossal_engine_hybrid.py; Gemini and
    LowLevelZero need CUDA and are not run here.
    """
    pytest.importorskip("colossalai")
    from transformers import AutoModelForCausalLM

    from ckpt_explorer.convert.colossal_engine import gather_with_colossalai

    folder, manifest = real_checkpoints("colossalai")
    src = folder / manifest["cases"]["pipeline_sharded_model"]["path"]
    before = snapshot(src)
    result = gather_with_colossalai(src, tmp_path / "gathered", shard=False)
    assert result.verified, result.mismatches
    assert snapshot(src) == before
    sharded = gather_with_colossalai(src, tmp_path / "sharded", shard=True, size_per_shard_mb=1)
    assert sharded.verified and (tmp_path / "sharded" / "config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sharded")
    sd = torch.load(tmp_path / "gathered", weights_only=True)
    for k, v in model.state_dict().items():
        assert torch.equal(v, sd[k]), k
