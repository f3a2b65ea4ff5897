"""``serve``'s background work: an idle server warms everything at once; a page asked for
early goes first (the verdicts after it is up, the heavy imports after a Weight map)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest

from ckpt_explorer.ui import view_cache

WAIT_S = 60.0  # prefetch's own wait for a page: far longer than any step below


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Fresh one-shot events (they are per server process), a stand-in view, recorded steps."""
    for name in ("_listening", "_page_asked", "_page_up", "_weights_up"):
        monkeypatch.setattr(view_cache, name, threading.Event())
    monkeypatch.setattr(view_cache, "_waiting", [])
    monkeypatch.setattr(view_cache, "IDLE_S", 0.3)
    monkeypatch.setattr(view_cache, "SETTLE_S", 0.0)
    monkeypatch.setattr(view_cache, "open_view", lambda path: f"view of {path}")
    steps: list[str] = []
    done = {k: threading.Event() for k in ("first", "then", "last")}

    def step(name: str) -> Any:
        def run(*args: Any) -> None:
            steps.append(name)
            done[name].set()

        return run

    return {"steps": steps, "done": done, "step": step}


def _start(fresh: dict[str, Any]) -> None:
    step = fresh["step"]
    view_cache.prefetch(["ckpt"], step("first"), step("then"), step("last"), wait_s=WAIT_S)


def test_an_idle_server_warms_everything_without_a_page(fresh: dict[str, Any]) -> None:
    _start(fresh)
    assert fresh["done"]["first"].wait(WAIT_S / 2)
    assert not fresh["done"]["then"].wait(1.0)  # not listening yet: a page may come first
    view_cache.listening()
    assert fresh["done"]["last"].wait(WAIT_S / 2)  # before: waited for a page, then a map
    assert fresh["steps"] == ["first", "then", "last"]


def test_a_page_asked_for_early_goes_first(fresh: dict[str, Any]) -> None:
    view_cache.listening()
    view_cache.page_asked()
    _start(fresh)
    done = fresh["done"]
    assert done["first"].wait(WAIT_S / 2)
    assert not done["then"].wait(1.0)  # the page is not up: the verdicts wait
    assert view_cache.page_loaded()  # serve's work was waiting for it
    assert done["then"].wait(WAIT_S / 2)
    assert not done["last"].wait(1.0)  # no Weight map shown yet: the imports wait
    view_cache.weights_shown()
    assert done["last"].wait(WAIT_S / 2)
    assert fresh["steps"] == ["first", "then", "last"]


WARM = """
import json, sys
from ckpt_explorer.ui import serve
serve._last()
print(json.dumps({m: m in sys.modules for m in ("torch", "nbformat", "jsonschema")}))
"""


def test_serves_warm_up_loads_torch_and_skips_the_notebook_renderers() -> None:
    out = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "torch": True,
        "nbformat": False,  # before: plotly's FigureWidget import brought it (2 CPU s)
        "jsonschema": False,
    }
