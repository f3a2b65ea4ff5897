"""The page: a sidebar with the path picker, the views as tabs; served or in a notebook."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import panel as pn

from ..remote.urls import is_url
from .components.click_keeper import ClickKeeper
from .components.common import ACCENT, error_pane, skip_notebook_renderers
from .components.module_tree import ModuleTree  # noqa: F401  (see below)
from .components.picker import PathPicker
from .components.tabulator_guard import TabulatorGuard
from .notebook import EXTENSIONS, prepare
from .remote_paths import RemoteAccess
from .state import AppState
from .tabs import TAB_CLASSES, TABS, tab_class
from .url_state import bind_url
from .warm_up import Step

# Every custom model (a JSComponent) is defined when this module is imported, before any page
# is drawn: Panel describes a class to a page only through the documents drawn after it was
# defined, or when it is first defined inside that page's session. The Weight map's tree,
# defined by serve's idle warm-up thread after a page was drawn, reached that page unknown
# ("could not resolve type 'ModuleTree1'") when its tab was opened.

PAGE_CSS = """
#main {background: #f5f6fa;}
.bk-panel-models-layout-Column {font-family: Inter, "Segoe UI", Helvetica, Arial, sans-serif;}
"""


def load_extensions(notebook: bool = False) -> None:
    """Load Panel's JS extensions; in a notebook inline, so output renders offline, and
    with every view's custom models defined first (:func:`.notebook.prepare`)."""
    if notebook:
        prepare()
    else:
        pn.extension(*EXTENSIONS)


def make_state(
    paths: Sequence[str | Path] = (),
    root: str | Path | None = None,
    remote: RemoteAccess | None = None,
) -> AppState:
    """An AppState rooted at ``root`` (default: the first path's folder, else the cwd), with
    the first of ``paths`` open and A/B set from the first two; ``remote``: the URLs it may
    read (none by default)."""
    local = [p for p in paths if not is_url(str(p))]
    if root is None:
        if not local:
            root = Path.cwd()
        else:
            common = Path(os.path.commonpath([Path(p).resolve() for p in local]))
            root = common.parent if len(local) == 1 or not common.is_dir() else common
    state = AppState(root, remote)
    rel = [_relative(state, p) for p in paths]
    if rel:
        # opening it makes it Convert's source, Validate's target and the doctor's A
        state.browse.open(rel[0], wait=True)
        state.compare.a = rel[0]
        state.resume.a = state.resume.a or rel[0]
    if len(rel) > 1:
        state.compare.b = state.resume.b = rel[1]
    return state


def _relative(state: AppState, p: str | Path) -> str:
    """``p`` as the pickers show it (relative to the root). A relative path means what it
    means to Python (from the working directory) when it exists there, as ``serve`` reads
    it; otherwise it is taken as relative to the root."""
    if is_url(str(p)):
        return str(p).strip()
    path = Path(p)
    if not path.is_absolute() and path.exists():
        path = path.resolve()
    if path.is_absolute():
        try:
            return state.guard.relative(path)
        except ValueError:
            return str(path)  # refused (with its message) when opened
    return str(path)


def sidebar(state: AppState) -> list[Any]:
    """The picker, the error line and a few facts about the open checkpoint (after the
    Tabulator guard, which must come before any table)."""
    b = state.browse

    def open_held(path: str) -> None:
        with pn.io.hold():  # one batch of model updates for every view
            b.open(path)

    state.candidates()  # the root listed once for every picker of the page
    picker = PathPicker(
        state,
        "Checkpoint",
        on_pick=open_held,
        warn=state.unsafe_note,
        urls=state.guard.remote.prefixes,
        busy=(b, "opening"),
    )
    picker.value = b.path
    b.param.watch(lambda e: setattr(picker, "value", e.new), "path")
    root = pn.pane.Markdown(f"Root: `{state.guard.root}`", styles={"color": "#6b7280"})
    err = pn.bind(lambda e: error_pane(e) if e else None, b.param.error)

    def facts(path: str, view: Any) -> Any:
        if view is None:
            return pn.pane.Markdown("*Nothing open yet.*")
        return pn.pane.Markdown(
            f"**Open:** `{path}`  \n{view.family} · {view.kind}  \n"
            f"{len(view.tensors):,} tensors · {len(view.files)} files"
        )

    return [
        TabulatorGuard(),
        ClickKeeper(),
        picker,
        root,
        err,
        pn.bind(facts, b.param.path, b.param.view),
    ]


