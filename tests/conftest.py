"""Shared fixtures: real-tool checkpoints made once per session by tests/fixture_makers/."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
MAKER_TIMEOUT_S = 900


def _maker_key(name: str) -> str:
    digest = hashlib.sha256()
    for p in sorted(MAKERS.glob("*.py")):
        if p.name.startswith(("_", name)):
            digest.update(p.read_bytes())
    return digest.hexdigest()[:16]


def run_maker(name: str) -> tuple[Path, dict[str, Any]]:
    """Run ``fixture_makers/<name>_maker.py`` once (cached by source hash); return its output."""
    out = CACHE / f"{name}-{_maker_key(name)}"
    manifest = out / "manifest.json"
    if not manifest.is_file():
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        env = {**os.environ, "PYTHONHASHSEED": "0", "DS_ACCELERATOR": "cpu"}
        proc = subprocess.run(
            [sys.executable, str(MAKERS / f"{name}_maker.py"), str(out)],
            capture_output=True,
            text=True,
            timeout=MAKER_TIMEOUT_S,
            env=env,
        )
        if proc.returncode != 0 or not manifest.is_file():
            shutil.rmtree(out, ignore_errors=True)
            pytest.fail(
                f"fixture maker {name} failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
            )
    return out, json.loads(manifest.read_text())


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
