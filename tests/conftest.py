"""Shared fixtures: real-tool checkpoints made once per session by tests/fixture_makers/."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

MAKERS = Path(__file__).parent / "fixture_makers"
CACHE = Path(os.environ.get("CKPT_FIXTURE_CACHE", Path(__file__).parent.parent / ".fixture-cache"))
# The tool's own caches (timeline summaries) go to a folder of this test session, never the
# user's ~/.cache; child processes (CLI runs, `panel serve`) inherit it.
_TOOL_CACHE = tempfile.mkdtemp(prefix="ckpt-cache-")
os.environ["CKPT_EXPLORER_CACHE"] = _TOOL_CACHE
atexit.register(shutil.rmtree, _TOOL_CACHE, True)
# ... but the generated diff kernels (a pure function of the figure layout, in a folder named
# by its hash) are kept beside the fixtures, so only a machine's first session compiles them
try:
    (CACHE / "kernels").mkdir(parents=True, exist_ok=True)
    (Path(_TOOL_CACHE) / "kernels").symlink_to(CACHE / "kernels", target_is_directory=True)
except OSError:
    pass
MAKER_TIMEOUT_S = 900


# The helpers any maker may use (fixture_makers/README.md), hashed into every maker's key. Any
# other `_` module counts for the makers that import it (directly or through another helper):
# changing a helper two makers share re-makes those two fixtures, not every one.
EVERY_MAKER = ("_manifest.py", "_models.py")
_HELPER_IMPORT = re.compile(r"^\s*(?:from|import)\s+(_\w+)", re.MULTILINE)


def _maker_key(name: str) -> str:
    files = {p for p in MAKERS.glob("*.py") if p.name.startswith(name) or p.name in EVERY_MAKER}
    todo = list(files)
    while todo:
        for module in _HELPER_IMPORT.findall(todo.pop().read_text(encoding="utf-8")):
            helper = MAKERS / f"{module}.py"
            if helper.is_file() and helper not in files:
                files.add(helper)
                todo.append(helper)
    digest = hashlib.sha256()
    for p in sorted(files):
        digest.update(p.read_bytes())
    return digest.hexdigest()[:16]


def run_maker(name: str) -> tuple[Path, dict[str, Any]]:
    """Run ``fixture_makers/<name>_maker.py`` once (cached by source hash); return its output.

    Waits while the prefetch thread (:func:`pytest_collection_finish`) is making the same one.
    """
    with _maker_lock(name):
        return _run_maker(name)


def _maker_lock(name: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(name, threading.Lock())


def _run_maker(name: str) -> tuple[Path, dict[str, Any]]:
    out = CACHE / f"{name}-{_maker_key(name)}"
    manifest = out / "manifest.json"
    if not manifest.is_file():
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        env = {**os.environ, "PYTHONHASHSEED": "0", "DS_ACCELERATOR": "cpu"}
        proc = _PREFETCH.run([sys.executable, str(MAKERS / f"{name}_maker.py"), str(out)], env)
        if proc.returncode != 0 or not manifest.is_file():
            shutil.rmtree(out, ignore_errors=True)
            pytest.fail(
                f"fixture maker {name} failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
            )
    return out, json.loads(manifest.read_text())


class _Prefetch:
    """Makes the fixtures a session will need in a background thread, from the last one needed
    to the first, while the tests run: a fresh clone's makers (most of a CI run) then share the
    machine's cores with the tests instead of running before them one by one. The tests make
    what they need first themselves (:func:`run_maker` waits on a maker being made). Off with
    ``CKPT_FIXTURE_PREFETCH=0``."""

    def __init__(self) -> None:
        self.stopping = False
        self.children: set[subprocess.Popen[str]] = set()
        self.guard = threading.Lock()

    def run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """``subprocess.run`` that :meth:`stop` can end."""
        child = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # stop() ends the maker's own children too
        )
        with self.guard:
            self.children.add(child)
        try:
            out, err = child.communicate(timeout=MAKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            out, err = child.communicate()
        finally:
            with self.guard:
                self.children.discard(child)
        return subprocess.CompletedProcess(argv, child.returncode, out, err)

    def start(self, names: list[str]) -> None:
        threading.Thread(target=self._work, args=(names,), daemon=True).start()

    def _work(self, names: list[str]) -> None:
        for name in reversed(names):
            lock = _maker_lock(name)
            if self.stopping or not lock.acquire(blocking=False):
                continue  # a test is making it now
            try:
                _run_maker(name)
            except BaseException:  # the test that needs it makes it again, and fails
                pass
            finally:
                lock.release()

    def stop(self) -> None:
        self.stopping = True
        with self.guard:
            for child in self.children:
                _kill_group(child)


def _kill_group(child: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)


_PREFETCH = _Prefetch()
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _makers_named_in(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    if "real_checkpoints" not in text and "run_maker" not in text:
        return []
    return [m for m in _MAKER_NAMES if f'"{m}"' in text]


_MAKER_NAMES = sorted(p.name[: -len("_maker.py")] for p in MAKERS.glob("*_maker.py"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start :class:`_Prefetch` on the makers the collected tests name, in order of first use,
    when two or more are not cached yet."""
    if os.environ.get("CKPT_FIXTURE_PREFETCH", "1") == "0":
        return
    needed: list[str] = []
    files = dict.fromkeys(Path(str(item.fspath)) for item in session.items)
    for path in files:
        for name in _makers_named_in(path):
            if name not in needed:
                needed.append(name)
    missing = [
        n for n in needed if not (CACHE / f"{n}-{_maker_key(n)}" / "manifest.json").is_file()
    ]
    if len(missing) >= 2:
        _PREFETCH.start(missing)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _PREFETCH.stop()


@pytest.fixture(scope="session")
def real_checkpoints() -> Any:
    """``real_checkpoints("torch")`` -> (output folder, manifest)."""
    cache: dict[str, tuple[Path, dict[str, Any]]] = {}

    def get(name: str) -> tuple[Path, dict[str, Any]]:
        if name not in cache:
            cache[name] = run_maker(name)
        return cache[name]

    return get


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The hostile corpus (tests/hostile/make_corpus.py) in a fresh folder: (root, cases)."""
    hostile = str(Path(__file__).parent / "hostile")
    sys.path.insert(0, hostile)
    try:
        from make_corpus import make
    finally:
        sys.path.remove(hostile)
    root = tmp_path_factory.mktemp("hostile")
    return root, make(root)
