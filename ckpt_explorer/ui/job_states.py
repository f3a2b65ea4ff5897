"""State of the long-running views: compare, validate, resume doctor, convert.

Each runs its engine in a background :class:`~.jobs.Job` with the engines' contract
(:mod:`ckpt_explorer.contracts`: :class:`~ckpt_explorer.contracts.Progress` events in, the
job's cancel event passed on, a report out) and publishes
``running``/``progress``/``message``/``error`` and its result as parameters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import param

from ..contracts import Progress
from ..convert import ConversionCancelled, plan_conversion, run_conversion
from ..convert.plan_types import ConversionPlan
from ..convert.targets import target, target_names
from ..diff import DiffResult, TensorDiff, diff_checkpoints
from ..errors import CkptExplorerError
from ..io.location import Location
from ..resume import DoctorReport, resume_doctor
from ..validate import ValidationReport, validate_checkpoint
from .jobs import Job, Throttle
from .numbers import fmt_bytes
from .owner_thread import mailbox
from .paths import RootGuard


class JobState(param.Parameterized):
    """Progress of one background job (a fresh run replaces the previous one)."""

    running = param.Boolean(default=False)
    progress = param.Number(default=0.0, bounds=(0, 1), doc="fraction done")
    message = param.String(default="")
    error = param.String(default="")
    log = param.List(default=[], item_type=str, doc="lines the job reported")
    seconds = param.Number(default=0.0, doc="wall time of the last run")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.job: Job | None = None
        self._t0 = 0.0
        self._box = mailbox()  # a job's reports reach the page on the thread that made this

    def begin(self, message: str) -> None:
        self._t0 = time.perf_counter()
        self.param.update(running=True, progress=0.0, message=message, error="", log=[])

    def report(self, fraction: float, message: str | None = None) -> None:
        self._box.call(self._report, fraction, message)

    def _report(self, fraction: float, message: str | None) -> None:
        upd: dict[str, Any] = {"progress": min(max(float(fraction), 0.0), 1.0)}
        if message is not None:
            upd["message"] = message
        self.param.update(**upd)

    def add_log(self, line: str) -> None:
        self._box.call(self._add_log, line)

    def _add_log(self, line: str) -> None:
        self.log = [*self.log[-499:], line]

    def finish(self, message: str) -> None:
        self.param.update(
            running=False, progress=1.0, message=message, seconds=time.perf_counter() - self._t0
        )

    def fail(self, error: str) -> None:
        self.param.update(running=False, error=error, message="failed")

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.message = "cancelling..."

    def wait(self, timeout: float | None = None) -> None:
        if self.job is not None:
            self.job.join(timeout)

    def _later(self, guard: RootGuard, *texts: str) -> list[Callable[[], Path | Location]] | None:
        """``guard.later`` of each of ``texts`` (a URL is fetched in the job); None while the job
        runs already, or (the job failed) where one is refused."""
        if self.running:
            return None
        try:
            return [guard.later(t) for t in texts]
        except CkptExplorerError as e:
            self.fail(e.one_line())
            return None

    def _start(self, work: Any, done: Any, wait: bool, name: str) -> None:
        self.job = Job(work, done, self.fail, name=name).start()
        if wait:
            self.job.join()


class CompareState(JobState):
    """Two checkpoints diffed tensor by tensor."""

    a = param.String(default="", doc="A, relative to the root")
    b = param.String(default="", doc="B, relative to the root")
    atol = param.Number(default=0.0, bounds=(0, None))
    rtol = param.Number(default=0.0, bounds=(0, None))
    result = param.Parameter(default=None, doc="DiffResult of the last run")
    partial = param.List(default=[], doc="rows so far, while the diff runs (when streamed)")
    selected = param.String(default="", doc="the tensor shown side by side (A's name)")
    ab = param.Parameter(default=None, doc="ABDetail of `selected`")
    ab_loading = param.Boolean(default=False)
    ab_error = param.String(default="")
    changed_only = param.Boolean(default=True, doc="the table shows changed tensors only")
    ran = param.Tuple(default=("", "", 0.0, 0.0), length=4, doc="(A, B, atol, rtol) of the run")
    want = param.String(default="", doc="the tensor to show A/B once the run ends (a link's)")

    def __init__(self, guard: RootGuard, **params: Any) -> None:
        super().__init__(**params)
        self.guard = guard
        self._ab_gen = 0
        self._ab_lock = threading.Lock()

    def shown(self) -> bool:
        """Whether the result shown is of the form as it is (A, B and the tolerances)."""
        return (self.result is not None or self.running) and self.ran == (
            self.a,
            self.b,
            self.atol,
            self.rtol,
        )

    def _show_wanted(self, result: DiffResult) -> None:
        """A link's tensor, once the run it asked for ends: shown A/B when both sides hold it."""
        want, self.want = self.want, ""
        row = next((t for t in result.tensors if t.name == want), None)
        if row is not None and row.status not in ("only_in_a", "only_in_b"):
            self.select(want, row.name_b or "")

    def select(
        self, name: str, name_b: str = "", wait: bool = False, keep_wanted: bool = False
    ) -> None:
        """Show A's ``name`` against B's ``name_b`` (default the same name) side by side;
        both are read in the background."""
        from ..api import open_checkpoint
        from .ab_detail import ab_detail

        with self._ab_lock:
            self._ab_gen += 1
            gen = self._ab_gen
        upd: dict[str, Any] = {} if keep_wanted else {"want": ""}
        self.param.update(selected=name, ab=None, ab_loading=bool(name), ab_error="", **upd)
        if not name:
            return
        a_path, b_path, other = self.a, self.b, name_b or name

        def work(_cancel: threading.Event) -> Any:
            va = open_checkpoint(self.guard.resolve(a_path))
            vb = open_checkpoint(self.guard.resolve(b_path))
            for side, view, n in (("A", va, name), ("B", vb, other)):
                if n not in view:
                    raise CkptExplorerError(
                        f"{a_path if side == 'A' else b_path}", f"a tensor {n!r}", "none"
                    )
            return ab_detail(name, va.load(name), vb.load(other), other)

        def done(d: Any) -> None:
            if gen == self._ab_gen:
                self.param.update(ab=d, ab_loading=False)

        def failed(msg: str) -> None:
            if gen == self._ab_gen:
                self.param.update(ab_error=msg, ab_loading=False)

        job = Job(work, done, failed, name="ckpt-explorer-ab").start()
        if wait:
            job.join()

    def run(self, wait: bool = False) -> None:
        """Diff A against B in the background (``wait`` blocks until it ends)."""
        sides = self._later(self.guard, self.a, self.b)
        if sides is None:
            return
        a, b = sides
        rows: list[TensorDiff] = []
        push_rows = Throttle(lambda: setattr(self, "partial", list(rows)), 0.3)
        tick = Throttle(
            lambda e: self.report(
                e.fraction, f"{fmt_bytes(e.done)} of {fmt_bytes(e.total)} compared"
            ),
            0.1,
        )

        def on_row(row: TensorDiff) -> None:
            rows.append(row)
            push_rows()

        def work(cancel: threading.Event) -> DiffResult:
            return diff_checkpoints(
                a(), b(), atol=self.atol, rtol=self.rtol, progress=tick, cancel=cancel,
                on_row=on_row,
            )  # fmt: skip

        def done(result: DiffResult) -> None:
            s = result.summary()
            self.param.update(result=result, partial=[])
            self._show_wanted(result)
            verdict = "equal" if s["equal"] else f"{s['changed']} changed"
            if s["cancelled"]:
                self.finish(
                    f"cancelled: partial result — {s['compared']:,} of {s['tensors']:,} "
                    f"tensors compared, {verdict}"
                )
            else:
                self.finish(f"done — {s['tensors']} tensors, {verdict}")

        self.param.update(result=None, partial=[], ran=(self.a, self.b, self.atol, self.rtol))
        self.select("", keep_wanted=True)  # a new run: the pair shown before is stale
        self.begin(f"comparing {self.a} with {self.b}")
        self._start(work, done, wait, "ckpt-explorer-diff")


