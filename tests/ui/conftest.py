"""Fixtures of the dashboard tests: a root of real checkpoints, the served app, a browser."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BIG_LAYERS, BIG_PER_LAYER = 100, 100  # 10,000 tensors


def write_sharded_safetensors(folder: Path, perturb: bool) -> None:
    """An HF-style sharded safetensors folder of 10,000 tensors (100 shards), real writer."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    weight_map: dict[str, str] = {}
    total = 0
    for layer in range(BIG_LAYERS):
        shard = f"model-{layer + 1:05d}-of-{BIG_LAYERS:05d}.safetensors"
        tensors = {}
        for j in range(BIG_PER_LAYER):
            name = f"model.layers.{layer}.block{j // 4}.w{j % 4}.weight"
            t = torch.randn(32, 64, generator=gen)
            if perturb and (layer * BIG_PER_LAYER + j) % 7 == 0:
                t = t + 1e-3 * (layer + 1)
            tensors[name] = t
            weight_map[name] = shard
            total += t.numel() * 4
        save_file(tensors, str(folder / shard), metadata={"format": "pt"})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


MANY = 30_000  # tensors of many_a / many_b: a diff long enough to watch and cancel
BIG_TENSOR = 24 * 2**20  # elements of big_tensor's one tensor: its detail starts from a sample


def write_many_tensors(path: Path, shift: float) -> None:
    """One safetensors file of :data:`MANY` tiny tensors (per-tensor work makes a diff long)."""
    import torch
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True)
    base = torch.arange(16, dtype=torch.float32)
    save_file({f"blocks.{i}.w": base + shift * (i % 3) for i in range(MANY)}, str(path))


def write_big_tensor(path: Path) -> None:
    """One float32 tensor of :data:`BIG_TENSOR` elements with known values (0, 1, ... mod 997)."""
    import torch
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True)
    t = (torch.arange(BIG_TENSOR, dtype=torch.int64) % 997).to(torch.float32).reshape(-1, 4096)
    save_file({"huge.weight": t, "small.bias": torch.zeros(8)}, str(path))


PLANTED = {"eps": 1e-08, "lr": 5e-07, "weight_decay": 0.0, "max_norm": 1.5e12, "odd": math.nan}


def write_planted_optimizer(path: Path) -> None:
    """A real AdamW state (torch.save) with planted values: param-group fields ``PLANTED``
    and every ``exp_avg_sq`` filled with 5e-07, the numbers the page must show as they are."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=PLANTED["lr"], eps=PLANTED["eps"])
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    for g in sd["param_groups"]:
        g.update(weight_decay=0.0, max_norm=PLANTED["max_norm"], odd=PLANTED["odd"])
    for st in sd["state"].values():
        st["exp_avg_sq"].fill_(5e-07)
    path.parent.mkdir(parents=True)
    torch.save(sd, path)


@pytest.fixture(scope="session")
def ui_root(tmp_path_factory: pytest.TempPathFactory, real_checkpoints: Any) -> Path:
    """A root folder: the demo (resumed_from / after_resume and a short run/step-N, made by
    torch with a real training loop), an HF sharded GPT-2 (transformers save_pretrained), an
    optimizer with planted values (planted/optim.pt), a 10,000-tensor sharded safetensors
    pair (big_a, big_b), a 30,000-tensor pair (many_a, many_b) and a file holding one
    tensor of 24M elements (big_tensor)."""
    from ckpt_explorer.demo import make_demo

    root = tmp_path_factory.mktemp("ui_root")
    make_demo(root / "demo")
    hf_dir, manifest = real_checkpoints("hf")
    shutil.copytree(hf_dir / manifest["cases"]["gpt2_sharded"]["path"], root / "hf_gpt2")
    write_planted_optimizer(root / "planted" / "optim.pt")
    write_sharded_safetensors(root / "big_a", perturb=False)
    write_sharded_safetensors(root / "big_b", perturb=True)
    write_many_tensors(root / "many_a" / "model.safetensors", 0.0)
    write_many_tensors(root / "many_b" / "model.safetensors", 0.5)
    write_big_tensor(root / "big_tensor" / "model.safetensors")
    (root / "outside_link").symlink_to("/etc")
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_app(root: Path, paths: list[Path], log_name: str = "panel-serve.log") -> Iterator[str]:
    """``panel serve app.py`` on 127.0.0.1 at a free port, rooted at ``root`` with ``paths``
    open; yields the page URL. The server's output goes to ``test-artifacts/<log_name>``.
    Only the process started here is stopped."""
    port = free_port()
    panel = Path(sys.executable).parent / "panel"
    env = {
        **os.environ,
        "CKPT_EXPLORER_ROOT": str(root),
        "CKPT_EXPLORER_PATH": os.pathsep.join(str(p) for p in paths),
    }
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")  # noqa: SIM115 - closed at teardown
    cmd = [str(panel), "serve", "app.py", "--address", "127.0.0.1", "--port", str(port)]
    cmd += ["--allow-websocket-origin", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/app"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"panel serve exited with {proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(url, timeout=60) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("panel serve did not answer within 180 s")
                time.sleep(0.5)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def served_app(ui_root: Path) -> Iterator[str]:
    """The app served over ``ui_root``, the demo's two states opened (``CKPT_EXPLORER_PATH``)."""
    demo = ui_root / "demo"
    with serve_app(ui_root, [demo / "resumed_from", demo / "after_resume"]) as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright (set up by scripts/setup_env.sh WITH_BROWSER=1)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (run scripts/setup_env.sh with WITH_BROWSER=1)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


# Panel 1.9.4's Plotly view (panel/models/plotly.ts) can call Plotly.react on a figure whose
# first Plotly.newPlot has not resolved yet (a `_render_count` bump arriving within the first
# draw, seen on this loaded 2-core machine when a diff finishes behind a hidden tab); plotly.js
# then throws this and the figure is drawn by the pending newPlot anyway. It is kept apart,
# counted and printed, instead of failing the test; every other page error still fails it.
UPSTREAM_PLOTLY_RACE = "reading '_guiEditing'"


class ConsoleLog:
    """Errors the page reported: console errors, uncaught exceptions, failed requests."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.upstream_races = 0
        page.on("console", self._console)
        page.on("pageerror", self._page_error)
        page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))

    def _page_error(self, error: Any) -> None:
        if UPSTREAM_PLOTLY_RACE in str(error):
            self.upstream_races += 1
            print(f"known upstream plotly race in the page ({self.upstream_races})")
            return
        self.errors.append(f"page error: {error}")

    def _console(self, msg: Any) -> None:
        if msg.type == "error":
            self.errors.append(f"console: {msg.text}")


@pytest.fixture
def page(browser: Any, served_app: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh page on the app (its own server session); no console errors allowed."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    log = ConsoleLog(pg)
    pg.goto(served_app)
    pg.wait_for_selector("text=Why this is", timeout=120_000)
    yield pg
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"ui-{request.node.name}-end.png"))
    context.close()
    assert log.errors == [], "the page reported errors:\n" + "\n".join(log.errors)
