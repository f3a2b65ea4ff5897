"""Run a module as a real distributed job: ``python -m torch.distributed.run`` on 127.0.0.1.

The diff and conversion jobs start their ranks the same way: a free loopback port for the
rendezvous, the caller's environment without a parent job's rank variables, OpenMP threads
shared among the ranks, the log kept in a file, cancellation and a time limit polled while
the job runs. Each rank writes its result where the caller's arguments say.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .ports import free_port

Cancel = threading.Event | Callable[[], bool] | None
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class JobExit:
    """How the job ended: ``returncode`` (None when cancelled) and the end of its log."""

    returncode: int | None
    log_tail: str

    @property
    def cancelled(self) -> bool:
        return self.returncode is None


def _stop_requested(cancel: Cancel) -> bool:
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())


def run_torchrun(
    module: str,
    args: Sequence[str],
    nproc: int,
    log_dir: Path,
    *,
    cancel: Cancel = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
) -> JobExit:
    """Run ``python -m <module> <args>`` in ``nproc`` ranks and wait for it.

    Args:
        module: the rank-side module (it reads ``RANK``/``WORLD_SIZE`` from torchrun).
        args: its command-line arguments.
        nproc: processes on this machine.
        log_dir: a folder for the job's log (stdout and stderr of every rank).
        cancel: an Event or a callable; when set, the job is terminated.
        timeout_s: terminate the job after this long (it then ends with a non-zero code).
        env: variables set for the job on top of the caller's environment.
    """
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", str(nproc),
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        "-m", module, *args,
    ]  # fmt: skip
    job_env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    job_env.update(env or {})
    job_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    log = log_dir / "torchrun.log"
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=job_env)
        while proc.poll() is None:
            late = deadline is not None and time.monotonic() > deadline
            if _stop_requested(cancel) or late:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if not late:
                    return JobExit(None, "")
                break
            time.sleep(0.05)
    tail = log.read_text(errors="replace")[-2000:]
    return JobExit(proc.returncode, tail)