class ValidateState(JobState):
    """Findings of the validation rules on one checkpoint."""

    target = param.String(default="", doc="the checkpoint the next run validates")
    checked = param.String(default="", doc="the checkpoint the findings shown are of")
    report_obj = param.Parameter(default=None, doc="the engine's report")
    findings = param.DataFrame(default=None, allow_None=True)
    note = param.String(default="", doc="where the finding clicked led, or why nowhere")

    def __init__(self, guard: RootGuard, **params: Any) -> None:
        super().__init__(**params)
        self.guard = guard

    def run(self, wait: bool = False) -> None:
        later = self._later(self.guard, self.target)
        if later is None:
            return
        (path,) = later
        tick = Throttle(lambda e: self.report(e.fraction), 0.1)

        def work(cancel: threading.Event) -> ValidationReport:
            return validate_checkpoint(path(), progress=tick)

        def done(report: ValidationReport) -> None:
            df = report.to_frame()
            self.param.update(report_obj=report, findings=df)
            self.finish(f"{len(df)} finding(s)")

        self.param.update(findings=None, report_obj=None, checked=self.target)
        self.begin(f"validating {self.target}")
        self._start(work, done, wait, "ckpt-explorer-validate")


class ResumeState(JobState):
    """The resume doctor: a training state and the one resumed from it, causes ranked."""

    a = param.String(default="", doc="the state training resumed from")
    b = param.String(default="", doc="a state from after the resume (or a reference run)")
    report_obj = param.Parameter(default=None)
    causes = param.List(default=[], doc="ranked causes as dicts")
    examined = param.Tuple(default=("", ""), length=2, doc="(A, B) the causes shown are of")

    def __init__(self, guard: RootGuard, **params: Any) -> None:
        super().__init__(**params)
        self.guard = guard

    def run(self, wait: bool = False) -> None:
        sides = self._later(self.guard, self.a, self.b)
        if sides is None:
            return
        a, b = sides
        tick = Throttle(lambda e: self.report(e.fraction), 0.1)

        def work(cancel: threading.Event) -> DoctorReport:
            return resume_doctor(a(), b(), progress=tick)

        def done(report: DoctorReport) -> None:
            causes = [c.to_dict() for c in report.causes]
            self.param.update(report_obj=report, causes=causes)
            self.finish(f"{len(causes)} likely cause(s)")

        self.param.update(report_obj=None, causes=[], examined=(self.a, self.b))
        self.begin(f"examining {self.a} → {self.b}")
        self._start(work, done, wait, "ckpt-explorer-resume")


