"""Real checkpoints (copies of the cached fixtures, some damaged on purpose), the tool's
loader table and repair on them, and the real loaders run once on every case (one
subprocess per loader family). Shared by test_loadable.py and test_repair.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ORACLE = Path(__file__).parent / "loader_oracle.py"
ROOT = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_oracle(family: str, cases: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    if not cases:
        return {}
    src, dst = tmp / f"{family}-cases.json", tmp / f"{family}-results.json"
    src.write_text(json.dumps(cases))
    env = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_port()),
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "HF_HUB_OFFLINE": "1",
    }
    name = family
    if family == "hf4":
        side = ROOT / ".venv" / "side" / "transformers4"
        assert side.is_dir(), f"no transformers 4 at {side} (scripts/setup_env.sh puts it there)"
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(side), env.get("PYTHONPATH")) if x)
        name = "hf"
    proc = subprocess.run(
        [sys.executable, str(ORACLE), name, str(src), str(dst)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, (
        f"{family} oracle failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    return json.loads(dst.read_text())


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def make_cases(fx: Any, root: Path) -> dict[str, Path]:
    """Each case folder, built from the real makers' outputs."""
    cai, _ = fx("colossalai")
    hf, _ = fx("hf")
    dcp, _ = fx("dcp")
    ds, _ = fx("deepspeed")
    rw, _ = fx("realworld_hf")
    ts = cai / "ddp" / "epoch-1_step-3"
    c: dict[str, Path] = {}
    c["cai_state"] = _copy(ts, root / "cai_state")
    c["cai_optim_noindex"] = _copy(ts / "optimizer", root / "cai_optim_noindex")
    (c["cai_optim_noindex"] / "pytorch_optim.bin.index.json").unlink()
    c["cai_model_noindex"] = _copy(ts / "modeling", root / "cai_model_noindex")
    (c["cai_model_noindex"] / "pytorch_model.bin.index.json").unlink()
    g = hf / "gpt2_sharded"
    c["hf_ok"] = _copy(g, root / "hf_ok")
    c["hf_two_index"] = _copy(g, root / "hf_two_index")
    for f in (hf / "gpt2_bin_sharded").iterdir():
        if f.name.startswith("pytorch_model"):
            shutil.copy2(f, c["hf_two_index"] / f.name)
    c["hf_stale_bin"] = _copy(g, root / "hf_stale_bin")
    from safetensors.torch import load_file

    sd = {}
    for f in sorted(g.glob("model-*.safetensors")):
        sd.update(load_file(f))
    stale = c["hf_stale_bin"] / "pytorch_model.bin"
    torch.save({k: torch.zeros_like(v) for k, v in sd.items()}, stale)  # an older, other save
    old = time.time() - 3 * 86400
    os.utime(stale, (old, old))
    c["hf_noindex"] = _copy(g, root / "hf_noindex")
    (c["hf_noindex"] / "model.safetensors.index.json").unlink()
    c["hf_noconfig"] = _copy(g, root / "hf_noconfig")
    (c["hf_noconfig"] / "config.json").unlink()
    # config.json without model_type, in folders whose names do / do not hold a model type
    # transformers 4 knows (its path guess: a BertLMHeadModel for one, ValueError for the other)
    for name in ("hf_bert-run", "hf_0412"):
        c[name] = _copy(g, root / name)
        config = json.loads((c[name] / "config.json").read_text())
        del config["model_type"]
        (c[name] / "config.json").write_text(json.dumps(config))
    c["hf_missing_shard"] = _copy(g, root / "hf_missing_shard")
    (c["hf_missing_shard"] / "model-00002-of-00004.safetensors").unlink()
    c["dcp_ok"] = _copy(dcp / "dcp_model", root / "dcp_ok")
    c["dcp_nometa"] = _copy(dcp / "dcp_model", root / "dcp_nometa")
    (c["dcp_nometa"] / ".metadata").unlink()
    c["ds_ok"] = _copy(ds / "ds_zero1", root / "ds_ok")
    c["ds_nolatest"] = _copy(ds / "ds_zero1", root / "ds_nolatest")
    (c["ds_nolatest"] / "latest").unlink()
    c["accel_ok"] = _copy(rw / "accelerate" / "step2", root / "accel_ok")
    c["accel_no_optim"] = _copy(rw / "accelerate" / "step2", root / "accel_no_optim")
    (c["accel_no_optim"] / "optimizer.bin").unlink()
    c["ds_optim_file"] = c["ds_ok"] / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    c["sched_file"] = c["cai_state"] / "lr_scheduler"
    # repaired copies (repair runs here; the loaders check them below)
    for name in ("cai_optim_noindex", "cai_model_noindex", "hf_noindex", "ds_nolatest"):
        c[f"{name}_repaired"] = _copy(c[name], root / f"{name}_repaired")
    return c


