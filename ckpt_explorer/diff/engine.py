"""Stream aligned tensor pairs in A's on-disk order, one pair (or chunk) at a time.

Per pair: both tensors are loaded as views (mmapped where the format allows), flattened, and
walked in chunks of ``chunk_bytes``. Same dtype and shape: the raw bytes are compared first
(``memcmp``, no float work); a pair whose bytes all agree is *identical*. Otherwise the pair is
walked again in float64 sub-chunks of at most ``FLOAT_ELEMENTS`` elements (sub-chunks whose
bytes agree only add ``||a||²``). On CPU the sub-chunks are reduced by worker threads (one
per core; the fused numba kernel when installed, torch ops otherwise) and their partial sums
are added in chunk order, so the figures are the same bits for any thread or process count.
On an accelerator the worker threads instead fill pinned host slots ahead (byte comparison
and staging copy), and the calling thread starts the copies and torch ops in chunk order.
On CPU with the compiled kernels, a tensor whose bytes are one dense block of a mapped file
(safetensors, torch zips) is read as a numpy view of its raw elements and never becomes a
torch tensor: a diff of such files does not import torch (the figures are the same bits).
A background read-ahead asks the kernel for the next file ranges, so reading overlaps with
comparing. Nothing holds more than the current pair.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contracts import Cancel, Progress, ProgressFn, is_cancelled
from ..errors import CkptExplorerError
from ..io.location import Location
from ..io.readahead import Readahead
from ..io.torch_names import DTYPES
from ..types import TensorRecord
from ..view import CheckpointView
from . import kernel
from .align import Pair, align_names, param_name_keys
from .figure_layout import FIGURES
from .native import bytes_equal
from .raw_arrays import raw_view, supported
from .rows import (
    CHANGED,
    DTYPE_MISMATCH,
    EQUAL,
    IDENTICAL,
    NOT_COMPARED,
    ONLY_IN_A,
    ONLY_IN_B,
    SHAPE_MISMATCH,
    TensorDiff,
    describe_name,
)
from .stats import ChunkStats, Sums

if TYPE_CHECKING:
    import torch

DEFAULT_CHUNK_BYTES = 32 * 2**20
FLOAT_ELEMENTS = 2**20
MAX_THREADS = 8
_BEHIND = 2**20  # bytes released behind a consumed chunk as well (see Engine._release)


_THREADS_LOCK = threading.Lock()
_THREADS_USERS = 0
_THREADS_SAVED = 0


class CpuDevice:
    """The CPU as a device without importing torch (``type`` and ``str`` as torch's)."""

    type = "cpu"
    index = None

    def __str__(self) -> str:
        return "cpu"

    def __repr__(self) -> str:
        return "device(type='cpu')"

    def __eq__(self, other: object) -> bool:
        return str(other) == "cpu"

    def __hash__(self) -> int:
        return hash("cpu")


CPU = CpuDevice()


def torch_device(device: Any) -> torch.device:
    """``device`` as a ``torch.device`` (imports torch)."""
    import torch

    return torch.device(str(device))


@contextmanager
def _one_intraop_thread() -> Iterator[None]:
    """torch intra-op threads set to 1 while any diff of this process runs.

    Reference-counted: the first run saves the process's setting and the last one restores
    it, so concurrent diffs (two dashboard users) never leave the process single-threaded.
    """
    global _THREADS_USERS, _THREADS_SAVED
    import torch

    with _THREADS_LOCK:
        if _THREADS_USERS == 0:
            _THREADS_SAVED = torch.get_num_threads()
        _THREADS_USERS += 1
        torch.set_num_threads(1)
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_USERS -= 1
            if _THREADS_USERS == 0:
                torch.set_num_threads(_THREADS_SAVED)


@dataclass(frozen=True)
class PairPlan:
    """One row to produce: records of both sides (either may be None)."""

    order: int
    pair: Pair
    rec_a: TensorRecord | None
    rec_b: TensorRecord | None

    @property
    def comparable(self) -> bool:
        return (
            self.rec_a is not None
            and self.rec_b is not None
            and tuple(self.rec_a.shape) == tuple(self.rec_b.shape)
        )

    @property
    def nbytes(self) -> int:
        """Bytes read to compare this pair (0 when nothing is read)."""
        if not self.comparable:
            return 0
        assert self.rec_a is not None and self.rec_b is not None
        return self.rec_a.nbytes + self.rec_b.nbytes


def plan_pairs(
    view_a: CheckpointView, view_b: CheckpointView, rename: dict[str, str] | None = None
) -> list[PairPlan]:
    """Every row, in A's on-disk order, then names only in B (in B's on-disk order)."""
    names_a, names_b = view_a.names(), view_b.names()
    pairs = align_names(
        names_a,
        names_b,
        rename,
        param_name_keys(names_a, lambda n: param_state(view_a, n)),
        param_name_keys(names_b, lambda n: param_state(view_b, n)),
    )
    pairs = _pair_tied(pairs, view_a, view_b)
    pos_a = {r.name: i for i, r in enumerate(view_a.disk_order())}
    pos_b = {r.name: i for i, r in enumerate(view_b.disk_order())}

    def key(p: Pair) -> tuple[int, int]:
        if p.a is not None:
            return (0, pos_a[p.a])
        assert p.b is not None
        return (1, pos_b[p.b])

    plans = []
    for i, p in enumerate(sorted(pairs, key=key)):
        rec_a = view_a.record(p.a) if p.a is not None else None
        rec_b = view_b.record(p.b) if p.b is not None else None
        plans.append(PairPlan(i, p, rec_a, rec_b))
    return plans


def tied_aliases(view: CheckpointView) -> dict[str, str]:
    """Dropped name -> kept name of the tied tensors safetensors' ``save_model`` left out
    (it records them in ``__metadata__``: ``{"head.weight": "emb.weight"}``)."""
    names = set(view.names())
    out = {}
    for key, value in view.values.items():
        if key.startswith("__metadata__.") and isinstance(value, str):
            dropped = key[len("__metadata__.") :]
            if value in names and dropped not in names:
                out[dropped] = value
    return out


def _pair_tied(pairs: list[Pair], view_a: CheckpointView, view_b: CheckpointView) -> list[Pair]:
    """A name one side holds and the other saved as a tied alias pairs with the kept tensor."""
    tied_a, tied_b = tied_aliases(view_a), tied_aliases(view_b)
    if not tied_a and not tied_b:
        return pairs
    out = []
    for p in pairs:
        if p.b is None and p.a in tied_b:
            p = Pair(p.a, tied_b[p.a], "tied")
        elif p.a is None and p.b in tied_a:
            p = Pair(tied_a[p.b], p.b, "tied")
        out.append(p)
    return out


def resolve_device(device: str) -> Any:
    """``"cpu"``, ``"cuda[:N]"`` or ``"auto"`` (CUDA when available, else CPU). The CPU is
    :data:`CPU` (torch is not imported for it); a CUDA device is a ``torch.device``."""
    if device == "cpu":
        return CPU
    import torch

    if device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else CPU
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise CkptExplorerError(
                None,
                f"a CUDA device for device={device!r}",
                "torch.cuda.is_available() is False",
                "Use device='cpu' or device='auto'.",
            )
        return torch.device(device)
    raise CkptExplorerError(None, "device 'cpu', 'cuda' or 'auto'", repr(device))


def param_name(view: CheckpointView, name: str) -> str | None:
    """The parameter name of an optimizer state row (``[part/]<name>``), where the view
    knows it (its slot's optimizer names the id)."""
    return view.slot_param(name)


def param_state(view: CheckpointView, name: str) -> tuple[str, str] | None:
    """(parameter name, state name) of an optimizer state row whose parameter is known."""
    param = view.slot_param(name)
    slot = view.slot(name) if param is not None else None
    return (param, slot.state) if slot is not None and param is not None else None


class _Stager:
    """Pinned host slots for host-to-device copies, filled ahead by worker threads.

    Chunk ``j`` of a pair uses slot ``j % slots`` (one buffer per side). A worker fills it
    only after the copies of the chunk that last used it have left (that chunk's CUDA event);
    the caller keeps fewer than ``slots - 1`` chunks staged ahead, so that event is always
    recorded before a fill waits on it. On CPU (tests) the buffers are plain memory.
    """

    def __init__(self, nbytes: int, device: torch.device, slots: int) -> None:
        import torch

        self.device = device
        self.cuda = device.type == "cuda"
        self.slots = slots

        def buf() -> torch.Tensor:
            b = torch.empty(nbytes, dtype=torch.uint8)
            return b.pin_memory() if self.cuda else b

        self.bufs = [(buf(), buf()) for _ in range(slots)]
        self.events: list[Any] = [None] * slots

    def fill(self, j: int, side: int, t: torch.Tensor) -> torch.Tensor:
        """Copy chunk ``t`` into side ``side`` of chunk ``j``'s slot (runs in a worker thread)."""
        slot = j % self.slots
        event = self.events[slot]
        if event is not None:
            event.synchronize()  # the copies that last used this slot have finished
        nbytes = t.numel() * t.element_size()
        host = self.bufs[slot][side][:nbytes].view(t.dtype)
        host.copy_(t.reshape(-1))
        return host

    def send(self, j: int, hosts: list[torch.Tensor]) -> list[torch.Tensor]:
        """Start the copies of chunk ``j``'s staged buffers to the device (calling thread)."""
        import torch

        devs = [h.to(self.device, non_blocking=True) for h in hosts]
        if self.cuda:
            event = torch.cuda.Event()
            event.record()
            self.events[j % self.slots] = event
        return devs


class Engine:
    """Compares planned pairs; one instance per run (it owns the float64 work buffers)."""

    def __init__(
        self,
        view_a: CheckpointView,
        view_b: CheckpointView,
        *,
        atol: float = 0.0,
        rtol: float = 0.0,
        device: str = "cpu",
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        progress: ProgressFn | None = None,
        cancel: Cancel | None = None,
        on_row: Callable[[TensorDiff], Any] | None = None,
        threads: int | None = None,
        readahead: bool = True,
    ) -> None:
        if chunk_bytes <= 0:
            raise CkptExplorerError(None, "chunk_bytes > 0", str(chunk_bytes))
        if atol < 0 or rtol < 0:
            raise CkptExplorerError(None, "atol >= 0 and rtol >= 0", f"{atol}, {rtol}")
        self.view_a, self.view_b = view_a, view_b
        self.atol, self.rtol = float(atol), float(rtol)
        self.device = resolve_device(device)
        self.chunk_bytes = int(chunk_bytes)
        self.progress = progress
        self.cancel = cancel
        self.on_row = on_row
        self.readahead = readahead  # False: the caller reads the files ahead itself
        # worker threads for the CPU float pass; never changes a figure (fixed chunks and order)
        self.threads = max(1, threads or min(MAX_THREADS, os.cpu_count() or 1))
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self.cancelled = False
        self.done = 0
        self.total = 0
        self._stats: ChunkStats | None = None
        self._stager: _Stager | None = None
        self._readahead: Readahead | None = None
        self._last_report = 0
        self._report_every = 1
        self._t0 = time.perf_counter()
        self._item = ""
        self._torch_ready: Callable[[], None] | None = None
        self._spans: tuple[tuple[Any, int, int] | None, ...] = ()

    # ---- progress and cancellation -------------------------------------------------------
    def _should_stop(self) -> bool:
        return is_cancelled(self.cancel)

    def _advance(self, nbytes: int, force: bool = False) -> None:
        self.done += nbytes
        if self._readahead is not None:
            self._readahead.advance(self.done)
        if self.progress is not None and (
            force or self.done - self._last_report >= self._report_every or self.done >= self.total
        ):
            self._report()

    def _report(self) -> None:
        """A ``compare`` event: bytes of both sides compared, the pair being compared."""
        assert self.progress is not None
        self._last_report = self.done
        elapsed = time.perf_counter() - self._t0
        eta = elapsed / self.done * max(self.total - self.done, 0) if self.done > 0 else None
        self.progress(Progress("compare", self.done, self.total, "bytes", self._item, eta_s=eta))

    # ---- the run --------------------------------------------------------------------------
    def run(self, plans: Sequence[PairPlan]) -> list[TensorDiff]:
        """Rows for ``plans`` in their order; after cancellation the rest are ``not_compared``."""
        self.total = sum(p.nbytes for p in plans)
        self._t0 = time.perf_counter()
        self._report_every = max(1, min(16 * 2**20, self.total // 200))
        if self.progress is not None:
            self._report()  # the total, before the first byte
        rows: list[TensorDiff] = []
        ranges: list[tuple[Location, int, int]] = []
        for p in plans if self.readahead else ():
            if p.nbytes:
                for view, rec in ((self.view_a, p.rec_a), (self.view_b, p.rec_b)):
                    assert rec is not None
                    span = view.disk_range(rec)
                    if span is not None:
                        ranges.append(span)
        # one intra-op thread: reductions then sum in a fixed order, so the figures are the
        # same bit for bit in every run and for every process count (scale out with nproc);
        # set when the first pair takes torch (a diff of raw views never imports it)
        with ExitStack() as stack, Readahead(ranges) as readahead, self._workers():
            self._torch_ready = lambda: stack.enter_context(_one_intraop_thread())
            if self.device.type != "cpu":
                self._use_torch()
            self._readahead = readahead
            for p in plans:
                if not self.cancelled and self._should_stop():
                    self.cancelled = True
                if self.cancelled:
                    rows.append(self._row(p, NOT_COMPARED))
                    continue
                self._item = (p.pair.a if p.pair.a is not None else p.pair.b) or ""
                row = self.compare(p)
                rows.append(row)
                if self.on_row is not None:
                    self.on_row(row)
            self._readahead = None
            self._torch_ready = None
        if self.progress is not None and not self.cancelled and self._last_report != self.done:
            self._report()
        return rows

    def _row(self, p: PairPlan, status: str) -> TensorDiff:
        a, b = p.rec_a, p.rec_b
        name = p.pair.a if p.pair.a is not None else p.pair.b
        assert name is not None
        pa = param_name(self.view_a, p.pair.a) if p.pair.a is not None else None
        pb = param_name(self.view_b, p.pair.b) if p.pair.b is not None else None
        slot = self.view_a.slot(name) if p.pair.a is not None else self.view_b.slot(name)
        part, state, module, layer = describe_name(name, pa if pa is not None else pb, slot)
        return TensorDiff(
            name=name,
            status=status,
            name_b=p.pair.b if p.pair.a is not None and p.pair.b != p.pair.a else None,
            match=p.pair.how,
            part=part,
            param=pa if pa is not None else pb,
            param_b=pb if pb is not None and pb != pa else None,
            state=state,
            module=module,
            layer=layer,
            dtype_a=a.dtype if a else None,
            dtype_b=b.dtype if b else None,
            shape_a=list(a.shape) if a else None,
            shape_b=list(b.shape) if b else None,
            numel=(a or b).numel if (a or b) else 0,  # type: ignore[union-attr]
            nbytes_a=a.nbytes if a else 0,
            nbytes_b=b.nbytes if b else 0,
            order=p.order,
        )

    def compare(self, p: PairPlan) -> TensorDiff:
        if p.rec_a is None:
            return self._row(p, ONLY_IN_B)
        if p.rec_b is None:
            return self._row(p, ONLY_IN_A)
        if not p.comparable:
            return self._row(p, SHAPE_MISMATCH)
        assert p.pair.a is not None and p.pair.b is not None
        row = self._row(p, IDENTICAL)
        start = self.done
        raw = self._raw_pair(p.rec_a, p.rec_b)
        ta: Any
        tb: Any
        self._spans = ()
        if raw is not None:
            ta, tb = raw
            same_dtype = p.rec_a.dtype == p.rec_b.dtype
            self._spans = (_span(p.rec_a, ta), _span(p.rec_b, tb))
        else:
            self._use_torch()
            ta = _flat(self.view_a.load(p.pair.a))
            tb = _flat(self.view_b.load(p.pair.b))
            same_dtype = ta.dtype == tb.dtype and p.rec_a.dtype == p.rec_b.dtype
        if len(ta) != len(tb):
            # complex against real of one shape: the flat views (real pairs) differ in length
            row.status = DTYPE_MISMATCH
            return row
        if same_dtype and self._bytes_identical(ta, tb):
            # no float work: the figures a same-bytes pair has by definition
            row.set_figures({fig.name: fig.identical for fig in FIGURES})
            return row
        # float path: rewind the progress of the byte pass, walk again in float64
        self.done = start
        dtypes = (p.rec_a.dtype, p.rec_b.dtype) if raw is not None else None
        sums = self._float_pass(ta, tb, same_dtype, dtypes)
        if self.cancelled:
            return self._row(p, NOT_COMPARED)
        f = sums.figures()
        row.set_figures(vars(f))
        if not same_dtype:
            row.status = DTYPE_MISMATCH
        else:
            row.status = EQUAL if f.n_outside == 0 else CHANGED
        return row

    def _use_torch(self) -> None:
        """Before the first torch op of a run: one intra-op thread (imports torch)."""
        if self._torch_ready is not None:
            self._torch_ready()
            self._torch_ready = None

    def _raw_pair(self, rec_a: TensorRecord, rec_b: TensorRecord) -> tuple[Any, Any] | None:
        """Both tensors as flat numpy views of their raw elements, where both are dense blocks
        of local mapped files in dtypes the kernels read and the kernels run here; else None
        (the torch path)."""
        if self.device.type != "cpu" or not (supported(rec_a.dtype) and supported(rec_b.dtype)):
            return None
        if not kernel.have_numba():
            return None
        views = []
        for rec in (rec_a, rec_b):
            dense = getattr(rec.read_values, "dense_bytes", None)
            data = dense() if dense is not None else None
            if data is None:
                return None
            views.append(raw_view(data, rec.dtype))
        return views[0], views[1]

    def _bytes_identical(self, ta: Any, tb: Any) -> bool:
        n = len(ta)
        step = max(1, self.chunk_bytes // max(1, _itemsize(ta)))
        for i in range(0, n, step):
            ca, cb = ta[i : i + step], tb[i : i + step]
            if not bytes_equal(ca, cb):
                return False
            self._advance(ca.nbytes + cb.nbytes)
            self._release(i, i + step)
        return True

    def _release(self, start: int, stop: int) -> None:
        """Elements ``[start, stop)`` of the current raw pair are consumed: drop their mapped
        pages (resident memory stays near one window, not the files' size)."""
        for span in self._spans:
            if span is not None:
                mapped, base, itemsize = span
                # from a little before: the kernel maps pages around each fault (fault-around),
                # so reading a tensor maps the end of the one before it again
                first = max(0, base + start * itemsize - _BEHIND)
                mapped.release(first, base + stop * itemsize - first)

    @contextmanager
    def _workers(self) -> Iterator[None]:
        """The worker threads (started by :meth:`_pool_for` at the first tensor of more than
        one chunk), shut down at the end of one run."""
        try:
            yield
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def _pool_for(self, chunks: int) -> ThreadPoolExecutor | None:
        """The worker pool for a tensor of ``chunks`` chunks; None (work inline) for a single
        chunk, where a thread hand-off only adds latency (runs of many small tensors)."""
        if self.threads <= 1 or chunks <= 1:
            return None
        if self._pool is None:  # CPU: the float pass; accelerator: staging into pinned slots
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="ckpt-diff")
        return self._pool

    def _work(self) -> ChunkStats:
        """This thread's torch work buffers (one set per worker thread on CPU)."""
        if self.device.type != "cpu":
            if self._stats is None:
                device = torch_device(self.device)
                self._stats = ChunkStats(FLOAT_ELEMENTS, device, self.atol, self.rtol)
            return self._stats
        stats: ChunkStats | None = getattr(self._local, "stats", None)
        if stats is None:
            import torch

            # OpenMP's thread count is per calling thread: a worker starts at the default,
            # and a multi-threaded BLAS dot would round differently from run to run
            torch.set_num_threads(1)
            stats = ChunkStats(FLOAT_ELEMENTS, torch_device(self.device), self.atol, self.rtol)
            self._local.stats = stats
        return stats

    def _chunk_cpu(
        self, ca: Any, cb: Any, same_dtype: bool, fused: bool, dtypes: tuple[str, str] | None
    ) -> list[float]:
        """One sub-chunk's partials on CPU (runs in a worker thread); ``dtypes`` given: the
        chunks are raw numpy views of tensors of those dtypes."""
        identical = same_dtype and bytes_equal(ca, cb)
        if dtypes is not None:
            if identical:
                return kernel.raw_identical_partials(ca, dtypes[0])
            return kernel.raw_pair_partials(ca, cb, dtypes, self.atol, self.rtol)
        if fused:
            if identical:
                return kernel.identical_partials(ca)
            return kernel.pair_partials(ca, cb, self.atol, self.rtol)
        stats = self._work()
        part = stats.identical(ca) if identical else stats.reduce(ca, cb)
        return part.tolist()  # type: ignore[no-any-return]

    def _float_pass(
        self, ta: Any, tb: Any, same_dtype: bool, dtypes: tuple[str, str] | None = None
    ) -> Sums:
        itemsize = max(_itemsize(ta), _itemsize(tb))
        step = max(1, min(FLOAT_ELEMENTS, self.chunk_bytes // itemsize))
        starts = range(0, len(ta), step)
        if self.device.type != "cpu":
            return self._float_pass_device(ta, tb, same_dtype, starts, step)
        fused = kernel.have_numba()  # decided once per pair: every chunk takes the same path
        pool = self._pool_for(len(starts))
        sums = Sums()
        pending: deque[tuple[int, int, Future[list[float]] | list[float]]] = deque()
        window = 2 * self.threads
        it = iter(starts)
        while True:
            while len(pending) < window and not self.cancelled:
                i = next(it, None)
                if i is None:
                    break
                ca, cb = ta[i : i + step], tb[i : i + step]
                nbytes = ca.nbytes + cb.nbytes
                if pool is None:
                    part = self._chunk_cpu(ca, cb, same_dtype, fused, dtypes)
                    pending.append((i, nbytes, part))
                else:
                    job = pool.submit(self._chunk_cpu, ca, cb, same_dtype, fused, dtypes)
                    pending.append((i, nbytes, job))
            if not pending:
                break
            i, nbytes, done = pending.popleft()
            # partials are added in chunk order, whichever thread finished first
            sums.merge(done if isinstance(done, list) else done.result())
            self._advance(nbytes)
            self._release(i, i + step)
            if self._should_stop():
                self.cancelled = True
            if self.cancelled:
                for _, _, rest in pending:
                    if not isinstance(rest, list):
                        rest.cancel()
                        if not rest.cancelled():
                            rest.exception()  # wait: the thread still reads the mapping
                break
        return sums

    def _float_pass_device(
        self, ta: torch.Tensor, tb: torch.Tensor, same_dtype: bool, starts: range, step: int
    ) -> Sums:
        """The float pass on an accelerator: worker threads compare bytes and fill pinned
        slots ahead, this thread starts the copies and the torch ops in chunk order; the
        partials stay on the device until the pair is done."""
        import torch

        stats = self._work()
        pool = self._pool_for(len(starts))
        if self._stager is None:
            # a chunk is at most FLOAT_ELEMENTS elements of at most 8 bytes
            slots = min(2 * self.threads, 8) + 2
            self._stager = _Stager(FLOAT_ELEMENTS * 8, torch_device(self.device), slots)
        stager = self._stager

        def stage(j: int, i: int) -> tuple[bool, list[torch.Tensor], int]:
            if pool is not None and not getattr(self._local, "one_thread", False):
                torch.set_num_threads(1)  # per worker: copies in parallel, not each copy
                self._local.one_thread = True
            ca, cb = ta[i : i + step], tb[i : i + step]
            identical = same_dtype and bytes_equal(ca, cb)
            hosts = [stager.fill(j, 0, ca)]
            if not identical:
                hosts.append(stager.fill(j, 1, cb))
            return identical, hosts, ca.numel() * ca.element_size() + cb.numel() * cb.element_size()

        partials: list[torch.Tensor] = []
        pending: deque[tuple[int, Future[Any] | tuple[bool, list[torch.Tensor], int]]] = deque()
        it = enumerate(starts)
        while True:
            while len(pending) < stager.slots - 2 and not self.cancelled:
                nxt = next(it, None)
                if nxt is None:
                    break
                j, i = nxt
                job = stage(j, i) if pool is None else pool.submit(stage, j, i)
                pending.append((j, job))
            if not pending:
                break
            j, job = pending.popleft()
            identical, hosts, nbytes = job if isinstance(job, tuple) else job.result()
            devs = stager.send(j, hosts)
            partials.append(stats.identical(devs[0]) if identical else stats.reduce(*devs))
            self._advance(nbytes)
            if self._should_stop():
                self.cancelled = True
            if self.cancelled:
                for _, rest in pending:  # let the fills finish: they write the slots
                    if not isinstance(rest, tuple):
                        rest.exception()
                break
        sums = Sums()
        if partials:
            table = torch.stack([t.to(stats.device) for t in partials]).cpu().tolist()
            for v in table:
                sums.merge(v)
        return sums


def _span(rec: TensorRecord, view: Any) -> tuple[Any, int, int] | None:
    """(mapped file, first byte, bytes per element) of a raw view of ``rec``'s bytes, to
    release its pages as the stream passes them (None: not a mapped local file)."""
    loader = rec.read_values
    mapped = getattr(loader, "mapped", None)
    if mapped is None or not hasattr(mapped, "release"):
        return None
    assert loader is not None
    known = DTYPES.get(rec.dtype)
    if known is None:
        return None
    start = loader.offset + loader.storage_offset * known.itemsize  # type: ignore[attr-defined]
    return mapped, start, int(view.itemsize)


def _itemsize(x: Any) -> int:
    """Bytes per element of a flat torch tensor or numpy array."""
    return int(x.itemsize) if hasattr(x, "itemsize") else int(x.element_size())


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A flat view (a copy only for non-contiguous storage); complex as real pairs."""
    import torch

    if t.is_complex():
        t = torch.view_as_real(t)
    return t.reshape(-1)
