"""The loader table's values: one verdict per (loader, target), and conflicts between them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# silent: returns without loading, no exception; cannot_tell: the outcome hangs on something
# the files do not hold (the path string the user passes, for transformers 4)
OUTCOMES = ("loads", "fails", "silent", "cannot_tell")
LABELS = {
    "colossalai.load_model": "ColossalAI 0.5.0 booster.load_model",
    "colossalai.load_optimizer": "ColossalAI 0.5.0 booster.load_optimizer",
    "colossalai.load_lr_scheduler": "ColossalAI 0.5.0 booster.load_lr_scheduler",
    "transformers.from_pretrained@5": "transformers 5.x from_pretrained",
    "transformers.from_pretrained@4": "transformers 4.x from_pretrained",
    "transformers.from_pretrained@5[use_safetensors=False]": "transformers 5.x from_pretrained(use_safetensors=False)",
    "torch.load": "torch.load (installed defaults)",
    "torch.jit.load": "torch.jit.load",
    "accelerate.load_state": "accelerate load_state",
    "deepspeed.load_checkpoint": "DeepSpeed load_checkpoint (tag from latest)",
    "dcp.load": "torch.distributed.checkpoint.load",
}


@dataclass(frozen=True)
class Verdict:
    """What one loader does with one target, decided from the files alone.

    Attributes:
        loader: id, e.g. ``"colossalai.load_optimizer"``.
        call: the call a user writes, e.g. ``"booster.load_optimizer(optimizer, 'optim')"``.
        target: the path handed to the loader, relative to the table's root (``""`` = root).
        outcome: ``loads``, ``fails`` (it raises), ``silent`` (returns, loads nothing) or
            ``cannot_tell`` (it depends on what the files do not say; ``message`` says what).
        reads: the files it would read, in its order.
        error: the exception type the loader raises (``fails``), e.g. ``"ValueError"``.
        message: the loader's own message (or the start of it), e.g. for ``silent`` its warning.
        fix: what to do about it.
        meant: the checkpoint was written for this loader (a failure is an error).
        notes: other facts (files it skips, choices it makes).
    """

    loader: str
    call: str
    target: str
    outcome: str
    reads: tuple[str, ...] = ()
    error: str = ""
    message: str = ""
    fix: str = ""
    meant: bool = False
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome == "loads"

    @property
    def label(self) -> str:
        return LABELS.get(self.loader, self.loader)

    # a to_json field list: alike in shape with other records' only
    def to_json(self) -> dict[str, Any]:
        return {
            "loader": self.loader,
            "label": self.label,
            "call": self.call,
            "target": self.target,
            "outcome": self.outcome,
            "reads": list(self.reads),
            "error": self.error,
            "message": self.message,
            "fix": self.fix,
            "meant": self.meant,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class LoaderCall:
    """One loader called on one target: the one place its verdicts are built."""

    loader: str
    call: str
    target: str

    def loads(
        self, reads: Iterable[str], *, meant: bool = False, notes: Iterable[str] = ()
    ) -> Verdict:
        return Verdict(
            self.loader, self.call, self.target, "loads", tuple(reads), meant=meant,
            notes=tuple(notes),
        )  # fmt: skip

    def fails(
        self,
        reads: Iterable[str],
        error: str,
        message: str,
        fix: str = "",
        *,
        meant: bool = False,
        notes: Iterable[str] = (),
    ) -> Verdict:
        return Verdict(
            self.loader, self.call, self.target, "fails", tuple(reads), error, message, fix,
            meant, tuple(notes),
        )  # fmt: skip

    def cannot_tell(self, message: str, fix: str, *, meant: bool) -> Verdict:
        """Loads or raises depending on something the files do not hold (``message``)."""
        return Verdict(
            self.loader, self.call, self.target, "cannot_tell", (), "", message, fix, meant
        )

    def silent(self, message: str, fix: str, *, meant: bool, notes: Iterable[str]) -> Verdict:
        """Returns without raising and reads nothing."""
        return Verdict(
            self.loader, self.call, self.target, "silent", (), "", message, fix, meant,
            tuple(notes),
        )  # fmt: skip


# A frozen record's field list: alike in shape with resume's Cause, nothing shared.
@dataclass(frozen=True)
class Conflict:
    """Two loaders that both load ``target`` but read different weight files."""

    target: str
    a: str
    b: str
    reads_a: tuple[str, ...]
    reads_b: tuple[str, ...]
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "a": self.a,
            "b": self.b,
            "reads_a": list(self.reads_a),
            "reads_b": list(self.reads_b),
            "message": self.message,
        }


@dataclass(frozen=True)
class Layout:
    """What a target is, by content; ``damaged`` says what is missing from it."""

    form: str  # hf-model, colossalai-model, colossalai-optimizer, dcp, deepspeed, ...
    evidence: tuple[str, ...] = ()
    damaged: str = ""
    repair: str = ""  # what `ckpt-explorer repair` would rebuild ("" = nothing)

    def describe(self) -> str:
        text = self.form + (f" — {self.damaged}" if self.damaged else "")
        return text


@dataclass(frozen=True)
class LoaderTable:
    """Every modeled loader against a checkpoint and its parts."""

    path: str
    layouts: dict[str, Layout]  # target -> layout
    verdicts: tuple[Verdict, ...]
    conflicts: tuple[Conflict, ...] = ()
    torch_version: str | None = None
    notes: tuple[str, ...] = field(default=())

    def for_target(self, target: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.target == target]

    def to_frame(self) -> pd.DataFrame:
        """One row per verdict (target, loader, label, outcome, meant, error, message, fix,
        reads), then one per conflict (loader ``conflict``, outcome ``warning``)."""
        import pandas as pd

        cols = ["target", "loader", "label", "outcome", "meant", "error", "message", "fix"]
        rows = [
            {**{k: getattr(v, k) for k in cols}, "reads": ", ".join(v.reads)} for v in self.verdicts
        ]
        rows += [
            {"target": c.target, "loader": "conflict", "label": f"{c.a} / {c.b}",
             "outcome": "warning", "meant": False, "error": "", "message": c.message, "fix": "",
             "reads": ", ".join((*c.reads_a, *c.reads_b))}
            for c in self.conflicts
        ]  # fmt: skip
        return pd.DataFrame(rows, columns=[*cols, "reads"])

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "layouts": {
                t: {
                    "kind": lay.form,
                    "damaged": lay.damaged,
                    "repair": lay.repair,
                    "evidence": list(lay.evidence),
                }
                for t, lay in self.layouts.items()
            },
            "verdicts": [v.to_json() for v in self.verdicts],
            "conflicts": [c.to_json() for c in self.conflicts],
            "torch_version": self.torch_version,
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        """The table as text (``inspect`` prints it)."""
        out = ["who can load this"]
        for target, lay in self.layouts.items():
            where = target or "."
            out.append(f"  {where}: {lay.describe()}")
            for v in self.for_target(target):
                mark = {"loads": "ok  ", "fails": "FAIL", "silent": "NONE"}.get(v.outcome, "?   ")
                meant = "*" if v.meant else " "
                reads = ", ".join(v.reads[:3]) + (" ..." if len(v.reads) > 3 else "")
                out.append(f"    {mark}{meant} {v.label}" + (f"  reads {reads}" if reads else ""))
                if v.outcome != "loads":
                    out.append(f"           {v.error + ': ' if v.error else ''}{v.message}")
                    if v.fix:
                        out.append(f"           fix: {v.fix}")
                out += [f"           note: {n}" for n in v.notes]
            if lay.repair:
                out.append(f"    repair: {lay.repair}")
        for c in self.conflicts:
            out.append(f"  conflict: {c.message}")
        out += [f"  note: {n}" for n in self.notes]
        unsure = any(v.outcome == "cannot_tell" for v in self.verdicts)
        out.append(
            "  (* = the loader this checkpoint was written for"
            + ("; ? = cannot tell from the files)" if unsure else ")")
        )
        return out
