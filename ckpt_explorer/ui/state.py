"""The dashboard's state: what is open, selected and running. Parameters only, no widgets.

Components watch these parameters and call these methods; tests drive them without a browser.
Long work (tensor detail, optimizer statistics, the jobs in :mod:`.job_states`) runs in
background threads and writes its results back here.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import param

from ..errors import CkptExplorerError
from ..view import CheckpointView
from . import tables
from .distribution_state import DistributionState
from .fit_state import FitState
from .job_states import CompareState, ConvertState, JobState, ResumeState, ValidateState
from .jobs import Job, Throttle
from .module_index import ModuleIndex
from .owner_thread import mailbox
from .paths import RootGuard
from .remote_paths import RemoteAccess
from .tabs import TABS
from .tensor_stats import Cancelled, TensorDetail, tensor_detail, tensor_stats
from .timeline_state import TimelineState
from .view_cache import memo
from .weight_filter import WeightFilter

DETAILS_KEPT = 24  # tensor details kept per checkpoint (a click back shows one at once)
_details_lock = threading.Lock()


def frame_of(view: CheckpointView, which: str) -> Any:
    """The table ``which`` of ``view`` (see :meth:`BrowseState.frame`), built once."""

    def build() -> Any:
        opt = tables.optimizer_of(view)
        builders = {
            "weights": lambda: tables.weight_map(view),
            "dtypes": lambda: tables.dtype_breakdown(view),
            "files": lambda: tables.files_frame(view),
            "parts": lambda: tables.parts_frame(view),
            "values": lambda: tables.values_frame(view),
            "groups": lambda: tables.param_groups_frame(opt[1]) if opt else None,
            "opt_params": lambda: tables.optimizer_params_frame(opt[1], opt[0]) if opt else None,
        }
        return builders[which]()

    return memo(view, f"frame:{which}", build)


def module_index_of(view: CheckpointView) -> ModuleIndex:
    return memo(view, "module_index", lambda: ModuleIndex(frame_of(view, "weights")))


def weight_filter_of(view: CheckpointView) -> WeightFilter:
    def build() -> WeightFilter:
        index = module_index_of(view)
        return WeightFilter(frame_of(view, "weights"), index.rows)

    return memo(view, "weight_filter", build)


def details_of(view: CheckpointView) -> OrderedDict[str, TensorDetail]:
    """Tensor details of ``view`` computed so far (exact ones only), most recent last."""
    return memo(view, "details", OrderedDict)


def remember_detail(view: CheckpointView, detail: TensorDetail) -> None:
    kept = details_of(view)
    with _details_lock:
        kept[detail.name] = detail
        kept.move_to_end(detail.name)
        while len(kept) > DETAILS_KEPT:
            kept.popitem(last=False)


def warm(view: CheckpointView) -> None:
    """Build the tables the Overview of ``view`` shows (a server does it before anyone asks)."""
    for which in ("dtypes", "files", "parts", "values"):
        frame_of(view, which)


def warm_weight_map(view: CheckpointView) -> None:
    """Build what the Weight map of ``view`` shows: the table, its filter, the tree's root."""
    frame_of(view, "weights")
    weight_filter_of(view)
    module_index_of(view).children("")


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
    detail_progress = param.Number(
        default=1.0, bounds=(0, 1), doc="share of a large tensor read for its exact statistics"
    )
    opt_stats = param.DataFrame(default=None, allow_None=True, doc="per-parameter state stats")

    def __init__(self, guard: RootGuard, **params: Any) -> None:
        super().__init__(**params)
        self.guard = guard
        self.opt_stats_job = JobState()  # progress of the optimizer statistics job
        self._detail_job: Job | None = None
        self._detail_gen = 0
        self._stats_gen = 0  # the optimizer statistics of an earlier view are dropped
        self._open_gen = 0
        self._lock = threading.Lock()

    # ---- opening ----------------------------------------------------------------------
    def open(self, text: str | Path, wait: bool = False) -> bool:
        """Open ``text`` (relative to the root, or absolute inside it); False on error.

        An allowed URL opens in the background (``opening`` says so; ``wait`` blocks): True
        once started, or with ``wait``, once open."""
        from ..remote.urls import is_url
        from .view_cache import open_view

        if is_url(str(text).strip()):
            return self._open_url(str(text).strip(), wait)
        with self._lock:
            self._open_gen += 1
        try:
            real = self.guard.resolve(text)
            view = open_view(real)
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
        self._stop_detail()
        self._stop_stats()
        # keyword fields of the browse state: alike in shape with a profile's keywords only
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
            detail_progress=1.0,
            opt_stats=None,
        )

    def _stop_stats(self) -> None:
        """Another view opens: the optimizer statistics being read are of the one before."""
        with self._lock:
            self._stats_gen += 1
        job = self.opt_stats_job
        if job.running and job.job is not None:
            job.job.cancel()
            job.param.update(running=False, progress=0.0, message="", error="")

    def _stop_detail(self) -> None:
        """The detail shown or loading is stale: its job stops and its results are dropped."""
        with self._lock:
            self._detail_gen += 1
            job, self._detail_job = self._detail_job, None
        if job is not None:
            job.cancel()

    @param.depends("name_filter", "file_filter", "name_prefix", watch=True)
    def _filters_changed(self) -> None:
        """A new filter: the detail of a tensor chosen before is no longer in view (unless
        the filter is that tensor's own name, as :meth:`focus` sets it)."""
        if self.selected and self.name_prefix and self.name_filter == self.selected:
            return
        if self.selected or self.detail is not None or self.detail_loading:
            self._stop_detail()
            self.param.update(
                selected="", detail=None, detail_loading=False, detail_error="", detail_progress=1.0
            )

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
        """A table of the open view, built once per view (shared by the pages showing it):
        ``weights``, ``dtypes``, ``files``, ``parts``, ``values``, ``groups``, ``opt_params``
        (None where it does not apply)."""
        view: CheckpointView | None = self.view
        if view is None:
            return None
        return frame_of(view, which)

    def weight_filter(self) -> WeightFilter | None:
        """The open view's weight-map filter (precomputed columns, kept queries)."""
        view: CheckpointView | None = self.view
        return None if view is None else weight_filter_of(view)

    def module_index(self) -> ModuleIndex | None:
        """The open view's module tree, opened level by level."""
        view: CheckpointView | None = self.view
        return None if view is None else module_index_of(view)

    # ---- tensor detail ------------------------------------------------------------------
    def select(self, name: str, wait: bool = False) -> None:
        """Show ``name`` in the detail panel; its values load in the background. A large
        tensor shows figures of a sample first, then exact statistics as they are read
        (``detail_progress``); a detail seen before comes back at once."""
        view: CheckpointView | None = self.view
        if view is None or not name or name not in view:
            return
        self._stop_detail()
        with self._lock:
            gen = self._detail_gen
        with _details_lock:
            seen = details_of(view).get(name)
        if seen is not None:
            self.param.update(
                selected=name,
                detail=seen,
                detail_loading=False,
                detail_error="",
                detail_progress=1.0,
            )
            return
        self.param.update(
            selected=name, detail=None, detail_loading=True, detail_error="", detail_progress=0.0
        )

        def current() -> bool:
            return gen == self._detail_gen

        def quick(first: TensorDetail) -> None:
            if current():
                self.param.update(detail=first, detail_loading=False)

        box = mailbox()  # the quick detail reaches the page on this thread

        def work(cancel: threading.Event) -> TensorDetail | None:
            t = view.load(name)
            first = tensor_detail(name, t, quick=True)
            if first.exact:
                return first
            box.call(quick, first)

            def read(done: int, total: int) -> None:
                if current():
                    self.report_detail(done / total if total else 1.0)

            tick = Throttle(read, 0.2)
            try:
                stats = tensor_stats(t, progress=tick, cancel=cancel)
            except Cancelled:
                return None
            return first.with_exact(stats)

        def done(d: TensorDetail | None) -> None:
            if d is None:
                return
            remember_detail(view, d)
            if current():
                self.param.update(detail=d, detail_loading=False, detail_progress=1.0)

        def failed(msg: str) -> None:
            if current():
                self.param.update(detail_error=msg, detail_loading=False, detail_progress=1.0)

        job = Job(work, done, failed, name="ckpt-explorer-detail")
        with self._lock:
            self._detail_job = job
        job.start()
        if wait:
            job.join()

    def report_detail(self, fraction: float) -> None:
        self.detail_progress = min(max(fraction, 0.0), 1.0)

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
        with self._lock:
            gen = self._stats_gen

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
                if gen == self._stats_gen:
                    jobstate.report((i + 1) / max(total, 1), f"{i + 1} of {total} parameters")
            return pd.DataFrame(rows)

        def done(df: Any) -> None:
            if gen == self._stats_gen:  # else: of a checkpoint no longer open
                self.opt_stats = df
                jobstate.finish(f"{len(df)} parameters")

        def failed(msg: str) -> None:
            if gen == self._stats_gen:
                jobstate.fail(msg)

        jobstate.begin(f"reading the optimizer state of {self.path}")
        job = Job(work, done, failed, name="ckpt-explorer-optstats").start()
        jobstate.job = job
        if wait:
            job.join()


