"""Verdicts of ckpt_explorer on one real-world corpus case, scored against the maker's truth.

The real-world makers (``tests/fixture_makers/realworld_*_maker.py``) record per case what is
true (``expect``: "clean" or the planted cause, ``resume_of``, ``id_names``); this module runs
``validate`` / ``resume_doctor`` / the optimizer naming on the case and says how each verdict
compares: :func:`check_state` for one state, :func:`check_resume` for a (resumed-from, saved
after) pair; :func:`state_problems` / :func:`resume_problems` list what breaks the contract.
``tests/realworld/test_realworld_*.py`` assert on them (the ``assert_*`` helpers at the end hold
the assertions they share) and ``scripts/diagnosis_table.py`` tabulates them.

Two optional case keys refine ``expect``: ``also`` lists further causes truly present in the
state (Trainer restores optimizer and scheduler together or not at all, so deleting one file
resets both); ``"shape_visible": false`` marks a param-order fault that only swapped
same-shaped params: the state's files alone cannot show it (no validate finding, and names
aligned to the model order are necessarily those of the original order), only the pair can.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt_explorer import open_checkpoint, resume_doctor, validate_checkpoint
from ckpt_explorer.types import OptimizerInfo, ParamName
from ckpt_explorer.validate import Finding
from ckpt_explorer.view import CheckpointView

CAUSES = (
    "scheduler_not_restored",
    "optimizer_moments_reset",
    "param_order_changed",
    "rng_state_missing",
)

# Validate rules whose finding (warning or error) reports each planted fault. A rule named
# after the cause (e.g. a future ``optimizer.param_order_changed``) fits too.
FAULT_RULES: dict[str, frozenset[str]] = {
    "scheduler_not_restored": frozenset(
        {
            "bundle.missing_scheduler",
            "bundle.scheduler_step",
            "scheduler.optimizer_step",
            "scheduler.step_count",
            "scheduler.last_lr",
        }
    ),
    "optimizer_moments_reset": frozenset(
        {"bundle.optimizer_step", "optimizer.step_mismatch", "scheduler.optimizer_step"}
    ),
    "param_order_changed": frozenset(
        {"optimizer.state_shape", "optimizer.param_count", "optimizer.param_order"}
    ),
    "rng_state_missing": frozenset({"bundle.missing_rng", "bundle.missing_run_state"}),
}

VERDICTS = ("right", "ambiguous_with_truth", "ambiguous_without_truth", "unknown", "wrong")

# The finding validate gives where one state cannot show a restart (an optimizer without a
# step counter): a ``"state_shows": false`` case must get it, and the doctor must find the cause.
UNDECIDABLE = "optimizer.restart_unknown"

# Causes that only a pair can show: the state saved after such a resume is a normal state
# (its weights came from another run, its RNG was re-seeded, it resumed from an older copy);
# validate is not scored on them, the doctor is.
PAIR_ONLY = frozenset({"resumed_from_another_run", "rng_not_restored", "stale_pointer"})

# A doctor score at or above this on a correct resume is a false cause.
FALSE_CAUSE_SCORE = 0.5


@dataclass(frozen=True)
class NameCheck:
    """One optimizer id: the truth, what ckpt_explorer says, and the verdict."""

    location: str
    param_id: int
    truth: str
    shown: str
    verdict: str


@dataclass
class StateResult:
    """Verdicts on one saved state (see :func:`check_state`)."""

    case_id: str
    setup: str
    expect: str
    also: tuple[str, ...] = ()
    shape_visible: bool = True
    state_shows: bool = True  # False: one state's files cannot show the fault (no counter)
    resumed: bool = False  # saved after a resume (the manifest names its resume_of)
    findings: list[Finding] = field(default_factory=list)
    names: list[NameCheck] = field(default_factory=list)
    missing_optimizers: list[str] = field(default_factory=list)
    crash: str | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def planted(self) -> tuple[str, ...]:
        """The causes present in this state: ``expect`` and ``also`` (empty when clean)."""
        return () if self.expect == "clean" else (self.expect, *self.also)

    @property
    def fault_findings(self) -> list[Finding]:
        """Warning/error findings whose rule fits a planted fault (none for clean states)."""
        return [
            f
            for f in self.findings
            if f.severity in ("error", "warning")
            and any(f.rule in FAULT_RULES.get(c, ()) or c in f.rule for c in self.planted)
        ]

    @property
    def fault_found(self) -> bool | None:
        """For a faulty state: did validate report the fault? None for clean states."""
        if self.expect == "clean" or self.pair_only:
            return None
        return bool(self.fault_findings)

    @property
    def pair_only(self) -> bool:
        """A state whose planted cause only the pair (A, this state) can show."""
        return self.expect in PAIR_ONLY and not self.also and self.resumed

    @property
    def false_findings(self) -> list[Finding]:
        """Warnings and errors that do not report the planted fault."""
        fault = set(map(id, self.fault_findings))
        return [
            f for f in self.findings if f.severity in ("error", "warning") and id(f) not in fault
        ]

    def verdict_counts(self) -> Counter[str]:
        return Counter(n.verdict for n in self.names)

    def bad_names(self) -> list[NameCheck]:
        """Ids named wrong, or ambiguous with candidates that miss the true name."""
        return [n for n in self.names if n.verdict in ("wrong", "ambiguous_without_truth")]

    def describe(self) -> str:
        """A few lines for an assertion message."""
        lines = [f"{self.case_id} ({self.setup}, expect {self.expect})"]
        if self.crash:
            lines.append(f"  crashed: {self.crash.strip().splitlines()[-1]}")
        lines += [f"  {f.severity} {f.rule}: {f.message}" for f in self.findings[:12]]
        lines += [f"  optimizer not found at {loc!r}" for loc in self.missing_optimizers]
        for n in self.bad_names()[:8]:
            lines.append(f"  {n.location!r} id {n.param_id}: {n.shown} (truth {n.truth})")
        return "\n".join(lines)


@dataclass
class ResumeResult:
    """The doctor on (resume_of, case): see :func:`check_resume`."""

    case_id: str
    resume_of: str
    expect: str
    also: tuple[str, ...] = ()
    causes: list[tuple[str, float]] = field(default_factory=list)
    crash: str | None = None

    @property
    def top_cause(self) -> str | None:
        return self.causes[0][0] if self.causes else None

    @property
    def top_score(self) -> float:
        return self.causes[0][1] if self.causes else 0.0

    @property
    def planted_first(self) -> bool | None:
        """For a faulty resume: is the planted cause ranked first? None for clean ones."""
        if self.expect == "clean":
            return None
        return self.top_cause in (self.expect, *self.also)

    @property
    def false_score(self) -> float:
        """The highest score of a cause that was not planted (0.0 when none)."""
        planted = (self.expect, *self.also)
        return max((s for c, s in self.causes if c not in planted), default=0.0)

    def describe(self) -> str:
        head = f"{self.resume_of} -> {self.case_id} (expect {self.expect})"
        if self.crash:
            return f"{head}\n  crashed: {self.crash.strip().splitlines()[-1]}"
        body = [f"  {c}: {s:.2f}" for c, s in self.causes] or ["  no cause"]
        return "\n".join([head, *body])


def iter_views(view: CheckpointView) -> Iterator[CheckpointView]:
    """``view`` and its parts, recursively."""
    yield view
    for part in view.parts.values():
        yield from iter_views(part)


def _location(case_path: Path, view: CheckpointView) -> str:
    try:
        rel = view.path.resolve().relative_to(case_path.resolve())
    except ValueError:
        return str(view.path)
    return "" if str(rel) == "." else rel.as_posix()


def _named_views(view: CheckpointView, name: str = "") -> Iterator[tuple[str, CheckpointView]]:
    yield name, view
    for part_name, part in view.parts.items():
        yield from _named_views(part, part_name)


def optimizers_by_location(case_path: Path, view: CheckpointView) -> dict[str, OptimizerInfo]:
    """Every optimizer the view shows, keyed by its path relative to the case path; an entry
    of a one-file state (``optimizers.1`` in one ``.pt``) also by its entry name."""
    out: dict[str, OptimizerInfo] = {}
    for name, v in _named_views(view):
        if v.optimizer is None:
            continue
        locs = [_location(case_path, v)]
        if name and v.path.is_file() and v.path.resolve() == case_path.resolve():
            locs.append(name)
        for loc in locs:
            if loc not in out or (v.optimizer.names and not out[loc].names):
                out[loc] = v.optimizer
    return out


def name_verdict(pn: ParamName | None, truth: str) -> tuple[str, str]:
    """(what is shown, verdict) for one id whose true parameter name is ``truth``."""
    if pn is None:
        return "unknown", "unknown"
    if pn.known:
        return str(pn.name), "right" if pn.name == truth else "wrong"
    if pn.how == "ambiguous":
        return pn.label(), (
            "ambiguous_with_truth" if truth in pn.candidates else "ambiguous_without_truth"
        )
    return pn.label(), "unknown"


def _param_name(info: OptimizerInfo, pid: int) -> ParamName | None:
    pn = info.names.get(pid)
    if pn is None and pid in info.param_names:  # a reader that only fills param_names
        pn = ParamName(info.param_names[pid], "recorded")
    return pn


def check_names(
    case_path: Path, view: CheckpointView, id_names: Mapping[str, Mapping[str, str]]
) -> tuple[list[NameCheck], list[str]]:
    """Per-id verdicts against the truth, and the truth locations with no optimizer view."""
    found = optimizers_by_location(case_path, view)
    checks: list[NameCheck] = []
    missing: list[str] = []
    for loc, truth in id_names.items():
        info = found.get(loc)
        if info is None:
            missing.append(loc)
        for sid, name in truth.items():
            pid = int(sid)
            pn = _param_name(info, pid) if info is not None else None
            shown, verdict = name_verdict(pn, name)
            checks.append(NameCheck(loc, pid, name, shown, verdict))
    return checks, missing


def check_state(root: Path, case_id: str, case: Mapping[str, Any]) -> StateResult:
    """Validate one case and score its optimizer names against ``case["id_names"]``."""
    result = StateResult(
        case_id,
        str(case.get("setup", "")),
        str(case.get("expect", "clean")),
        tuple(case.get("also", ())),
        bool(case.get("shape_visible", True)),
        bool(case.get("state_shows", True)),
        resumed="resume_of" in case,
    )
    path = Path(root) / case["path"]
    try:
        view = open_checkpoint(path)
        result.findings = list(validate_checkpoint(view).findings)
        result.names, result.missing_optimizers = check_names(path, view, case.get("id_names", {}))
    except Exception:
        result.crash = traceback.format_exc()
    return result


def check_resume(root: Path, manifest: Mapping[str, Any], case_id: str) -> ResumeResult:
    """Run the doctor on (``resume_of``, ``case_id``) and keep its ranked causes."""
    cases = manifest["cases"]
    case = cases[case_id]
    a_id = case["resume_of"]
    result = ResumeResult(
        case_id, a_id, str(case.get("expect", "clean")), tuple(case.get("also", ()))
    )
    try:
        report = resume_doctor(Path(root) / cases[a_id]["path"], Path(root) / case["path"])
        result.causes = [(c.cause, float(c.score)) for c in report.causes]
    except Exception:
        result.crash = traceback.format_exc()
    return result


def state_problems(result: StateResult) -> list[str]:
    """What breaks the corpus contract for one state (empty when it holds).

    Clean: no error or warning finding. Faulty: a warning/error finding that fits the fault,
    or, for a ``"state_shows": false`` case, the info finding that one state cannot tell.
    Both: it opens and validates, every optimizer of ``id_names`` is found, and no id is named
    wrong (nor ambiguous with candidates that miss the true name). A ``shape_visible: false``
    state is exempt from the fault finding and the names (its files cannot show the fault).
    """
    if result.crash:
        return [f"crashed: {result.crash.strip().splitlines()[-1]}"]
    out: list[str] = []
    if result.expect == "clean":
        out += [f"false {f.severity} {f.rule}: {f.message}" for f in result.errors]
        out += [f"false {f.severity} {f.rule}: {f.message}" for f in result.warnings]
    elif not result.state_shows:
        if not any(f.rule == UNDECIDABLE for f in result.findings):
            out.append(f"validate did not say that {result.expect} cannot be told from one state")
    elif not result.fault_found and result.shape_visible and not result.pair_only:
        out.append(f"validate did not report {result.expect}")
    out += [f"no optimizer view at {loc!r}" for loc in result.missing_optimizers]
    if not result.shape_visible:
        return out
    out += [
        f"{n.verdict}: {n.location!r} id {n.param_id} shown {n.shown!r}, truth {n.truth!r}"
        for n in result.bad_names()
    ]
    return out


def resume_problems(result: ResumeResult) -> list[str]:
    """What breaks the contract for a resume pair: the planted cause not first, or a false
    cause scoring >= FALSE_CAUSE_SCORE on a correct resume."""
    if result.crash:
        return [f"crashed: {result.crash.strip().splitlines()[-1]}"]
    if result.expect == "clean":
        return [
            f"false cause {c} scores {s:.2f}" for c, s in result.causes if s >= FALSE_CAUSE_SCORE
        ]
    if not result.planted_first:
        ranked = ", ".join(f"{c} {s:.2f}" for c, s in result.causes) or "no cause"
        return [f"{result.expect} not ranked first ({ranked})"]
    return []


def resume_cases(manifest: Mapping[str, Any]) -> list[str]:
    """Ids of the cases saved after a resume (those with ``resume_of``)."""
    return resumed_ids(manifest["cases"])


# The assertions the corpus tests (tests/realworld/test_realworld_*.py) share: each test keeps
# its own name, parameters and docstring, and says in one line which contract it asserts.


def resumed_ids(plan: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Ids of the planned cases saved after a resume (the maker's ``planned_cases()``)."""
    return sorted(cid for cid, c in plan.items() if c.get("resume_of"))