def body(state: AppState) -> pn.Tabs:
    """The views as tabs, kept in step with ``state.active`` both ways. A view is built the
    first time its tab is shown, so a page starts with the one in front (a view then reads
    the state as it is, and follows it from there)."""
    slots = [pn.Column(sizing_mode="stretch_width", name=name) for name, _ in TAB_CLASSES]

    def build(index: int) -> None:
        if not len(slots[index]):
            slots[index][:] = [tab_class(TAB_CLASSES[index][1])(app=state)]

    tabs = pn.Tabs(
        *((name, slot) for (name, _), slot in zip(TAB_CLASSES, slots, strict=True)),
        dynamic=False,
        sizing_mode="stretch_width",
        margin=(0, 4),
    )
    build(TABS.index(state.active))
    tabs.active = TABS.index(state.active)

    def shown(e: Any) -> None:
        build(e.new)
        state.active = TABS[e.new]

    def follow(e: Any) -> None:
        build(TABS.index(e.new))
        tabs.active = TABS.index(e.new)

    tabs.param.watch(shown, "active")
    state.param.watch(follow, "active")
    return tabs


def embedded(state: AppState) -> pn.viewable.Viewable:
    """The page without a template (for notebooks): picker on top, the views below."""
    return pn.Column(
        pn.pane.HTML(
            f"<div style='font-size:18px;font-weight:700;color:{ACCENT}'>ckpt_explorer</div>"
        ),
        pn.Row(*sidebar(state)[:4], sizing_mode="stretch_width"),
        body(state),
        sizing_mode="stretch_width",
        min_height=600,
    )


def warm_steps() -> list[Step]:
    """What a served page's first clicks would load, as :mod:`.warm_up` steps, the first
    Compare's first: numba (its import, then its kernels: about 0.8 s each), plotly's
    figures one kind per step (notebook renderers off), the Compare view's modules; then
    torch (a tensor's values are torch tensors) and every other view's module. Steps are
    small because a click arriving during one shares the interpreter with it until it ends."""
    import importlib

    def numba() -> None:
        import numba  # noqa: F401  (alone: the kernels' step is shorter)

    def kernels() -> None:
        from ..diff import kernel

        kernel.warm_up()

    def figure(kind: str) -> Callable[[], None]:
        def build() -> None:
            from .components.common import warm_figure

            skip_notebook_renderers()  # served pages only: no nbformat behind FigureWidget
            warm_figure(kind)

        return build

    def modules(*names: str) -> Callable[[], None]:
        def load() -> None:
            for name in names:
                importlib.import_module(f"{__package__}.components.{name}")

        return load

    def torch() -> None:
        import torch  # noqa: F401  (imported here so the first detail does not wait for it)

    from .components.common import FIGURE_KINDS

    views = [spec.partition(":")[0] for _, spec in TAB_CLASSES]
    return [
        ("numba", numba),
        ("numba kernels", kernels),
        *((f"plotly {kind}", figure(kind)) for kind in FIGURE_KINDS),
        ("compare view", modules("ab_view", "compare", "export_compare")),
        ("torch", torch),
        ("views", modules(*views)),
    ]


def page_up() -> None:
    """A page is drawn: it no longer holds back the warm-up, which starts now when nothing
    started it (``panel serve app.py``)."""
    from .view_cache import page_loaded
    from .warm_up import start

    page_loaded()
    start(warm_steps())


def create_app(
    paths: Sequence[str | Path] = (),
    root: str | Path | None = None,
    notebook: bool = False,
    remote: RemoteAccess | None = None,
) -> pn.template.BaseTemplate:
    """The served dashboard: ``create_app(paths=["run/step-6000"], root="run").servable()``."""
    load_extensions(notebook)
    state = make_state(paths, root, remote)
    # Bootstrap: every resource is served by Panel itself (the Fast design asks Google Fonts).
    template = pn.template.BootstrapTemplate(
        title="ckpt_explorer",
        sidebar=sidebar(state),
        main=[body(state)],
        header_background=ACCENT,
        sidebar_width=290,
        raw_css=[PAGE_CSS],
    )
    template.state = state  # type: ignore[attr-defined]  # for tests and notebooks
    if not notebook:
        bind_url(state)  # the address holds the view: a link reopens it
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            from .server_log import quiet_closed_sockets

            quiet_closed_sockets()  # a closed tab: no traceback in the server's log
            skip_notebook_renderers()  # the first chart does not import nbformat
            pn.state.onload(page_up)
    return template
