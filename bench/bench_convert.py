"""Conversion benchmark: ckpt_explorer's converters against ``cp`` and the naive converters.

    .venv/bin/python bench/bench_convert.py [--rounds 3] [--zero-params 60] [--markdown]

Data under ``bench/.data/convert/`` (kept between runs): a ~1 GB torch ``.bin`` (16 fp32
tensors of 64 MiB), a ~1 GB DCP folder of the same tensors written with ``dcp.save``, and a
DeepSpeed ZeRO-2 checkpoint (one CPU rank, gloo) of a model of ``--zero-params`` million fp32
parameters. Each case runs in a fresh process, cases alternate, ``--rounds`` times, cold
(``posix_fadvise DONTNEED`` on every source file first) and warm (files read once first):

- ``cp``:           ``cp SRC DST`` of the .bin (the copy limit), and ``cp`` + fsync;
- ``convert``:      ckpt_explorer ``.bin`` -> safetensors (writes, fsyncs; verification timed
                    apart);
- ``naive``:        ``torch.load(weights_only=True)`` + ``safetensors.torch.save_file``;
- ``dcp_convert`` / ``dcp_naive``: DCP -> HF safetensors folder vs torch's
                    ``dcp_to_torch_save``;
- ``zero_convert`` / ``zero_naive``: ZeRO -> HF safetensors vs DeepSpeed's ``zero_to_fp32``
                    (its module run as a script, ``--safe_serialization``).

Times are of the work inside the process (imports excluded). Memory: peak RssAnon sampled
every ~5 ms in a background thread; VmHWM (which also counts mapped file pages) beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
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


def make_data(zero_params_m: int) -> None:
    import torch

    DATA.mkdir(parents=True, exist_ok=True)
    if not (DATA / "model.bin").is_file():
        torch.save(tensors(), DATA / "model.bin.part")
        os.replace(DATA / "model.bin.part", DATA / "model.bin")
    if not (DATA / "dcp" / ".metadata").is_file():
        import torch.distributed.checkpoint as dcp

        shutil.rmtree(DATA / "dcp", ignore_errors=True)
        dcp.save(tensors(), checkpoint_id=str(DATA / "dcp"), no_dist=True)
    zero = DATA / f"zero2_{zero_params_m}m"
    if not (zero / "latest").is_file():
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
        from ckpt_explorer.convert import jobs, planner, sources, verify, writers  # noqa: F401

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
    return [DATA / "model.bin"]


def prepare(name: str, cold: bool) -> None:
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


def run_case(name: str, cold: bool) -> dict[str, Any]:
    prepare(name, cold)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, __file__, "--case", name], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
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
    make_data(args.zero_params)
    OUT.mkdir(parents=True, exist_ok=True)
    groups = [
        ["cp", "cp_fsync", "convert", "naive"],
        ["dcp_convert", "dcp_naive"],
        ["zero_convert", "zero_naive"],
    ]
    results: dict[str, list[dict[str, Any]]] = {}
    for temp in ("cold", "warm"):
        for group in groups:
            for _ in range(args.rounds):
                for name in group:
                    r = run_case(name, temp == "cold")
                    results.setdefault(f"{name}/{temp}", []).append(r)
                    print(f"{name:13} {temp}: {r}", file=sys.stderr)
    summary = {}
    for key, rs in results.items():
        summary[key] = {
            k: statistics.median(r[k] for r in rs)
            for k in rs[0]
            if isinstance(rs[0][k], float | int)
        }
    sizes = {
        "bin_bytes": (DATA / "model.bin").stat().st_size,
        "largest_tensor": 64 * MIB,
        "dcp_largest_file": max(p.stat().st_size for p in (DATA / "dcp").iterdir()),
        "zero_partition": max(
            p.stat().st_size for p in next(DATA.glob("zero2_*")).rglob("*optim_states.pt")
        ),
    }
    doc = {"summary": summary, "sizes": sizes, "rounds": args.rounds}
    print(json.dumps(doc, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
