"""Many-tensor checkpoints, side by side with the tools a user would pick instead.

    .venv/bin/python bench/bench_many.py [--rounds 5] [--groups convert,diff,list]
        [--size-mb 1024] [--tensors 1057] [--shards 12] [--shard-tensors 4661] [--keep]
        [--tmp DIR] [--before TREE] [--only SUBSTR,...] [--pause S]

Data (written under ``--tmp``, default a fresh folder in /tmp, deleted at the end unless
``--keep``), random bf16 with Qwen2-MoE-like names (attention, router, experts' gate/up/down):

- ``bin``:   a ``torch.save`` file of ``--size-mb`` MiB in ``--tensors`` tensors;
- ``folder`` A and B: HF folders of ``--shards`` safetensors shards and an index holding
  ``--shard-tensors`` tensors in ``--size-mb`` MiB; B differs from A in 3 tensors.
- ``tiny`` A and B: two 16 KiB safetensors files (every element changed).

Groups (every case a fresh process timed from outside, cases alternating, ``--rounds``
rounds; medians with min-max; CPU = user + system from ``wait4``; peak RSS = the child's
``ru_maxrss`` (mapped file pages included); peak anon = ``RssAnon`` sampled every 2 ms):

- ``convert``: ``cp`` + ``sync`` of the source; ``ckpt-explorer convert SRC OUT --to
  safetensors`` (the whole job: plan, copy, verification bit for bit, fsync, rename);
  ``save_file(torch.load(SRC))``; for the ``.bin`` and for folder A (``--to safetensors``
  re-shards it into one file: the many-tensor copy path; ``--to hf`` too, into 5 GB shards,
  the index and the side files).
- ``diff``: ``ckpt-explorer diff A B`` of the folders; the peers: a float64 torch loop over
  ``safe_open`` (max |a-b| per tensor, what a user writes by hand), and ``cat`` of both
  folders to /dev/null (the raw read); and ``ckpt-explorer diff`` of the tiny pair against
  ``python -c "import torch"``.
- ``list``: ``ckpt-explorer inspect A``, a ``safe_open`` loop (keys, dtype, shape) and
  huggingface_hub's ``get_local_safetensors_metadata`` (if installed).

Pages are warm (each source read once first): the machine's disk is shared and cold reads
measure the neighbours. Ratios are the only figures to compare between runs.

``--tmp DIR`` keeps the data there (made once, reused by later runs); ``--before TREE`` adds
each ckpt-explorer case run from another tree (``git archive`` of an earlier commit) with
``PYTHONPATH=TREE``, alternating with the rest; ``--only`` keeps the cases whose label holds
one of the given texts (the first case of each group, its base, is always kept).

Every case starts in the same state: a scratch copy of the ``.bin`` made through the page
cache and removed, as a previous job's output would be (``sync`` after), then ``--pause S``
seconds idle. On a VM whose guest reports free memory to the host (virtio-balloon free page
reporting), memory freed a few seconds earlier has been handed back, and the first touch of
each of its pages costs a fault in the host: a buffered write of 1 GiB into fresh page cache
then pays 1-2.5 s of system CPU that it does not pay right after the removal. ``--pause 0``
(the default) measures the state right after other disk work, ``--pause 6`` after idle.
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
MIB = 2**20


# ---- data ---------------------------------------------------------------------------------
def moe_shapes(total_bytes: int, count: int) -> list[tuple[str, tuple[int, int]]]:
    """``count`` (name, 2-D shape) of Qwen2-MoE-like tensors adding up to about
    ``total_bytes`` of bf16."""
    names: list[str] = []
    layer = 0
    while len(names) < count:
        p = f"model.layers.{layer}"
        names += [f"{p}.self_attn.{k}_proj.weight" for k in "qkvo"]
        names += [f"{p}.input_layernorm.weight", f"{p}.mlp.gate.weight"]
        for e in range(60):
            names += [f"{p}.mlp.experts.{e}.{k}_proj.weight" for k in ("gate", "up", "down")]
        layer += 1
    names = names[:count]
    per = max(2, total_bytes // count // 2)  # elements per tensor
    cols = 256
    rows = max(1, per // cols)
    return [(n, (rows, cols)) for n in names]


def write_bin(path: Path, total: int, count: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(0)
    sd = {n: torch.randn(s, generator=gen).to(torch.bfloat16) for n, s in moe_shapes(total, count)}
    torch.save(sd, path)


def write_folder(out: Path, total: int, count: int, shards: int, changed: int, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    shapes = moe_shapes(total, count)
    per = -(-len(shapes) // shards)
    weight_map: dict[str, str] = {}
    for s in range(shards):
        part = shapes[s * per : (s + 1) * per]
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        gen = torch.Generator().manual_seed(1000 + s)
        sd = {n: torch.randn(shape, generator=gen).to(torch.bfloat16) for n, shape in part}
        if seed and s == 0:
            for n in list(sd)[:changed]:
                sd[n] = sd[n] + 1e-2
        save_file(sd, str(out / name), metadata={"format": "pt"})
        weight_map.update({n: name for n, _ in part})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))


def write_tiny(a: Path, b: Path) -> None:
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(1)
    sd = {f"w{i}": torch.randn(32, 32, generator=gen).to(torch.bfloat16) for i in range(8)}
    save_file(sd, str(a))
    save_file({k: v + 1e-2 for k, v in sd.items()}, str(b))


# ---- running one case ---------------------------------------------------------------------
def _status(pid: int) -> tuple[int, int]:
    """(RssAnon, VmHWM) bytes of a running process (0, 0 once it is gone)."""
    anon = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    return anon, hwm


def run(argv: list[str], env: dict[str, str], shell: bool = False) -> dict[str, float]:
    """Wall, CPU, peak RSS (VmHWM: mapped file pages included) and peak RssAnon of one fresh
    process, both sampled every 2 ms (``ru_maxrss`` would count the forked parent's pages).
    Through a shell, the figures are the children's CPU and the shell's memory."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, shell=shell
    )  # fmt: skip
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            anon, hwm = _status(proc.pid)
            peak[0], peak[1] = max(peak[0], anon), max(peak[1], hwm)
            time.sleep(0.002)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{argv} failed ({code}): {err[-3000:]}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "maxrss_mib": peak[1] / MIB,
        "anon_mib": peak[0] / MIB,
    }


