"""``build_timeline``: discover, read (or take from the cache), order, pair, find anomalies."""

from __future__ import annotations

import time
from pathlib import Path

from ..api import as_view
from ..contracts import Cancel, Progress, ProgressFn, is_cancelled
from ..errors import Cancelled, CkptExplorerError
from ..io.readahead import Readahead
from ..validate.parts import Components, collect
from ..view import CheckpointView
from .cache import SummaryCache, checkpoint_files, identity
from .discover import Candidate, discover
from .facts import Part, moment_norms, summarize_view
from .parts import summarize_parts
from .passes import pair_pass_parts, value_pass_parts
from .result import Timeline
from .summaries import CheckpointSummary, PairSummary

SMALL_CHECKPOINT = 64 * 2**20  # bytes; read ahead whole by the build, not per pair


class _Opened:
    """Views opened during one build (each checkpoint opened at most once)."""

    def __init__(self, stats: dict[str, int]) -> None:
        self.stats = stats
        self._views: dict[str, tuple[CheckpointView, Components]] = {}

    def get(self, path: str) -> tuple[CheckpointView, Components]:
        if path not in self._views:
            view = as_view(path)
            self.stats["opened"] += 1
            self._views[path] = (view, collect(view))
        return self._views[path]

    def parts(self, cand: Candidate) -> list[Part]:
        """The checkpoint's labelled parts: one part labelled ``""`` unless it is saved as
        one file per part."""
        if not cand.parts:
            return [("", *self.get(str(cand.path)))]
        return [(label, *self.get(str(f))) for label, f in cand.parts]


def _read(cand: Candidate, ident: str, mtime: float, opened: _Opened) -> CheckpointSummary:
    try:
        if cand.parts:
            summary = summarize_parts(cand, opened.parts(cand), mtime)
        else:
            view, _ = opened.get(str(cand.path))
            summary = summarize_view(cand, view, mtime)
    except (CkptExplorerError, OSError) as e:
        msg = e.one_line() if isinstance(e, CkptExplorerError) else f"{cand.path}: {e}"
        summary = CheckpointSummary(str(cand.path), name_step=cand.name_step, error=msg)
        summary.mtime = mtime
    summary.identity = ident
    return summary


class _RunReadahead:
    """Asks the kernel for the files of the small checkpoints to read, in run order, across
    opens and pairs: each of their pairs is too short for the diff engine's own read-ahead
    to overlap reading with comparing (larger checkpoints keep that one, which follows the
    pass). Page cache only (no process memory); at most the :class:`Readahead` window
    ahead of the last pair done."""

    def __init__(self, cands: list[Candidate]) -> None:
        self._ends: dict[str, int] = {}
        ranges: list[tuple[Path, int, int]] = []
        for cand in cands:
            p = str(cand.path)
            files = []
            for f in cand.files if cand.parts else checkpoint_files(cand.path):
                try:
                    files.append((f, 0, f.stat().st_size))
                except OSError:
                    continue
            if sum(n for _, _, n in files) <= SMALL_CHECKPOINT:  # large: the engine's own
                ranges += files
                self._ends[p] = sum(n for _, _, n in ranges)
        self._done = 0
        self._ahead = Readahead(ranges)

    def covers(self, path: str) -> bool:
        """Whether ``path`` is read ahead whole here (a small checkpoint: the window holds
        it; a larger one needs the diff engine's read-ahead, which follows its pass)."""
        return path in self._ends

    def done(self, path: str) -> None:
        """Every byte of ``path`` (and of the checkpoints before it) has been read."""
        end = self._ends.get(path, 0)
        if end > self._done:
            self._done = end
            self._ahead.advance(end)

    def close(self) -> None:
        self._ahead.close()


def _order_key(s: CheckpointSummary) -> tuple[int, int, float, str]:
    return (s.step is None, s.step if s.step is not None else 0, s.mtime, s.path)


def _pairs(
    ordered: list[CheckpointSummary],
    readable: list[CheckpointSummary],
    pairs: list[PairSummary],
    cache: SummaryCache,
    opened: _Opened,
    cands: dict[str, Candidate],
    fresh: set[int],
    ahead: _RunReadahead,
    stats: dict[str, int],
    progress: ProgressFn | None,
    cancel: Cancel | None,
) -> None:
    """One pass per consecutive readable pair (or its cached figures); a checkpoint whose
    tensor bytes do not read gets its error and drops out of ``readable``."""
    for i, sb in enumerate(ordered[1:], start=1):
        _check(cancel, sb.path)
        sa = readable[-1]
        key = f"{sa.identity}:{sb.identity}"
        doc = cache.get("pair", key)
        if doc is not None and id(sb) not in fresh and id(sa) not in fresh:
            pair = PairSummary.from_dict(doc)
        else:
            try:
                pa, pb = opened.parts(cands[sa.path]), opened.parts(cands[sb.path])
                ahead_both = ahead.covers(sa.path) and ahead.covers(sb.path)
                pair = pair_pass_parts(pa, sa, pb, sb, readahead=not ahead_both)
            except (CkptExplorerError, OSError) as e:  # listed fine, tensor bytes did not read
                sb.error = e.one_line() if isinstance(e, CkptExplorerError) else f"{sb.path}: {e}"
                sb.tensors = {}
                fresh.add(id(sb))
                continue
            finally:
                ahead.done(sa.path)
            stats["pair_passes"] += 1
            cache.put("pair", key, pair.to_dict())
        pair.step_a, pair.step_b = sa.step, sb.step
        pairs.append(pair)
        readable.append(sb)
        if progress is not None:
            progress(Progress("pair", i, len(ordered) - 1, "pairs", Path(sb.path).name))


