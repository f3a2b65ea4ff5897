"""Remote checkpoints in the dashboard, over a real HTTP server with Range support on
127.0.0.1 (never the internet): a URL opens in the background when its prefix is allowed,
is refused (before any request) when not, and a failing server gives one line in the page."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.cli import build_parser, main
from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.ui.remote_paths import RemoteAccess, RemoteRefusedError
from ckpt_explorer.ui.state import AppState

sys.path.insert(0, str(Path(__file__).parents[1]))
from remote_servers import RangeServer

pytest.importorskip("aiohttp")


@pytest.fixture
def served(tmp_path: Path, real_checkpoints: Any) -> Iterator[tuple[RangeServer, Path]]:
    """``run/hf_gpt2`` and ``run2/hf_gpt2``: the HF sharded GPT-2 (save_pretrained), served."""
    hf_dir, manifest = real_checkpoints("hf")
    root = tmp_path / "served"
    for run in ("run", "run2"):
        shutil.copytree(hf_dir / manifest["cases"]["gpt2_sharded"]["path"], root / run / "hf_gpt2")
    server = RangeServer(root)
    yield server, root
    server.close()


def test_an_allowed_url_opens_like_the_local_folder(
    served: tuple[RangeServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from ckpt_explorer.io import store_file
    from ckpt_explorer.remote import store

    monkeypatch.setattr(store, "HEAD", 16)  # read the tiny fixture the way large ones are
    monkeypatch.setattr(store, "TAIL", 16)
    monkeypatch.setattr(store, "MERGE_GAP", 0)
    monkeypatch.setattr(store_file, "BUFFER", 512)

    server, root = served
    url = f"{server.url}/run/hf_gpt2"
    app = AppState(root, RemoteAccess([f"{server.url}/run"]))
    local = AppState(root)
    assert local.browse.open("run/hf_gpt2"), local.browse.error
    seen: list[str] = []
    app.browse.param.watch(lambda e: seen.append(e.new), "opening")
    assert app.browse.open(url, wait=True), app.browse.error
    b = app.browse
    assert seen[0].startswith("fetching the structure of ") and b.opening == ""
    assert b.path == url and b.error == ""
    assert b.view.family == local.browse.view.family
    assert b.frame("weights").equals(local.browse.frame("weights"))  # the Overview's tables
    assert b.frame("dtypes").equals(local.browse.frame("dtypes"))
    listed = server.bytes_sent
    assert listed < sum(p.stat().st_size for p in (root / "run/hf_gpt2").iterdir())
    name = b.frame("weights")["name"].iloc[-1]
    b.select(name, wait=True)
    local.browse.select(name, wait=True)
    assert b.detail_error == "" and server.bytes_sent > listed  # fetched on demand
    assert torch.equal(b.view.load(name), local.browse.view.load(name))
    assert b.detail.stats == local.browse.detail.stats

    app.compare.param.update(a="run/hf_gpt2", b=url)  # Compare's second path: a URL
    app.compare.run(wait=True)
    assert app.compare.error == "" and app.compare.result.summary()["equal"], app.compare.error
    for state, target in ((app.validate, url), (local.validate, "run/hf_gpt2")):
        state.target = target
        state.run(wait=True)
        assert state.error == "" and state.findings is not None, state.error
    # the same findings, but for the loader table's, which needs the whole local folder
    remote_rules = list(app.validate.findings["rule"])
    local_rules = [r for r in local.validate.findings["rule"] if not r.startswith("loadable.")]
    assert remote_rules == local_rules

    # the served checkpoint is rewritten (same names and sizes): a new open sees the new bytes
    from safetensors.torch import load_file, save_file

    shard = root / "run/hf_gpt2" / b.view.tensors[-1].file
    changed = {k: v + 1 for k, v in load_file(str(shard)).items()}
    save_file(changed, str(shard), metadata={"format": "pt"})
    assert app.browse.open(url, wait=True), app.browse.error
    last = b.view.tensors[-1].name
    assert torch.equal(b.view.load(last), changed[last])


def test_urls_outside_the_prefixes_are_refused_before_any_request(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    off = AppState(root)
    assert not off.browse.open(f"{server.url}/run/hf_gpt2")
    assert "--allow-remote" in off.browse.error and off.browse.view is None
    app = AppState(root, RemoteAccess([f"{server.url}/run"]))
    for bad in (
        f"{server.url}/run2/hf_gpt2",  # a sibling sharing the prefix's characters
        f"{server.url}/run/../run2/hf_gpt2",
        f"{server.url}/run/%2e%2e/run2/hf_gpt2",
        f"{server.url.rsplit(':', 1)[0]}:1/run/hf_gpt2",  # another port
        f"{server.url.replace('127.0.0.1', 'localhost')}/run/hf_gpt2",
    ):
        assert not app.browse.open(bad), bad
        assert "expected a URL" in app.browse.error or "'..'" in app.browse.error, bad
        assert "\n" not in app.browse.error
        app.compare.param.update(a="run/hf_gpt2", b=bad)
        app.compare.run(wait=True)
        assert app.compare.error and app.compare.result is None, bad
        app.validate.target = bad
        app.validate.run(wait=True)
        assert app.validate.error, bad
    app.convert.param.update(source=f"{server.url}/run2/hf_gpt2", destination="out")
    assert not app.convert.make_plan() and "outside" in app.convert.error
    assert server.requests == 0
    assert app.browse.view is None and app.compare.result is None


def test_prefixes_compare_whole_segments() -> None:
    access = RemoteAccess(["s3://bucket/run", "hf://org/model", "https://host/ckpt/"])
    yes = ["s3://bucket/run", "s3://bucket/run/step-6", "s3a://bucket/run/x", "s3://bucket/run/"]
    yes += ["hf://org/model@v1/step-6", "https://host:443/ckpt/a", "https://u:p@host/ckpt/a"]
    no = ["s3://bucket/run2", "s3://bucket-evil/run", "s3://bucket/ru", "s3://bucket//run"]
    no += ["gs://bucket/run", "s3://bucket", "hf://org/model2", "http://host/ckpt/a"]
    no += ["https://host/ckpt2", "https://host:8443/ckpt/a", "https://host/ckpt/../x", "/etc"]
    assert [u for u in yes if not access.allowed(u)] == []
    assert [u for u in no if access.allowed(u)] == []
    assert RemoteAccess(["hf://org/model@v1"]).allowed("hf://org/model@v2/x") is False
    with pytest.raises(RemoteRefusedError, match="host or bucket"):
        RemoteAccess(["s3://"])


def test_a_failing_server_gives_one_line_and_the_app_keeps_running(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    app = AppState(root, RemoteAccess([f"{server.url}/run"]))
    b = app.browse
    index = "run/hf_gpt2/model.safetensors.index.json"
    cases = {"403": "access refused", "404": "404"}
    for fault, words in cases.items():
        server.faults[index] = fault
        assert not b.open(f"{server.url}/{index}", wait=True)
        assert words in b.error and "\n" not in b.error and b.opening == "", b.error
        assert b.view is None
    server.faults.clear()
    secret = "hunter2-secret"
    assert not b.open(f"{server.url}/run/nothing?token={secret}", wait=True)
    assert "404" in b.error and secret not in b.error, b.error
    user = server.url.replace("http://", f"http://me:{secret}@")
    assert not b.open(f"{user}/run/nothing", wait=True)
    assert b.error and secret not in b.error, b.error
    assert b.open(f"{server.url}/run/hf_gpt2", wait=True), b.error  # still serving
    assert b.open("run/hf_gpt2") and b.path == "run/hf_gpt2"


def test_timeline_reads_local_run_folders_only(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    app = AppState(root, RemoteAccess([server.url]))
    app.timeline.run_dir = f"{server.url}/run"
    app.timeline.build(wait=True, cache_dir=root / ".cache")
    assert "local paths only" in app.timeline.error and server.requests == 0


def test_serve_allow_remote_arguments(
    served: tuple[RangeServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, _ = served
    argv = ["serve", "s3://b/run/step-1", "--allow-remote", "s3://b/run", "--allow-remote"]
    argv += ["hf://org/m", "--cache", "fetched", "--storage-option", "anon=true"]
    args = build_parser().parse_args(argv)
    assert args.serve_paths == ["s3://b/run/step-1"]
    assert args.allow_remote == ["s3://b/run", "hf://org/m"]
    assert args.remote_cache == "fetched" and args.storage_option == ["anon=true"]
    assert build_parser().parse_args(["serve"]).allow_remote == []
    # refused before the server starts (no port is taken, nothing is fetched)
    url = f"{server.url}/run2/hf_gpt2"
    assert main(["serve", "--port", "0", url]) != 0
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["serve", "--port", "0", "--allow-remote", f"{server.url}/run", url]) != 0
    assert "outside" in capsys.readouterr().err and server.requests == 0
    with pytest.raises(CkptExplorerError, match="host or bucket"):
        from ckpt_explorer.ui.serve import serve

        serve(allow_remote=["https://"])


def test_the_page_opens_and_refuses_urls_in_a_browser(
    served: tuple[RangeServer, Path], browser: Any
) -> None:
    """``serve --allow-remote``: the sidebar picker opens an allowed URL (its format shown) and
    shows a refused one as one line; no console error."""
    from conftest import ConsoleLog
    from test_ui_browser import text, wait_text

    from ckpt_explorer.ui.serve import serve

    server, root = served
    app, page_url = serve(root=root, port=0, allow_remote=[f"{server.url}/run"])
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(90_000)
        log = ConsoleLog(page)
        page.goto(page_url)
        box = page.get_by_placeholder("or a URL under").first

        def pick(value: str) -> None:
            box.fill(value)
            box.press("End")  # a key up: the completion menu filters out (fill sends none)
            box.press("Enter")
            page.get_by_role("button", name="Open").first.click()

        pick(f"{server.url}/run2/hf_gpt2")
        wait_text(page, "t.includes('a URL outside them')")
        url = f"{server.url}/run/hf_gpt2"
        pick(url)
        wait_text(page, "t.includes('Open: ' + arg)", url)
        assert "hf-sharded" in text(page) and "outside them" not in text(page)
        assert log.errors == [], log.errors
    finally:
        context.close()
        app.stop()