def cli() -> list[str]:
    script = Path(sys.executable).with_name("ckpt-explorer")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ckpt_explorer"]


def child_env(tmp: Path, tree: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(HERE / ".data" / "pycache")  # as installed: .pyc files
    if tree is not None:
        env["PYTHONPATH"] = tree
    return env


PEER_DIFF = r"""
import sys, torch
from safetensors import safe_open
from pathlib import Path
a, b = Path(sys.argv[1]), Path(sys.argv[2])
for fa in sorted(a.glob("*.safetensors")):
    with safe_open(fa, "pt") as x, safe_open(b / fa.name, "pt") as y:
        for k in x.keys():
            d = (y.get_tensor(k).double() - x.get_tensor(k).double()).abs().max().item()
"""
PEER_LIST = r"""
import sys
from safetensors import safe_open
from pathlib import Path
n = 0
for f in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with safe_open(f, "numpy") as x:
        for k in x.keys():
            s = x.get_slice(k); s.get_shape(); s.get_dtype(); n += 1
"""
HF_LIST = r"""
import sys
from huggingface_hub import get_local_safetensors_metadata
m = get_local_safetensors_metadata(sys.argv[1])
n = sum(len(f.tensors) for f in m.files_metadata.values())
"""
SAVE_FILE = r"""
import sys, torch
from safetensors.torch import save_file
save_file(torch.load(sys.argv[1], weights_only=True), sys.argv[2])
"""
SAVE_FOLDER = r"""
import sys, torch, os
from pathlib import Path
from safetensors.torch import load_file, save_file
out = Path(sys.argv[2]); out.mkdir()
for f in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    save_file(load_file(f), str(out / f.name))
    fd = os.open(out / f.name, os.O_RDONLY); os.fsync(fd); os.close(fd)
"""


def has_hf() -> bool:
    try:
        from huggingface_hub import get_local_safetensors_metadata  # noqa: F401
    except ImportError:
        return False
    return True


Case = tuple[list[str], bool, Path | None, str | None]


def cases(tmp: Path, groups: set[str], before: Path | None = None) -> dict[str, Case]:
    """label -> (argv, through a shell, output to remove before the case, PYTHONPATH)."""
    py = sys.executable
    out = tmp / "out"
    trees: dict[str, str | None] = {"": None}
    if before is not None:
        trees["before: "] = str(before.resolve())
    c: dict[str, Case] = {}
    if "convert" in groups:
        for src, label in ((tmp / "model.bin", "bin"), (tmp / "A", "folder")):
            dst = out / (label + (".safetensors" if label == "bin" else ""))
            # sync of each copied file and the folder (``sync DIR`` alone flushes the folder)
            cp = f"cp -r {src} {dst} && sync {dst}/* {dst}" if label == "folder" else None
            c[f"convert {label}: cp + sync"] = (
                [cp or f"cp {src} {dst} && sync {dst}"],
                True,
                dst,
                None,
            )
            targets = ["safetensors", "hf"] if label == "folder" else ["safetensors"]
            for prefix, tree in trees.items():
                for to in targets:
                    out_path = dst if to == "safetensors" else out / f"{label}-hf"
                    c[f"convert {label}: {prefix}ckpt-explorer convert --to {to}"] = (
                        [*cli(), "convert", str(src), str(out_path), "--to", to],
                        False,
                        out_path,
                        tree,
                    )
            peer = SAVE_FILE if label == "bin" else SAVE_FOLDER
            c[f"convert {label}: save_file(torch.load)"] = (
                [py, "-c", peer, str(src), str(dst)],
                False,
                dst,
                None,
            )
    if "diff" in groups:
        a, b = tmp / "A", tmp / "B"
        c["diff folder: cat A B > /dev/null"] = ([f"cat {a}/* {b}/* > /dev/null"], True, None, None)
        for prefix, tree in trees.items():
            argv = [*cli(), "diff", str(a), str(b)]
            c[f"diff folder: {prefix}ckpt-explorer diff"] = (argv, False, None, tree)
        peer = [py, "-c", PEER_DIFF, str(a), str(b)]
        c["diff folder: torch float64 loop"] = (peer, False, None, None)
        ta, tb = tmp / "tiny_a.safetensors", tmp / "tiny_b.safetensors"
        c["diff tiny: python -c 'import torch'"] = ([py, "-c", "import torch"], False, None, None)
        for prefix, tree in trees.items():
            argv = [*cli(), "diff", str(ta), str(tb)]
            c[f"diff tiny: {prefix}ckpt-explorer diff"] = (argv, False, None, tree)
    if "list" in groups:
        a = tmp / "A"
        for prefix, tree in trees.items():
            argv = [*cli(), "inspect", str(a)]
            c[f"list folder: {prefix}ckpt-explorer inspect"] = (argv, False, None, tree)
        c["list folder: safe_open loop"] = ([py, "-c", PEER_LIST, str(a)], False, None, None)
        if has_hf():
            peer = [py, "-c", HF_LIST, str(a)]
            c["list folder: huggingface_hub metadata"] = (peer, False, None, None)
    return c


def keep_only(todo: dict[str, Case], only: str | None) -> dict[str, Case]:
    """The cases whose label holds one of the comma-separated texts of ``only``, and the base
    of each group that keeps one."""
    if not only:
        return todo
    wanted = [w for w in only.split(",") if w]
    bases: dict[str, str] = {}
    for label in todo:
        bases.setdefault(label.split(":")[0], label)
    kept = {k for k in todo if any(w in k for w in wanted)}
    kept |= {bases[k.split(":")[0]] for k in kept}
    return {k: v for k, v in todo.items() if k in kept}


def _first(tmp: Path) -> str:
    return sorted(p.name for p in (tmp / "A").glob("*.safetensors"))[0]


def _remove(path: Path | None) -> None:
    if path is None:
        return
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--groups", default="convert,diff,list")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--tensors", type=int, default=1057)
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--shard-tensors", type=int, default=4661)
    ap.add_argument("--tmp", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the data folder")
    ap.add_argument("--no-warmup", action="store_true", help="skip the unmeasured first runs")
    ap.add_argument("--json-out")
    ap.add_argument("--before", type=Path, help="another tree to run ckpt-explorer from too")
    ap.add_argument("--only", help="comma-separated texts: keep the cases whose label has one")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds of idle before each case")
    args = ap.parse_args()
    groups = set(args.groups.split(","))
    tmp = args.tmp or Path(tempfile.mkdtemp(prefix="ckpt-bench-many-"))
    tmp.mkdir(parents=True, exist_ok=True)
    total = args.size_mb * MIB
    todo = keep_only(cases(tmp, groups, args.before), args.only)
    try:
        need_bin = any(label.startswith("convert bin") for label in todo)
        if need_bin and not (tmp / "model.bin").exists():
            write_bin(tmp / "model.bin", total, args.tensors)
        if not (tmp / "A").exists():
            write_folder(tmp / "A", total, args.shard_tensors, args.shards, 0, 0)
        if "diff" in groups and not (tmp / "B").exists():
            write_folder(tmp / "B", total, args.shard_tensors, args.shards, 3, 1)
        if "diff" in groups and not (tmp / "tiny_a.safetensors").exists():
            write_tiny(tmp / "tiny_a.safetensors", tmp / "tiny_b.safetensors")
        (tmp / "out").mkdir(exist_ok=True)
        subprocess.run(f"cat {tmp}/model.bin {tmp}/A/* {tmp}/B/* > /dev/null 2>&1", shell=True)
        # bytecode, numba's kernel cache: once, unmeasured
        for argv, shell, dst, tree in [] if args.no_warmup else todo.values():
            _remove(dst)
            run(argv, child_env(tmp, tree), shell)
            _remove(dst)
        got: dict[str, list[dict[str, float]]] = {k: [] for k in todo}
        for _ in range(args.rounds):
            for label, (argv, shell, dst, tree) in todo.items():
                _remove(dst)
                scratch = tmp / "out" / "scratch"
                shutil.copyfile(tmp / "model.bin" if need_bin else tmp / "A" / _first(tmp), scratch)
                scratch.unlink()
                subprocess.run(["sync"])
                if args.pause:
                    time.sleep(args.pause)
                got[label].append(run(argv, child_env(tmp, tree), shell))
                _remove(dst)
        report(got, args)
    finally:
        if not args.keep and args.tmp is None:
            shutil.rmtree(tmp, ignore_errors=True)


def report(got: dict[str, list[dict[str, float]]], args: Any) -> None:
    print(
        f"{args.rounds} alternating rounds, pause {args.pause:g} s before each case, "
        f"load (1 min) at the end {os.getloadavg()[0]:.1f}; "
        f"bin: {args.size_mb} MiB "
        f"in {args.tensors} tensors; folder: {args.size_mb} MiB in {args.shard_tensors} tensors, "
        f"{args.shards} shards"
    )
    head = f"{'case':46} {'wall s (min-max)':>22} {'CPU s':>7} {'VmHWM MiB':>10} {'anon MiB':>9}"
    print(head + f" {'x base wall':>11} {'x base CPU':>10}")
    med: dict[str, dict[str, float]] = {}
    for label, rows in got.items():
        med[label] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    groups: dict[str, str] = {}
    for label in got:  # the first case of each group is its base
        groups.setdefault(label.split(":")[0], label)
    for label, rows in got.items():
        m = med[label]
        base = med[groups[label.split(":")[0]]]
        walls = [r["wall"] for r in rows]
        span = f"{m['wall']:.3f} ({min(walls):.3f}-{max(walls):.3f})"
        print(
            f"{label:46} {span:>22} {m['cpu']:7.3f} {m['maxrss_mib']:10.0f} "
            f"{m['anon_mib']:9.0f} {m['wall'] / base['wall']:11.2f} "
            f"{m['cpu'] / max(base['cpu'], 1e-9):10.2f}"
        )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"median": med, "runs": got}, indent=1))


if __name__ == "__main__":
    main()
