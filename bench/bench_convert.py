"""Conversion benchmark: ckpt_explorer's converters against ``cp`` and the naive converters.

    .venv/bin/python bench/bench_convert.py [--rounds 3] [--groups cli,bin,dcp,zero]
        [--zero-params 60] [--json-out FILE]

Data under ``bench/.data/convert/`` (kept between runs): a ~1 GB torch ``.bin`` (16 fp32
tensors of 64 MiB), a ``.bin`` of 10,000 small tensors (40 MB, per-tensor overhead), a ~1 GB
DCP folder of the same tensors written with ``dcp.save``, and a DeepSpeed ZeRO-2 checkpoint
(one CPU rank, gloo) of a model of ``--zero-params`` million fp32 parameters. Each case runs in
a fresh process, cases alternate, ``--rounds`` times, cold (``posix_fadvise DONTNEED`` on
every source file first) and warm (files read once first); ``sync`` before every case.

Group ``cli`` (whole processes, timed from outside, start-up included):

- ``cp_sync``:      ``cp SRC DST && sync DST`` (the copy limit, on disk);
- ``cli_convert``:  ``python -m ckpt_explorer convert SRC DST --to safetensors`` (plan, write,
                    verify bit for bit, fsync, atomic rename), and the same two for the
                    10,000-tensor file (``cp_sync_10k``, ``cli_convert_10k``);
- ``py_start``:     ``python -c pass`` (interpreter start-up, for scale).

Memory of a whole process: peak ``RssAnon`` of ``/proc/<pid>/status`` sampled every ~2 ms
by the parent; ``VmHWM`` (which also counts mapped file pages) beside it. Children run without
``PYTHONDONTWRITEBYTECODE`` after one untimed warm-up, as an installed package runs (with .pyc).

Group ``bin`` and the others (times of the work inside the process, imports excluded; peak
RssAnon sampled in a thread, above the process after its imports):

- ``cp``:           ``cp SRC DST`` of the .bin, and ``cp`` + fsync;
- ``convert``:      ckpt_explorer ``.bin`` -> safetensors (write, then verification while the
                    output is flushed; both timed apart);
- ``naive``:        ``torch.load(weights_only=True)`` + ``safetensors.torch.save_file``;
- ``dcp_convert`` / ``dcp_naive``: DCP -> HF safetensors folder vs torch's
                    ``dcp_to_torch_save``;
- ``zero_convert`` / ``zero_naive``: ZeRO -> HF safetensors vs DeepSpeed's ``zero_to_fp32``
                    (its module run as a script, ``--safe_serialization``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
DATA = HERE / ".data" / "convert"
OUT = DATA / "out"
MIB = 2**20


# ---- memory sampling (inside each case process) -------------------------------------------
def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Sampler:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _status("RssAnon"))
            time.sleep(0.005)

    def __enter__(self) -> Sampler:
        self.base = _status("RssAnon")
        self._t.start()
        return self

    def __exit__(self, *a: Any) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _status("RssAnon"))


# ---- data ----------------------------------------------------------------------------------
def tensors() -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    return {f"layers.{i}.weight": torch.randn(4096, 4096, generator=g) for i in range(16)}


def small_tensors() -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    return {f"blocks.{i}.scale": torch.randn(1024, generator=g) for i in range(10_000)}


def make_data(zero_params_m: int, groups: set[str]) -> None:
    import torch

    DATA.mkdir(parents=True, exist_ok=True)
    for name, make in (("model.bin", tensors), ("small10k.bin", small_tensors)):
        if not (DATA / name).is_file():
            torch.save(make(), DATA / f"{name}.part")
            os.replace(DATA / f"{name}.part", DATA / name)
    if "dcp" in groups and not (DATA / "dcp" / ".metadata").is_file():
        import torch.distributed.checkpoint as dcp

        shutil.rmtree(DATA / "dcp", ignore_errors=True)
        dcp.save(tensors(), checkpoint_id=str(DATA / "dcp"), no_dist=True)
    zero = DATA / f"zero2_{zero_params_m}m"
    if "zero" in groups and not (zero / "latest").is_file():
        shutil.rmtree(zero, ignore_errors=True)
        env = {**os.environ, "DS_ACCELERATOR": "cpu", "RANK": "0", "LOCAL_RANK": "0",
               "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": "29611"}  # fmt: skip
        subprocess.run(
            [sys.executable, __file__, "--make-zero", str(zero), str(zero_params_m)],
            env=env, check=True,
        )  # fmt: skip


def make_zero(out: Path, params_m: int) -> None:
    import deepspeed.comm.torch

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed
    import torch
    from torch import nn

    deepspeed.init_distributed(dist_backend="gloo")
    width = 2048
    layers = max(1, params_m * 10**6 // (width * width))
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    config = {
        "train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True,
    }  # fmt: skip
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    loss = engine(torch.randn(2, width)).square().mean()
    engine.backward(loss)
    engine.step()
    engine.save_checkpoint(str(out))


# ---- cases ---------------------------------------------------------------------------------
def case(name: str) -> dict[str, Any]:
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    if out.with_suffix(".safetensors").exists():
        out.with_suffix(".safetensors").unlink()
    res: dict[str, Any] = {}
    if name.startswith("cp"):
        dst = OUT / "cp.bin"
        t0 = time.perf_counter()
        subprocess.run(["cp", str(DATA / "model.bin"), str(dst)], check=True)
        if name == "cp_fsync":
            fd = os.open(dst, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        res["seconds"] = time.perf_counter() - t0
        dst.unlink()
        return res
    if name in ("convert", "dcp_convert", "zero_convert"):
        import safetensors.torch  # noqa: F401  (imports are not timed)
        import torch.distributed.checkpoint

        from ckpt_explorer import plan_conversion, run_conversion
        from ckpt_explorer.convert import (  # noqa: F401
            planner,
            runner,
            source_reading,
            verify,
            writers,
        )

        src = {"convert": DATA / "model.bin", "dcp_convert": DATA / "dcp"}.get(name)
        src = src or next(DATA.glob("zero2_*"))
        dst = out.with_suffix(".safetensors") if name == "convert" else out
        to = "safetensors" if name == "convert" else "hf"
        with Sampler() as s:
            t0 = time.perf_counter()
            result = run_conversion(plan_conversion(src, dst, to))
            res["seconds"] = time.perf_counter() - t0
        assert result.verified
        res.update(write_s=result.seconds, verify_s=result.verify_seconds)
    elif name == "naive":
        import torch
        from safetensors.torch import save_file

        with Sampler() as s:
            t0 = time.perf_counter()
            sd = torch.load(DATA / "model.bin", weights_only=True)
            save_file(sd, str(out.with_suffix(".safetensors")))
            res["seconds"] = time.perf_counter() - t0
    elif name == "dcp_naive":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with Sampler() as s:
            t0 = time.perf_counter()
            dcp_to_torch_save(DATA / "dcp", out.with_suffix(".pt"))
            res["seconds"] = time.perf_counter() - t0
        out.with_suffix(".pt").unlink()
    elif name == "zero_naive":
        import runpy

        src = next(DATA.glob("zero2_*"))
        sys.argv = ["zero_to_fp32", str(src), str(out), "--safe_serialization"]
        with Sampler() as s:
            t0 = time.perf_counter()
            runpy.run_module("deepspeed.utils.zero_to_fp32", run_name="__main__")
            res["seconds"] = time.perf_counter() - t0
    res.update(peak_anon=s.peak - s.base, vmhwm=_status("VmHWM"))
    shutil.rmtree(out, ignore_errors=True)
    if out.with_suffix(".safetensors").exists():
        out.with_suffix(".safetensors").unlink()
    return res


def sources(name: str) -> list[Path]:
    if name.startswith("dcp"):
        return sorted((DATA / "dcp").iterdir())
    if name.startswith("zero"):
        return sorted(p for p in next(DATA.glob("zero2_*")).rglob("*") if p.is_file())
    if name.endswith("_10k"):
        return [DATA / "small10k.bin"]
    return [DATA / "model.bin"]


def prepare(name: str, cold: bool) -> None:
    os.sync()  # nothing of an earlier case is left to flush during this one
    for p in sources(name):
        fd = os.open(p, os.O_RDONLY)
        try:
            if cold:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, 64 * MIB):
                    pass
        finally:
            os.close(fd)


# ---- whole processes (group "cli") ---------------------------------------------------------
CLI_CASES = ("py_start", "cp_sync", "cli_convert", "cp_sync_10k", "cli_convert_10k")


def _proc_status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("RssAnon", "VmHWM"):
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def run_process(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Wall time of one process from start to exit, its peak RssAnon and last VmHWM."""
    peak = {"RssAnon": 0, "VmHWM": 0}
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        while proc.poll() is None:
            for k, v in _proc_status(proc.pid).items():
                peak[k] = max(peak[k], v)
            time.sleep(0.002)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{argv}: exit {proc.returncode}: {err.read().decode()[-3000:]}")
    return {"seconds": seconds, "peak_anon": peak["RssAnon"], "vmhwm": peak["VmHWM"]}


