"""A writer profile: what one training framework's saved files record and what they mean.

The readers say what each entry *is* (a model, an optimizer, a scheduler, an RNG state); a
profile says what the *writer* meant by it: which parts it saves and under which keys, what
each counter counts, whether it saves its LR scheduler or rebuilds it from a counter, whether
it saves RNG states, and how its folders and ``last``/``latest`` pointers are laid out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# What a counter counts. ``optimizer_steps``: optimizer.step() calls (a scheduler stepped per
# optimizer step agrees with it); ``micro_batches``: forward/backward passes (the optimizer's
# steps times the gradient-accumulation factor); ``epochs``; ``samples``; ``saves``.
Unit = Literal["optimizer_steps", "micro_batches", "epochs", "samples", "saves"]
UNITS: tuple[Unit, ...] = ("optimizer_steps", "micro_batches", "epochs", "samples", "saves")

# How a writer treats a part: ``saved`` (always beside the optimizer, unless the user asked for
# a weights-only save), ``optional`` (saved when the user's code asks), ``rebuilt`` (not saved:
# rebuilt at resume from a counter), ``not_saved`` (never saved), ``unknown``.
Policy = Literal["saved", "optional", "rebuilt", "not_saved", "unknown"]


@dataclass(frozen=True)
class Evidence:
    """What a state's files show, gathered once (no tensor bytes), for detection and rules.

    Attributes:
        name: the state's file or folder name (``checkpoint-4``, ``iter_8.pth``).
        files: names inside the folder (a folder state; empty for one file).
        siblings: names beside the state, in its parent folder (pointers, ``last.ckpt``).
        keys: top-level keys of the state: a folder's part names, a one-file state's first
            key components (``meta``, ``state_dict``, ``optimizer``, ``param_schedulers``).
        values: every plain value of the state as ckpt_explorer lists it: a one-file state's
            dotted keys (``meta.iter``), a folder's ``<part>/<key>``
            (``trainer_state.json/global_step``).
        kinds: the kinds of the state's parts (``optimizer``, ``scheduler``, ``rng`` ...).
    """

    name: str = ""
    files: frozenset[str] = frozenset()
    siblings: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()
    values: Mapping[str, Any] = field(default_factory=dict)
    kinds: frozenset[str] = frozenset()

    def value(self, key: str) -> Any:
        """The value under ``key``, or under a longer name ending in ``/key`` or ``.key``
        (``global_step`` finds ``trainer_state.json/global_step``), or inside a plain dict or
        list value (``meta.iter`` finds ``values["meta"]["iter"]``, ``param_schedulers.0.x``
        the list's first item's ``x``); None if absent."""
        if key in self.values:
            return self.values[key]
        for name, v in self.values.items():
            if name.endswith(("/" + key, "." + key)):
                return v
        head, _, rest = key.partition(".")
        while rest:
            if head in self.values:
                return _inside(self.values[head], rest)
            more, _, rest = rest.partition(".")
            head = f"{head}.{more}"
        return None

    def has(self, key: str) -> bool:
        """``key`` is a value (see :meth:`value`), a top-level key or a file of the state."""
        return self.value(key) is not None or key in self.keys or key in self.files


def _inside(value: Any, path: str) -> Any:
    for step in path.split("."):
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list | tuple) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    return value


# A detector returns the evidence lines that identify its writer ("trainer_state.json holds
# global_step and log_history"), or None when the state is not that writer's.
Detector = Callable[[Evidence], list[str] | None]


@dataclass(frozen=True)
class Counter:
    """One counter a writer saves: where, and what it counts.

    ``key`` is matched like :meth:`Evidence.value` (a name or a tail of one).
    """

    key: str
    counts: Unit
    meaning: str = ""


@dataclass(frozen=True)
class WriterProfile:
    """One writer family's conventions.

    Attributes:
        name: registry id (``hf-trainer``); never shown as the only evidence.
        title: shown to people (``HF Trainer``).
        detect: the :data:`Detector`.
        priority: detectors run lowest first; the first match wins.
        parts: role -> where the writer saves it (files or keys), for people and rules:
            ``{"optimizer": ("optimizer.pt",), "scheduler": ("scheduler.pt",)}``.
        counters: every counter it saves and its unit; the one counting the run position in
            optimizer steps first.
        accumulation: keys recording its gradient-accumulation factor (micro-batches per
            optimizer step).
        optimizer: how it treats the optimizer state (``saved`` for resumable savers).
        scheduler: how it treats the LR scheduler (``rebuilt``: from ``scheduler_from``).
        scheduler_from: the counter a ``rebuilt`` scheduler is rebuilt from.
        rng: how it treats RNG states.
        pointers: files naming the newest save (``last_checkpoint``, ``latest``).
        copies: files that are a copy of another save (``last.ckpt``).
        save_name: a regex of its save names; group 1 is the counter named in ``counters``
            by ``save_counter``.
        save_counter: the key of :attr:`counters` the save name carries.
        notes: one line for people (what resuming restores, what it rebuilds).
        facts: values the profile derives from the evidence where the writer records them
            in its own way (mmengine's ``accumulative_counts`` in its config text): key ->
            value, looked up like :meth:`Evidence.value` keys by the rules.
    """

    name: str
    title: str
    detect: Detector
    priority: int = 100
    parts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    counters: tuple[Counter, ...] = ()
    accumulation: tuple[str, ...] = ()
    optimizer: Policy = "unknown"
    scheduler: Policy = "unknown"
    scheduler_from: str = ""
    rng: Policy = "unknown"
    pointers: tuple[str, ...] = ()
    copies: tuple[str, ...] = ()
    save_name: str = ""
    save_counter: str = ""
    notes: str = ""
    facts: Callable[[Evidence], Mapping[str, Any]] | None = None

    @property
    def known(self) -> bool:
        """False for the profile of a writer not recognised (every policy ``unknown``)."""
        return self.name != UNKNOWN_NAME

    def counter(self, key: str) -> Counter | None:
        """The counter saved under ``key`` (or a name ending in ``.key`` / ``/key``)."""
        for c in self.counters:
            if key == c.key or key.endswith(("." + c.key, "/" + c.key)):
                return c
        return None

    def unit(self, key: str) -> Unit | None:
        """What the value under ``key`` counts; None where the profile does not say."""
        c = self.counter(key)
        return c.counts if c else None


UNKNOWN_NAME = "unknown"


def _never(_: Evidence) -> list[str] | None:
    return None


UNKNOWN = WriterProfile(
    UNKNOWN_NAME,
    "unknown writer",
    _never,
    priority=10**9,
    notes="No writer profile matches: rules that depend on a writer's conventions say "
    "'cannot tell' (info) instead of warning.",
)


@dataclass(frozen=True)
class ProfileMatch:
    """The profile detected for a state, why, and the evidence it was detected from."""

    profile: WriterProfile
    reasons: tuple[str, ...]
    evidence: Evidence

    @property
    def known(self) -> bool:
        return self.profile.known

    def facts(self) -> Mapping[str, Any]:
        """The profile's derived values (:attr:`WriterProfile.facts`); empty on any failure."""
        if self.profile.facts is None:
            return {}
        try:
            return dict(self.profile.facts(self.evidence))
        except Exception:
            return {}

    def describe(self) -> str:
        why = "; ".join(self.reasons) if self.reasons else "no writer's conventions recognised"
        return f"{self.profile.title} ({why})"