def _check(cancel: Cancel | None, path: str | Path) -> None:
    if is_cancelled(cancel):
        raise Cancelled(path, "the timeline build to finish", "a cancel request")


def _partial_last_save(cands: list[Candidate]) -> Candidate | None:
    """The newest checkpoint saved one file per part when it has fewer parts than the run's
    other saves: its other files are still to come (``model_N.pt`` written, ``optim_N.pt``
    not yet), so a live run waits for them rather than reporting a part missing."""
    saves = sorted((c for c in cands if c.parts), key=lambda c: c.name_step or 0)
    if len(saves) < 2:
        return None
    last = saves[-1]
    return last if len(last.parts) < max(len(c.parts) for c in saves[:-1]) else None


def build_timeline(
    run_dir: str | Path,
    cache_dir: str | Path | SummaryCache | None = None,
    progress: ProgressFn | None = None,
    settle_s: float = 0.0,
    cancel: Cancel | None = None,
) -> Timeline:
    """The timeline of the run whose checkpoints are in ``run_dir``.

    Args:
        run_dir: the folder holding the checkpoints (see :mod:`.discover` for the names).
        cache_dir: where summaries are cached per file identity (a folder, or a
            :class:`SummaryCache`); None caches nothing on disk. A cached rebuild opens no
            checkpoint and reads no tensor (``timeline.stats`` counts the work done).
        progress: called with :class:`~ckpt_explorer.contracts.Progress` events: stage
            ``"open"`` (checkpoints read or taken from the cache), then ``"pair"`` (pairs
            compared), each naming the checkpoint.
        settle_s: leave out checkpoints modified less than this many seconds ago (a save
            in progress), and a newest per-part save with fewer files than the others; they
            are listed in ``timeline.pending``.
        cancel: when set, the build stops before its next checkpoint or pair.

    Raises:
        CkptExplorerError: ``run_dir`` is not a folder of checkpoints.
        Cancelled: ``cancel`` was set.
    """
    from .anomalies import find_anomalies

    cache = cache_dir if isinstance(cache_dir, SummaryCache) else SummaryCache(cache_dir)
    stats = {"opened": 0, "pair_passes": 0, "value_passes": 0, "cached": 0}
    opened = _Opened(stats)
    now = time.time()
    summaries: list[CheckpointSummary] = []
    fresh: set[int] = set()
    pending: list[str] = []
    cands = discover(run_dir)
    by_path = {str(c.path): c for c in cands}
    partial = _partial_last_save(cands) if settle_s else None
    found = []
    for cand in cands:
        ident, mtime = identity(cand.path, cand.files if cand.parts else None)
        if (settle_s and now - mtime < settle_s) or cand is partial:
            pending.append(str(cand.path))
            continue
        found.append((cand, ident, mtime, cache.get("ckpt", ident)))
    # the files to read, read ahead from now on: opening them reads scattered small
    # records (pickles, optimizer steps) that would otherwise each wait for the disk
    ahead = _RunReadahead([c for c, _, _, doc in found if doc is None])
    try:
        for i, (cand, ident, mtime, doc) in enumerate(found):
            _check(cancel, cand.path)
            if doc is not None:
                summaries.append(CheckpointSummary.from_dict(doc))
                stats["cached"] += 1
            else:
                summaries.append(_read(cand, ident, mtime, opened))
                fresh.add(id(summaries[-1]))
            if progress is not None:
                progress(Progress("open", i + 1, len(found), "checkpoints", cand.path.name))
        ordered = sorted((s for s in summaries if s.error is None), key=_order_key)
        pairs: list[PairSummary] = []
        readable = ordered[:1]
        _pairs(
            ordered, readable, pairs, cache, opened, by_path, fresh, ahead, stats, progress, cancel
        )
    finally:
        ahead.close()
    for s in readable:
        if not s.complete:
            value_pass_parts(opened.parts(by_path[s.path]), s)
            stats["value_passes"] += 1
            fresh.add(id(s))
        if id(s) in fresh:
            s.moments = moment_norms(s)
            cache.put("ckpt", s.identity, s.to_dict())
    for s in summaries:
        if s.error is not None and id(s) in fresh:
            cache.put("ckpt", s.identity, s.to_dict())
    unreadable = [s for s in summaries if s.error is not None]
    ordered = readable + unreadable
    anomalies = find_anomalies(ordered, pairs, {p: c.naming for p, c in by_path.items()})
    return Timeline(str(run_dir), ordered, pairs, anomalies, stats, pending)