# the engine's errors name its CLI flags; the page names its own controls instead
CONTROL_WORDS = (
    ("--model-only", "the “Model weights only” box"),
    ("--max-shard-size N", "a “Max shard size”"),
    ("--max-shard-size", "“Max shard size”"),
    ("--dtype", "“Cast to”"),
    ("--to ", "“Convert to” "),
    ("--to", "“Convert to”"),
    ("--overwrite", "a new output path"),
    ("Pass ", "Tick "),
)
CAST_CHECK_LIMIT = 2 * 2**30  # cast bytes up to which the difference to the original is read


def control_words(message: str) -> str:
    """An engine message in the page's words: ``Pass --model-only`` -> ``Tick the “Model
    weights only” box``."""
    for flag, words in CONTROL_WORDS:
        if flag == "Pass " and "“Model weights only”" not in message:
            continue
        message = message.replace(flag, words)
    return message


def cast_difference(plan: ConversionPlan) -> float | None:
    """Max |cast − original| over the plan's cast tensors (float64), None when nothing was
    cast or there is too much to read again."""
    cast = [t for t in plan.tensors if t.cast_from and t.read_values is not None]
    if not cast or sum(t.nbytes for t in cast) > CAST_CHECK_LIMIT:
        return None
    import torch

    from ..api import open_checkpoint

    view = open_checkpoint(plan.source)
    worst = 0.0
    for t in cast:
        if t.source not in view or t.read_values is None:
            return None
        a = view.load(t.source).to(torch.float64)
        b = t.read_values().to(torch.float64)
        if a.numel():
            worst = max(worst, float((a - b).abs().max()))
    return worst


def log_lines(e: Progress, logged: dict[str, Any], files: int) -> list[str]:
    """The conversion log's new lines for event ``e`` (``logged`` remembers what was said):
    each file as its writing starts, the write once complete at 100 %, then verifying."""
    out = []
    if e.stage == "write" and e.item and e.item != logged["file"]:
        logged["file"] = e.item
        out.append(f"{e.fraction:6.1%}  writing {e.item}")
    done_writing = (e.stage == "write" and e.total and e.done >= e.total) or e.stage == "verify"
    if done_writing and not logged["written"]:
        logged["written"] = True
        what = f"{fmt_bytes(e.total)} in {files} file{'s' if files != 1 else ''}"
        out.append(f"{1:6.1%}  written: {what} (in a temporary folder until verified)")
    if e.stage == "verify" and not logged["verify"]:
        logged["verify"] = True
        out.append("        verifying: every output tensor read back and compared with its source")
    return out


FORM = ("source", "destination", "target", "max_shard_size", "dtype", "model_only")


