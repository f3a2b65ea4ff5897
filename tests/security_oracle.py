"""The oracle of the security gate: load files with the REAL loaders, watch what they reach.

``run_oracle(paths)`` loads every file (or DCP folder) with each real loader that could be
pointed at it (``pickle.load``, ``pickle._Unpickler``, ``torch.load`` with and without
``weights_only``, ``numpy.load(allow_pickle=True)``, ``joblib.load``, ``pandas.read_pickle``,
``torch.export.load``, DCP's ``dcp_to_torch_save``), each independently, in a child process
under ``sys.addaudithook``. The hook records every ``pickle.find_class`` and the events that
mean code ran: ``os.system``, ``subprocess.Popen``, ``os.exec*``/``spawn*``/``posix_spawn``,
``socket.*``, ``ctypes.*``, files opened for writing or changed outside the loaders' own
temp folder, ``exec``/``compile`` of code that is not a library module, and modules imported
from the checkpoint's own folder (a shadowing ``omegaconf/`` beside the pickle). A payload
in the corpus creates a ``PWNED-*`` marker file; the oracle looks for those too.

Process model: one *zygote* process (started as ``python -c`` would start, so
``sys.path[0] == ''``) imports the loaders and warms them up once; each worker is a fork of it
that serves files until something non-inert happened (or a new module was imported), then
exits, so every file is loaded by a process in the same clean state. A hung or crashed load
costs one fork, not a re-import of torch. Each file is copied with its folder into a throwaway
cwd (HOME and TMPDIR are temp folders too) and loaded there, so a payload can change nothing
of the corpus and a shadowing package beside the file is found exactly as ``python -c`` in that
folder would find it.

``OracleResult.non_inert`` lists what was reached: globals for which
``ckpt_explorer.security.inert.inert_reason`` is None, and code-running events.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ALL = (
    "pickle",
    "pickle_py",
    "pickle_fresh",
    "torch",
    "torch_weights_only",
    "numpy",
    "joblib",
    "pandas",
    "torch_export",
    "dcp",
)
# consumers pointed at a folder, each in a fresh process started there or in-process:
# ``python -c "import torch"`` run in it (``arg``: the statement), ``site.addsitedir`` of it,
# ``transformers`` ``from_pretrained(trust_remote_code=True)`` (``arg``: the Auto class), and
# DeepSpeed's ``load_checkpoint`` tag resolution (``latest`` -> ``os.path.join(dir, tag)`` ->
# ``torch.load(weights_only=False)`` of its model-state files)
FOLDER_LOADERS = ("python_in_folder", "site_dir", "from_pretrained", "deepspeed_latest")
# ``keras.saving.load_model`` (safe_mode=True, the default; and safe_mode=False) in a fresh
# process, Keras from the side folder(s) ``arg`` names (an os.pathsep list), torch backend
KERAS_LOADERS = ("keras", "keras_unsafe")
# ``hydra.utils.instantiate(OmegaConf.load(path))`` in a fresh process, Hydra from the side
# folder ``arg`` names (what NeMo's restore_from and training scripts do with a config)
_FRESH_LOADERS = (
    "pickle_fresh",
    "python_in_folder",
    "site_dir",
    "from_pretrained",
    *KERAS_LOADERS,
    "hydra",
)
MARKER_ENV = "CKPT_ORACLE_MARKERS"
MARKER_PREFIX = "PWNED"


@dataclass
class LoaderResult:
    """What one loader did with one file."""

    loader: str
    status: str  # ok | error | stopped | timeout | crash | n/a
    error: str = ""
    globals: list[tuple[str, str]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    non_inert: list[str] = field(default_factory=list)


@dataclass
class OracleResult:
    """Every loader's result for one path; ``non_inert`` is the union of theirs."""

    path: Path
    loaders: dict[str, LoaderResult] = field(default_factory=dict)

    @property
    def non_inert(self) -> list[str]:
        out: list[str] = []
        for r in self.loaders.values():
            out += [x for x in r.non_inert if x not in out]
        return out

    @property
    def unsafe(self) -> bool:
        return bool(self.non_inert)

    @property
    def reached_by(self) -> list[str]:
        """The loaders under which something non-inert was reached."""
        return [name for name, r in self.loaders.items() if r.non_inert]

    @property
    def ran_marker(self) -> list[str]:
        """The loaders under which a payload really ran (a marker file appeared)."""
        return [name for name, r in self.loaders.items() if r.markers]


