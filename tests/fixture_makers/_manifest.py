"""Shared helpers for the fixture makers: manifest entries, a loud case runner, and the
processes the real tools run in (a free port, a launcher's environment, children whose output is
shown when they fail, side folders of other library versions).

Everything here only reshapes the real tool's own objects into the manifest contract described
in README.md; nothing here imports ckpt_explorer.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> `"float32"`."""
    return str(dtype).removeprefix("torch.")


def tensor_entry(t: torch.Tensor) -> dict[str, Any]:
    """Manifest entry of one tensor: dtype, shape and (float dtypes only) the float64 sum."""
    entry: dict[str, Any] = {"dtype": dtype_name(t.dtype), "shape": list(t.shape)}
    if t.is_floating_point():
        entry["sum"] = float(t.detach().double().sum())
    return entry


def tensors_entries(tensors: Mapping[str, torch.Tensor], prefix: str = "") -> dict[str, Any]:
    """`{name: tensor}` -> `{prefix + name: entry}`; raises on any non-tensor value."""
    out: dict[str, Any] = {}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{prefix}{name} is a {type(t).__name__}, not a tensor")
        out[f"{prefix}{name}"] = tensor_entry(t)
    return out


def jsonable(value: Any) -> Any:
    """A non-tensor leaf as JSON (tuples and torch.Size become lists); raises on anything else."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Size | tuple | list):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    raise TypeError(f"not a JSON-able leaf: {type(value).__name__}")


def optimizer_entries(osd: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A torch optimizer state_dict -> `tensors` / `values` / `param_groups` of the manifest."""
    tensors: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for pid, state in osd["state"].items():
        for name, v in state.items():
            key = f"{prefix}state.{pid}.{name}"
            if isinstance(v, torch.Tensor):
                tensors[key] = tensor_entry(v)
            else:
                values[key] = jsonable(v)
    return {
        "tensors": tensors,
        "values": values,
        "param_groups": [jsonable(dict(g)) for g in osd["param_groups"]],
    }


def check_case(out_dir: Path, case_id: str, case: Mapping[str, Any]) -> None:
    """Minimal self-check of one case before it goes into the manifest."""
    for key in ("path", "family", "kind"):
        if key not in case:
            raise ValueError(f"case {case_id}: missing {key!r}")
    path = out_dir / case["path"]
    if not path.exists():
        raise FileNotFoundError(f"case {case_id}: {path} does not exist")
    for part in case.get("parts", {}):
        if not (path / part).is_file():
            raise FileNotFoundError(f"case {case_id}: part {part} is not a file under {path}")
    for name, entry in case.get("tensors", {}).items():
        if not isinstance(entry.get("dtype"), str) or not isinstance(entry.get("shape"), list):
            raise ValueError(f"case {case_id}: bad tensor entry {name}: {entry}")


