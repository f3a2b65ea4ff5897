"""The dashboard's state: what is open, selected and running. Parameters only, no widgets.

Components watch these parameters and call these methods; tests drive them without a browser.
Long work (tensor detail, optimizer statistics, the jobs in :mod:`.job_states`) runs in
background threads and writes its results back here.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import param

from ..errors import CkptExplorerError
from ..view import CheckpointView
from . import tables
from .fit_state import FitState
from .job_states import CompareState, ConvertState, JobState, ResumeState, ValidateState
from .jobs import Job
from .paths import RootGuard
from .remote_paths import RemoteAccess
from .tensor_stats import TensorDetail, tensor_detail
from .timeline_state import TimelineState
from .views import TABS


class BrowseState(param.Parameterized):
    """One open checkpoint: its view, its tables, the selected tensor and its detail."""

    path = param.String(default="", doc="the open checkpoint, relative to the root")
    view = param.Parameter(default=None, doc="the open CheckpointView")
    error = param.String(default="", doc="why the last open failed (one line)")
    opening = param.String(default="", doc="what is being opened in the background")
    name_filter = param.String(default="", doc="weight-map name filter (substring)")
    file_filter = param.String(default="", doc="weight-map file filter (substring)")
    name_prefix = param.Boolean(default=False, doc="name_filter matches from the start only")
    selected = param.String(default="", doc="tensor shown in the detail panel")
    detail = param.Parameter(default=None, doc="TensorDetail of `selected`")
    detail_loading = param.Boolean(default=False)
    detail_error = param.String(default="")
    opt_stats = param.DataFrame(default=None, allow_None=True, doc="per-parameter state stats")

    def __init__(self, guard: RootGuard, **params: Any) -> None:
        super().__init__(**params)
        self.guard = guard
        self.opt_stats_job = JobState()  # progress of the optimizer statistics job
        self._frames: dict[str, Any] = {}
        self._detail_gen = 0
        self._open_gen = 0
        self._lock = threading.Lock()

    # ---- opening ----------------------------------------------------------------------
    def open(self, text: str | Path, wait: bool = False) -> bool:
        """Open ``text`` (relative to the root, or absolute inside it); False on error.

        An allowed URL opens in the background (``opening`` says so; ``wait`` blocks): True
        once started, or with ``wait``, once open."""
        from ..api import open_checkpoint
        from ..remote.urls import is_url

        if is_url(str(text).strip()):
            return self._open_url(str(text).strip(), wait)
        with self._lock:
            self._open_gen += 1
        try:
            real = self.guard.resolve(text)
            view = open_checkpoint(real)
        except CkptExplorerError as e:
            self.param.update(error=e.one_line(), opening="")
            return False
        except OSError as e:
            self.param.update(
                error=f"{text}: could not read ({e.__class__.__name__}: {e.strerror or e})",
                opening="",
            )
            return False
        self._show(self.guard.relative(real), view)
        return True

    def _open_url(self, url: str, wait: bool) -> bool:
        from ..remote.urls import public
        from .remote_paths import mask

        with self._lock:
            self._open_gen += 1
            gen = self._open_gen
        try:
            url = self.guard.check_url(url)
        except CkptExplorerError as e:
            self.param.update(error=e.one_line(), opening="")
            return False
        shown = public(url)
        self.param.update(error="", opening=f"fetching the structure of {shown} …")

        def done(view: CheckpointView) -> None:
            if gen == self._open_gen:
                self._show(shown, view)

        def failed(msg: str) -> None:
            if gen == self._open_gen:
                self.param.update(error=mask(msg, url), opening="")

        job = Job(lambda _c: self.guard.remote.open(url), done, failed, "ckpt-explorer-open")
        job.start()
        if wait:
            job.join()
            return not self.error and self.path == shown
        return True

    def _show(self, path: str, view: CheckpointView) -> None:
        self._frames = {}
        self._detail_gen += 1
        self.param.update(
            path=path,
            view=view,
            error="",
            opening="",
            name_filter="",
            file_filter="",
            name_prefix=False,
            selected="",
            detail=None,
            detail_loading=False,
            detail_error="",
            opt_stats=None,
        )

    @param.depends("name_filter", "file_filter", "name_prefix", watch=True)
    def _filters_changed(self) -> None:
        """A new filter: the detail of a tensor chosen before is no longer in view."""
        if self.selected or self.detail is not None or self.detail_loading:
            with self._lock:
                self._detail_gen += 1
            self.param.update(selected="", detail=None, detail_loading=False, detail_error="")

    def filter_module(self, prefix: str) -> None:
        """Show the tensors under ``prefix`` only (a module-tree box): exact prefix match."""
        self.param.update(name_filter=prefix, name_prefix=True, file_filter="")

    def filter_text(self, name: str | None = None, file: str | None = None) -> None:
        """A typed filter: substring match."""
        upd: dict[str, Any] = {"name_prefix": False}
        if name is not None:
            upd["name_filter"] = name
        if file is not None:
            upd["file_filter"] = file
        self.param.update(**upd)

    def frame(self, which: str) -> Any:
        """A table of the open view, built once: ``weights``, ``dtypes``, ``files``, ``parts``,
        ``values``, ``tree``, ``groups``, ``opt_params`` (None where it does not apply)."""
        view: CheckpointView | None = self.view
        if view is None:
            return None
        if which not in self._frames:
            opt = tables.optimizer_of(view)
            builders = {
                "weights": lambda: tables.weight_map(view),
                "dtypes": lambda: tables.dtype_breakdown(view),
                "files": lambda: tables.files_frame(view),
                "parts": lambda: tables.parts_frame(view),
                "values": lambda: tables.values_frame(view),
                "tree": lambda: tables.module_tree(view),
                "groups": lambda: tables.param_groups_frame(opt[1]) if opt else None,
                "opt_params": lambda: (
                    tables.optimizer_params_frame(opt[1], opt[0]) if opt else None
                ),
            }
            self._frames[which] = builders[which]()
        return self._frames[which]

    # ---- tensor detail ------------------------------------------------------------------
    def select(self, name: str, wait: bool = False) -> None:
        """Show ``name`` in the detail panel; its values load in the background."""
        view: CheckpointView | None = self.view
        if view is None or not name or name not in view:
            return
        with self._lock:
            self._detail_gen += 1
            gen = self._detail_gen
        self.param.update(selected=name, detail=None, detail_loading=True, detail_error="")

        def work(_cancel: threading.Event) -> TensorDetail:
            return tensor_detail(name, view.load(name))

        def done(d: TensorDetail) -> None:
            if gen == self._detail_gen:
                self.param.update(detail=d, detail_loading=False)

        def failed(msg: str) -> None:
            if gen == self._detail_gen:
                self.param.update(detail_error=msg, detail_loading=False)

        job = Job(work, done, failed, name="ckpt-explorer-detail").start()
        if wait:
            job.join()

    def focus(self, tensor: str | None = None, file: str | None = None) -> bool:
        """Point the weight map at a tensor (and open its detail) or a file; False if unknown."""
        view: CheckpointView | None = self.view
        if view is None:
            return False
        if tensor:
            for cand in (tensor, *(f"{p}/{tensor}" for p in view.parts)):
                if cand in view:
                    self.param.update(name_filter=cand, file_filter="", name_prefix=True)
                    self.select(cand)
                    return True
        if file:
            known = {f.path for f in view.files}
            cands = [f for f in known if f == file or f.endswith("/" + file)]
            if cands:
                self.param.update(file_filter=cands[0], name_filter="", name_prefix=False)
                return True
        return False

    # ---- optimizer statistics -----------------------------------------------------------
    def compute_optimizer_stats(self, wait: bool = False) -> None:
        """Per parameter id: mean |x| and max |x| of each state tensor, scalar ``step``."""
        view: CheckpointView | None = self.view
        params = self.frame("opt_params")
        if view is None or params is None or self.opt_stats_job.running:
            return
        jobstate = self.opt_stats_job

        def work(cancel: threading.Event) -> Any:
            import pandas as pd

            from .tensor_stats import tensor_stats

            names = [r.name for r in view.tensors]
            rows = []
            total = len(params)
            for i, row in enumerate(params.itertuples(index=False)):
                if cancel.is_set():
                    break
                out: dict[str, Any] = {"id": row.id, "name": row.name}
                for full in (n for n in names if n.startswith(row.prefix)):
                    state = full[len(row.prefix) :]
                    t = view.load(full)
                    if t.numel() == 1:
                        out[state] = float(t.reshape(-1)[0])
                    else:
                        s = tensor_stats(t)
                        out[f"{state} mean|x|"] = float(s["mean_abs"])
                        out[f"{state} max|x|"] = float(max(abs(s["min"]), abs(s["max"])))
                        if s["nan"] or s["inf"]:
                            out[f"{state} nan/inf"] = s["nan"] + s["inf"]
                rows.append(out)
                jobstate.report((i + 1) / max(total, 1), f"{i + 1} of {total} parameters")
            return pd.DataFrame(rows)

        def done(df: Any) -> None:
            self.opt_stats = df
            jobstate.finish(f"{len(df)} parameters")

        jobstate.begin("reading optimizer state")
        job = Job(work, done, jobstate.fail, name="ckpt-explorer-optstats").start()
        jobstate.job = job
        if wait:
            job.join()


class AppState(param.Parameterized):
    """Everything one page (or one notebook output) shows."""

    active: str = param.Selector(  # type: ignore[assignment]
        default="Overview", objects=list(TABS), doc="the view in front"
    )

    def __init__(self, root: str | Path, remote: RemoteAccess | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.guard = RootGuard(root, remote)
        self.browse = BrowseState(self.guard)
        self.compare = CompareState(self.guard)
        self.validate = ValidateState(self.guard)
        self.resume = ResumeState(self.guard)
        self.convert = ConvertState(self.guard)
        self.fit = FitState()
        self.timeline = TimelineState(self.guard)
        self._candidates: list[str] | None = None
        self._unsafe: dict[str, str] = {}

    def candidates(self, refresh: bool = False) -> list[str]:
        """Paths offered by the pickers (listed once per page; ``refresh`` lists again)."""
        if self._candidates is None or refresh:
            self._candidates = self.guard.candidates()
            self._unsafe.clear()
        return self._candidates

    def unsafe_note(self, rel: str) -> str:
        """A warning when the path ``rel`` is, or holds, a file with a pickle that would run
        code ("" when none): judged from headers by ``scan`` (never unpickled), once per path."""
        rel = rel.strip().strip("/")
        if not rel:
            return ""
        if rel not in self._unsafe:
            from ..security import unsafe_paths

            try:
                path = self.guard.resolve(rel)
            except CkptExplorerError:
                return ""  # outside the root or missing: the picker's own error says so
            found = unsafe_paths(path) if path.exists() else set()
            files = sorted(p.relative_to(self.guard.root).as_posix() for p in found if p.is_file())
            note = ""
            if files:
                shown = ", ".join(files[:3]) + (
                    f" and {len(files) - 3} more" if len(files) > 3 else ""
                )
                note = (
                    f"⚠ unsafe or unverified: {shown} may run code if loaded with "
                    "torch.load(weights_only=False), pickle, numpy or joblib (ckpt_explorer "
                    "never runs it; scan says why)"
                )
            self._unsafe[rel] = note
        return self._unsafe[rel]

    def go(self, tab: str) -> None:
        self.active = tab

    def open_finding(self, row: dict[str, Any]) -> bool:
        """Follow a finding's link: its tensor or file in the weight map."""
        tensor, file = _present(row.get("tensor")), _present(row.get("file"))
        if self.browse.focus(tensor=tensor, file=file):
            self.active = "Weight map"
            return True
        pid = row.get("param_id")
        if isinstance(pid, int | float) and pid == pid:
            self.browse.param.update(
                name_filter=f"state.{int(pid)}.", file_filter="", name_prefix=False
            )
            self.active = "Weight map"
            return True
        return False


def _present(value: Any) -> str | None:
    """A finding's ``tensor`` or ``file`` cell; None when empty (None, NaN or "")."""
    return value if isinstance(value, str) and value else None
