"""How fast ``ckpt-explorer scan`` judges a mix of checkpoints (files/s and MB/s).

    .venv/bin/python bench/bench_scan.py [--repeats 3] [--copies 20]

The mix, written under bench/.data/scan_mix/ (git-ignored): the security corpus
(tests/hostile/make_security_corpus.py: torch zips, legacy files, plain pickles, folders),
``--copies`` torch.save state_dicts of a 12-layer MLP (zip and legacy) and of its AdamW
optimizer, and a safetensors file (no pickle: sniffed and skipped). Prints the median over
``--repeats`` in-process runs of :func:`ckpt_explorer.security.scan_paths`, warm page cache.
MB/s counts file sizes, although scan reads only the pickles (headers), never tensor bytes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

DATA = Path(__file__).parent / ".data" / "scan_mix"


def make_mix(copies: int) -> Path:
    import torch
    from safetensors.torch import save_file

    if (DATA / "done").exists():
        return DATA
    DATA.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "hostile"))
    from make_security_corpus import make

    make(DATA / "corpus")
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(12)])
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 256)).sum().backward()
    opt.step()
    for i in range(copies):
        torch.save(model.state_dict(), DATA / f"model_{i}.pt")
        torch.save(opt.state_dict(), DATA / f"optimizer_{i}.pt")
        torch.save(
            model.state_dict(), DATA / f"legacy_{i}.pt", _use_new_zipfile_serialization=False
        )
    save_file(model.state_dict(), DATA / "model.safetensors")
    (DATA / "done").write_text("")
    return DATA


def main() -> None:
    import time

    from ckpt_explorer.security import scan_paths

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copies", type=int, default=20)
    args = ap.parse_args()
    root = make_mix(args.copies)
    times = []
    report = scan_paths([root])  # warm-up: imports, page cache
    for _ in range(args.repeats):
        start = time.perf_counter()
        report = scan_paths([root])
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    files = report.files_seen
    mb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6
    verdicts = [v.verdict for v in report.verdicts]
    print(
        f"scan: {files} files ({len(verdicts)} checkpoint files, "
        f"{verdicts.count('unsafe')} unsafe), "
        f"{mb:.1f} MB in {seconds:.3f} s (median of {args.repeats}): "
        f"{files / seconds:.0f} files/s, {mb / seconds:.0f} MB/s"
    )


if __name__ == "__main__":
    main()
