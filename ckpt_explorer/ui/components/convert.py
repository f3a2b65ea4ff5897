"""Convert: a form, the plan, the run with progress and log, the verification result."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import panel as pn

from ..numbers import fmt_number, plural
from ..state import AppState
from ..subject import acts_on, code
from .common import (
    cancel_button,
    cards,
    error_pane,
    fmt_bytes,
    job_bar,
    job_status,
    on_press,
    placeholder,
    section,
    sync,
    table,
    watch,
)
from .picker import PathPicker

if TYPE_CHECKING:
    import pandas as pd

    from ...convert import ConversionPlan

DTYPES = {"keep": "", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


def dtype_options(name: str) -> dict[str, str]:
    """The "Cast to" choices for target ``name``: the planner's casts, or the types the
    target applies itself (its ``TargetSpec.dtypes``, each type once; "default" first)."""
    from ...convert.targets import TARGETS

    spec = TARGETS.get(name)
    if spec is None or spec.dtypes is None:
        return DTYPES
    first: dict[str, str] = {}
    for key, value in spec.dtypes.items():
        first.setdefault(value, key)
    return {"default": "", **{key: key for key in first.values()}}


def plan_frame(plan: ConversionPlan) -> pd.DataFrame:
    """Output files of a plan: name, writer, tensors, bytes, first names."""
    import pandas as pd

    rows = [
        {
            "file": f.name,
            "writer": f.writer,
            "tensors": len(f.tensors),
            "bytes": f.nbytes,
            "first tensors": ", ".join(t.name for t in f.tensors[:3])
            + (" …" if len(f.tensors) > 3 else ""),
        }
        for f in plan.files
    ]
    return pd.DataFrame(rows, columns=["file", "writer", "tensors", "bytes", "first tensors"])


def byte_copy_card(fast: int, total: int, cast: str | None) -> tuple[str, str, str]:
    """(title, value, subtitle) of how much is copied byte for byte, without contradiction."""
    if not total:
        return ("Byte copy", "—", "nothing to write")
    if fast >= total:
        return ("Byte copy", "100%", "copied byte for byte")
    why = f"cast to {cast}" if cast else "re-serialised"
    if not fast:
        return ("Byte copy", "none", f"every tensor {why}")
    return ("Byte copy", f"{fast / total:.0%}", f"the rest {why}")


def verified_words(cast: str | None, max_diff: float | None, destination: str) -> str:
    """What verification proved: bit for bit against the source, or against the source cast
    to ``cast`` (with the largest difference to the original when it was measured)."""
    where = f" Written to `{destination}`."
    if not cast:
        return "**Verified bit for bit** — every output tensor equals its source." + where
    diff = (
        f" (max difference to the original {fmt_number(max_diff)})"
        if max_diff is not None
        else " (the difference to the original was not measured)"
    )
    return (
        f"**Verified** — every output tensor equals its source cast to {cast}{diff}; "
        "tensors not cast are equal bit for bit." + where
    )


def plan_title(plan: Any, result: Any, running: bool, where: str = "") -> str:
    """The plan's section title: whether anything is written yet, and where it went
    (``where``: the output as the form names it; default the result's own path)."""
    if plan is None:
        return "2 · The plan"
    if running:
        return "2 · The plan (being written, into a temporary folder until verified)"
    if result is None:
        return "2 · The plan (nothing is written yet)"
    if result.verified:
        return f"2 · The plan (written and verified: {where or result.destination})"
    return "2 · The plan (written, NOT verified: nothing was installed)"


# A Panel view's constructor (widgets, watches, body): alike in shape with the other views'.
class ConvertView(pn.viewable.Viewer):
    """Plan first, then run in the background: the page stays responsive, Cancel works."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        c = self.app.convert
        self._source = PathPicker(self.app, "Source checkpoint", warn=self.app.unsafe_note)
        sync(c, "source", self._source, "value")  # the open checkpoint unless picked here
        self._subject = pn.pane.Markdown("", sizing_mode="stretch_width")
        watch(c, lambda *_: self._say_subject(), "source")
        watch(self.app.browse, lambda *_: self._say_subject(), "path")
        targets = c.targets()
        self._target = pn.widgets.Select(label="Convert to", options=targets, width=150)
        sync(c, "target", self._target, "value")
        self._dest = pn.widgets.TextInput(
            label="Output (new path under the root)",
            placeholder="e.g. model-hf (empty: a name is suggested)",
        )
        sync(c, "destination", self._dest, "value")
        self._shard = pn.widgets.TextInput(label="Max shard size", placeholder="5GB", width=120)
        sync(c, "max_shard_size", self._shard, "value")
        self._dtype = pn.widgets.Select(label="Cast to", options=dtype_options(c.target), width=100)
        sync(c, "dtype", self._dtype, "value")
        watch(c, lambda *_: setattr(self._dtype, "options", dtype_options(c.target)), "target")
        self._model_only = pn.widgets.Checkbox(
            label="Model weights only (leave optimizer, scheduler and RNG out)"
        )
        sync(c, "model_only", self._model_only, "value")
        self._plan_btn = pn.widgets.Button(label="Plan", color="primary", width=100)
        on_press(self._plan_btn, self._plan)
        self._run_btn = pn.widgets.Button(
            label="Run conversion", color="success", width=150, disabled=True
        )
        on_press(self._run_btn, c.run)
        self._cancel = cancel_button(c)
        self._progress = job_bar("success")
        self._status = pn.pane.Markdown("")
        self._log = pn.pane.HTML("", sizing_mode="stretch_width")
        self._plan_area = pn.Column(sizing_mode="stretch_width")
        self._result = pn.Column(sizing_mode="stretch_width")
        watch(c, self._on_progress, ["running", "progress", "message", "error", "log"])
        watch(c, lambda *_: self._render_plan(), ["plan", "error"])
        watch(c, lambda *_: self._render_result(), "result")
        form = pn.Column(
            self._source,
            self._subject,
            pn.Row(self._target, self._dest, self._shard, self._dtype, sizing_mode="stretch_width"),
            self._model_only,
            pn.Row(self._plan_btn, self._run_btn, self._cancel),
            sizing_mode="stretch_width",
        )
        self._plan_card = section(plan_title(None, None, False), self._plan_area)
        self._body = pn.Column(
            section("1 · What to convert", form),
            self._plan_card,
            section(
                "3 · Run and verify",
                self._progress,
                self._status,
                self._log,
                self._result,
            ),
            sizing_mode="stretch_width",
        )
        self._render_plan()
        self._on_progress()
        self._say_subject()

    def _say_subject(self) -> None:
        self._subject.object = acts_on("Converts", self.app.convert.source, self.app.browse.path)

    def _plan(self) -> None:
        c = self.app.convert
        if not c.destination.strip():
            c.destination = c.suggest_destination()
        c.make_plan()

    def _on_progress(self, *_: Any) -> None:
        c = self.app.convert
        self._progress.visible = c.running
        self._progress.value = int(c.progress * 1000)
        self._plan_btn.disabled = c.running
        self._run_btn.disabled = c.running or c.plan is None or c.result is not None
        self._cancel.disabled = not c.running
        self._status.object = job_status(c)
        self._plan_card.title = plan_title(c.plan, c.result, c.running, c.destination)
        if c.log:
            lines = html.escape("\n".join(c.log[-12:]))
            self._log.object = (
                "<pre style='background:#0f172a;color:#e2e8f0;padding:10px;border-radius:8px;"
                f"font-size:12px;max-height:220px;overflow:auto'>{lines}</pre>"
            )
        else:
            self._log.object = ""
        if c.error and c.plan is not None:
            self._result[:] = [error_pane(c.error)]

    def _render_plan(self) -> None:
        c = self.app.convert
        if c.error and c.plan is None:
            self._plan_area[:] = [error_pane(c.error)]
            return
        plan = c.plan
        if plan is None:
            self._plan_area[:] = [placeholder("Fill in the form and press Plan.")]
            self._on_progress()
            return
        total, fast = plan.total_bytes, plan.fast_bytes
        blocks: list[Any] = [
            pn.pane.Markdown(
                f"{code(c.source)} → {code(c.destination)}", sizing_mode="stretch_width"
            ),
            cards(
                [
                    ("From", plan.source_family, plan.source_kind),
                    ("To", plan.target, "folder" if plan.output_is_dir else "file"),
                    ("Tensors", f"{len(plan.tensors):,}", fmt_bytes(total)),
                    byte_copy_card(fast, total, plan.options.get("dtype")),
                    ("Files", str(len(plan.files)), "written atomically"),
                ]
            ),
            table(plan_frame(plan), pagination="local", page_size=10, css_classes=["plan-table"]),
        ]
        notes = [*plan.notes, *(f"dropped: {d}" for d in plan.dropped)]
        if notes:
            blocks.append(pn.pane.Markdown("\n".join(f"- {n}" for n in notes)))
        self._plan_area[:] = blocks
        self._result[:] = []
        self._on_progress()

    def _render_result(self) -> None:
        r = self.app.convert.result
        if r is None:
            self._result[:] = []
            return
        ok = r.verified
        rate = r.bytes / r.seconds / 2**20 if r.seconds else 0.0
        plan = self.app.convert.plan
        cast = plan.options.get("dtype") if plan is not None else None
        alert = pn.pane.Alert(
            (
                verified_words(cast, self.app.convert.cast_max_diff, str(r.destination))
                if ok
                else "**Verification failed** — nothing was installed:\n\n"
                + "\n".join(f"- {m}" for m in r.mismatches[:20])
            ),
            alert_type="success" if ok else "danger",
            sizing_mode="stretch_width",
        )
        stats = cards(
            [
                ("Written", fmt_bytes(r.bytes), plural(len(r.files), "file")),
                ("Write time", f"{r.seconds:.2f} s", f"{rate:.0f} MiB/s"),
                ("Verify time", f"{r.verify_seconds:.2f} s", "compared with the source"),
            ]
        )
        self._result[:] = [alert, stats]
        self._on_progress()

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
