"""State of the Timeline view: the run folder, the background build and the pair to compare.

A folder that holds several runs (sub-folders of checkpoints named by step, as TensorBoard's
log folder holds one folder per run) is built run by run: its scalars are overlaid, one line
per chosen run, and the heatmap, pairs and anomalies are those of the first chosen run.

The figures come from :func:`ckpt_explorer.timeline.build_timeline` (cached per file identity
in the default cache folder, so reopening a run reads no tensor); nothing is recomputed here.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import param

from ..contracts import Progress
from ..errors import Cancelled, CkptExplorerError
from ..natural import natural_key as natural_key  # re-exported for the view
from .job_states import JobState
from .jobs import Job, Throttle
from .numbers import plural
from .paths import RootGuard

# share of the progress bar per build stage (reading checkpoints, then consecutive pairs)
STAGES = {"open": (0.0, 0.4), "pair": (0.4, 1.0)}
STAGE_WORDS = {"open": "checkpoints read", "pair": "pairs compared", "values": "tensor passes"}


def default_run_dir(open_path: str) -> str:
    """The run folder of the checkpoint open in the app (relative to the root): its parent,
    or its grandparent when the open path is a file inside a checkpoint folder; "" if none."""
    from ..remote.urls import is_url
    from ..timeline.discover import name_step

    if not open_path or open_path == "." or is_url(open_path):
        return ""  # a remote checkpoint: the timeline reads local run folders only
    parent = Path(open_path).parent
    if parent.name and name_step(parent.name, True) is not None:
        parent = parent.parent  # run/checkpoint-6/model.safetensors -> run
    return parent.as_posix()


def _saves(folder: Path) -> int:
    """How many entries of ``folder`` are named as checkpoints by step (0 if unreadable)."""
    from ..timeline.discover import name_step

    try:
        return sum(1 for e in folder.iterdir() if name_step(e.name, e.is_dir()))
    except OSError:
        return 0


def run_beside(root: Path, run_dir: str) -> str:
    """``run_dir`` when it holds checkpoints named by step, else the one sub-folder of it
    that does (the demo: ``demo/resumed_from`` open -> ``demo/run``); ``run_dir`` if none."""
    here = root / run_dir
    if not run_dir or _saves(here) >= 2 or not here.is_dir():
        return run_dir
    found = [d for d in sorted(here.iterdir()) if d.is_dir() and _saves(d) >= 2]
    return (Path(run_dir) / found[0].name).as_posix() if len(found) == 1 else run_dir


def runs_in(folder: Path) -> list[str]:
    """The runs ``folder`` holds, in natural order: its sub-folders that hold checkpoints
    named by step, when it holds two or more of them and no checkpoint itself; else []."""
    try:
        if not folder.is_dir() or _saves(folder):
            return []
        found = [d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")]
    except OSError:
        return []
    found = [n for n in found if _saves(folder / n)]
    return sorted(found, key=natural_key) if len(found) >= 2 else []


class TimelineState(JobState):
    """A run folder's timeline, built in the background."""

    run_dir = param.String(default="", doc="the run folder, relative to the root")
    timeline = param.Parameter(default=None, doc="Timeline of the last build")
    pair = param.Integer(default=0, bounds=(0, None), doc="index of the pair to compare")
    built = param.String(default="", doc="the run folder of the timeline shown (or building)")
    want_pair = param.Integer(
        default=None, allow_None=True, doc="the pair to select once the build ends (a link's)"
    )
    lr_scale: str = param.Selector(  # type: ignore[assignment]
        default="linear", objects=["linear", "log"], doc="the learning-rate chart's y axis"
    )
    run_timelines = param.Dict(
        default={}, doc="run name -> Timeline, when the folder holds several runs; {} for one"
    )
    runs = param.List(default=[], item_type=str, doc="the runs overlaid (of run_timelines)")
    want_runs = param.List(
        default=None, allow_None=True, doc="the runs to overlay once the build ends (a link's)"
    )

    def __init__(self, guard: RootGuard, **params: Any) -> None:
        super().__init__(**params)
        self.guard = guard
        self._gen = 0
        self._lock = threading.Lock()
        self.param.watch(lambda *_: self._refocus(), "runs")

    @property
    def runs_found(self) -> list[str]:
        """The runs of the folder built, in natural order ([] for a single run)."""
        return list(self.run_timelines)

    def focus(self) -> str:
        """The run whose heatmap, pairs and anomalies are shown: the first run overlaid (the
        first run found when none is); "" for a single run."""
        chosen = [r for r in self.runs_found if r in self.runs]
        return (chosen or self.runs_found or [""])[0]

    def overlaid(self) -> dict[str, Any]:
        """Run name -> Timeline of the runs drawn on the scalar charts, in natural order:
        the chosen ones of several runs; for a single run, its name -> its timeline."""
        if self.run_timelines:
            return {r: t for r, t in self.run_timelines.items() if r in self.runs}
        t = self.timeline
        return {Path(t.run_dir).name: t} if t is not None else {}

    def _refocus(self) -> None:
        """Show the focus run's timeline after the choice of runs changed."""
        t = self.run_timelines.get(self.focus())
        if t is not None and t is not self.timeline:
            self.param.update(timeline=t, pair=_first_flagged_pair(t))

    def build(self, wait: bool = False, cache_dir: str | Path | None = None) -> None:
        """Build the timeline of ``run_dir`` (default cache folder unless ``cache_dir``)."""
        from ..timeline import build_timeline, default_cache_dir

        with self._lock:
            self._gen += 1
            gen = self._gen
        if self.job is not None and self.job.running:
            self.job.cancel()  # a newer build wins; the old one stops at its next checkpoint
        try:
            run = self.guard.resolve(self.run_dir)
        except CkptExplorerError as e:
            self.param.update(timeline=None, run_timelines={}, built="")
            self.fail(e.one_line())
            return
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        tick = Throttle(self._progress, 0.1)
        names = runs_in(run)

        def one(folder: Path, i: int, cancel: threading.Event) -> Any:
            def progress(e: Progress) -> None:
                tick(e, i, max(1, len(names)), force=e.done == e.total)

            return build_timeline(folder, cache_dir=cache, progress=progress, cancel=cancel)

        def work(cancel: threading.Event) -> Any:
            try:
                if names:
                    return {n: one(run / n, i, cancel) for i, n in enumerate(names)}
                return one(run, 0, cancel)
            except Cancelled:
                return None
            except OSError as e:
                raise CkptExplorerError(
                    self.run_dir,
                    "a readable run folder",
                    f"{e.__class__.__name__}: {e.strerror or e}",
                    "Check the folder's permissions.",
                ) from e

        def done(t: Any) -> None:
            if gen != self._gen:
                return
            if t is None:
                self.finish("cancelled")
                return
            several: dict[str, Any] = t if isinstance(t, dict) else {}
            wanted, self.want_runs = self.want_runs, None
            chosen = [r for r in several if wanted is None or r in wanted]
            if wanted and not chosen:
                chosen = list(several)  # a link's runs that are gone: every run
            if several:
                t = several[(chosen or list(several))[0]]
            want, self.want_pair = self.want_pair, None
            pair = want if want is not None and 0 <= want < len(t.pairs) else None
            self.param.update(
                run_timelines=several,
                runs=chosen,
                timeline=t,
                pair=_first_flagged_pair(t) if pair is None else pair,
            )
            line = summary_line(t)
            if several:
                line = f"{plural(len(several), 'run')}; {self.focus()}: {line}"
            self.finish(line)

        def failed(msg: str) -> None:
            if gen == self._gen:
                self.fail(msg)

        self.param.update(timeline=None, run_timelines={}, built=self.run_dir)
        self.begin(f"reading {self.run_dir}")
        self.job = Job(work, done, failed, name="ckpt-explorer-timeline").start()
        if wait:
            self.job.join()

    def _progress(self, e: Progress, run: int = 0, runs: int = 1) -> None:
        lo, hi = STAGES.get(e.stage, (0.0, 1.0))
        frac = lo + (hi - lo) * (e.done / e.total if e.total else 1.0)
        words = f"{e.done} of {e.total} {STAGE_WORDS.get(e.stage, e.stage)}"
        if runs > 1:
            words = f"run {run + 1} of {runs}: {words}"
        self.report((run + frac) / runs, words)

    def relative(self, path: str) -> str:
        """A checkpoint path of the timeline as the pickers take it (relative to the root)."""
        try:
            return self.guard.relative(path)
        except ValueError:
            return path

    def pair_paths(self, index: int) -> tuple[str, str]:
        """(A, B) of the timeline's pair ``index``, relative to the root.

        Raises:
            CkptExplorerError: no timeline, or no such pair.
        """
        t = self.timeline
        n = len(t.pairs) if t is not None else 0
        if not 0 <= index < n:
            raise CkptExplorerError(
                self.run_dir or None, f"a pair index in 0..{n - 1}", str(index), "Build first."
            )
        p = t.pairs[index]
        return self.relative(_openable(t, p.path_a)), self.relative(_openable(t, p.path_b))