FAMILY = {
    "colossalai": "colossalai",
    "transformers": "hf",
    "torch.load": "hf",
    "dcp.load": "hf",
    "accelerate.load_state": "hf",
    "deepspeed.load_checkpoint": "deepspeed",
}


def _family(loader: str) -> str:
    if loader.startswith("transformers.from_pretrained@4"):
        return "hf4"
    return next(f for k, f in FAMILY.items() if loader.startswith(k))


_STATE: dict[str, Any] = {}


def run_all(fx: Any) -> dict[str, Any]:
    """Cases, their tables (before any repair), repairs, and every real loader's result."""
    if _STATE:
        return _STATE
    from ckpt_explorer.loadable import loader_table
    from ckpt_explorer.repair import plan_repair, run_repair

    # transformers 4 guesses a model type from the folder's path when config.json has none
    # (any of its model-type names in the path string, e.g. "t5" in a random "9shcz5t5"): a
    # name of digits only keeps the cases' paths free of them, so that only the cases named
    # for it (hf_bert-run) hold one
    tmp = Path(tempfile.mkdtemp(prefix="loadable-", suffix=f"-{os.getpid()}"))
    tmp = tmp.rename(tmp.parent / f"loadable-{os.getpid()}-{int(tmp.stat().st_ino)}")
    cases = make_cases(fx, tmp)
    repairs = {}
    for name, p in cases.items():
        if name.endswith("_repaired"):
            plan = plan_repair(p)
            repairs[name] = (plan, run_repair(plan))
    tables = {name: loader_table(p) for name, p in cases.items()}
    jobs: dict[str, list[dict[str, Any]]] = {}
    for name, table in tables.items():
        for v in table.verdicts:
            p = Path(table.path) / v.target if v.target else Path(table.path)
            job = {"id": f"{name}|{v.loader}|{v.target}", "loader": v.loader, "path": str(p)}
            if v.loader == "colossalai.load_model" and name.startswith("hf_"):
                job.update(model="config", model_path=str(cases["hf_ok"]))  # the GPT-2 saved
            if v.loader == "deepspeed.load_checkpoint":
                job["stage"] = 1
            jobs.setdefault(_family(v.loader), []).append(job)
    results: dict[str, Any] = {}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # one subprocess per family, two at a time (2 cores)
        for found in pool.map(lambda kv: run_oracle(kv[0], kv[1], tmp), jobs.items()):
            results.update(found)
    _STATE.update(cases=cases, tables=tables, repairs=repairs, results=results, tmp=tmp)
    return _STATE


def agrees(v: Any, real: dict[str, Any]) -> str:
    """ "" when the real loader did what the verdict says, else what differed."""
    if v.outcome == "loads":
        return (
            "" if real["ok"] else f"predicted loads, got {real['error']}: {real['message'][:300]}"
        )
    if v.outcome == "cannot_tell":  # no claim: test_loadable checks where it is said
        return ""
    if real["ok"]:
        return f"predicted {v.outcome} ({v.error}: {v.message}), but it loaded"
    if v.outcome == "silent":
        return "" if real["message"] == "returned (None, None)" else f"got {real}"
    if v.error and v.error != real["error"]:
        return f"predicted {v.error}, got {real['error']}: {real['message'][:300]}"
    if v.message and v.message not in real["message"]:
        return f"predicted message {v.message!r} not in {real['message'][:400]!r}"
    return ""