def run_cli_case(name: str, cold: bool, env: dict[str, str]) -> dict[str, Any]:
    src = sources(name)[0]
    dst = OUT / (name + (".bin" if name.startswith("cp") else ".safetensors"))
    dst.unlink(missing_ok=True)
    prepare(name, cold)
    if name == "py_start":
        return run_process([sys.executable, "-c", "pass"], env)
    if name.startswith("cp_sync"):
        shell = f'cp "{src}" "{dst}" && sync "{dst}"'
        res = run_process(["sh", "-c", shell], env)
    else:
        argv = [sys.executable, "-m", "ckpt_explorer", "convert", str(src), str(dst)]
        res = run_process([*argv, "--to", "safetensors"], env)
    dst.unlink()
    return res


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(HERE.parent)
    env["OMP_NUM_THREADS"] = "2"
    return env


def run_case(name: str, cold: bool) -> dict[str, Any]:
    if name in CLI_CASES:
        return run_cli_case(name, cold, cli_env())
    prepare(name, cold)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, __file__, "--case", name], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


GROUPS = {
    "cli": [["cp_sync", "cli_convert", "py_start"], ["cp_sync_10k", "cli_convert_10k"]],
    "bin": [["cp", "cp_fsync", "convert", "naive"]],
    "dcp": [["dcp_convert", "dcp_naive"]],
    "zero": [["zero_convert", "zero_naive"]],
}


