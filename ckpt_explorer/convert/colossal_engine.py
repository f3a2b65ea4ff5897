"""The ColossalAI engine job: convert a model checkpoint by loading it through a real Booster.

:func:`run_engine_job` carries out an :class:`~.colossal_plan.EnginePlan`: the ranks
(:mod:`.colossal_worker`, started by the one torchrun launcher) build the model from
``config.json``, boost it with the plugin (TorchDDP, HybridParallel tp x pp, Gemini,
LowLevelZero), ``booster.load_model`` the source and ``booster.save_model`` it into the temp
folder beside the destination. The source's config files are copied, every output tensor is
compared bit for bit with the source, and only then is the output moved into place.

HybridParallel's sharded save gathers the tp pieces into full tensors and strips the vocab
padding rows, so its HF-style folder (``model-0000N.safetensors`` or ``pytorch_model-0000N.bin``
plus an index; ``-stage-`` names at pp > 1) holds the source's tensors as they were.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..contracts import Cancel, Progress, ProgressFn
from ..errors import CkptExplorerError
from .colossal_plan import EnginePlan, plan_engine_job
from .runner import ConversionResult

CONFIG_FILES = ("config.json", "generation_config.json")
_ECHOES = ("Connection closed by peer", "Connection reset by peer", "remote worker")


def compare_outputs(source: Path, output: Path) -> tuple[list[str], list[str]]:
    """(mismatches, notes): every source tensor must be in the output with equal bytes.

    An output tensor the source lacks is accepted only when its bytes equal a source tensor's
    (a tied weight saved twice, e.g. ``lm_head.weight``); it is then named in ``notes``.
    """
    import torch

    from ..api import open_checkpoint
    from .writers import tensor_bytes

    a, b = open_checkpoint(source), open_checkpoint(output)
    problems, notes = [], []
    for r in a.tensors:
        if r.name not in b:
            problems.append(f"{r.name}: missing from the output")
            continue
        x, y = a.load(r.name), b.load(r.name)
        if x.dtype != y.dtype or x.shape != y.shape:
            problems.append(f"{r.name}: {y.dtype} {list(y.shape)} vs {x.dtype} {list(x.shape)}")
        elif not torch.equal(tensor_bytes(x), tensor_bytes(y)):
            problems.append(f"{r.name}: bytes differ")
    names = {r.name for r in a.tensors}
    for r in b.tensors:
        if r.name in names:
            continue
        y = b.load(r.name)
        twin = next(
            (
                s.name
                for s in a.tensors
                if s.dtype == r.dtype and s.shape == r.shape
                and torch.equal(tensor_bytes(a.load(s.name)), tensor_bytes(y))
            ),
            None,
        )  # fmt: skip
        if twin is None:
            problems.append(f"{r.name}: in the output, not in the source")
        else:
            notes.append(f"{r.name}: not in the source; written as a copy of {twin} (tied)")
    return problems, notes


def _size_under(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):  # a file the ranks are renaming
                total += os.path.getsize(os.path.join(root, f))
    return total


def _watcher(out: Path, total: int, progress: ProgressFn | None) -> Callable[[], None] | None:
    """Polled by the launcher while the ranks run: reports the bytes saved so far (the
    Booster's save says nothing while it runs; its output's size does)."""
    if progress is None:
        return None
    last = [0.0]

    def poll() -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            done = min(_size_under(out), total) if out.exists() else 0
            words = "loading and saving through the Booster"
            progress(Progress("write", done, total, message=words))

    return poll


def _rank_error(results: Path, returncode: int | None, log_tail: str) -> str | None:
    """The first error a rank reported, else a missing report; None when every rank finished."""
    docs = sorted(results.glob("rank*.json"))
    errors = []
    for p in docs:
        doc = json.loads(p.read_text())
        if not doc.get("ok"):
            errors.append(f"{p.stem}: {doc.get('error')}")
    if errors:  # a rank's own error first, the "peer closed" echoes of it in other ranks last
        errors.sort(key=lambda e: any(s in e for s in _ECHOES))
        return errors[0] + (f" (and {len(errors) - 1} more rank(s))" if len(errors) > 1 else "")
    if returncode != 0 or not docs:
        last = [ln for ln in log_tail.splitlines() if ln.strip()][-1:]
        return f"exit {returncode}" + (f"; the log ends with: {last[0][:300]}" if last else "")
    return None


def _launch(
    plan: EnginePlan, out: Path, progress: ProgressFn | None, cancel: Cancel | None
) -> float:
    """Run the ranks; the seconds they took. Raises when a rank failed or the job was stopped."""
    from ..io.torchrun import run_torchrun
    from .writers import ConversionCancelled

    with tempfile.TemporaryDirectory(prefix="ckpt-colossalai-") as td:
        args = {
            "source": str(plan.source), "config": str(plan.config_dir), "out": str(out),
            "plugin": plan.plugin, "tp": plan.tp, "pp": plan.pp, "dtype": plan.dtype,
            "backend": plan.backend, "shard": plan.shard,
            "size_per_shard": plan.size_per_shard_mb, "use_safetensors": plan.use_safetensors,
            "results": td, "vocab_multiple": plan.vocab_multiple,
        }  # fmt: skip
        env = {"TORCH_FORCE_WEIGHTS_ONLY_LOAD": "1"}  # colossalai's torch.load calls
        if plan.backend == "gloo":  # colossalai picks its CUDA accelerator wherever it sees one
            env["CUDA_VISIBLE_DEVICES"] = ""
        if plan.python_path:
            old = os.environ.get("PYTHONPATH", "")
            env["PYTHONPATH"] = os.pathsep.join([*plan.python_path, *([old] if old else [])])
        t0 = time.perf_counter()
        ended = run_torchrun(
            "ckpt_explorer.convert.colossal_worker", [json.dumps(args)], plan.nproc, Path(td),
            cancel=cancel, env=env, on_poll=_watcher(out, plan.total_bytes, progress),
        )  # fmt: skip
        if ended.cancelled:
            raise ConversionCancelled(plan.destination, "the job to finish", "a cancel request")
        error = _rank_error(Path(td), ended.returncode, ended.log_tail)
        if error is not None:
            raise CkptExplorerError(
                plan.source,
                f"the ColossalAI {plan.plugin} job ({plan.nproc} process(es)) to load and save",
                error.replace("\n", " | "),
                "Nothing was installed at the destination.",
            )
        return time.perf_counter() - t0


def run_engine_job(
    plan: EnginePlan, progress: ProgressFn | None = None, cancel: Cancel | None = None
) -> ConversionResult:
    """Carry out ``plan``: ranks load and save into a temp folder, verify, move into place.

    ``progress`` gets a ``launch`` event, ``write`` events (the output's bytes so far) and a
    ``verify`` event; ``cancel`` stops the ranks (:class:`~.writers.ConversionCancelled`).

    Returns:
        ConversionResult; ``verified`` False (and nothing installed) when any tensor differs.
    """
    from .atomic import clean_stale, discard, fsync_tree, install, make_temp

    dst = plan.destination
    clean_stale(dst)
    tmp = make_temp(dst)
    out = tmp / "out" if plan.shard else tmp / dst.name  # the folder, or the file itself
    try:
        if progress is not None:
            words = f"starting {plan.nproc} process(es)"
            progress(Progress("launch", 0, plan.total_bytes, message=words))
        seconds = _launch(plan, out, progress, cancel)
        if plan.shard:
            for name in CONFIG_FILES:  # the source's own, not the one the worker's model wrote
                if (plan.config_dir / name).is_file():
                    shutil.copyfile(plan.config_dir / name, out / name)
        if progress is not None:
            total = plan.total_bytes
            progress(Progress("verify", total, total, message="(verifying)"))
        t1 = time.perf_counter()
        mismatches, notes = compare_outputs(plan.source, out)
        verify_seconds = time.perf_counter() - t1
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else [dst.name]
        if mismatches:
            discard(tmp)
        else:
            fsync_tree(tmp)
            if plan.shard:
                for p in out.iterdir():
                    os.replace(p, tmp / p.name)
                out.rmdir()
            install(tmp, dst, plan.shard, plan.overwrite)
    except BaseException:
        discard(tmp)
        raise
    return ConversionResult(
        verified=not mismatches,
        destination=str(dst),
        files=files,
        bytes=plan.total_bytes,
        seconds=seconds,
        verify_seconds=verify_seconds,
        mismatches=mismatches,
        nproc=plan.nproc,
        notes=notes,
    )


def gather_with_colossalai(
    source: str | Path,
    destination: str | Path,
    plugin: str = "torch_ddp",
    shard: bool = True,
    size_per_shard_mb: int = 1024,
    use_safetensors: bool = False,
    overwrite: bool = False,
    config_dir: str | Path | None = None,
    tp: int = 1,
    pp: int = 1,
    device: str = "auto",
) -> ConversionResult:
    """Plan and run the engine job in one call (see :func:`plan_engine_job`).

    ``use_safetensors`` is off by default, as in ColossalAI: its safetensors save refuses
    models with tied weights.
    """
    plan = plan_engine_job(
        source, destination, plugin, tp, pp, target="hf" if use_safetensors else "bin",
        shard=shard, size_per_shard_mb=size_per_shard_mb, overwrite=overwrite,
        config_dir=config_dir, device=device,
    )  # fmt: skip
    return run_engine_job(plan)