def classify(events: Sequence[Sequence[Any]], markers: Sequence[str]) -> list[str]:
    """The non-inert items of one loader's raw events (see the worker's hook)."""
    from ckpt_explorer.security.inert import inert_reason

    out: list[str] = []
    for ev in events:
        kind = ev[0]
        if kind == "find_class":
            mod, name = str(ev[1]), str(ev[2])
            if inert_reason(mod, name) is None:
                item = f"global {mod}.{name}"
                if item not in out:
                    out.append(item)
        elif kind == "code" and ev[1] not in out:
            out.append(str(ev[1]))
    out += [f"marker {m}" for m in markers]
    return out


# ----------------------------------------------------------------------------------------
# worker side (runs in the zygote and its forks; never in the test process)


class OracleStop(BaseException):
    """Raised by the hook at the first non-inert global in stop mode (before it is called)."""


_STATE: dict[str, Any] = {
    "armed": False,
    "events": [],
    "stop": False,
    "cwd": "",
    "tmp": "",
    "inert": None,
}
_CODE_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn", "socket.", "ctypes.", "os.fork")
_CODE_EVENTS = {
    "os.system",
    "subprocess.Popen",
    "os.forkpty",
    "pty.spawn",
    "webbrowser.open",
    "code.__new__",
    "sys.addaudithook",
    "urllib.Request",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
}
_FS_EVENTS = {
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.symlink",
    "os.link",
    "os.chmod",
    "os.chown",
    "os.truncate",
    "os.utime",
    "os.removexattr",
    "os.setxattr",
    "shutil.copyfile",
    "shutil.copymode",
    "shutil.copystat",
    "shutil.copytree",
    "shutil.move",
    "shutil.rmtree",
    "shutil.unpack_archive",
    "shutil.make_archive",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pyw")


def _under(path: Any, root: str) -> bool:
    if not root or not isinstance(path, (str, bytes, os.PathLike)):
        return False
    try:
        p = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return p == root or p.startswith(root + os.sep)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _STATE["armed"]:
        return
    try:
        _record(event, args)
    except OracleStop:
        raise
    except Exception:  # the hook must never break the load it watches
        pass


def _record(event: str, args: tuple[Any, ...]) -> None:
    st = _STATE
    rec = st["events"]
    if event == "pickle.find_class":
        mod, name = args[0], args[1]
        rec.append(("find_class", str(mod), str(name)))
        if st["stop"] and st["inert"] is not None and st["inert"](str(mod), str(name)) is None:
            raise OracleStop(f"{mod}.{name}")
        return
    if event in _CODE_EVENTS or event.startswith(_CODE_PREFIXES):
        rec.append(("code", f"{event} {_short(args)}"))
        return
    if event == "open":
        path, mode, flags = ([*list(args), None, None, None])[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writing and not _under(path, st["tmp"]):
            rec.append(("code", f"open-for-write {_short((path, mode))}"))
        elif (
            not writing
            and _under(path, st["cwd"])
            and os.fsdecode(path).endswith(_MODULE_SUFFIXES)
            and os.path.realpath(os.fsdecode(path)) != st.get("target")
        ):
            rec.append(("code", f"module source read from the checkpoint folder {_short((path,))}"))
        return
    if event in _FS_EVENTS:
        paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
        fds = [a for a in args[1:] if isinstance(a, int) and not isinstance(a, bool) and a >= 0]
        if paths and fds and not os.path.isabs(os.fsdecode(paths[0])):  # relative to dir_fd
            with contextlib.suppress(OSError):
                base = os.readlink(f"/proc/self/fd/{fds[0]}")
                paths = [os.path.join(base, os.fsdecode(p)) for p in paths]
        if not paths or not all(_under(p, st["tmp"]) for p in paths):
            rec.append(("code", f"{event} {_short(args)}"))
        return
    if event in ("exec", "compile"):
        code = args[0]
        filename = getattr(code, "co_filename", None) if event == "exec" else args[1]
        filename = os.fsdecode(filename) if isinstance(filename, (str, bytes)) else ""
        if os.path.isabs(filename) and _under(filename, st["cwd"]):
            rec.append(("code", f"{event} of code from the checkpoint folder {filename}"))
        elif event == "exec" and not os.path.isabs(filename):
            rec.append(("dynamic", f"exec of dynamic code {filename!r}"))
        return
    if event == "import":
        rec.append(("import", str(args[0])))
    elif event == "marshal.loads":
        rec.append(("marshal", "marshal.loads"))


def _short(args: Any, n: int = 160) -> str:
    try:
        text = repr(args)
    except Exception:
        text = object.__repr__(args)
    return text if len(text) <= n else text[:n] + "..."


_FRESH = r"""
import sys, os
events = []
cwd = os.path.realpath(os.getcwd())
def hook(event, args):
    if event == "pickle.find_class":
        events.append(("find_class", str(args[0]), str(args[1])))
    elif event == "exec":
        fn = getattr(args[0], "co_filename", "") or ""
        if os.path.isabs(fn) and os.path.realpath(fn).startswith(cwd + os.sep):
            events.append(("code", "exec of code from the checkpoint folder " + fn))
    elif event in ("os.system", "subprocess.Popen") or event.startswith(("os.exec", "os.spawn")):
        events.append(("code", event + " " + repr(args)[:160]))
sys.addaudithook(hook)
status, error = "ok", ""
try:
    import pickle
    with open(sys.argv[1], "rb") as f:
        pickle.load(f)
except BaseException as e:
    status, error = "error", (type(e).__name__ + ": " + str(e))[:300]
with open(sys.argv[2], "w") as f:
    f.write(repr({"status": status, "error": error, "raw": events}))
"""


def _load_pickle_fresh(path: str) -> dict[str, Any]:
    """``pickle.load`` in a fresh ``python -c`` in that folder: nothing imported yet, so a
    ``torch.py`` there shadows torch exactly as it would for a user's one-liner."""
    import ast

    out = os.path.join(_STATE["tmp"], f"fresh-{os.getpid()}-{time.monotonic_ns()}.txt")
    armed, _STATE["armed"] = _STATE["armed"], False
    try:
        subprocess.run(
            [sys.executable, "-c", _FRESH, path, out],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
        with open(out) as f:
            return dict(ast.literal_eval(f.read()))
    finally:
        _STATE["armed"] = armed
        if os.path.exists(out):
            os.remove(out)


def _fresh_process(argv: list[str], cwd: str, **env: str) -> dict[str, Any]:
    """Run ``python argv`` in ``cwd`` unwatched by this process's hook (the child's own effects
    are proven by the marker a payload leaves): status ``ok`` on exit 0, else ``error``."""
    armed, _STATE["armed"] = _STATE["armed"], False
    try:
        proc = subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=240,
            check=False,
        )
    finally:
        _STATE["armed"] = armed
    if proc.returncode == 0:
        return {"status": "ok", "error": "", "raw": []}
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return {"status": "error", "error": f"exit {proc.returncode}: {tail[0][:300]}", "raw": []}


def _load_python_in_folder(path: str) -> dict[str, Any]:
    """A Python process started in the folder (a notebook, a script, ``python -c``): its
    ``sys.path[0]`` is that folder, so any module there shadows one the import looks for."""
    return _fresh_process(["-c", _STATE.get("arg") or "import torch"], path)


def _load_site_dir(path: str) -> dict[str, Any]:
    """The folder as a site directory (unpacked into site-packages): its ``.pth`` files run."""
    return _fresh_process(["-c", "import site, sys; site.addsitedir(sys.argv[1])", path], path)


_FROM_PRETRAINED = (
    "import sys, transformers\n"
    "getattr(transformers, sys.argv[2]).from_pretrained(sys.argv[1], trust_remote_code=True)\n"
)


def _load_from_pretrained(path: str) -> dict[str, Any]:
    """``AutoX.from_pretrained(folder, trust_remote_code=True)`` offline, in a fresh process."""
    auto = _STATE.get("arg") or "AutoConfig"
    return _fresh_process(
        ["-c", _FROM_PRETRAINED, path, auto],
        os.path.dirname(path),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=os.path.join(_STATE["tmp"], "hf"),
    )


_KERAS_LOAD = (
    "import sys, keras\nkeras.saving.load_model(sys.argv[1], safe_mode=sys.argv[2] == '1')\n"
)


def _load_keras(path: str, safe: bool = True) -> dict[str, Any]:
    """``keras.saving.load_model(path, safe_mode=safe)`` in a fresh process in the file's
    folder, Keras taken from the side folders ``arg`` names."""
    return _fresh_process(
        ["-c", _KERAS_LOAD, path, "1" if safe else "0"],
        os.path.dirname(path) if os.path.isfile(path) else path,
        PYTHONPATH=_STATE.get("arg") or "",
        KERAS_BACKEND="torch",
    )


_HYDRA_LOAD = (
    "import sys\nfrom omegaconf import OmegaConf\nfrom hydra.utils import instantiate\n"
    "instantiate(OmegaConf.load(sys.argv[1]))\n"
)


def _load_hydra(path: str) -> dict[str, Any]:
    """``hydra.utils.instantiate`` of the YAML config at ``path``, in a fresh process."""
    side = os.pathsep.join(x for x in (_STATE.get("arg"), os.environ.get("PYTHONPATH")) if x)
    return _fresh_process(["-c", _HYDRA_LOAD, path], os.path.dirname(path), PYTHONPATH=side)


def _load_deepspeed_latest(path: str) -> Any:
    """DeepSpeed's ``load_checkpoint(load_dir)`` with no tag: the tag is ``latest``'s text,
    the folder ``os.path.join(load_dir, tag)``, each model-state file there ``torch.load``ed
    with ``weights_only=False`` (its TorchCheckpointEngine)."""
    import glob

    import torch

    with open(os.path.join(path, "latest")) as f:
        tag = f.read().strip()
    folder = os.path.join(path, str(tag))
    files = sorted(glob.glob(os.path.join(folder, "*model_states.pt")))
    if not files:
        raise FileNotFoundError(f"no model states in {folder}")
    return [torch.load(f, map_location="cpu", weights_only=False) for f in files]


def _load_pickle(path: str) -> Any:
    import pickle

    with open(path, "rb") as f:
        return pickle.load(f)


def _load_pickle_py(path: str) -> Any:
    import pickle

    with open(path, "rb") as f:
        return pickle._Unpickler(f).load()  # type: ignore[attr-defined]


def _load_torch(path: str) -> Any:
    import torch

    return torch.load(path, weights_only=False, map_location="cpu")


def _load_torch_wo(path: str) -> Any:
    import torch

    return torch.load(path, weights_only=True, map_location="cpu")


def _load_numpy(path: str) -> Any:
    import numpy as np

    out = np.load(path, allow_pickle=True)
    if hasattr(out, "files"):  # NpzFile: read every member, as a user iterating it would
        try:
            return {k: out[k] for k in out.files}
        finally:
            out.close()
    return out


def _load_joblib(path: str) -> Any:
    import joblib

    return joblib.load(path)


def _load_pandas(path: str) -> Any:
    import pandas as pd

    return pd.read_pickle(path)


def _load_torch_export(path: str) -> Any:
    import torch

    return torch.export.load(path)


def _load_dcp(path: str) -> Any:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = os.path.join(_STATE["tmp"], f"dcp-{os.getpid()}-{time.monotonic_ns()}.pt")
    try:
        dcp_to_torch_save(path, out)
    finally:
        if os.path.exists(out):
            os.remove(out)


_LOADERS = {
    "pickle": _load_pickle,
    "pickle_py": _load_pickle_py,
    "pickle_fresh": _load_pickle_fresh,
    "torch": _load_torch,
    "torch_weights_only": _load_torch_wo,
    "numpy": _load_numpy,
    "joblib": _load_joblib,
    "pandas": _load_pandas,
    "torch_export": _load_torch_export,
    "dcp": _load_dcp,
    "python_in_folder": _load_python_in_folder,
    "site_dir": _load_site_dir,
    "from_pretrained": _load_from_pretrained,
    "deepspeed_latest": _load_deepspeed_latest,
    "keras": _load_keras,
    "keras_unsafe": lambda path: _load_keras(path, safe=False),
    "hydra": _load_hydra,
}


def _applies(loader: str, path: str) -> bool:
    """Whether a user could point this loader at this path at all."""
    if loader in FOLDER_LOADERS:
        return os.path.isdir(path)
    if loader in KERAS_LOADERS:  # a .keras / .h5 file, or a model saved as a folder
        return True
    if os.path.isdir(path):
        return loader == "dcp" and os.path.isfile(os.path.join(path, ".metadata"))
    if loader == "dcp":
        return False
    if loader == "pickle_fresh":
        return _importables(os.path.dirname(path), path)
    if loader == "torch_export":
        import zipfile

        return zipfile.is_zipfile(path)
    return True


def _warm_up(tmp: str) -> None:
    """Run every loader once on benign files of each layout, so lazy imports happen now."""
    import numpy as np
    import pandas as pd
    import torch

    d = tempfile.mkdtemp(dir=tmp)
    samples = []
    obj = {"w": torch.ones(2), "n": 1}
    for name, kw in (("z.pt", {}), ("l.pt", {"_use_new_zipfile_serialization": False})):
        torch.save(obj, os.path.join(d, name), **kw)
        samples.append(os.path.join(d, name))
    np.save(os.path.join(d, "a.npy"), np.arange(3))
    np.save(os.path.join(d, "o.npy"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(os.path.join(d, "a.npz"), a=np.arange(3))
    samples += [os.path.join(d, n) for n in ("a.npy", "o.npy", "a.npz")]
    for ext in ("pkl", "pkl.gz", "pkl.bz2", "pkl.xz", "pkl.zip"):
        pd.to_pickle({"a": 1}, os.path.join(d, f"p.{ext}"))
        samples.append(os.path.join(d, f"p.{ext}"))
    try:
        import joblib

        for i, comp in enumerate((0, ("zlib", 3), ("gzip", 3), ("bz2", 3), ("xz", 3))):
            p = os.path.join(d, f"j{i}.joblib")
            joblib.dump({"a": np.arange(3)}, p, compress=comp)
            samples.append(p)
    except ImportError:
        pass
    try:

        class _Tiny(torch.nn.Module):
            def forward(self, x: Any) -> Any:
                return x * 2

        program = torch.export.export(_Tiny(), (torch.ones(2),))
        torch.export.save(program, os.path.join(d, "e.pt2"))
        samples.append(os.path.join(d, "e.pt2"))
    except Exception:
        pass
    try:
        import torch.distributed.checkpoint as dcp

        dcp.save({"w": torch.ones(2), "x": {"k": 1}}, checkpoint_id=os.path.join(d, "dcp"))
        samples.append(os.path.join(d, "dcp"))
    except Exception:
        pass
    for path in samples:
        for name, fn in _LOADERS.items():
            if name not in FOLDER_LOADERS and _applies(name, path):
                with contextlib.suppress(BaseException):
                    fn(path)
    shutil.rmtree(d, ignore_errors=True)


def _copy_into(src: str, dst: str, whole: bool) -> None:
    """Copy the folder ``src`` to ``dst`` (symlinks followed): all of it for a DCP folder,
    else its importable entries only (``*.py`` and the like, packages): what an import by a
    loader running in that folder could find there."""
    if whole:
        shutil.copytree(src, dst, symlinks=False, ignore_dangling_symlinks=True)
        return
    os.makedirs(dst, exist_ok=True)
    for entry in os.scandir(src):
        target = os.path.join(dst, entry.name)
        try:
            if entry.is_file() and entry.name.endswith((*_MODULE_SUFFIXES, ".pth")):
                shutil.copy2(entry.path, target)
            elif entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")):
                shutil.copytree(entry.path, target, ignore_dangling_symlinks=True)
        except OSError:
            pass


def _importables(cwd: str, target: str) -> bool:
    """Whether the folder holds something an import could pick up (besides the target)."""
    for entry in os.scandir(cwd):
        if entry.path == target:
            continue
        if entry.name.endswith(_MODULE_SUFFIXES) or os.path.isdir(entry.path):
            return True
    return False


def _markers(*dirs: str) -> list[str]:
    found = []
    for d in dirs:
        for root, _dirs, files in os.walk(d):
            found += [os.path.join(root, f) for f in files if f.startswith(MARKER_PREFIX)]
    return sorted({os.path.basename(p) for p in found})


def _run_job(job: dict[str, Any], base: str, baseline: set[str]) -> tuple[list[dict], bool]:
    """Load one path with each loader asked for; stop early when the process got dirty.

    With ``job["root"]`` (a folder above the path) that folder is copied whole and the loaders
    run in the copy of the path's folder (the path's own copy when it is a folder)."""
    path = job["path"]
    work = tempfile.mkdtemp(prefix="job-", dir=base)
    if job.get("root"):
        top = os.path.join(work, "root")
        shutil.copytree(job["root"], top, symlinks=True)
        target = os.path.normpath(os.path.join(top, os.path.relpath(path, job["root"])))
        cwd = target if os.path.isdir(target) else os.path.dirname(target)
        copied = top
    else:
        root = path if os.path.isdir(path) else os.path.dirname(path)
        cwd = os.path.join(work, "cwd")
        _copy_into(root, cwd, whole=os.path.isdir(path))
        target = cwd if os.path.isdir(path) else os.path.join(cwd, os.path.basename(path))
        if not os.path.lexists(target):
            shutil.copy2(path, target)
        copied = cwd
    _STATE["arg"] = job.get("arg", "")
    real_cwd = os.path.realpath(cwd)
    results: list[dict] = []
    dirty = False
    try:
        for loader in job["loaders"]:
            if not _applies(loader, target):
                results.append({"loader": loader, "status": "n/a"})
                continue
            marks = os.path.join(work, "markers", loader)
            os.makedirs(marks)
            os.environ[MARKER_ENV] = marks
            os.chdir(cwd)
            _STATE.update(events=[], stop=bool(job.get("stop")), cwd=real_cwd, armed=True)
            _STATE["target"] = os.path.realpath(target)
            status, error = "ok", ""
            try:
                got = _LOADERS[loader](target)
                if loader in _FRESH_LOADERS:  # a fresh child's own report
                    status, error = got["status"], got["error"]
                    _STATE["events"] += [tuple(e) for e in got["raw"]]
            except OracleStop as e:
                status, error = "stopped", f"stopped at {e}"
            except BaseException as e:  # a payload may raise SystemExit, KeyboardInterrupt
                status, error = "error", f"{type(e).__name__}: {str(e)[:300]}"
            finally:
                _STATE["armed"] = False
            os.chdir(base)
            events = _STATE["events"]
            _STATE["events"] = []
            new = set(sys.modules) - baseline
            shadow = []
            for name in sorted(new):
                mod = sys.modules.get(name)
                where = getattr(mod, "__file__", None) or ""
                if _under(os.path.realpath(where), real_cwd) if where else False:
                    shadow.append(("code", f"import of {name} from the checkpoint folder"))
            keep = [e for e in events if e[0] in ("find_class", "code")] + shadow
            # exec of dynamic code outside any fresh import ran code of the file's choosing;
            # torch.export.load itself execs the forward() that torch.fx generates from the
            # graph (its targets are resolved through torch's op registry), so not there
            if not new and loader != "torch_export":
                keep += [("code", e[1]) for e in events if e[0] == "dynamic"]
            code = [e for e in keep if e[0] == "code"]
            if len(keep) > 300:
                keep = keep[:200] + [e for e in keep[200:] if e[0] == "code"][-50:]
            results.append(
                {
                    "loader": loader,
                    "status": status,
                    "error": error,
                    "raw": keep,
                    "imports": sorted(new)[:50],
                    "markers": _markers(marks, copied),
                }
            )
            inert = _STATE["inert"]
            reached = any(
                e[0] == "find_class" and inert is not None and inert(e[1], e[2]) is None
                for e in keep
            )
            # a load stopped at its first non-inert global called and imported nothing
            # (the hook runs before find_class imports): the process is still clean
            if new or code or results[-1]["markers"] or (reached and not _STATE["stop"]):
                dirty = True
                break
    finally:
        os.chdir(base)
        shutil.rmtree(work, ignore_errors=True)
    return results, dirty


def _serve(conn: socket.socket, base: str, baseline: set[str]) -> None:
    """A forked worker: serve jobs on ``conn`` until one leaves the process dirty."""
    f = conn.makefile("rwb", buffering=0)
    f.write(json.dumps({"pid": os.getpid()}).encode() + b"\n")
    for line in f:
        job = json.loads(line)
        results, dirty = _run_job(job, base, baseline)
        f.write(json.dumps({"results": results, "dirty": dirty}).encode() + b"\n")
        if dirty:
            break
    f.close()


def zygote_main(sock_path: str, base: str) -> None:
    """Entry of the zygote process: install the hook, import and warm up, then fork per
    connection."""
    sys.addaudithook(_hook)
    os.environ.setdefault(MARKER_ENV, os.path.join(base, "markers-unarmed"))
    import warnings

    warnings.simplefilter("ignore")
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import torch

    torch.set_num_threads(1)
    import torch.distributed.checkpoint
    import torch.export

    with contextlib.suppress(ImportError):
        import joblib  # noqa: F401
    from ckpt_explorer.security.inert import inert_reason

    _STATE["inert"] = inert_reason
    _STATE["tmp"] = os.path.realpath(os.environ["TMPDIR"])
    os.chdir(base)
    _warm_up(_STATE["tmp"])
    baseline = set(sys.modules)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            srv.close()
            code = 0
            try:
                _serve(conn, base, baseline)
            except BaseException:
                code = 3
            os._exit(code)
        conn.close()


# ----------------------------------------------------------------------------------------
# parent side


_ZYGOTE_CODE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_ckpt_security_oracle', {path!r})\n"
    "m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m\n"
    "spec.loader.exec_module(m)\n"
    "m.zygote_main({sock!r}, {base!r})\n"
)


class Oracle:
    """A running zygote and its forked workers; use as a context manager, or
    :func:`run_oracle` for one batch."""

    def __init__(self, workers: int = 1, timeout: float = 60.0, stop: bool = False) -> None:
        self.workers, self.timeout, self.stop = max(1, workers), timeout, stop
        self.base = tempfile.mkdtemp(prefix="ckpt-oracle-")
        self.sock = os.path.join(self.base, "zygote.sock")
        self.proc: subprocess.Popen[bytes] | None = None
        self.forks = 0
        self._lock = threading.Lock()

    def __enter__(self) -> Oracle:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        home = os.path.join(self.base, "home")
        tmp = os.path.join(self.base, "loader-tmp")
        os.makedirs(home, exist_ok=True)
        os.makedirs(tmp, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "CKPT_ORACLE"))}
        env.update(
            HOME=home,
            TMPDIR=tmp,
            PYTHONDONTWRITEBYTECODE="1",
            OMP_NUM_THREADS="1",
            OPENBLAS_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
        )
        env[MARKER_ENV] = os.path.join(self.base, "markers-unarmed")
        code = _ZYGOTE_CODE.format(path=os.path.abspath(__file__), sock=self.sock, base=self.base)
        if os.path.exists(self.sock):
            os.remove(self.sock)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=self.base,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=open(os.path.join(self.base, "zygote.log"), "wb"),  # noqa: SIM115
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            log = Path(self.base, "zygote.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"oracle zygote did not start: {line!r}\n{log}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        shutil.rmtree(self.base, ignore_errors=True)

    def _connect(self) -> tuple[socket.socket, Any, int]:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self.start()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.sock)
            self.forks += 1
        f = s.makefile("rwb", buffering=0)
        s.settimeout(self.timeout)
        hello = json.loads(f.readline())
        return s, f, int(hello["pid"])

    def _run_one(
        self,
        path: Path,
        loaders: Sequence[str],
        conn: list[Any],
        stop: bool,
        timeout: float,
        extra: dict[str, str] | None = None,
    ) -> OracleResult:
        result = OracleResult(path)
        todo = list(loaders)
        while todo:
            if not conn:
                conn.extend(self._connect())
            s, f, pid = conn
            s.settimeout(timeout)
            job = {"path": os.path.abspath(path), "loaders": todo, "stop": stop, **(extra or {})}
            status = "crash"
            try:
                f.write(json.dumps(job).encode() + b"\n")
                line = f.readline()
                reply = json.loads(line) if line else None
            except TimeoutError:
                reply, status = None, "timeout"
            except (OSError, ValueError):
                reply = None
            if reply is None:  # the worker hung or died on the first loader still to do
                _kill(pid)
                s.close()
                conn.clear()
                result.loaders[todo[0]] = LoaderResult(todo[0], status)
                todo = todo[1:]
                continue
            for r in reply["results"]:
                events = [tuple(e) for e in r.get("raw", [])]
                result.loaders[r["loader"]] = LoaderResult(
                    r["loader"],
                    r["status"],
                    r.get("error", ""),
                    [(e[1], e[2]) for e in events if e[0] == "find_class"],
                    [e[1] for e in events if e[0] == "code"],
                    r.get("markers", []),
                    classify(events, r.get("markers", [])),
                )
            todo = [x for x in todo if x not in result.loaders]
            if reply["dirty"]:
                s.close()
                conn.clear()
        return result

    def run(
        self,
        paths: Iterable[str | Path],
        loaders: Sequence[str] = ALL,
        stop: bool | None = None,
        timeout: float | None = None,
    ) -> dict[Path, OracleResult]:
        """Each path's result, loaded by ``self.workers`` forked workers in parallel;
        ``stop`` and ``timeout`` override the oracle's own for this batch."""
        items = [Path(p) for p in paths]
        results = self.run_jobs([(p, loaders, {}) for p in items], stop, timeout)
        return dict(zip(items, results, strict=True))

    def run_jobs(
        self,
        jobs: Sequence[tuple[str | Path, Sequence[str], dict[str, str]]],
        stop: bool | None = None,
        timeout: float | None = None,
    ) -> list[OracleResult]:
        """One result per ``(path, loaders, extra)``, in order; ``extra`` may name ``root``
        (a folder above the path to copy whole, for pointers that lead out of the path's
        folder) and ``arg`` (what a folder loader runs, see ``FOLDER_LOADERS``)."""
        stop = self.stop if stop is None else stop
        timeout = self.timeout if timeout is None else timeout
        out: dict[int, OracleResult] = {}
        queue = list(enumerate(jobs))
        qlock = threading.Lock()

        def drive() -> None:
            conn: list[Any] = []
            try:
                while True:
                    with qlock:
                        if not queue:
                            return
                        i, (p, loaders, extra) = queue.pop(0)
                    extra = {k: os.path.abspath(v) if k == "root" else v for k, v in extra.items()}
                    out[i] = self._run_one(Path(p), loaders, conn, stop, timeout, extra)
            finally:
                if conn:
                    conn[0].close()

        threads = [threading.Thread(target=drive) for _ in range(min(self.workers, len(jobs)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [out[i] for i in range(len(jobs))]


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def run_oracle(
    paths: Iterable[str | Path],
    loaders: Sequence[str] = ALL,
    timeout: float = 60.0,
    workers: int = 1,
    stop: bool = False,
) -> dict[Path, OracleResult]:
    """Load every path with every loader in ``loaders``; ``stop=True`` stops each load at its
    first non-inert global (nothing of the payload runs, the reach is still proven)."""
    with Oracle(workers=workers, timeout=timeout, stop=stop) as oracle:
        return oracle.run(paths, loaders)


def files_of(path: Path) -> list[Path]:
    """What a case holds for the oracle: the file, or every file under a folder (symlinks
    followed) plus each DCP folder (one holding ``.metadata``) itself."""
    if not path.is_dir():
        return [path]
    out: list[Path] = []
    for root, dirs, files in os.walk(path, followlinks=True):
        dirs.sort()
        if ".metadata" in files:
            out.append(Path(root))
        out += [Path(root) / f for f in sorted(files)]
    return out


def run_as_user(cwd: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` in ``cwd`` as a user loading a checkpoint there would (hub offline).

    For tests that show a consumer running a folder's code on a plain load without the audit
    hook: their payloads leave marker files.
    """
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **offline, **env},
    )
