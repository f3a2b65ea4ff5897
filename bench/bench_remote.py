"""Remote checkpoints: bytes and requests that listing moves per family (HTTP server with Range
support that counts them), and remote diff throughput against a plain parallel download of the
same bytes (moto's S3 server), both on 127.0.0.1.

    .venv/bin/python bench/bench_remote.py [--size-mb 1024] [--s3-mb 512] [--repeats 3]

Writes test data under bench/.data/remote/ (git-ignored). Every timed case runs in a fresh
process; baseline and remote diff alternate; medians and their ratio are printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data" / "remote"
sys.path.insert(0, str(HERE.parent / "tests"))

from remote_servers import RangeServer, moto_s3  # noqa: E402


def make_data(size_mb: int) -> dict[str, Path]:
    import torch
    from huggingface_hub import save_torch_state_dict
    from safetensors.torch import save_file

    DATA.mkdir(parents=True, exist_ok=True)
    n = size_mb * 2**20 // 4 // 64  # 64 float32 tensors

    def state(seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {f"layers.{i}.weight": torch.randn(n // 256, 256, generator=g) for i in range(64)}

    out = {
        "safetensors": DATA / "model.safetensors",
        "torch-zip": DATA / "pytorch_model.bin",
        "hf-sharded": DATA / "hf_sharded",
        "dcp": DATA / "dcp",
    }
    if not out["safetensors"].is_file():
        save_file(state(0), str(out["safetensors"]))
    if not out["torch-zip"].is_file():
        torch.save(state(1), out["torch-zip"])
    if not (out["hf-sharded"] / "model.safetensors.index.json").is_file():
        out["hf-sharded"].mkdir(exist_ok=True)
        save_torch_state_dict(state(2), out["hf-sharded"], max_shard_size=f"{size_mb // 4}MB")
    if not out["dcp"].is_dir():
        import torch.distributed.checkpoint as dcp

        sd = {"model": state(3), "optim": {"lr": 0.001, "betas": (0.9, 0.999), "step": 10}}
        dcp.save(sd, checkpoint_id=str(out["dcp"]), no_dist=True)
    return out


def listing(paths: dict[str, Path]) -> list[dict[str, object]]:
    """``inspect --json`` of each family over HTTP, in a fresh process; bytes and requests."""
    server = RangeServer(DATA)
    rows = []
    try:
        for family, path in paths.items():
            size = sum(p.stat().st_size for p in path.rglob("*")) if path.is_dir() else None
            size = size or path.stat().st_size
            url = f"{server.url}/{path.relative_to(DATA)}"
            server.reset()
            t = time.perf_counter()
            cmd = [sys.executable, "-m", "ckpt_explorer", "inspect", url, "--json"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            seconds = time.perf_counter() - t
            ok = proc.returncode == 0
            rows.append(
                {
                    "family": family,
                    "size_mb": round(size / 2**20),
                    "ok": ok if ok else proc.stderr.strip()[-200:],
                    "bytes_moved": server.bytes_sent,
                    "requests": server.requests,
                    "seconds": round(seconds, 2),
                }
            )
    finally:
        server.close()
    return rows


DOWNLOAD = r"""
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
import s3fs
url, dest = sys.argv[1], sys.argv[2]
fs = s3fs.S3FileSystem()
size = fs.info(url)["size"]
chunk = 16 * 2**20
fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
def get(pos):
    os.pwrite(fd, fs.cat_file(url, start=pos, end=min(size, pos + chunk)), pos)
with ThreadPoolExecutor(8) as pool:
    list(pool.map(get, range(0, size, chunk)))
os.close(fd)
"""


def s3_throughput(source: Path, repeats: int) -> dict[str, object]:
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with moto_s3() as endpoint:
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": endpoint,
        }
        os.environ.update(env)
        fs = s3fs.S3FileSystem(endpoint_url=endpoint)
        fs.mkdir("bench")
        fs.put_file(str(source), "bench/model.safetensors")
        url = "s3://bench/model.safetensors"
        times: dict[str, list[float]] = {"download": [], "remote_diff": []}
        for _ in range(repeats):
            for case in times:
                if case == "download":
                    cmd = [sys.executable, "-c", DOWNLOAD, url, str(DATA / "downloaded")]
                else:
                    cmd = [sys.executable, "-m", "ckpt_explorer", "diff", url, str(source)]
                t = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                times[case].append(time.perf_counter() - t)
                if proc.returncode != 0:
                    raise SystemExit(f"{case} failed: {proc.stderr[-500:]}")
        (DATA / "downloaded").unlink(missing_ok=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    mb = source.stat().st_size / 2**20
    return {
        "size_mb": round(mb),
        "download_s": round(med["download"], 2),
        "remote_diff_s": round(med["remote_diff"], 2),
        "download_mb_s": round(mb / med["download"], 1),
        "remote_diff_mb_s": round(mb / med["remote_diff"], 1),
        "ratio": round(med["download"] / med["remote_diff"], 2),
        "runs": {k: [round(x, 2) for x in v] for k, v in times.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--s3-mb", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-s3", action="store_true")
    args = ap.parse_args()
    paths = make_data(args.size_mb)
    for row in listing(paths):
        print(json.dumps(row))
    if not args.skip_s3:
        small = DATA / f"s3_{args.s3_mb}.safetensors"
        if not small.is_file():
            import torch
            from safetensors.torch import save_file

            g = torch.Generator().manual_seed(5)
            n = args.s3_mb * 2**20 // 4 // 32
            save_file({f"w.{i}": torch.randn(n, generator=g) for i in range(32)}, str(small))
        print(json.dumps({"s3_diff_vs_download": s3_throughput(small, args.repeats)}))


if __name__ == "__main__":
    main()
