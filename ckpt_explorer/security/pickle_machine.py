"""One pickle walked the way CPython's C unpickler (``_pickle.c``) loads it, nothing unpickled.

:func:`walk_pickle` reads every opcode with its argument exactly as ``pickle.load`` does
(binary lengths, text arguments through :mod:`.pickle_text`, protocols 0-5, framing) and moves
symbolic values on a stack, a mark stack and a memo with the C unpickler's rules (``MEMOIZE``
numbers by the count of filled slots, a pop below the last mark is an underflow), so that the
target of every ``find_class`` (``GLOBAL``, ``STACK_GLOBAL`` built from memoised strings,
``INST``, ``EXT``) and of every call (``REDUCE``, ``NEWOBJ``, ``OBJ``, ``INST``, ``BUILD``,
``APPEND``, ``SETITEM``, ``ADDITEMS``) is known without importing or calling anything.

The walk stops where the C unpickler would certainly stop: at ``STOP``, or at an error that
does not depend on what a call returns (a bad opcode, a truncated argument, a stack underflow,
a missing memo entry, calling a constant). Where the outcome depends on a value the file
computes, or where the pure-Python unpickler (joblib, ``pickle._Unpickler``) would read the
bytes differently, the walk records a *doubt* and goes on: it judges at least everything any
loader could reach.
"""

from __future__ import annotations

import _compat_pickle
import functools
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import pickle_text as text
from .byte_loaders import BYTE_LOADERS, CALLS_ARGUMENT, called_arguments
from .pickle_text import Ambiguous, TextArgError

MAX_OPS = 50_000_000  # opcodes walked per pickle before the walk gives up (a doubt)
MAX_STACK = 2_000_000  # live stack entries before the walk gives up (a doubt)
MAX_MEMO = 8_000_000  # memo entries before the walk gives up (a doubt)
MAX_KEPT_BYTES = 64 * 2**20  # byte and text constants copied out of the buffer, in all
CHECK_EVERY = 1 << 14  # opcodes between two looks at the clock and the memory in use
KEEP = 256  # items a container keeps for later evaluation (more are counted, not kept)
_SSIZE_MAX = 2**63 - 1
HIGHEST_PROTOCOL = 5


@dataclass(frozen=True)
class GlobalRef:
    """A ``find_class(module, name)`` the load makes, and where (after protocol-2 renames)."""

    module: str
    name: str
    offset: int
    opcode: str  # GLOBAL, STACK_GLOBAL, INST or EXT1/2/4
    raw: tuple[str, str] | None = None  # the names as written, when a rename applied

    @functools.cached_property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Call:
    """An opcode that makes the unpickler call code of ``target`` (or of an object it made).

    ``on_global_itself``: BUILD / SETITEM / APPEND / ADDITEMS on the global object itself
    (a class or function patched in the running process), not on an instance.
    """

    opcode: str
    offset: int
    target: GlobalRef | None
    on_global_itself: bool = False


@dataclass
class PickleWalk:
    """What one pickle does when loaded. Offsets count from the start of the buffer."""

    start: int
    end: int = 0  # just after STOP, or the opcode where the load stops
    complete: bool = False  # STOP was reached
    error: str = ""  # why the load stops before STOP
    globals: list[GlobalRef] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    doubts: list[tuple[int, str]] = field(default_factory=list)  # (offset, why)
    opcodes: dict[str, int] = field(default_factory=dict)  # opcode name -> first offset
    embedded: list[tuple[int, Any]] = field(default_factory=list)  # bytes / BigBytes: pickles
    # (offset, byte loader called, the bytes or BigBytes it loads), see :mod:`.byte_loaders`
    nested_loads: list[tuple[int, str, Any]] = field(default_factory=list)
    limit: str = ""  # the budget that stopped the walk (time, memory), when one did
    failed_imports: list[str] = field(default_factory=list)  # module names no import finds
    protocol: int = 0
    ops: int = 0
    value: Any = None  # what the load returns (see the value classes below)

    @property
    def did_anything(self) -> bool:
        """Whether the load got past its first opcode into real work (a global or a STOP)."""
        return self.complete or bool(self.globals) or bool(self.calls)


# Values on the symbolic stack: plain Python constants (str, bytes, int, float, bool, None,
# Ambiguous), containers made by opcodes, globals, and objects made by calls.


@dataclass(eq=False, slots=True)
class Glob:
    ref: GlobalRef


@dataclass(eq=False, slots=True)
class Made:
    """An object a call made (``by`` the global called; None: persistent_load's result)."""

    by: GlobalRef | None
    args: Any = None
    state: Any = None  # the last BUILD state, when small


@dataclass(eq=False, slots=True)
class Opaque:
    """A value the walk cannot know (an EXT code, a call of an object made in the pickle)."""

    why: str


@dataclass(eq=False, slots=True)
class Tup:
    items: tuple[Any, ...] | None  # None: too many to keep


@dataclass(eq=False, slots=True)
class Lst:
    items: list[Any] | None


@dataclass(eq=False, slots=True)
class Dct:
    items: dict[Any, Any] | None  # keys made hashable by _key


@dataclass(eq=False, slots=True)
class SetV:
    frozen: bool


