"""Time and peak memory of ``ckpt-explorer scan`` on hostile pickles: floods the walk must
answer (``unverified``, naming the limit) within 10 s and 1 GiB.

    python bench/bench_gate_hostile.py OUT_DIR [--ops 60000000] [--repeat 1]

Builds each flood (a memo flood, a sparse memo flood, an opcode flood, a stack of containers,
open marks, deeply nested tuples, lists sharing one object) raw, gzip-compressed, in a torch-like
zip (deflated ``archive/data.pkl``) and gzip-compressed three times; then runs, per file and
alternating, a fresh ``ckpt-explorer scan FILE`` and the baselines of the same run: a trivial
Python start-up, ``scan`` of a tiny benign pickle (the tool's own start-up), and the file's real
consumer (``pickle.load`` of the decompressed stream, killed after 60 s). Each process's peak
anonymous memory and ``VmHWM`` (both from ``/proc/PID/status``, sampled every 5 ms) are reported beside its wall time and exit code.
"""

from __future__ import annotations

import argparse
import gzip
import pickle
import statistics
import struct
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

WALL_LIMIT_S = 120.0


FLOODS = (
    "memo", "sparse memo", "opcodes", "containers", "marks", "nested tuples", "shared lists"
)  # fmt: skip


def flood(name: str, ops: int) -> bytes:
    """A pickle of about ``ops`` opcodes that a walk cannot finish cheaply."""
    if name == "memo":  # MEMOIZE of one object, over and over
        return b"\x80\x04N" + b"\x94" * ops + b"."
    if name == "sparse memo":  # LONG_BINPUT at scattered indices
        return (
            b"\x80\x04N"
            + b"".join(b"r" + struct.pack("<I", 3 * i + 7) for i in range(ops // 5))
            + b"."
        )
    if name == "opcodes":  # NONE, POP, over and over: nothing kept
        return b"\x80\x04" + b"N0" * (ops // 2) + b"N."
    if name == "containers":  # an empty list per opcode, all kept on the stack
        return b"\x80\x04" + b"]" * ops + b"."
    if name == "marks":  # open marks
        return b"\x80\x04" + b"(" * ops + b"N."
    if name == "nested tuples":  # each tuple in the next
        return b"\x80\x04)" + b"\x85" * ops + b"."
    if name == "shared lists":  # lists of 256 references to one object
        return b"\x80\x04]\x94" + (b"(" + b"h\x00" * 256 + b"l") * (ops // 258) + b"."
    raise ValueError(name)  # fmt: skip


def floods(ops: int) -> dict[str, bytes]:
    """name -> each flood of about ``ops`` opcodes."""
    return {name: flood(name, ops) for name in FLOODS}


def torch_zip(data: bytes) -> bytes:
    """A zip laid out as torch.save lays it out (``archive/data.pkl``), deflated."""
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", data)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def wrapped(data: bytes) -> dict[str, tuple[str, bytes]]:
    """wrapper -> (file suffix, bytes)."""
    return {
        "raw": (".pkl", data),
        "gzip": (".pkl.gz", gzip.compress(data, 6)),
        "zip": (".pt", torch_zip(data)),
        "gzip x3": (".pkl.gz", gzip.compress(gzip.compress(gzip.compress(data, 9), 9), 9)),
    }


def make(root: Path, ops: int) -> dict[str, Path]:
    """Write every flood in every wrapper under ``root``; name -> path."""
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in FLOODS:  # one at a time: the processes measured fork from this one
        for how, (suffix, blob) in wrapped(flood(name, ops)).items():
            path = root / f"{name.replace(' ', '_')}-{how.replace(' ', '')}{suffix}"
            path.write_bytes(blob)
            out[f"{name}, {how}"] = path
    return out


def _status(pid: int) -> tuple[int, int]:
    """(RssAnon, VmHWM) of a process, bytes (0 when gone)."""
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


def measure(argv: list[str]) -> tuple[float, int, int, int]:
    """(seconds, peak RssAnon bytes, VmHWM bytes, exit code) of one fresh process; both
    sampled from /proc every 5 ms (``wait4``'s ``ru_maxrss`` would count this process's pages
    the child had before its exec)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            anon, hwm = _status(proc.pid)
            peak[0], peak[1] = max(peak[0], anon), max(peak[1], hwm)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    timer = threading.Timer(WALL_LIMIT_S, proc.kill)
    timer.start()
    status = proc.wait()
    seconds = time.monotonic() - start
    timer.cancel()
    done.set()
    sampler.join()
    return seconds, peak[0], peak[1], status


_CONSUMER = (
    "import gzip, pickle, sys, zipfile\n"
    "p = sys.argv[1]\n"
    "if p.endswith('.pt'):\n"
    "    data = zipfile.ZipFile(p).read('archive/data.pkl')\n"
    "else:\n"
    "    data = open(p, 'rb').read()\n"
    "    while data[:2] == b'\\x1f\\x8b':\n"
    "        data = gzip.decompress(data)\n"
    "try:\n"
    "    pickle.loads(data)\n"
    "except Exception:\n"
    "    pass\n"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ops", type=int, default=60_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    cases = {k: v for k, v in make(args.out, args.ops).items() if args.only in k}
    tiny = args.out / "tiny.pkl"
    tiny.write_bytes(pickle.dumps({"a": 1}))
    scan = [sys.executable, "-m", "ckpt_explorer", "scan"]
    rows: dict[str, list[tuple[float, int, int, int]]] = {}
    for _ in range(args.repeat):
        runs = [
            ("baseline: python -c pass", [sys.executable, "-c", "pass"]),
            ("baseline: scan of a tiny pickle", [*scan, str(tiny)]),
        ]
        for name, path in cases.items():
            runs.append((f"scan     {name}", [*scan, str(path)]))
            runs.append((f"consumer {name}", [sys.executable, "-c", _CONSUMER, str(path)]))
        for label, argv in runs:
            rows.setdefault(label, []).append(measure(argv))
    mib = 2**20
    print(f"{'case':48} {'wall s':>7} {'RssAnon MiB':>12} {'VmHWM MiB':>10} exit")
    for label, results in rows.items():
        wall = statistics.median(r[0] for r in results)
        anon = max(r[1] for r in results) / mib
        hwm = max(r[2] for r in results) / mib
        codes = ",".join(str(r[3]) for r in results)
        print(f"{label:48} {wall:7.2f} {anon:12.0f} {hwm:10.0f} {codes}")


if __name__ == "__main__":
    main()