def assert_cases_as_planned(
    cases: Mapping[str, Mapping[str, Any]], plan: Mapping[str, Mapping[str, Any]]
) -> None:
    """The manifest holds exactly the planned cases, each with the planned truth."""
    assert set(cases) == set(plan)
    for cid, case in cases.items():
        assert {k: case.get(k) for k in plan[cid]} == plan[cid], cid


def assert_read_as_planned(root: Path, case: Mapping[str, Any]) -> None:
    """The case opens in the family and as the kind the maker names."""
    view = open_checkpoint(Path(root) / case["path"])
    assert (view.family, view.kind) == (case["family"], case["kind"])


def assert_state_holds(root: Path, manifest: Mapping[str, Any], case_id: str) -> StateResult:
    """:func:`state_problems` finds nothing on the case; the result, for further checks."""
    result = check_state(root, case_id, manifest["cases"][case_id])
    problems = state_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])
    return result


def assert_resume_holds(root: Path, manifest: Mapping[str, Any], case_id: str) -> None:
    """:func:`resume_problems` finds nothing on (``resume_of``, case)."""
    result = check_resume(root, manifest, case_id)
    problems = resume_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])


__all__ = [
    "CAUSES",
    "FALSE_CAUSE_SCORE",
    "FAULT_RULES",
    "PAIR_ONLY",
    "VERDICTS",
    "NameCheck",
    "ResumeResult",
    "StateResult",
    "assert_cases_as_planned",
    "assert_read_as_planned",
    "assert_resume_holds",
    "assert_state_holds",
    "check_names",
    "check_resume",
    "check_state",
    "name_verdict",
    "optimizers_by_location",
    "resume_cases",
    "resume_problems",
    "resumed_ids",
    "state_problems",
]