@dataclass(frozen=True)
class BigBytes:
    """A byte string too long to copy: its place in the buffer."""

    offset: int
    length: int


def is_module_path(module: str) -> bool:
    """Whether ``import module`` can find anything: dotted identifiers (a file in the folder
    a loader starts in may still carry another name: the folder check looks for those)."""
    return bool(module) and all(part.isidentifier() for part in module.split("."))


def resolve_name(module: str, name: str, proto: int) -> tuple[str, str]:
    """What ``find_class`` imports for a pickled global: below protocol 3 (where the load has
    seen no PROTO 3+ yet), ``fix_imports`` maps Python 2 names as ``_compat_pickle`` says."""
    if proto >= 3:
        return module, name
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


class _Stop(Exception):
    """The C unpickler raises here: the load ends."""


class _Limit(Exception):
    """A budget of the walk ran out: the walk gives up (a doubt), the load would go on."""


@dataclass
class Budget:
    """Limits of one walk beyond its opcodes: a deadline (``time.thread_time``: CPU seconds of
    the judging thread) and the anonymous memory (bytes) the process may hold; None: no such
    limit."""

    deadline: float | None = None
    memory: int | None = None
    seconds: float = 0.0
    seconds_words: str = ""  # the limits in words
    memory_words: str = ""


