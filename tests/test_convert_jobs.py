"""Conversion jobs: atomicity under SIGKILL, 2-process runs, CLI, progress, cancellation."""

from __future__ import annotations

import json
import os
import random
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
from ckpt_explorer.convert import ConversionCancelled, ProgressEvent
from ckpt_explorer.convert.atomic import clean_stale, temp_dir_for
from ckpt_explorer.convert.verify import verify_output

ROOT = Path(__file__).resolve().parent.parent
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


def _complete_or_absent(dst: Path, reference: dict[str, bytes]) -> str:
    if not dst.exists():
        return "absent"
    assert tree_bytes(dst) == reference, "a partial or different destination"
    plan = plan_conversion(dst, dst.parent / "unused", "hf")  # it opens and plans
    assert plan.tensors
    return "complete"


def test_sigkill_leaves_no_partial_destination(big_bin: Path, tmp_path: Path) -> None:
    reference_dst = tmp_path / "reference"
    assert run_conversion(
        plan_conversion(big_bin, reference_dst, "hf", max_shard_size="8MB")
    ).verified
    reference = tree_bytes(reference_dst)
    source_before = snapshot(big_bin)
    t0 = time.perf_counter()
    r = _cli(
        "convert", str(big_bin), str(tmp_path / "timed"), "--to", "hf", "--max-shard-size", "8MB"
    )
    full = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    rng = random.Random(int(os.environ.get("CKPT_KILL_SEED", "0")))
    seen = []
    for i in range(KILL_POINTS):
        dst = tmp_path / f"killed{i}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "ckpt_explorer", "convert", str(big_bin), str(dst),
             "--to", "hf", "--max-shard-size", "8MB"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(rng.uniform(0.3, full * 1.1))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen.append(_complete_or_absent(dst, reference))
        assert snapshot(big_bin) == source_before, "the source changed"
        # a new job cleans the dead job's temp folder and succeeds
        result = run_conversion(
            plan_conversion(big_bin, dst, "hf", max_shard_size="8MB", overwrite=True)
        )
        assert result.verified and tree_bytes(dst) == reference
        assert not list(tmp_path.glob(f".{dst.name}.tmp-*"))
    print("kill outcomes:", seen)


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
    import ckpt_explorer.convert.jobs as jobs

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
    events: list[ProgressEvent] = []
    plan = plan_conversion(big_bin, tmp_path / "a", "hf", max_shard_size="8MB")
    assert run_conversion(plan, progress=events.append).verified
    done = [e.bytes_done for e in events]
    assert done == sorted(done) and done[-1] == plan.total_bytes
    assert {e.bytes_total for e in events} == {plan.total_bytes}
    assert any(e.current_file.startswith("model-0000") for e in events)
    assert any(e.eta_s is not None for e in events)

    cancel = threading.Event()

    def stop_half_way(e: ProgressEvent) -> None:
        if e.bytes_done > plan.total_bytes // 2:
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

    Gemini, LowLevelZero and HybridParallel with TP>1 need CUDA and are not run here.
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