def _openable(t: Any, path: str) -> str:
    """A path Compare can open: a checkpoint saved as one file per part is compared by its
    model file (its path joins the part files' names with ``+``)."""
    summary = next((c for c in t.checkpoints if c.path == path), None)
    if summary is None or not summary.files:
        return path
    model = next((f for f, role in summary.files.items() if role.startswith("model")), None)
    chosen = model or next(iter(summary.files))
    return str(Path(path).parent / chosen)


def summary_line(t: Any) -> str:
    """``6 checkpoints, 5 pairs, 3 anomalies (2 errors); 6 summaries from the cache``."""
    from ..timeline.result import Timeline

    assert isinstance(t, Timeline)
    n_err = sum(a.severity == "error" for a in t.anomalies)
    unread = sum(c.error is not None for c in t.checkpoints)
    parts = [
        plural(len(t.checkpoints), "checkpoint"),
        plural(len(t.pairs), "pair"),
        plural(len(t.anomalies), "anomaly", "anomalies")
        + (f" ({plural(n_err, 'error')})" if n_err else ""),
    ]
    if unread:
        parts.append(f"{unread} unreadable")
    cached = t.stats.get("cached", 0)
    cache = f"; {plural(cached, 'summary', 'summaries')} from the cache" if cached else ""
    return ", ".join(parts) + cache


def _first_flagged_pair(t: Any) -> int:
    """The pair ending where the first error (else any) anomaly starts; 0 when none."""
    for severity in ("error", "warning", "info"):
        for a in t.anomalies:
            if a.severity != severity or a.step is None:
                continue
            for i, p in enumerate(t.pairs):
                if p.step_b == a.step:
                    return i
    return 0