def anon_memory() -> int | None:
    """Anonymous memory this process holds now (bytes; None where ``/proc`` cannot say)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


LOAD_FROM_BYTES = "torch.storage._load_from_bytes"  # pickle.dumps of a tensor calls it
GETATTR = "builtins.getattr"
_BYTE_MAKERS = frozenset({"builtins.bytes", "builtins.bytearray", "__builtin__.bytearray"})
_LATIN1 = frozenset({"latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"})
_TEXT_CODECS = _LATIN1 | {"utf-8", "utf8", "ascii"}
_BIG = 1 << 20


def _key(value: Any) -> Any:
    return value if isinstance(value, str | bytes | int | float | bool | None) else id(value)


def _looks_like_pickle(value: bytes) -> bool:
    return len(value) >= 4 and value[0] == 0x80 and value[1] <= 5 and value[-1:] == b"."


def _show(value: Any) -> str:
    """A value in a message, never recursing into what the pickle built."""
    if isinstance(value, Ambiguous):
        return repr(value.candidates())
    if isinstance(value, str | bytes | int | float | bool | None):
        return repr(value)[:80]
    return type(value).__name__


class _Machine:
    def __init__(
        self, data: Any, start: int, end: int, *, torch_zip: bool, max_ops: int = MAX_OPS
    ) -> None:
        self.data = data
        self.pos = start
        self.limit = end
        self.w = PickleWalk(start)
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}
        self.proto = 0
        self.frame_end: int | None = None
        self.torch_zip = torch_zip  # torch's zip loader maps torch.tensor -> torch._tensor
        self.on_build: BuildHook | None = None
        self.max_ops = max_ops
        # builtins.getattr: times each reference was pushed / called as getattr(Class, "name")
        self.getattr_pushed: dict[GlobalRef, int] = {}
        self.getattr_resolved: dict[GlobalRef, int] = {}
        self.budget = Budget()
        self.kept = 0  # bytes of constants copied out of the buffer
        self.memo_dense: list[Any] = []  # memo[0..n-1]; the rest in self.memo
        # references to byte loaders pushed and not yet called on bytes the walk knows
        self.loader_refs: dict[GlobalRef, int] = {}

    # --- reading --------------------------------------------------------------------------

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.limit:
            raise _Stop("pickle data was truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def skip(self, n: int) -> int:
        """Skip ``n`` argument bytes; returns where they start."""
        if n < 0 or self.pos + n > self.limit:
            raise _Stop("pickle data was truncated")
        at = self.pos
        self.pos += n
        return at

    def readline(self) -> bytes:
        nl = self.data.find(b"\n", self.pos, self.limit)
        if nl < 0:
            raise _Stop("pickle data was truncated (a line without its newline)")
        out = bytes(self.data[self.pos : nl + 1])
        self.pos = nl + 1
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.read(n), "little")

    def doubt(self, at: int, why: str) -> None:
        self.w.doubts.append((at, why))

    # --- the stack (C's Pdata with its fence) ---------------------------------------------

    @property
    def fence(self) -> int:
        return self.marks[-1] if self.marks else 0

    def push(self, value: Any) -> None:
        if type(value) is Glob and value.ref.qualified == GETATTR:
            self.getattr_pushed[value.ref] = self.getattr_pushed.get(value.ref, 0) + 1
        self.stack.append(value)
        if len(self.stack) > MAX_STACK:
            raise _Limit(f"over {MAX_STACK:,} objects on the stack (the walk's memory limit)")
        if type(value) is Glob and value.ref.qualified in BYTE_LOADERS:
            self.loader_refs[value.ref] = self.loader_refs.get(value.ref, 0) + 1

    def pop(self) -> Any:
        if len(self.stack) <= self.fence:
            raise _Stop("unpickling stack underflow")
        return self.stack.pop()

    def top(self) -> Any:
        if len(self.stack) <= self.fence:
            raise _Stop("unpickling stack underflow")
        return self.stack[-1]

    def marker(self) -> int:
        if not self.marks:
            raise _Stop("could not find MARK")
        return self.marks.pop()

    def pop_from(self, start: int) -> list[Any]:
        if start < self.fence:
            raise _Stop("unpickling stack underflow")
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def memo_put(self, idx: int, value: Any) -> None:
        dense = self.memo_dense
        if idx == len(dense) and not self.memo:  # the usual case: the next free slot
            dense.append(value)
            if idx >= MAX_MEMO:
                raise _Limit(f"over {MAX_MEMO:,} memo entries (the walk's memory limit)")
            return
        if 0 <= idx < len(dense):
            dense[idx] = value
            return
        if idx == len(dense):
            self.memo.pop(idx, None)
            dense.append(value)
            while len(dense) in self.memo:  # entries put ahead of the dense run join it
                dense.append(self.memo.pop(len(dense)))
        else:
            self.memo[idx] = value
        if len(dense) + len(self.memo) > MAX_MEMO:
            raise _Limit(f"over {MAX_MEMO:,} memo entries (the walk's memory limit)")

    def memo_get(self, idx: int) -> Any:
        if 0 <= idx < len(self.memo_dense):
            return self.memo_dense[idx]
        if idx not in self.memo:
            raise _Stop(f"Memo value not found at index {idx}")
        return self.memo[idx]

    @property
    def memo_len(self) -> int:
        return len(self.memo_dense) + len(self.memo)

    def keep(self, n: int) -> bool:
        """Whether ``n`` more bytes of constants may be copied out of the buffer."""
        if self.kept + n > MAX_KEPT_BYTES:
            return False
        self.kept += n
        return True

    # --- globals and calls ----------------------------------------------------------------

    def find_class(self, module: str, name: str, at: int, opcode: str) -> GlobalRef:
        """The names ``find_class`` looks up (protocol < 3 renames; torch's own maps)."""
        mod, nm = resolve_name(module, name, self.proto)
        if self.torch_zip and mod == "torch.tensor":
            mod = "torch._tensor"
        if not is_module_path(mod):  # the import fails: no installed module has this name
            self.w.failed_imports.append(mod)
            raise _Stop(f"No module named {mod!r} (not an importable name)")
        raw = (module, name) if (mod, nm) != (module, name) else None
        ref = GlobalRef(mod, nm, at, opcode, raw)
        self.w.globals.append(ref)
        return ref

    def call(self, opcode: str, at: int, callee: Any, args: Any = None) -> Any:
        """``opcode`` calls ``callee`` (INST: a global not pushed before) with ``args``."""
        if isinstance(callee, Glob):
            ref = callee.ref
            self.w.calls.append(Call(opcode, at, ref))
            items = args.items if isinstance(args, Tup) else None
            if ref.qualified in BYTE_LOADERS:
                return self.load_bytes(opcode, at, ref, items, pushed=opcode != "INST")
            if ref.qualified in CALLS_ARGUMENT:
                self._calls_argument(opcode, at, ref, items)
            if opcode in ("REDUCE", "INST", "OBJ"):  # these call a function too
                return self._evaluate(ref, args)
            return Made(ref, args)
        if isinstance(callee, Made | Opaque):
            self.w.calls.append(Call(opcode, at, None))
            self.doubt(at, f"{opcode} calls an object made inside the pickle")
            return Opaque("the result of calling an object made inside the pickle")
        raise _Stop(f"{opcode} on an object that is not callable")

    def load_bytes(
        self, opcode: str, at: int, ref: GlobalRef, items: tuple[Any, ...] | None, *, pushed: bool
    ) -> Opaque:
        """A call of a byte loader: its bytes, when the walk knows them, are judged as a file of
        their own (:func:`.views.nested_loads`); otherwise a doubt names the loader."""
        index = BYTE_LOADERS[ref.qualified]
        data = (
            items[index] if items is not None and index is not None and index < len(items) else None
        )
        how = f"{opcode} at byte {at} calls {ref.qualified} (named by {ref.opcode} at byte {ref.offset})"
        if index is None:
            self.doubt(at, f"{how}, which loads a file or stream the pickle names: not judged")
        elif isinstance(data, bytes | BigBytes):
            self.w.nested_loads.append((at, ref.qualified, data))
            if pushed and self.loader_refs.get(ref, 0) > 0:
                self.loader_refs[ref] -= 1
        else:
            self.doubt(at, f"{how} on bytes the walk cannot know ({_show(data)}): not judged")
        return Opaque(f"what {ref.qualified} loads")

    def _calls_argument(
        self, opcode: str, at: int, ref: GlobalRef, items: tuple[Any, ...] | None, depth: int = 0
    ) -> None:
        """``ref`` calls one of its arguments: that is judged as a call of the argument."""
        if depth > 8:
            self.doubt(at, f"{opcode} calls functions that call their arguments, over 8 deep")
            return
        if items is None:
            self.doubt(at, f"{opcode} calls {ref.qualified} with arguments the walk cannot know")
            return
        via = f"{opcode} (by {ref.qualified})"
        for callee, call_args in called_arguments(ref.qualified, items):
            if isinstance(callee, Glob):
                self.w.calls.append(Call(via, at, callee.ref))
                if callee.ref.qualified in BYTE_LOADERS:
                    self.load_bytes(via, at, callee.ref, call_args, pushed=True)
                elif callee.ref.qualified in CALLS_ARGUMENT:
                    self._calls_argument(via, at, callee.ref, call_args, depth + 1)
            elif isinstance(callee, Made | Opaque) and call_args != ():
                # (a class given by name is instantiated; an object made here is not called)
                self.w.calls.append(Call(via, at, None))
                self.doubt(at, f"{via} calls an object made inside the pickle")

    def _evaluate(self, ref: GlobalRef, args: Any) -> Any:
        """A few calls whose result matters: ``getattr(Class, "name")`` (a method reached
        through its class), bytes made in the pickle (protocol 2's ``_codecs.encode(s,
        "latin1")``, ``bytes``/``bytearray`` of bytes, text or small ints)."""
        if ref.qualified == GETATTR:
            return self._attribute(ref, args)
        if ref.qualified in _BYTE_MAKERS:
            items = args.items if isinstance(args, Tup) else None
            made = _make_bytes(items) if items else None
            if made is not None and self.keep(len(made)):
                return self.const_bytes(made, ref.offset)
            return Made(ref, args)
        if ref.qualified in ("_codecs.encode", "codecs.encode"):
            items = args.items if isinstance(args, Tup) else None
            enc = items[1] if items and len(items) > 1 else "utf-8"
            if not isinstance(enc, str) or enc.lower() not in _TEXT_CODECS:
                self.doubt(ref.offset, "codecs.encode with a codec chosen by the file")
            elif items and isinstance(items[0], str) and enc.lower() in _LATIN1:
                try:
                    return self.const_bytes(items[0].encode("latin-1"), ref.offset)
                except UnicodeEncodeError:
                    pass
        return Made(ref, args)

    def _attribute(self, ref: GlobalRef, args: Any) -> Any:
        """Protocol < 4 pickles a method ``Class.name`` as ``getattr(Class, "name")``: a
        public name of a global is the global ``module.Class.name`` (judged as such)."""
        items = args.items if isinstance(args, Tup) else None
        if not (
            items
            and len(items) == 2
            and isinstance(items[0], Glob)
            and isinstance(items[1], str)
            and items[1].isidentifier()
            and not items[1].startswith("_")
        ):
            return Made(ref, args)
        self.getattr_resolved[ref] = self.getattr_resolved.get(ref, 0) + 1
        owner = items[0].ref
        reached = GlobalRef(owner.module, f"{owner.name}.{items[1]}", ref.offset, "getattr")
        self.w.globals.append(reached)
        return Glob(reached)

    def settle_getattr(self) -> None:
        """A ``getattr`` only ever called as ``getattr(Class, "name")`` is judged by the
        names it reaches, not as a global of its own."""
        for ref, pushed in self.getattr_pushed.items():
            if self.getattr_resolved.get(ref) == pushed:
                self.w.globals = [g for g in self.w.globals if g != ref]
                self.w.calls = [c for c in self.w.calls if c.target != ref]

    def const_bytes(self, value: bytes, at: int) -> bytes:
        if _looks_like_pickle(value):
            self.w.embedded.append((at, value))
        return value

    def big_bytes(self, offset: int, length: int, at: int) -> BigBytes:
        """Bytes left in the buffer (too long to copy); an embedded pickle all the same."""
        big = BigBytes(offset, length)
        if length >= 4:
            head = bytes(self.data[offset : offset + 2])
            if head[0] == 0x80 and head[1] <= 5 and self.data[offset + length - 1] == 0x2E:
                self.w.embedded.append((at, big))
        return big

    def mutate(self, opcode: str, at: int, target: Any) -> None:
        """BUILD / SETITEM(S) / APPEND(S) / ADDITEMS run methods of the target's class."""
        if isinstance(target, Glob):
            self.w.calls.append(Call(opcode, at, target.ref, on_global_itself=True))
        elif isinstance(target, Made) and target.by is not None:
            self.w.calls.append(Call(opcode, at, target.by))
        elif isinstance(target, Made | Opaque):
            self.w.calls.append(Call(opcode, at, None))
            self.doubt(at, f"{opcode} on an object whose class the walk cannot know")

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> PickleWalk:
        try:
            self._run()
        except _Limit as e:
            self.doubt(self.pos, f"{e}: not walked to its end")
            self.w.end, self.w.error, self.w.limit = self.pos, "too long to judge", str(e)
        except (RecursionError, MemoryError) as e:
            self.doubt(
                self.pos, f"the walk ran out of memory ({type(e).__name__}): not walked to its end"
            )
            self.w.end, self.w.error, self.w.limit = self.pos, "too long to judge", "memory"
        for ref, n in self.loader_refs.items():
            if n > 0:
                self.doubt(
                    ref.offset,
                    f"{ref.qualified} (named by {ref.opcode}), which loads bytes, is passed, "
                    "stored or kept other than called on bytes the walk knows: what it loads is "
                    "not judged",
                )
        return self.w

    def _check_budget(self, at: int) -> None:
        budget = self.budget
        if budget.deadline is not None and time.thread_time() > budget.deadline:
            raise _Limit(f"over the time limit of {budget.seconds_words}")
        if budget.memory is not None:
            used = anon_memory()
            if used is not None and used > budget.memory:
                raise _Limit(f"over the memory limit of {budget.memory_words}")

    def _run(self) -> PickleWalk:
        w = self.w
        dispatch = _DISPATCH
        try:
            while True:
                at = self.pos
                if self.frame_end is not None and at >= self.frame_end:
                    self.frame_end = None
                if at >= self.limit:
                    raise _Stop(
                        "Ran out of input" if at == w.start else "pickle data was truncated"
                    )
                code = self.data[at]
                self.pos += 1
                handler = dispatch.get(code)
                if handler is None:
                    raise _Stop(f"invalid load key, {bytes([code])!r}")
                name = handler[0]
                if name not in w.opcodes:
                    w.opcodes[name] = at
                w.ops += 1
                if w.ops & (CHECK_EVERY - 1) == 1:
                    self._check_budget(at)
                if w.ops > self.max_ops:
                    self.doubt(at, f"over {self.max_ops:,} opcodes: not walked to its end")
                    w.end, w.error, w.limit = at, "too long to judge", "opcodes"
                    return w
                if handler[1](self, at):
                    w.end, w.complete = self.pos, True
                    return w
                if self.frame_end is not None and self.pos > self.frame_end:
                    self.doubt(at, "an opcode runs past the end of its frame")
                    self.frame_end = None
        except (_Stop, TextArgError) as e:
            w.end, w.error = at, str(e)
        return w


# --- opcode handlers: each returns True at STOP ----------------------------------------------


def _stop(m: _Machine, at: int) -> bool:
    m.w.value = m.pop()
    if m.frame_end is not None and m.pos < m.frame_end:
        m.doubt(
            at,
            "STOP before the end of its frame: the C and Python unpicklers resume "
            "reading at different places",
        )
    return True


def _mark(m: _Machine, at: int) -> bool:
    m.marks.append(len(m.stack))
    if len(m.marks) > MAX_STACK:
        raise _Limit(f"over {MAX_STACK:,} open marks (the walk's memory limit)")
    return False


def _pop(m: _Machine, at: int) -> bool:
    if m.marks and m.marks[-1] == len(m.stack):
        m.marks.pop()
    else:
        m.pop()
    return False


def _pop_mark(m: _Machine, at: int) -> bool:
    del m.stack[m.marker() :]
    return False


def _dup(m: _Machine, at: int) -> bool:
    m.push(m.top())
    return False


def _const(value: Any) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        m.push(value)
        return False

    return handler


def _binint(n: int, signed: bool) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        m.push(int.from_bytes(m.read(n), "little", signed=signed))
        return False

    return handler


def _counted_long(n: int) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        size = int.from_bytes(m.read(n), "little", signed=True)
        if size < 0:
            raise _Stop("LONG pickle has negative byte count")
        m.push(int.from_bytes(m.read(size), "little", signed=True) if size else 0)
        return False

    return handler


def _binfloat(m: _Machine, at: int) -> bool:
    m.push(struct.unpack(">d", m.read(8))[0])
    return False


def _text(reader: Callable[[bytes], text.Parsed], what: str) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        parsed = reader(m.readline())
        if not parsed.agree:
            m.doubt(at, f"{what} argument that the C and Python unpicklers read differently")
        m.push(parsed.value)
        return False

    return handler


def _unicode(m: _Machine, at: int) -> bool:
    m.push(text.read_unicode(m.readline()))
    return False


def _size(m: _Machine, n: int, what: str) -> int:
    size = m.uint(n)
    if size > _SSIZE_MAX:
        raise _Stop(f"{what} exceeds the maximum size")
    return size


def _counted_bytes(n: int, kind: str) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        size = _size(m, n, kind)
        if size > _BIG or not m.keep(size):
            at_data = m.skip(size)
            m.push(
                m.big_bytes(at_data, size, at) if kind != "BINSTRING" else BigBytes(at_data, size)
            )
        else:
            value = m.read(size)
            m.push(m.const_bytes(value, at) if kind != "BINSTRING" else text.text_of(value))
        return False

    return handler


def _counted_unicode(n: int) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        size = _size(m, n, "BINUNICODE")
        raw = m.read(size) if size <= _BIG and m.keep(size) else None
        if raw is None:
            m.skip(size)
            m.push(Opaque("a long string"))
            return False
        try:
            m.push(raw.decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError as e:
            raise _Stop(f"BINUNICODE is not UTF-8: {e}") from e
        return False

    return handler


def _counted_tuple(n: int) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        if len(m.stack) < n:
            raise _Stop("unpickling stack underflow")
        items = m.pop_from(len(m.stack) - n)
        m.push(Tup(tuple(items)))
        return False

    return handler


def _tuple(m: _Machine, at: int) -> bool:
    items = m.pop_from(m.marker())
    m.push(Tup(tuple(items) if len(items) <= KEEP else None))
    return False


def _empty_list(m: _Machine, at: int) -> bool:
    m.push(Lst([]))
    return False


def _list(m: _Machine, at: int) -> bool:
    items = m.pop_from(m.marker())
    m.push(Lst(items if len(items) <= KEEP else None))
    return False


def _empty_dict(m: _Machine, at: int) -> bool:
    m.push(Dct({}))
    return False


def _dict(m: _Machine, at: int) -> bool:
    items = m.pop_from(m.marker())
    if len(items) % 2:
        raise _Stop("odd number of items for DICT")
    d = Dct({})
    _set_items(d, items)
    m.push(d)
    return False


def _set_items(d: Dct, items: list[Any]) -> None:
    if d.items is None:
        return
    for k, v in zip(items[::2], items[1::2], strict=True):
        d.items[_key(k)] = v
    if len(d.items) > KEEP:
        d.items = None


def _empty_set(m: _Machine, at: int) -> bool:
    m.push(SetV(False))
    return False


def _frozenset(m: _Machine, at: int) -> bool:
    m.pop_from(m.marker())
    m.push(SetV(True))
    return False


def _additems(m: _Machine, at: int) -> bool:
    mark = m.marker()
    if mark > len(m.stack) or mark <= m.fence:
        raise _Stop("unpickling stack underflow")
    if mark == len(m.stack):
        return False
    target = m.stack[mark - 1]
    del m.stack[mark:]
    if not isinstance(target, SetV):
        m.mutate("ADDITEMS", at, target)
    return False


# Opening checks shared in shape with _setitems_at below (each in CPython's own order).
def _append_at(m: _Machine, at: int, x: int, opcode: str) -> None:
    n = len(m.stack)
    if x > n or x <= m.fence:
        raise _Stop("unpickling stack underflow")
    if x == n:
        return
    target = m.stack[x - 1]
    items = m.stack[x:]
    del m.stack[x:]
    if isinstance(target, Lst):
        if target.items is not None:
            target.items.extend(items)
            if len(target.items) > KEEP:
                target.items = None
    else:
        m.mutate(opcode, at, target)


def _append(m: _Machine, at: int) -> bool:
    if len(m.stack) - 1 <= m.fence:
        raise _Stop("unpickling stack underflow")
    _append_at(m, at, len(m.stack) - 1, "APPEND")
    return False


def _appends(m: _Machine, at: int) -> bool:
    _append_at(m, at, m.marker(), "APPENDS")
    return False


# Same opening checks as _append_at: _pickle.c's do_setitems repeats do_append's, and the walk
# keeps each opcode's order of checks as CPython has it (the odd-count error comes before the pop).
def _setitems_at(m: _Machine, at: int, x: int, opcode: str) -> None:
    n = len(m.stack)
    if x > n or x <= m.fence:
        raise _Stop("unpickling stack underflow")
    if x == n:
        return
    if (n - x) % 2:
        raise _Stop("odd number of items for SETITEMS")
    target = m.stack[x - 1]
    items = m.stack[x:]
    del m.stack[x:]
    if isinstance(target, Dct):
        _set_items(target, items)
    elif not isinstance(target, Lst):
        m.mutate(opcode, at, target)


def _setitem(m: _Machine, at: int) -> bool:
    _setitems_at(m, at, len(m.stack) - 2, "SETITEM")
    return False


def _setitems(m: _Machine, at: int) -> bool:
    _setitems_at(m, at, m.marker(), "SETITEMS")
    return False


def _build(m: _Machine, at: int) -> bool:
    if len(m.stack) - 2 < m.fence:
        raise _Stop("unpickling stack underflow")
    state = m.pop()
    inst = m.top()
    m.mutate("BUILD", at, inst)
    if isinstance(inst, Made):
        inst.state = state
        hook = m.on_build
        if hook is not None:
            hook(m, at, inst)
    return False


def _memo_get(m: _Machine, idx: int) -> None:
    m.push(m.memo_get(idx))


def _get(m: _Machine, at: int) -> bool:
    parsed = text.read_index(m.readline(), "GET")
    if not parsed.agree:
        m.doubt(at, "a GET index that the C and Python unpicklers read differently")
    _memo_get(m, parsed.value)
    return False


def _binget(m: _Machine, at: int) -> bool:
    _memo_get(m, m.uint(1))
    return False


def _long_binget(m: _Machine, at: int) -> bool:
    _memo_get(m, m.uint(4))
    return False


def _put(m: _Machine, at: int) -> bool:
    line = m.readline()
    value = m.top()
    parsed = text.read_index(line, "PUT")
    if not parsed.agree:
        m.doubt(at, "a PUT index that the C and Python unpicklers read differently")
    m.memo_put(parsed.value, value)
    return False


def _binput(m: _Machine, at: int) -> bool:
    idx = m.uint(1)
    m.memo_put(idx, m.top())
    return False


def _long_binput(m: _Machine, at: int) -> bool:
    idx = m.uint(4)
    m.memo_put(idx, m.top())
    return False


def _memoize(m: _Machine, at: int) -> bool:
    m.memo_put(m.memo_len, m.top())
    return False


def _global(m: _Machine, at: int) -> bool:
    module = text.read_name(m.readline(), ascii_only=False)
    name = text.read_name(m.readline(), ascii_only=False)
    m.push(Glob(m.find_class(module, name, at, "GLOBAL")))
    return False


def _stack_global(m: _Machine, at: int) -> bool:
    name = m.pop()
    module = m.pop()
    if isinstance(name, str) and isinstance(module, str):
        m.push(Glob(m.find_class(module, name, at, "STACK_GLOBAL")))
        return False
    if isinstance(name, str | Ambiguous | Made | Opaque) and isinstance(
        module, str | Ambiguous | Made | Opaque
    ):
        m.doubt(at, f"STACK_GLOBAL with a name the loader decides ({_show(module)}, {_show(name)})")
        m.push(Opaque("a global whose name the walk cannot know"))
        return False
    raise _Stop("STACK_GLOBAL requires str")


def _inst(m: _Machine, at: int) -> bool:
    # C pops the mark first; the Python unpickler imports the class first: both are walked
    module = text.read_name(m.readline(), ascii_only=True)
    name = text.read_name(m.readline(), ascii_only=True)
    ref = m.find_class(module, name, at, "INST")
    mark = m.marker()
    args = m.pop_from(mark)
    m.push(m.call("INST", at, Glob(ref), Tup(tuple(args) if len(args) <= KEEP else None)))
    return False


def _obj(m: _Machine, at: int) -> bool:
    mark = m.marker()
    if len(m.stack) - mark < 1:
        raise _Stop("unpickling stack underflow")
    args = m.pop_from(mark + 1)
    cls = m.pop()
    m.push(m.call("OBJ", at, cls, Tup(tuple(args) if len(args) <= KEEP else None)))
    return False


def _reduce(m: _Machine, at: int) -> bool:
    args = m.pop()
    callee = m.pop()
    m.push(m.call("REDUCE", at, callee, args))
    return False


def _newobj(m: _Machine, at: int) -> bool:
    args = m.pop()
    cls = m.pop()
    m.push(m.call("NEWOBJ", at, cls, args))
    return False


def _newobj_ex(m: _Machine, at: int) -> bool:
    m.pop()  # kwargs
    args = m.pop()
    cls = m.pop()
    m.push(m.call("NEWOBJ_EX", at, cls, args))
    return False


def _ext(n: int) -> Callable[[_Machine, int], bool]:
    def handler(m: _Machine, at: int) -> bool:
        code = int.from_bytes(m.read(n), "little", signed=n == 4)
        if code <= 0:
            raise _Stop("EXT specifies code <= 0")
        m.w.globals.append(GlobalRef("copyreg", f"_extension_registry[{code}]", at, f"EXT{n}"))
        m.doubt(
            at,
            f"EXT{n} code {code}: names whatever the loading process registered with "
            "copyreg.add_extension (a plain Python registers nothing, and the load fails)",
        )
        m.push(Opaque(f"extension {code}"))
        return False

    return handler


def _persid(m: _Machine, at: int) -> bool:
    line = m.readline()
    try:
        line[:-1].decode("ascii")
    except UnicodeDecodeError as e:
        raise _Stop("persistent IDs in protocol 0 must be ASCII strings") from e
    m.push(Made(None, line[:-1]))
    return False


def _binpersid(m: _Machine, at: int) -> bool:
    pid = m.pop()
    m.push(Made(None, pid))
    return False


def _proto(m: _Machine, at: int) -> bool:
    version = m.uint(1)
    if version > HIGHEST_PROTOCOL:
        raise _Stop(f"unsupported pickle protocol: {version}")
    m.proto = version
    m.w.protocol = max(m.w.protocol, version)
    return False


def _frame(m: _Machine, at: int) -> bool:
    size = m.uint(8)
    if size > _SSIZE_MAX:
        raise _Stop("FRAME length exceeds the maximum")
    if m.frame_end is not None and at < m.frame_end:
        m.doubt(at, "a FRAME inside a frame (the Python unpickler refuses it, C reads on)")
    if m.pos + size > m.limit:
        m.doubt(at, "a FRAME longer than the data (C stops here, the Python unpickler reads on)")
        m.frame_end = None
        return False
    m.frame_end = m.pos + size
    return False


def _next_buffer(m: _Machine, at: int) -> bool:
    raise _Stop("pickle stream refers to out-of-band data but no *buffers* argument was given")


def _readonly_buffer(m: _Machine, at: int) -> bool:
    target = m.top()
    if isinstance(target, Made | Opaque):
        m.mutate("READONLY_BUFFER", at, target)
    return False


_DISPATCH: dict[int, tuple[str, Callable[[_Machine, int], bool]]] = {
    ord(c): (n, h)
    for c, n, h in (
        ("(", "MARK", _mark),
        (".", "STOP", _stop),
        ("0", "POP", _pop),
        ("1", "POP_MARK", _pop_mark),
        ("2", "DUP", _dup),
        ("F", "FLOAT", _text(text.read_float, "a FLOAT")),
        ("I", "INT", _text(text.read_int, "an INT")),
        ("J", "BININT", _binint(4, True)),
        ("K", "BININT1", _binint(1, False)),
        ("L", "LONG", _text(text.read_long, "a LONG")),
        ("M", "BININT2", _binint(2, False)),
        ("N", "NONE", _const(None)),
        ("P", "PERSID", _persid),
        ("Q", "BINPERSID", _binpersid),
        ("R", "REDUCE", _reduce),
        ("S", "STRING", _text(text.read_string, "a STRING")),
        ("T", "BINSTRING", _counted_bytes(4, "BINSTRING")),
        ("U", "SHORT_BINSTRING", _counted_bytes(1, "BINSTRING")),
        ("V", "UNICODE", _unicode),
        ("X", "BINUNICODE", _counted_unicode(4)),
        ("a", "APPEND", _append),
        ("b", "BUILD", _build),
        ("c", "GLOBAL", _global),
        ("d", "DICT", _dict),
        ("}", "EMPTY_DICT", _empty_dict),
        ("e", "APPENDS", _appends),
        ("g", "GET", _get),
        ("h", "BINGET", _binget),
        ("i", "INST", _inst),
        ("j", "LONG_BINGET", _long_binget),
        ("l", "LIST", _list),
        ("]", "EMPTY_LIST", _empty_list),
        ("o", "OBJ", _obj),
        ("p", "PUT", _put),
        ("q", "BINPUT", _binput),
        ("r", "LONG_BINPUT", _long_binput),
        ("s", "SETITEM", _setitem),
        ("t", "TUPLE", _tuple),
        (")", "EMPTY_TUPLE", _counted_tuple(0)),
        ("u", "SETITEMS", _setitems),
        ("G", "BINFLOAT", _binfloat),
        ("B", "BINBYTES", _counted_bytes(4, "BINBYTES")),
        ("C", "SHORT_BINBYTES", _counted_bytes(1, "BINBYTES")),
        ("\x80", "PROTO", _proto),
        ("\x81", "NEWOBJ", _newobj),
        ("\x82", "EXT1", _ext(1)),
        ("\x83", "EXT2", _ext(2)),
        ("\x84", "EXT4", _ext(4)),
        ("\x85", "TUPLE1", _counted_tuple(1)),
        ("\x86", "TUPLE2", _counted_tuple(2)),
        ("\x87", "TUPLE3", _counted_tuple(3)),
        ("\x88", "NEWTRUE", _const(True)),
        ("\x89", "NEWFALSE", _const(False)),
        ("\x8a", "LONG1", _counted_long(1)),
        ("\x8b", "LONG4", _counted_long(4)),
        ("\x8c", "SHORT_BINUNICODE", _counted_unicode(1)),
        ("\x8d", "BINUNICODE8", _counted_unicode(8)),
        ("\x8e", "BINBYTES8", _counted_bytes(8, "BINBYTES")),
        ("\x8f", "EMPTY_SET", _empty_set),
        ("\x90", "ADDITEMS", _additems),
        ("\x91", "FROZENSET", _frozenset),
        ("\x92", "NEWOBJ_EX", _newobj_ex),
        ("\x93", "STACK_GLOBAL", _stack_global),
        ("\x94", "MEMOIZE", _memoize),
        ("\x95", "FRAME", _frame),
        ("\x96", "BYTEARRAY8", _counted_bytes(8, "BINBYTES")),
        ("\x97", "NEXT_BUFFER", _next_buffer),
        ("\x98", "READONLY_BUFFER", _readonly_buffer),
    )
}

OPCODE_BYTES = frozenset(_DISPATCH)

BuildHook = Callable[[_Machine, int, Made], None]


def walk_pickle(
    data: Any,
    start: int = 0,
    end: int | None = None,
    *,
    torch_zip: bool = False,
    on_build: BuildHook | None = None,
    max_ops: int = MAX_OPS,
    budget: Budget | None = None,
) -> PickleWalk:
    """Walk the pickle of ``data`` (bytes or a read-only mmap) that starts at ``start``, as
    ``pickle.load`` reads it from there; never raises on bad input.

    Args:
        end: where the data ends for the loader (the end of a zip member); default the end.
        torch_zip: apply torch's zip loader's own module map (``torch.tensor``).
        on_build: called after each BUILD on an object made by a call (joblib reads its arrays
            from the stream right there).
        max_ops: opcodes walked before giving up (a doubt).
        budget: a deadline and a memory ceiling (a doubt naming the limit when one is reached).
    """
    m = _Machine(
        data, start, len(data) if end is None else end, torch_zip=torch_zip, max_ops=max_ops
    )
    m.on_build = on_build
    if budget is not None:
        m.budget = budget
    walk = m.run()
    m.settle_getattr()
    return walk


def _make_bytes(items: tuple[Any, ...]) -> bytes | None:
    """``bytes(x)`` / ``bytearray(x)`` of what the walk knows: bytes, a list or tuple of small
    ints, text with a text codec; None for anything else."""
    first = items[0]
    if isinstance(first, bytes) and len(items) == 1:
        return first
    if isinstance(first, Lst | Tup) and first.items is not None and len(items) == 1:
        values = first.items
        if all(type(v) is int and 0 <= v < 256 for v in values):
            return bytes(values)
        return None
    if isinstance(first, str) and len(items) >= 2 and isinstance(items[1], str):
        codec = items[1].lower()
        if codec in _TEXT_CODECS:
            try:
                return first.encode(codec)
            except (UnicodeEncodeError, LookupError):
                return None
    return None
