"""Plain-text rendering of a timeline (the CLI's output)."""

from __future__ import annotations

from pathlib import Path

from .result import Timeline
from .summaries import Anomaly, CheckpointSummary, PairSummary


def _num(x: float | int | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _name(path: str) -> str:
    return Path(path).name


def _shown(c: CheckpointSummary) -> str:
    """The checkpoint's name; one saved per part shows its model file and a part count."""
    if len(c.files) < 2:
        return _name(c.path)
    main = next((f for f, what in c.files.items() if what.startswith("model")), None)
    main = main or next(iter(c.files))
    return f"{main} +{len(c.files) - 1} files"


def checkpoint_line(c: CheckpointSummary, pair: PairSummary | None) -> str:
    if c.error is not None:
        return f"{'?':>8}  {_name(c.path):24}  unreadable: {c.error}"
    lr = c.groups[0].get("lr") if c.groups else None
    top = ""
    if pair is not None and pair.layers:
        layer, ratio = max(pair.layers.items(), key=lambda kv: kv[1])
        top = f"{ratio:.3g} ({layer})"
    src = " (name)" if c.step_source == "name" else ""
    return (
        f"{_num(c.step):>8}{src:7}  {_shown(c):24}  {_num(c.opt_step):>8}  "
        f"{_num(c.sched_step):>6}  {_num(lr):>10}  {top:28}  {','.join(c.parts)}"
    )


def files_lines(cks: list[CheckpointSummary]) -> list[str]:
    """Which file is which, for checkpoints saved one file per part: the first one's, then
    each one whose roles differ from the one before."""
    out, shown = [], None
    for c in cks:
        roles = sorted(c.files.values())
        if c.files and roles != shown:
            where = f"step {c.step}" if c.step is not None else _name(c.path)
            out.append(f"  {where} files: " + ", ".join(f"{f} = {w}" for f, w in c.files.items()))
            shown = roles
    if out:
        out.insert(0, "one file per part (roles read from their content; same at later steps):")
    return out


def anomaly_lines(a: Anomaly, evidence: int = 4) -> list[str]:
    where = f"step {a.step}" if a.step is not None else _name(a.path) or "run"
    out = [f"[{a.severity}] {where} {a.kind}: {a.message}"]
    out += [f"    {e}" for e in a.evidence[:evidence]]
    if len(a.evidence) > evidence:
        out.append(f"    … {len(a.evidence) - evidence} more")
    return out


def format_timeline(t: Timeline) -> str:
    readable = [c for c in t.checkpoints if c.error is None]
    steps = [c.step for c in readable if c.step is not None]
    span = f", steps {min(steps)}..{max(steps)}" if steps else ""
    lines = [f"run {t.run_dir}: {len(t.checkpoints)} checkpoints{span}"]
    lines.append(
        f"{'step':>8}{'':7}  {'checkpoint':24}  {'opt step':>8}  {'sched':>6}  {'lr g0':>10}  "
        f"{'largest layer ‖Δ‖/‖W‖':28}  parts"
    )
    pairs: list[PairSummary | None] = [None, *t.pairs]
    for i, c in enumerate(t.checkpoints):
        lines.append(checkpoint_line(c, pairs[i] if i < len(pairs) else None))
    lines += files_lines(t.checkpoints)
    if any(c.step_source == "name" and c.error is None for c in t.checkpoints):
        lines.append(
            "(name): the step is read from the checkpoint's name; nothing inside records it"
        )
    if t.pending:
        lines.append(f"still being written (not read yet): {', '.join(map(_name, t.pending))}")
    lines.append("")
    if not t.anomalies:
        lines.append("no anomaly found")
    for a in t.anomalies:
        lines += anomaly_lines(a)
    counts = {s: sum(a.severity == s for a in t.anomalies) for s in ("error", "warning", "info")}
    tally = ", ".join(
        _count(counts[s], word)
        for s, word in (("error", "error"), ("warning", "warning"), ("info", "note"))
    )
    lines.append(
        f"{tally} "
        f"(opened {t.stats.get('opened', 0)}, pair passes {t.stats.get('pair_passes', 0)}, "
        f"cached {t.stats.get('cached', 0)})"
    )
    return "\n".join(lines)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