def run_maker(
    out_dir: str | Path,
    tool: str,
    version: str,
    cases: Mapping[str, Callable[[Path], Mapping[str, Any]]],
) -> int:
    """Run every case function `fn(out_dir) -> {case_id: case}`; write manifest.json.

    Every case is attempted. If any fails, its traceback is printed, no manifest is written and
    the return value is 1 (the caller exits with it), so a broken case is never silently missing.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        manifest_path.unlink()
    all_cases: dict[str, Any] = {}
    failed: list[str] = []
    for label, fn in cases.items():
        t0 = time.perf_counter()
        try:
            produced = fn(out)
            for case_id, case in produced.items():
                if case_id in all_cases:
                    raise ValueError(f"duplicate case id {case_id}")
                check_case(out, case_id, case)
                all_cases[case_id] = case
        except Exception:
            traceback.print_exc()
            failed.append(label)
            print(f"[{tool}] {label}: FAILED", file=sys.stderr)
        else:
            print(f"[{tool}] {label}: ok ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if failed:
        print(f"[{tool}] failed cases: {', '.join(failed)}; no manifest written", file=sys.stderr)
        return 1
    manifest = {"tool": tool, "version": version, "cases": all_cases}
    text = json.dumps(manifest, indent=2, allow_nan=False)
    manifest_path.write_text(text + "\n", encoding="utf-8")
    print(f"[{tool}] wrote {manifest_path} ({len(all_cases)} cases)", file=sys.stderr)
    return 0


def fresh_dir(path: Path) -> Path:
    """An empty folder at `path` (a previous run's files would make a stale case)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def main_out_dir(argv: list[str]) -> Path:
    if len(argv) != 2:
        raise SystemExit(f"usage: python {argv[0]} OUT_DIR")
    return Path(argv[1]).resolve()


def leave_worker() -> None:
    """End a distributed worker process now, after its work, with exit status 0.

    Skips interpreter and C++ static teardown: a gloo thread still joinable at exit aborts the
    process now and then ("terminate called without an active exception", status -6) after all
    its files and results are written, which would fail a maker that did its job.
    """
    for thread in threading.enumerate():  # what interpreter shutdown would wait for
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ----------------------------------------------------------------------------------------------
# Processes: ports, launcher environments, children, side folders
# ----------------------------------------------------------------------------------------------

LOCALHOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A localhost TCP port nothing listens on now (a rendezvous's MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def launcher_env(rank: int = 0, world: int = 1, port: int | str | None = None) -> dict[str, str]:
    """What ``torchrun`` sets for one rank on this host (a free port unless ``port``)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": LOCALHOST,
        "MASTER_PORT": str(free_port() if port is None else port),
    }


def cpu_rank_env(
    rank: int = 0, world: int = 1, port: int | str | None = None, **extra: str
) -> dict[str, str]:
    """This process's environment for a child rank on the CPU: :func:`launcher_env`,
    ``DS_ACCELERATOR=cpu``, ``OMP_NUM_THREADS`` as set here (else 1), then ``extra``."""
    env = dict(os.environ)
    env.update(DS_ACCELERATOR="cpu", **launcher_env(rank, world, port))
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def run_child(
    cmd: list[str],
    env: Mapping[str, str],
    what: str,
    result: Path | None = None,
    tail: int = 6000,
) -> subprocess.CompletedProcess[str]:
    """Run a child to its end (10 minutes at most); raise with the end of its output when it
    fails or does not write ``result``."""
    proc = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or (result is not None and not result.is_file()):
        raise RuntimeError(
            f"{what} exited with {proc.returncode}:\n" + (proc.stdout + proc.stderr)[-tail:]
        )
    return proc


def torchrun_cmd(nproc: int, port: int | str, *script: str) -> list[str]:
    """``python -m torch.distributed.run`` of ``script`` with ``nproc`` ranks on this host."""
    return [
        *(sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"),
        *(f"--master-addr={LOCALHOST}", f"--master-port={port}", *script),
    ]


def run_session(
    cmd: list[str],
    env: Mapping[str, str],
    what: str,
    result: Path,
    timeout: float,
    tail: int = 20000,
) -> str:
    """Run a launcher in its own session (a hung launcher and its ranks are killed together);
    its output, or an error with the end of it when it fails, times out or writes no
    ``result``."""
    proc = subprocess.Popen(
        cmd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        raise RuntimeError(f"{what} timed out after {timeout:.0f} s:\n{log[-tail:]}") from None
    if proc.returncode != 0 or not result.is_file():
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{log[-tail:]}")
    return log


def side_folder(module: str, env_var: str, folder: str, *older: str) -> str:
    """A folder holding another version of ``module`` for a child's PYTHONPATH
    (scripts/setup_env.sh installs it as ``.venv/side/<folder>``): ``$env_var``, then
    ``<sys.prefix>/side/<folder>``, ``<sys.prefix>/<older>``, the repository's
    ``.venv/side/<folder>``."""
    candidates = [
        os.environ.get(env_var, ""),
        os.path.join(sys.prefix, "side", folder),
        *(os.path.join(sys.prefix, o) for o in older),
        str(REPO / ".venv" / "side" / folder),
    ]
    for c in candidates:
        if c and os.path.isdir(os.path.join(c, module)):
            return c
    raise RuntimeError(
        f"{folder} side folder not found (scripts/setup_env.sh with WITH_FIXTURE_TOOLS=1, or set "
        f"{env_var}); tried " + ", ".join(c for c in candidates if c)
    )


def path_first(env: dict[str, str], folder: str) -> dict[str, str]:
    """``env`` with ``folder`` first on its PYTHONPATH."""
    env["PYTHONPATH"] = os.pathsep.join(x for x in (folder, env.get("PYTHONPATH", "")) if x)
    return env
