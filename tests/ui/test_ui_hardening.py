"""Hardening of the dashboard: hostile files, paths leaving the root, the bound address, and
two users at once. State-level tests drive AppState; browser tests drive a served app.

``CKPT_UI_CORPUS=all`` opens every corpus case in the browser (default: every third case).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, ConsoleLog, serve_app
from test_ui_browser import open_path, pick, tab, text, wait_text

from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.fit.written_by import view_clues
from ckpt_explorer.ui.components.overview import written_by_card
from ckpt_explorer.ui.paths import PathOutsideRootError, RootGuard
from ckpt_explorer.ui.state import AppState

pytestmark = pytest.mark.timeout(900)

GOOD = ("_good.safetensors", "_good.pt")
# Job turns an exception that is not the project's own into "Type: message (file.py:line)"
FOREIGN_ERROR = re.compile(r"\(\w+\.py:\d+\)$")


def _one_line(msg: str) -> bool:
    return bool(msg) and "\n" not in msg and "Traceback" not in msg


# ---- hostile files, state level --------------------------------------------------------------
def test_every_corpus_case_leaves_the_app_usable(corpus: tuple[Path, dict[str, Any]]) -> None:
    """Every case through open / tensor detail / fit / compare / validate: a one-line error of the
    project's own (never a foreign exception), the open checkpoint kept, the app usable."""
    root, cases = corpus
    app = AppState(root)
    b = app.browse
    assert b.open(GOOD[0])
    problems: list[str] = []
    for name, case in cases.items():
        rel, expected = case["path"], case["error"]
        opened = b.open(rel)
        if expected == "ok":
            if not opened:
                problems.append(f"{name}: refused: {b.error}")
            else:
                for which in ("weights", "dtypes", "files", "parts", "values"):
                    b.frame(which)
                index = b.module_index()
                assert index is not None
                for node in index.children(""):  # the tree's first two levels
                    index.children(node.filter)
        elif opened:  # lazily refused: loading a tensor must give the error
            errors = []
            for r in b.view.tensors:
                b.select(r.name, wait=True)
                errors.append(b.detail_error)
            if not any(errors) or not all(_one_line(e) for e in errors if e):
                problems.append(f"{name}: opened, tensor errors {errors}")
        elif not _one_line(b.error) or b.path not in GOOD:
            problems.append(f"{name}: error {b.error!r}, open path {b.path!r}")
        if FOREIGN_ERROR.search(b.error) or FOREIGN_ERROR.search(b.detail_error):
            problems.append(f"{name}: not the project's error: {b.error or b.detail_error}")
        if opened:  # the Layout view's fit report (and the Overview's writing layout)
            app.fit.run(b.view, wait=True)
            err = app.fit.error
            if FOREIGN_ERROR.search(err) or "\n" in err:
                problems.append(f"{name}: fit error {err!r}")
            written_by_card(view_clues(b.view))
        app.compare.param.update(a=rel, b=GOOD[0])
        app.compare.run(wait=True)
        err = app.compare.error
        if (expected != "ok" and not err) or FOREIGN_ERROR.search(err) or "\n" in err:
            problems.append(f"{name}: compare error {err!r}")
        app.validate.target = rel
        app.validate.run(wait=True)
        err = app.validate.error
        if FOREIGN_ERROR.search(err) or "\n" in err:
            problems.append(f"{name}: validate error {err!r}")
        # still usable: a good checkpoint opens and its tensor detail loads
        if not b.open(GOOD[len(problems) % 2]):
            problems.append(f"{name}: the good checkpoint no longer opens: {b.error}")
        b.select(b.view.tensors[0].name, wait=True)
        if b.detail is None or b.detail_error:
            problems.append(f"{name}: detail of a good tensor failed: {b.detail_error}")
    assert not (root / "PWNED").exists(), "a payload in the corpus was executed"
    assert not problems, "\n".join(problems)


