"""A long fuzz run of the security gate against its oracle (real loaders, audit hook).

    .venv/bin/python bench/bench_gate_fuzz.py [--files 100000] [--seed 0] [--workers 2]

Generates ``--files`` inputs with tests/hostile/pickle_mutations.py (a seed pickle, malicious
or benign, rebuilt with mutated lead opcodes, argument encodings, memo, frames and
containers), in batches under bench/.data/gate_fuzz/ (git-ignored; each batch deleted once
judged). Each batch goes through the oracle (tests/security_oracle.py: every real loader in a
forked child; ``--run-payloads`` lets payloads run, by default each load stops at its first
non-inert global, which still proves the reach) and through ``scan_paths``. Prints how many
files reached the oracle's unsafe set, how many of those the scanner called ``safe`` or gave
no fail-closed verdict (must be 0), the verdict counts and the throughput; writes a JSON
summary to bench/.data/gate_fuzz.json and copies every file that broke the rule to
bench/.data/gate_fuzz_failures/ to replay.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shlex
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
DATA = HERE / ".data"
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "hostile"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--run-payloads", action="store_true", help="let payloads run (markers)")
    args = ap.parse_args()

    import pickle_mutations
    from security_oracle import Oracle

    from ckpt_explorer.security import scan_paths

    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])
    rng = random.Random(args.seed)
    work = DATA / "gate_fuzz"
    fails_dir = DATA / "gate_fuzz_failures"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(fails_dir, ignore_errors=True)
    counts: collections.Counter[str] = collections.Counter()
    verdicts: collections.Counter[str] = collections.Counter()
    by_how: collections.Counter[str] = collections.Counter()
    failures: list[dict[str, object]] = []
    t_oracle = t_scan = 0.0
    start = time.perf_counter()
    with Oracle(workers=args.workers, timeout=args.timeout, stop=not args.run_payloads) as oracle:
        done = 0
        while done < args.files:
            n = min(args.batch, args.files - done)
            folder = work / f"batch{done // args.batch:05d}"
            folder.mkdir(parents=True)
            made = [pickle_mutations.random_file(rng, done + i) for i in range(n)]
            paths = [g.write(folder) for g in made]
            t0 = time.perf_counter()
            results = oracle.run(paths)
            t1 = time.perf_counter()
            report = scan_paths([folder])
            t2 = time.perf_counter()
            t_oracle, t_scan = t_oracle + t1 - t0, t_scan + t2 - t1
            got = {os.path.abspath(v.path): v for v in report.verdicts}
            for p, g in zip(paths, made, strict=True):
                r = results[p]
                v = got.get(os.path.abspath(p))
                word = v.verdict if v is not None else "no verdict"
                verdicts[word] += 1
                counts["files"] += 1
                counts["malicious seed" if g.malicious_seed else "benign seed"] += 1
                if not r.unsafe:
                    continue
                counts["oracle unsafe"] += 1
                by_how[g.how] += 1
                if not g.malicious_seed:
                    counts["oracle unsafe from a benign seed"] += 1
                if word not in ("unsafe", "unverified"):
                    counts["oracle unsafe but scanner not fail-closed"] += 1
                    counts[f"oracle unsafe, scanner said {word}"] += 1
                    fails_dir.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(p, fails_dir / p.name)
                    if len(failures) < 200:
                        failures.append({"file": p.name, "how": g.how, "scanner": word,
                                         "oracle": r.non_inert[:4], "loaders": r.reached_by})  # fmt: skip
            shutil.rmtree(folder, ignore_errors=True)
            done += n
            rate = done / (time.perf_counter() - start)
            print(f"{done}/{args.files} files, {counts['oracle unsafe']} oracle-unsafe, "
                  f"{counts['oracle unsafe but scanner not fail-closed']} missed, "
                  f"{rate:.1f} files/s", file=sys.stderr, flush=True)  # fmt: skip
        forks = oracle.forks
    seconds = time.perf_counter() - start
    summary = {
        "command": command,
        "files": counts["files"],
        "seed": args.seed,
        "counts": dict(counts),
        "scanner_verdicts": dict(verdicts),
        "oracle_unsafe_by_container": dict(by_how),
        "seconds": round(seconds, 1),
        "files_per_s": round(counts["files"] / seconds, 1),
        "oracle_seconds": round(t_oracle, 1),
        "scanner_seconds": round(t_scan, 1),
        "scanner_files_per_s": round(counts["files"] / t_scan, 1) if t_scan else None,
        "oracle_forks": forks,
        "failures": failures,
    }
    DATA.mkdir(exist_ok=True)
    (DATA / "gate_fuzz.json").write_text(json.dumps(summary, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(f"command: {command}")
    print(f"files: {counts['files']} ({counts['malicious seed']} from malicious seeds)")
    print(f"oracle unsafe (a real loader reached a non-inert global): {counts['oracle unsafe']}")
    print(f"  of those, scanner said safe / no fail-closed verdict (must be 0): "
          f"{counts['oracle unsafe but scanner not fail-closed']}")  # fmt: skip
    print(f"  oracle unsafe from a benign seed (must be 0): "
          f"{counts['oracle unsafe from a benign seed']}")  # fmt: skip
    print(f"scanner verdicts: {dict(verdicts)}")
    print(f"throughput: {summary['files_per_s']} files/s overall "
          f"(oracle {t_oracle:.0f} s, scanner {t_scan:.1f} s = "
          f"{summary['scanner_files_per_s']} files/s), {forks} worker forks")  # fmt: skip
    print(f"summary: {DATA / 'gate_fuzz.json'}")
    if counts["oracle unsafe but scanner not fail-closed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
