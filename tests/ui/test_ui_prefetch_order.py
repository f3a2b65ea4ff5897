"""``serve``'s background work: an idle server warms everything at once; a page asked for
early goes first (the warm-up waits while the server's other threads work), and what a first
Compare needs is warmed before torch."""

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
    for name in ("_listening", "_page_asked"):
        monkeypatch.setattr(view_cache, name, threading.Event())
    monkeypatch.setattr(view_cache, "_waiting", [])
    monkeypatch.setattr(view_cache, "IDLE_S", 0.3)
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
    stop = threading.Event()

    def page_work() -> None:  # a session being built: the server's thread busy
        n = 0
        while not stop.is_set():
            n += 1

    busy = threading.Thread(target=page_work)
    busy.start()
    try:
        view_cache.page_asked()
        _start(fresh)
        done = fresh["done"]
        assert done["first"].wait(WAIT_S / 2)
        assert not done["then"].wait(1.0)  # the page's work goes first
        assert view_cache.page_loaded()  # serve's work is under way: no second warm-up
    finally:
        stop.set()
        busy.join()
    # quiet: the rest goes on, with no page load event or Weight map needed (before: the
    # imports waited for a Weight map, and a first Compare paid for them)
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


ORDER = """
import json, sys
seen = []
class Log:
    def find_spec(self, name, path=None, target=None):
        if name in ("numba", "plotly.graph_objs", "torch") and name not in seen:
            seen.append(name)
        return None
sys.meta_path.insert(0, Log())
from ckpt_explorer.ui import serve
serve._last()
print(json.dumps(seen))
"""


def test_the_warm_up_loads_what_a_first_compare_needs_before_torch() -> None:
    # a Compare of files the kernels read in place needs numba and plotly, never torch;
    # before, torch (2 s of a core) came first and a first Compare waited behind it
    out = subprocess.run([sys.executable, "-c", ORDER], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        "numba",
        "plotly.graph_objs",
        "torch",
    ]
