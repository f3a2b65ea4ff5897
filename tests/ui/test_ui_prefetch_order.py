"""``serve``'s background work: an idle server warms at once; a page asked for early is drawn
first; the warm-up's steps wait while a job runs and go on once it ends."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest

from ckpt_explorer.ui import view_cache, warm_up
from ckpt_explorer.ui.components.common import FIGURE_KINDS
from ckpt_explorer.ui.jobs import Job

WAIT_S = 60.0  # prefetch's own wait for a page: far longer than any step below


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Fresh one-shot events and warm-up state (they are per server process), a stand-in
    view, recorded steps."""
    for name in ("_listening", "_page_asked"):
        monkeypatch.setattr(view_cache, name, threading.Event())
    monkeypatch.setattr(view_cache, "IDLE_S", 0.3)
    monkeypatch.setattr(view_cache, "open_view", lambda path: f"view of {path}")
    monkeypatch.setattr(warm_up, "_started", threading.Event())
    monkeypatch.setattr(warm_up, "_until", {})
    monkeypatch.setattr(warm_up, "_pages", [])
    monkeypatch.setattr(warm_up, "done", [])
    steps: list[str] = []
    done = {k: threading.Event() for k in ("first", "kernels", "figures", "torch")}

    def step(name: str) -> Any:
        def run(*args: Any) -> None:
            steps.append(name)
            done[name].set()

        return run

    return {"steps": steps, "done": done, "step": step}


def _start(fresh: dict[str, Any], **steps: Any) -> None:
    step = fresh["step"]
    order = [(name, steps.get(name, step(name))) for name in ("kernels", "figures", "torch")]
    view_cache.prefetch(["ckpt"], step("first"), lambda view: order, wait_s=WAIT_S)


def test_an_idle_server_warms_everything_without_a_page(fresh: dict[str, Any]) -> None:
    _start(fresh)
    assert fresh["done"]["first"].wait(WAIT_S / 2)
    assert not fresh["done"]["kernels"].wait(1.0)  # not listening yet: a page may come first
    view_cache.listening()
    assert fresh["done"]["torch"].wait(WAIT_S / 2)
    assert fresh["steps"] == ["first", "kernels", "figures", "torch"]


def test_a_page_asked_for_early_is_drawn_before_any_step(fresh: dict[str, Any]) -> None:
    view_cache.listening()
    view_cache.page_asked()
    _start(fresh)
    done = fresh["done"]
    assert done["first"].wait(WAIT_S / 2)
    assert not done["kernels"].wait(1.0)  # the page is not drawn: the warm-up waits
    view_cache.page_loaded()
    # before: the imports waited for a Weight map to be shown (or 20 s), so a first Compare
    # asked for sooner paid them
    assert done["torch"].wait(WAIT_S / 2)
    assert fresh["steps"] == ["first", "kernels", "figures", "torch"]


def test_the_warm_up_waits_while_a_job_runs(fresh: dict[str, Any]) -> None:
    """A job started during a step (a click on Compare): the next step waits for its end."""
    release, started = threading.Event(), threading.Event()
    jobs: list[Job] = []

    def kernels() -> None:
        fresh["steps"].append("kernels")

        def work(_cancel: threading.Event) -> None:
            started.set()
            release.wait(WAIT_S)

        jobs.append(Job(work, lambda _: fresh["steps"].append("job done"), print).start())

    view_cache.listening()
    view_cache.page_asked()
    _start(fresh, kernels=kernels)
    view_cache.page_loaded()
    assert started.wait(WAIT_S / 2)
    assert not fresh["done"]["figures"].wait(1.0)  # the job runs: no step starts
    release.set()
    jobs[0].join(WAIT_S)
    assert fresh["done"]["torch"].wait(WAIT_S / 2)
    assert fresh["steps"] == ["first", "kernels", "job done", "figures", "torch"]
    assert warm_up.done == ["kernels", "figures", "torch"]


def test_the_warm_up_starts_once(fresh: dict[str, Any]) -> None:
    """A drawn page starts it when ``serve`` did not (``panel serve app.py``), never twice."""
    assert warm_up.start([("kernels", fresh["step"]("kernels"))])
    assert fresh["done"]["kernels"].wait(WAIT_S / 2)
    assert not warm_up.start([("torch", fresh["step"]("torch"))])
    assert not fresh["done"]["torch"].wait(0.5)


WARM = """
import json, sys
from ckpt_explorer.ui import layout, warm_up
warm_up.run(layout.warm_steps())
print(json.dumps({m: m in sys.modules for m in ("torch", "numba", "nbformat", "jsonschema")}))
print(json.dumps(warm_up.done))
"""


def test_the_warm_up_loads_kernels_and_torch_and_skips_the_notebook_renderers() -> None:
    out = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, check=True)
    loaded, steps = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    assert loaded == {
        "torch": True,
        "numba": True,
        "nbformat": False,  # before: plotly's FigureWidget import brought it (2 CPU s)
        "jsonschema": False,
    }
    first = steps[: steps.index("compare view")]  # what a first Compare needs, first
    assert first == ["numba", "numba kernels", *(f"plotly {k}" for k in FIGURE_KINDS)]