class ConvertState(JobState):
    """Conversion: the form's arguments, the plan, the run and its verification."""

    source = param.String(default="")
    destination = param.String(default="", doc="output path, relative to the root")
    target = param.String(default="safetensors", doc="plan_conversion's `to`")
    max_shard_size = param.String(default="", doc='e.g. "500MB"; empty: the target\'s default')
    dtype = param.String(default="", doc='cast floating tensors ("bf16", "fp16", "fp32")')
    model_only = param.Boolean(default=False, doc="a training state's model part only")
    plan = param.Parameter(default=None)
    result = param.Parameter(default=None)
    cast_max_diff = param.Number(default=None, allow_None=True, doc="max |cast − original|")

    def __init__(self, guard: RootGuard, **params: Any) -> None:
        super().__init__(**params)
        self.guard = guard
        self.param.watch(self._form_changed, list(FORM))

    def _form_changed(self, *_events: Any) -> None:
        """A plan is of the form it was made from: any change (another source, opened in
        the sidebar or picked here) drops it, so Run can only run what the form says."""
        if not self.running and (self.plan is not None or self.error):
            self.param.update(
                plan=None,
                result=None,
                error="",
                cast_max_diff=None,
                log=[],
                message="",
                seconds=0.0,
            )

    def targets(self) -> list[str]:
        return target_names()

    def suggest_destination(self) -> str:
        """``<source name>-<target>[.suffix]`` beside the root's top level, not yet taken; no
        file suffix when the output is a folder (a max shard size writes shards and an index)."""
        base = Path(self.source.strip() or "checkpoint").name.split(".")[0] or "checkpoint"
        spec = target(self.target)
        suffix = "" if self.max_shard_size.strip() and spec.shards else spec.suffix
        for i in range(1, 100):
            name = f"{base}-{self.target}{'' if i == 1 else f'-{i}'}{suffix}"
            if not (self.guard.root / name).exists():
                return name
        return ""

    def _destination(self) -> Path:
        text = self.destination.strip()
        if not text or ".." in Path(text).parts or Path(text).is_absolute():
            raise CkptExplorerError(
                text or None, "an output path relative to the root", text or "nothing"
            )
        out = self.guard.root / text
        parent = out.parent.resolve()
        if parent != self.guard.root and self.guard.root not in parent.parents:
            raise CkptExplorerError(text, f"an output inside {self.guard.root}", "a path outside")
        if out.exists():
            raise CkptExplorerError(text, "an output path that does not exist yet", "one that does")
        return out

    def make_plan(self) -> bool:
        """Plan the conversion (fast: nothing is written); False with ``error`` set on failure."""
        try:
            src, dst = self.guard.resolve(self.source, "structure"), self._destination()
            plan = plan_conversion(
                src,
                dst,
                to=self.target,
                max_shard_size=self.max_shard_size.strip() or None,
                dtype=self.dtype.strip() or None,
                model_only=self.model_only,
            )
        except CkptExplorerError as e:
            self.param.update(plan=None, result=None, error=control_words(e.one_line()))
            return False
        self.param.update(plan=plan, result=None, error="", message="planned")
        return True

    def run(self, wait: bool = False) -> None:
        """Run the current plan in the background: progress, log, then the verification."""
        if self.plan is None or self.running:
            return
        plan = self.plan
        tick = Throttle(lambda frac, msg: self.report(frac, msg), 0.1)

        logged = {"file": "", "written": False, "verify": False}

        def progress(e: Progress) -> None:
            frac, msg = e.fraction, e.item or e.message
            for line in log_lines(e, logged, len(plan.files)):
                self.add_log(line)
            tick(frac, f"{frac:.0%} — {msg}" if msg else None)

        def work(cancel: threading.Event) -> Any:
            try:
                result = run_conversion(plan, progress=progress, cancel=cancel)
            except ConversionCancelled:
                return None  # the engine removed what it had written
            diff = cast_difference(plan) if result.verified else None
            return result, diff

        def done(out: Any) -> None:
            if out is None:
                self.add_log("cancelled: nothing was installed")
                self.finish(f"cancelled — nothing was written; {self.destination} does not exist")
                return
            result, diff = out
            self.param.update(cast_max_diff=diff, result=result)
            ok = result.verified
            cast = plan.options.get("dtype")
            said = f"its source cast to {cast}" if cast else "its source"
            self.add_log(
                f"verified: every output tensor equals {said}; installed at {self.destination}"
                if ok
                else "NOT verified: nothing was installed"
            )
            self.finish(  # the whole job's time follows: "written and verified in 1.2 s"
                "written and verified" if ok else "done (not verified)" if ok is False else "done"
            )

        self.param.update(result=None, cast_max_diff=None)
        self.begin(f"converting {self.source} → {self.destination}")
        self._start(work, done, wait, "ckpt-explorer-convert")