class AppState(param.Parameterized):
    """Everything one page (or one notebook output) shows."""

    active: str = param.Selector(  # type: ignore[assignment]
        default="Overview", objects=list(TABS), doc="the view in front"
    )
    paths = param.List(default=[], item_type=str, doc="paths the pickers offer")
    sorts = param.Dict(default={}, doc="tab -> the sorters of its main table (Tabulator's)")

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
        self.steps = DistributionState(self.timeline)  # one tensor over the timeline's steps
        self._listed = 0.0
        self._unsafe: dict[str, str] = {}
        self._paths_lock = threading.Lock()
        self.browse.param.watch(self._follow_open, "path")
        for obj, names in (
            (self.browse, ["path"]),
            (self.compare, ["a", "b"]),
            (self.resume, ["a", "b"]),
            (self.convert, ["source"]),
            (self.timeline, ["run_dir"]),
        ):
            obj.param.watch(self._remember_events, names)
        self.convert.param.watch(self._offer_written, "result")

    def _follow_open(self, event: Any) -> None:
        """A checkpoint opened (sidebar, link, notebook) becomes what the views that act on one
        checkpoint act on: Convert's source, Validate's target and the doctor's A (unless it
        is the doctor's B: then the pair stays). A job running keeps its own; a view shows
        when what it acts on is not the open checkpoint."""
        path = event.new
        if not path:
            return
        if not self.convert.running:
            self.convert.source = path
        if not self.validate.running:
            self.validate.target = path
        if not self.resume.running and path != self.resume.b:
            self.resume.a = path

    def candidates(self, refresh: bool = False) -> list[str]:
        """Paths offered by the pickers (listed once per page; ``refresh`` lists again)."""
        if not self._listed or refresh:
            self.refresh_paths(0)
        return list(self.paths)

    def _offer_written(self, event: Any) -> None:
        """A conversion's output is offered among the paths as soon as it is written."""
        if event.new is not None:
            self.refresh_paths(0)

    def refresh_paths(self, at_most_every: float = 2.0) -> None:
        """List the root again (not more often than ``at_most_every`` seconds), keeping the
        paths remembered since: a folder written after the page opened is then offered."""
        now = time.monotonic()
        with self._paths_lock:
            if self._listed and now - self._listed < at_most_every:
                return
            self._listed = now
        listed = self.guard.candidates()
        known = set(listed)
        kept = [p for p in self.paths if p not in known and self._exists(p)]
        fresh = listed + kept
        if fresh != self.paths:
            self.paths = fresh
            self._unsafe.clear()

    def _remember_events(self, *events: Any) -> None:
        for e in events:
            self.remember(e.new)

    def remember(self, text: str) -> None:
        """Offer ``text`` in every picker when it names an existing path under the root
        (a path opened or typed once is a suggestion from then on)."""
        rel = str(text or "").strip().rstrip("/")
        if not rel or rel in self.paths or not self._exists(rel):
            return
        self.paths = [*self.paths, rel]

    def _exists(self, rel: str) -> bool:
        from ..remote.urls import is_url

        if is_url(rel):
            return False
        try:
            self.guard.resolve(rel)
        except CkptExplorerError:
            return False
        return True

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
                    f"⚠ unsafe, code or unverified: {shown} may run code if loaded with "
                    "torch.load(weights_only=False), pickle, numpy or joblib, imported or run "
                    "with trust_remote_code (ckpt_explorer never runs it; scan says why)"
                )
            self._unsafe[rel] = note
        return self._unsafe[rel]

    def go(self, tab: str) -> None:
        self.active = tab

    def open_finding(self, row: dict[str, Any]) -> bool:
        """Follow a finding's link: its tensor, the weight map's rows of its file or state
        id, or the Overview's values; False with ``validate.note`` saying why when it leads
        nowhere (:func:`~.finding_links.finding_link`)."""
        from .finding_links import finding_link

        b = self.browse
        self.validate.note = ""
        tensor = _present(row.get("tensor"))
        if tensor and b.focus(tensor=tensor):
            self.active = "Weight map"
            return True
        weights = b.frame("weights")
        values = b.frame("values")
        link = finding_link(
            row,
            set() if weights is None else set(weights["name"]),
            set() if weights is None else set(weights["file"]),
            [] if values is None else list(values["key"]),
        )
        if link.opens == "file":
            b.param.update(file_filter=link.target, name_filter="", name_prefix=False)
        elif link.opens == "param":
            b.param.update(name_filter=link.target, file_filter="", name_prefix=False)
        elif link.opens == "values":
            self.validate.note = link.why
            self.active = "Overview"
            return True
        else:
            self.validate.note = link.why
            return False
        self.active = "Weight map"
        return True


def _present(value: Any) -> str | None:
    """A finding's ``tensor`` or ``file`` cell; None when empty (None, NaN or "")."""
    return value if isinstance(value, str) and value else None
