"""How fast ``ckpt-explorer scan`` judges a mix of checkpoints (files/s, MB/s), against a
baseline measured in the same run.

    .venv/bin/python bench/bench_scan.py [--rounds 5] [--copies 20] [--against DIR]

The mix, written under bench/.data/scan_mix/ (git-ignored): the security corpus
(tests/hostile/make_security_corpus.py: torch zips, legacy files, plain pickles, folders),
``--copies`` torch.save state_dicts of a 12-layer MLP (zip and legacy) and of its AdamW
optimizer, and a safetensors file. Each round runs, each in a fresh process and alternating,
the scan of this checkout and the baseline, warm page cache; the median time of each and
their ratio are printed. The baseline is, by default, a walk of the same files with the
standard library's ``pickletools.genops`` (every ``.pkl`` zip member and every pickle at the
start of a file, what a pickletools-based scanner reads); with ``--against DIR`` it is the
scan of another checkout of ckpt_explorer at DIR (before / after a change).
MB/s counts file sizes, although scan reads only pickles and headers, never tensor bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / ".data" / "scan_mix"
ROOT = Path(__file__).parent.parent

_SCAN = """
import json, sys, time
from ckpt_explorer.security import scan_paths
scan_paths([sys.argv[1]])  # imports, page cache
start = time.perf_counter()
report = scan_paths([sys.argv[1]])
seconds = time.perf_counter() - start
verdicts = [getattr(v, "verdict", "?") for v in report.verdicts]
print(json.dumps({"seconds": seconds, "files": len(verdicts),
                  "unsafe": verdicts.count("unsafe")}))
"""

_PICKLETOOLS = """
import io, json, os, pickletools, sys, time, zipfile
def walk(data):
    try:
        for _ in pickletools.genops(io.BytesIO(data)):
            pass
    except Exception:
        pass
def scan(root):
    n = 0
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            n += 1
            try:
                with zipfile.ZipFile(path) as zf:
                    for info in zf.infolist():
                        if info.filename.endswith(".pkl"):
                            walk(zf.read(info))
                    continue
            except Exception:
                pass
            with open(path, "rb") as f:
                walk(f.read(1 << 20))
    return n
scan(sys.argv[1])
start = time.perf_counter()
files = scan(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start, "files": files, "unsafe": -1}))
"""


def make_mix(copies: int) -> Path:
    import torch
    from safetensors.torch import save_file

    if (DATA / "done").exists():
        return DATA
    DATA.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "tests" / "hostile"))
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


def _run(code: str, root: Path, pythonpath: Path) -> dict[str, float]:
    env = {"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--against", type=Path, help="another checkout to compare with")
    args = ap.parse_args()
    root = make_mix(args.copies)
    mb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6
    base_name = f"scan of {args.against}" if args.against else "pickletools.genops walk"
    runs: dict[str, list[dict[str, float]]] = {"this scan": [], base_name: []}
    for _ in range(args.rounds):
        runs["this scan"].append(_run(_SCAN, root, ROOT))
        if args.against:
            runs[base_name].append(_run(_SCAN, root, args.against))
        else:
            runs[base_name].append(_run(_PICKLETOOLS, root, ROOT))
    medians = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    for name, seconds in medians.items():
        last = runs[name][-1]
        print(
            f"{name}: {int(last['files'])} files, {mb:.1f} MB in {seconds:.3f} s (median of "
            f"{args.rounds}): {last['files'] / seconds:.0f} files/s, {mb / seconds:.0f} MB/s"
            + (f", {int(last['unsafe'])} unsafe" if last["unsafe"] >= 0 else "")
        )
    print(f"ratio this scan / {base_name}: {medians['this scan'] / medians[base_name]:.2f}")


if __name__ == "__main__":
    main()