def test_file_changed_after_opening_gives_an_error_in_the_page(tmp_path: Path) -> None:
    """A file truncated (and one rewritten) after it was opened: the tensor detail reports it
    in one line; the app opens the new file afterwards."""
    import torch
    from safetensors.torch import save_file

    save_file({f"t{i}": torch.randn(256, 256) for i in range(4)}, tmp_path / "m.safetensors")
    torch.save({"w": torch.randn(256, 256)}, tmp_path / "m.pt")
    app = AppState(tmp_path)
    b = app.browse
    for rel in ("m.safetensors", "m.pt"):
        assert b.open(rel), b.error
        last = b.view.tensors[-1].name
        with open(tmp_path / rel, "r+b") as f:
            f.truncate((tmp_path / rel).stat().st_size // 2)
        b.select(last, wait=True)
        assert b.detail is None and _one_line(b.detail_error), b.detail_error
        assert not FOREIGN_ERROR.search(b.detail_error), b.detail_error
    save_file({"x": torch.ones(3)}, tmp_path / "m.safetensors")  # rewritten in place
    assert b.open("m.safetensors") and [r.name for r in b.view.tensors] == ["x"]


# ---- hostile files, in the browser -----------------------------------------------------------
@pytest.fixture(scope="module")
def hostile_app(corpus: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    root, _ = corpus
    with serve_app(root, [root / GOOD[0]], log_name="panel-serve-hostile.log") as url:
        yield url


def _new_page(browser: Any, url: str) -> tuple[Any, Any, ConsoleLog]:
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    log = ConsoleLog(pg)
    pg.goto(url)
    pg.wait_for_selector("text=Why this is", timeout=120_000)
    return context, pg, log


# the Overview's charts drawn: its dtype ring (inline SVG) is on the page and every plotly
# figure on it (none unless a view added one) has finished its first draw
CHARTS_DRAWN = """(() => { const plots = []; let charts = 0; const walk = (n) => {
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) {
    if (c.classList && c.classList.contains('js-plotly-plot')) plots.push(c);
    if (c.classList && c.classList.contains('ck-chart')) charts += 1;
    walk(c); }
}; walk(document.body); return charts > 0 && plots.every((p) => p._fullLayout); })()"""


# an open dashboard bug (RELIABILITY.md, "Open issues"): ignored by name, nothing else is
KNOWN_RACE = "reading '_guiEditing'"


def _open_good(pg: Any, rel: str) -> None:
    """Open a good checkpoint and wait until its charts are drawn.

    Known race (RELIABILITY.md): a sidebar error appearing while plotly panes make their
    first draw makes plotly.js throw ("reading '_guiEditing'") in the page; it depends on
    click speed, not on the file. Waiting for the draw makes it rare, not impossible.
    """
    open_path(pg, rel)
    wait_text(pg, "t.includes('Open: ' + arg) && !t.includes('expected')", rel)
    pg.wait_for_function(CHARTS_DRAWN)


def _served(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status == 200 and b"bokeh" in r.read().lower()
    except OSError:
        return False


def test_dashboard_shows_corpus_errors_and_keeps_serving(
    browser: Any, hostile_app: str, corpus: tuple[Path, dict[str, Any]]
) -> None:
    """Corpus cases opened through the path picker: the page shows the error; after each bad
    case a good checkpoint opens in the same page, a second user's page opens another, and
    a new session is served. No console errors, no traceback in the server log."""
    root, cases = corpus
    picked = list(cases.items())
    if os.environ.get("CKPT_UI_CORPUS") != "all":
        picked = picked[::3]
    ctx1, p1, log1 = _new_page(browser, hostile_app)
    ctx2, p2, log2 = _new_page(browser, hostile_app)
    try:
        for i, (name, case) in enumerate(picked):
            rel = case["path"]
            open_path(p1, rel)
            body = text(p1)
            if case["error"] == "ok":
                assert f"Open: {rel}" in body, (name, body[:400])
            else:
                assert "expected" in body and f"Open: {rel}" not in body, (name, body[:400])
            _open_good(p1, GOOD[i % 2])
            _open_good(p2, GOOD[(i + 1) % 2])
            assert _served(hostile_app), f"no new session served after {name}"
        ctx3, _p3, log3 = _new_page(browser, hostile_app)  # a late user still gets the page
        ctx3.close()
    finally:
        ctx1.close()
        ctx2.close()
    errors = [e for e in log1.errors + log2.errors + log3.errors if KNOWN_RACE not in e]
    races = len(log1.errors + log2.errors + log3.errors) - len(errors)
    print(f"\n{len(picked)} cases; known plotly draw race seen {races} times")
    assert errors == [], errors
    assert not (root / "PWNED").exists()
    server_log = (REPO / "test-artifacts" / "panel-serve-hostile.log").read_text()
    ours = _without_closed_socket_writes(server_log)
    assert "Traceback" not in ours, ours[-3000:]


_CLOSED_WRITE = re.compile(
    r"Task exception was never retrieved\n(?:future: [^\n]*\n)?"
    r"(?:(?:Traceback \(most recent call last\):"
    r'|  File "[^"\n]*/tornado/[^\n]*'  # frames inside tornado only
    r"|    \S[^\n]*"  # their source lines
    r"|During handling of the above exception, another exception occurred:"
    r"|tornado\.iostream\.StreamClosedError: Stream is closed"
    r"|)\n)*?"
    r"tornado\.websocket\.WebSocketClosedError\n"
)


def _without_closed_socket_writes(log: str) -> str:
    """The server log without Tornado's own report of a write to a websocket the browser had
    closed (a page closed mid-update: "Task exception was never retrieved ...
    WebSocketClosedError", every frame inside tornado); any other traceback stays."""
    kept, n = _CLOSED_WRITE.subn("", log)
    if n:
        print(f"{n} write(s) to a closed websocket reported by tornado (upstream, not judged)")
    return kept


# ---- paths outside the root ------------------------------------------------------------------
@pytest.fixture
def guarded_root(tmp_path: Path) -> tuple[Path, Path]:
    """A root holding a real checkpoint, links out (to a folder, to a file, dangling),
    link loops and a link back to the root; a secret checkpoint outside it."""
    import torch
    from safetensors.torch import save_file

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    outside.mkdir()
    save_file({"w": torch.ones(2)}, root / "run" / "model.safetensors")
    save_file({"secret": torch.zeros(2)}, outside / "secret.safetensors")
    (root / "out_dir").symlink_to(outside)
    (root / "out_file.safetensors").symlink_to(outside / "secret.safetensors")
    (root / "run" / "up.safetensors").symlink_to("../../outside/secret.safetensors")
    (root / "dangling.safetensors").symlink_to(outside / "nothing.safetensors")
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    (root / "self.safetensors").symlink_to("self.safetensors")
    (root / "run" / "again").symlink_to("..")  # inside, but a cycle for a walker
    (root / "in_link.safetensors").symlink_to("run/model.safetensors")  # inside: allowed
    return root, outside


OUTSIDE_PATHS = [
    "..",
    "../outside/secret.safetensors",
    "run/../../outside/secret.safetensors",
    "./../outside",
    "run/again/../../outside",
    "out_dir",
    "out_dir/secret.safetensors",
    "out_file.safetensors",
    "run/up.safetensors",
]


def test_guard_refuses_dotdot_absolute_links_and_loops(guarded_root: tuple[Path, Path]) -> None:
    root, outside = guarded_root
    guard = RootGuard(root)
    absolute = [str(outside), str(outside / "secret.safetensors"), "/etc/passwd", "/"]
    absolute.append(f"{root}/../outside/secret.safetensors")
    absolute.append(f"{root}/out_dir/secret.safetensors")
    for bad in OUTSIDE_PATHS + absolute:
        with pytest.raises(PathOutsideRootError):
            guard.resolve(bad)
    for loop in ("loop_a", "loop_b", "self.safetensors", "dangling.safetensors"):
        with pytest.raises(CkptExplorerError):  # the project's error, not OSError/RuntimeError
            guard.resolve(loop)
    assert guard.resolve("in_link.safetensors") == (root / "run" / "model.safetensors")
    assert guard.resolve(str(root / "run")) == root / "run"
    assert guard.resolve("run/again/run/model.safetensors") == root / "run" / "model.safetensors"

    listed = guard.candidates()
    assert "run/model.safetensors" in listed and "in_link.safetensors" in listed
    for p in listed:
        assert not Path(p).is_absolute() and ".." not in Path(p).parts, p
        assert (root / p).resolve().is_relative_to(root), p
    assert not any(p.split("/")[0] in {"out_dir", "out_file.safetensors"} for p in listed)
    assert "run/up.safetensors" not in listed and "dangling.safetensors" not in listed
    assert not any("secret" in p for p in listed)
    assert len(listed) < 50  # the link back to the root does not blow up the listing


def test_app_never_reads_outside_the_root(guarded_root: tuple[Path, Path]) -> None:
    """Open, compare, validate, resume and convert refuse paths that leave the root; a
    conversion never writes outside it (not even through a dangling link)."""
    root, outside = guarded_root
    app = AppState(root)
    secret = str(outside / "secret.safetensors")
    for bad in [*OUTSIDE_PATHS, secret, "loop_a", "self.safetensors"]:
        assert not app.browse.open(bad), bad
        assert app.browse.error and "secret" not in str(app.browse.view and app.browse.view.tensors)
        app.compare.param.update(a="run/model.safetensors", b=bad)
        app.compare.run(wait=True)
        assert app.compare.error and app.compare.result is None, bad
        app.validate.target = bad
        app.validate.run(wait=True)
        assert app.validate.error, bad
        app.resume.param.update(a=bad, b="run/model.safetensors")
        app.resume.run(wait=True)
        assert app.resume.error, bad
        app.convert.param.update(source=bad, target="safetensors", destination="x.st")
        assert not app.convert.make_plan(), bad
    app.convert.param.update(source="run/model.safetensors", target="safetensors")
    for dest in ("../escape.safetensors", f"{outside}/escape.safetensors", "out_dir/e.st"):
        app.convert.destination = dest
        assert not app.convert.make_plan(), dest
    app.convert.destination = "dangling.safetensors"
    if app.convert.make_plan():
        app.convert.run(wait=True)
    assert not (outside / "nothing.safetensors").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.safetensors"]


def test_served_app_refuses_paths_outside_the_root_over_http(
    browser: Any, guarded_root: tuple[Path, Path]
) -> None:
    """The served page (it takes paths only from its pickers, none from the URL) shows the
    refusal for each outside path and never the secret; traversal URLs get no file."""
    root, outside = guarded_root
    with serve_app(root, [root / "run" / "model.safetensors"], "panel-serve-guard.log") as url:
        ctx, pg, log = _new_page(browser, url)
        try:
            for bad in ["../outside/secret.safetensors", "out_dir", "run/up.safetensors", "loop_a"]:
                open_path(pg, bad)
                assert "expected" in text(pg), bad
            for bad in [str(outside / "secret.safetensors"), "self.safetensors"]:
                open_path(pg, bad)
            assert "secret" not in text(pg).replace(str(outside / "secret.safetensors"), "")
            base = url.rsplit("/", 1)[0]
            for probe in (
                "/app?path=../outside/secret.safetensors",
                f"/app?path={outside}/secret.safetensors",
                "/static/../../../../etc/passwd",
                "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                "/%2e%2e/%2e%2e/etc/passwd",
                f"/static/{outside}/secret.safetensors",
            ):
                try:
                    with urllib.request.urlopen(base + probe, timeout=60) as r:
                        body = r.read()
                except urllib.error.HTTPError as e:
                    body = e.read()
                assert b"root:x:0:0" not in body and b"secret" not in body, probe
        finally:
            ctx.close()
        assert log.errors == [], log.errors


# ---- the bound address -----------------------------------------------------------------------
def _listening(pid: int) -> list[str]:
    """Local addresses ``ip:port`` of the TCP sockets ``pid`` listens on (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                hexip, hexport = cols[1].split(":")
                if table == "tcp":
                    ip = ".".join(str(b) for b in reversed(bytes.fromhex(hexip)))
                else:
                    ip = "v6:" + hexip
                out.append(f"{ip}:{int(hexport, 16)}")
    return out


def test_serve_binds_127_0_0_1_by_default(guarded_root: tuple[Path, Path]) -> None:
    """`ckpt-explorer serve` without --address: the process listens on 127.0.0.1 only."""
    import inspect

    from ckpt_explorer.ui.serve import serve

    assert inspect.signature(serve).parameters["address"].default == "127.0.0.1"
    root, _ = guarded_root
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_explorer", "serve", "run/model.safetensors",
         "--root", str(root), "--port", "0"],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"http://([\d.]+):(\d+)/", line)
        assert m, line
        assert m.group(1) == "127.0.0.1"
        assert _served(m.group(0)), "the URL was printed before the server answered"
        addrs = _listening(proc.pid)
        assert addrs and all(a.startswith("127.0.0.1:") for a in addrs), addrs
        assert f"127.0.0.1:{m.group(2)}" in addrs
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_on_a_port_in_use_is_one_error_line(guarded_root: tuple[Path, Path]) -> None:
    root, _ = guarded_root
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "ckpt_explorer", "serve", "--root", str(root),
             "--port", str(port)],
            cwd=root, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and f"port {port}" in line and "Traceback" not in line
    assert proc.stdout == ""


# ---- two users at once -----------------------------------------------------------------------
def _rows(result: Any) -> list[tuple[Any, ...]]:
    fields = ("name", "status", "numel", "max_abs", "mean_abs", "rel_l2", "cosine", "diff_l2")
    return [tuple(getattr(r, f) for f in fields) for r in result.tensors]


def test_two_sessions_compare_and_convert_concurrently(ui_root: Path, tmp_path: Path) -> None:
    """Two AppStates (two users) each run a compare and a conversion, all four at once. Each
    result equals a direct API call, neither sees the other's, and the diff engine's thread
    setting is restored for the process afterwards."""
    import torch
    from safetensors.torch import load_file, save_file

    from ckpt_explorer import open_checkpoint
    from ckpt_explorer.diff import diff_checkpoints

    threads_before = torch.get_num_threads()
    name = "gpt2_perturbed.safetensors"
    if not (ui_root / name).exists():
        src = open_checkpoint(ui_root / "hf_gpt2")
        sd = {r.name: src.load(r.name).clone() for r in src.tensors}
        first = sorted(sd)[0]
        sd[first] = sd[first] + 0.5
        save_file(sd, ui_root / name)
    u1, u2 = AppState(ui_root), AppState(ui_root)
    # opened first: opening a checkpoint makes it Convert's source (and drops a plan)
    assert u1.browse.open("demo/resumed_from") and u2.browse.open("hf_gpt2")
    u1.compare.param.update(a="demo/resumed_from", b="demo/after_resume")
    u2.compare.param.update(a="hf_gpt2", b=name)
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    u1.convert.param.update(source="hf_gpt2", target="safetensors", destination=f"u1-{tag}.st")
    u2.convert.param.update(source=name, target="bin", destination=f"u2-{tag}.bin")
    assert u1.convert.make_plan(), u1.convert.error
    assert u2.convert.make_plan(), u2.convert.error
    go = threading.Barrier(4)
    jobs = [u1.compare, u2.compare, u1.convert, u2.convert]
    starters = [threading.Thread(target=lambda j=j: (go.wait(), j.run())) for j in jobs]
    for s in starters:
        s.start()
    for s in starters:
        s.join()
    for j in jobs:
        j.wait(600)
        assert not j.running and j.error == "", j.error
    for u, (a, b) in ((u1, ("demo/resumed_from", "demo/after_resume")), (u2, ("hf_gpt2", name))):
        direct = diff_checkpoints(ui_root / a, ui_root / b)
        assert _rows(u.compare.result) == _rows(direct)
        assert u.compare.result.summary() == direct.summary()
    assert _rows(u1.compare.result) != _rows(u2.compare.result)
    assert u2.compare.result.summary()["changed"] == 1
    assert u1.convert.result.verified and u2.convert.result.verified
    got1 = load_file(ui_root / f"u1-{tag}.st")
    got2 = torch.load(ui_root / f"u2-{tag}.bin", weights_only=True)
    want1, want2 = open_checkpoint(ui_root / "hf_gpt2"), open_checkpoint(ui_root / name)
    assert set(got1) == {r.name for r in want1.tensors}
    assert all(torch.equal(got1[k], want1.load(k)) for k in got1)
    assert set(got2) == {r.name for r in want2.tensors}
    assert all(torch.equal(got2[k], want2.load(k)) for k in got2)
    assert (u1.browse.path, u2.browse.path) == ("demo/resumed_from", "hf_gpt2")
    assert u1.convert.destination != u2.convert.destination
    # the process is not left single-threaded (new threads start with the old setting)
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert torch.get_num_threads() == threads_before and seen == [threads_before]


def test_concurrent_diffs_restore_the_thread_setting(ui_root: Path) -> None:
    """Diff 1 starts, diff 2 starts, diff 1 ends, diff 2 ends (forced by on_row): the
    process keeps its intra-op thread count, and both results equal a lone run."""
    import torch

    from ckpt_explorer.diff import diff_checkpoints

    before = torch.get_num_threads()
    a, b = ui_root / "demo" / "resumed_from", ui_root / "demo" / "after_resume"
    lone = diff_checkpoints(a, b)
    in1, in2, out1 = threading.Event(), threading.Event(), threading.Event()
    results: dict[int, Any] = {}

    def first(_row: Any) -> None:
        if not in1.is_set():
            in1.set()
            in2.wait(120)

    def second(_row: Any) -> None:
        if not in2.is_set():
            in2.set()
            out1.wait(120)

    def run1() -> None:
        results[1] = diff_checkpoints(a, b, on_row=first)
        out1.set()

    def run2() -> None:
        in1.wait(120)
        results[2] = diff_checkpoints(a, b, on_row=second)

    ts = [threading.Thread(target=run1), threading.Thread(target=run2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert in1.is_set() and in2.is_set() and out1.is_set()
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert seen == [before] and torch.get_num_threads() == before
    assert _rows(results[1]) == _rows(lone) == _rows(results[2])


def test_two_browser_users_compare_and_convert_at_once(
    browser: Any, served_app: str, ui_root: Path
) -> None:
    """Two browser contexts on one server: user A compares the demo pair and converts, user B
    compares a checkpoint with itself and converts, at the same time; each page shows its own
    result only, and both outputs are correct."""
    import torch
    from safetensors import safe_open

    from ckpt_explorer import open_checkpoint

    ctxa, pa, loga = _new_page(browser, served_app)
    ctxb, pb, logb = _new_page(browser, served_app)
    outs = {}
    try:
        tab(pb, "Compare")
        pick(pb, 1, "hf_gpt2")
        pick(pb, 2, "hf_gpt2")
        for user, pg in (("a", pa), ("b", pb)):
            tab(pg, "Convert")
            outs[user] = f"two-users-{user}-{time.monotonic_ns()}"
            pg.get_by_placeholder("e.g. model-hf").fill(outs[user])
            pg.locator("input[type=checkbox]").first.check()  # the demo's model part only
            pg.get_by_role("button", name="Plan").click()
            pg.locator("text=Byte copy").first.wait_for()
        for pg in (pa, pb):  # start both compares, then both conversions
            tab(pg, "Compare")
            pg.get_by_role("button", name="Compare").click()
        for pg in (pa, pb):
            tab(pg, "Convert")
            pg.get_by_role("button", name="Run conversion").click()
        for pg in (pa, pb):
            pg.locator("text=Verified bit for bit").first.wait_for()
            tab(pg, "Compare")
            pg.locator("text=Verdict").first.wait_for()
        ta, tb = text(pa), text(pb)
        assert "DIFFERENT" in ta and "112" in ta
        near = tb[max(0, tb.find("Verdict") - 300) : tb.find("Verdict") + 300]
        assert "DIFFERENT" not in near and "EQUAL" in near, near
        assert outs["b"] not in ta and outs["a"] not in tb
        got = {}
        for user in ("a", "b"):
            with safe_open(str(ui_root / outs[user]), "pt") as f:
                got[user] = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        assert len(got["a"]) == 28 and got["a"].keys() == got["b"].keys()
        assert all(torch.equal(got["a"][k], got["b"][k]) for k in got["a"])
        model = open_checkpoint(ui_root / "demo" / "resumed_from")
        for k, v in got["a"].items():
            name = next(r.name for r in model.tensors if r.name.endswith("/" + k) or r.name == k)
            assert torch.equal(v, model.load(name)), k
    finally:
        ctxa.close()
        ctxb.close()
        for o in outs.values():
            p = ui_root / o
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    assert loga.errors == [] and logb.errors == [], loga.errors + logb.errors