def ratios(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    """The goal's ratios: whole CLI job against cp + sync of the same file, per cache state."""
    out = {}
    for temp in ("cold", "warm"):
        for a, b in (("cli_convert", "cp_sync"), ("cli_convert_10k", "cp_sync_10k")):
            if f"{a}/{temp}" in summary and f"{b}/{temp}" in summary:
                out[f"{a}/{b}/{temp}"] = (
                    summary[f"{a}/{temp}"]["seconds"] / summary[f"{b}/{temp}"]["seconds"]
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", default="cli,bin,dcp,zero", help="comma-separated")
    ap.add_argument("--zero-params", type=int, default=60, help="million parameters")
    ap.add_argument("--case")
    ap.add_argument("--make-zero", nargs=2)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if args.make_zero:
        make_zero(Path(args.make_zero[0]), int(args.make_zero[1]))
        return
    if args.case:
        print(json.dumps(case(args.case)))
        return
    chosen = [g for g in args.groups.split(",") if g]
    make_data(args.zero_params, set(chosen))
    OUT.mkdir(parents=True, exist_ok=True)
    groups = [group for g in chosen for group in GROUPS[g]]
    for name in (n for group in groups for n in group if n in CLI_CASES):
        run_cli_case(name, False, cli_env())  # warm-up: .pyc written, nothing timed
    results: dict[str, list[dict[str, Any]]] = {}
    for temp in ("cold", "warm"):
        for group in groups:
            for _ in range(args.rounds):
                for name in group:
                    r = run_case(name, temp == "cold")
                    results.setdefault(f"{name}/{temp}", []).append(r)
                    print(f"{name:15} {temp}: {r}", file=sys.stderr)
    summary = {}
    for key, rs in results.items():
        summary[key] = {
            k: statistics.median(r[k] for r in rs)
            for k in rs[0]
            if isinstance(rs[0][k], float | int)
        }
    sizes: dict[str, int] = {"bin_bytes": (DATA / "model.bin").stat().st_size}
    sizes["small10k_bytes"] = (DATA / "small10k.bin").stat().st_size
    if "dcp" in chosen:
        sizes["dcp_largest_file"] = max(p.stat().st_size for p in (DATA / "dcp").iterdir())
    if "zero" in chosen:
        sizes["zero_partition"] = max(
            p.stat().st_size for p in next(DATA.glob("zero2_*")).rglob("*optim_states.pt")
        )
    doc = {
        "summary": summary,
        "ratios": ratios(summary),
        "sizes": sizes,
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(doc, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
