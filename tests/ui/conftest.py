"""Fixtures of the dashboard tests: a root of real checkpoints, the served app, a browser."""

from __future__ import annotations

import json
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


@pytest.fixture(scope="session")
def ui_root(tmp_path_factory: pytest.TempPathFactory, real_checkpoints: Any) -> Path:
    """A root folder: the demo training state (resumed_from / after_resume, made by torch
    with a real training loop), an HF sharded GPT-2 (transformers save_pretrained) and a
    10,000-tensor sharded safetensors pair (big_a, big_b)."""
    from ckpt_explorer.demo import make_demo

    root = tmp_path_factory.mktemp("ui_root")
    make_demo(root / "demo")
    hf_dir, manifest = real_checkpoints("hf")
    shutil.copytree(hf_dir / manifest["cases"]["gpt2_sharded"]["path"], root / "hf_gpt2")
    write_sharded_safetensors(root / "big_a", perturb=False)
    write_sharded_safetensors(root / "big_b", perturb=True)
    (root / "outside_link").symlink_to("/etc")
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def served_app(ui_root: Path) -> Iterator[str]:
    """``panel serve app.py`` on 127.0.0.1 at a free port; yields the page URL.

    The demo's two states are opened (``CKPT_EXPLORER_PATH``) inside ``ui_root``. Only the
    process started here is stopped.
    """
    port = free_port()
    panel = Path(sys.executable).parent / "panel"
    env = {
        **os.environ,
        "CKPT_EXPLORER_ROOT": str(ui_root),
        "CKPT_EXPLORER_PATH": os.pathsep.join(
            [str(ui_root / "demo" / "resumed_from"), str(ui_root / "demo" / "after_resume")]
        ),
    }
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "panel-serve.log", "w")  # noqa: SIM115 - closed at teardown
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
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright (set up by scripts/setup_env.sh WITH_BROWSER=1)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (run scripts/setup_env.sh with WITH_BROWSER=1)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class ConsoleLog:
    """Errors the page reported: console errors, uncaught exceptions, failed requests."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))

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
