"""Every global and every call in a pickle, found by reading its opcodes; nothing is unpickled.

:func:`record_pickle` walks the opcodes of one pickle with a symbolic stack and memo, the way
the unpickler would move objects around, but every object is a placeholder: a constant, a
reference to a global, or "the result of a call". So names built on the stack
(``STACK_GLOBAL`` from memoised strings), dotted names (``builtins`` + ``print.__self__.exec``)
and the target of every ``REDUCE`` / ``NEWOBJ`` / ``NEWOBJ_EX`` / ``INST`` / ``OBJ`` / ``BUILD``
are resolved without importing or calling anything. Byte strings that are themselves pickles
(a payload that would ``pickle.loads`` them) are recorded too, and walked by the caller.
"""

from __future__ import annotations

import _compat_pickle
import io
import mmap
import pickletools
from dataclasses import dataclass, field
from typing import Any

Buffer = bytes | mmap.mmap  # a pickle's bytes, or a whole file mapped read-only
MAX_NESTED = 4  # pickles inside pickles inside pickles ... walked at most this deep


@dataclass(frozen=True)
class GlobalRef:
    """A global the pickle names: ``module`` + (possibly dotted) ``name``, where it is named."""

    module: str
    name: str
    offset: int
    opcode: str  # GLOBAL, STACK_GLOBAL, INST or EXT1/2/4

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Call:
    """An opcode that makes the unpickler call something: what it calls, and where.

    ``target`` is the global being called (or whose instance gets its state set); None when
    the callee is not a global (an object made earlier in the pickle).
    """

    opcode: str
    offset: int
    target: GlobalRef | None
    on_global_itself: bool = False  # BUILD / APPEND / SETITEM on a global object, not an instance


@dataclass
class PickleRecord:
    """What one pickle asks for. Offsets count from the start of the bytes given."""

    globals: list[GlobalRef] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    opcodes: dict[str, int] = field(default_factory=dict)  # opcode name -> first offset
    unresolved: list[tuple[int, str]] = field(default_factory=list)  # (offset, why)
    embedded: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, pickle bytes)
    protocol: int = 0
    end: int = 0  # offset just after STOP (or where reading stopped)
    error: str = ""  # why the opcodes could not be read to STOP ("" when they could)


@dataclass(frozen=True)
class _Const:
    value: Any


@dataclass(frozen=True)
class _Made:
    """An object made while unpickling: by calling ``by`` (None: a literal container)."""

    by: GlobalRef | None = None


@dataclass(frozen=True)
class _Tuple:
    items: tuple[Any, ...]


_TUPLES = {"EMPTY_TUPLE": 0, "TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3, "TUPLE": -1}
_UNKNOWN = _Made(None)
_CONST_OPS = {
    "STRING", "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "BYTEARRAY8", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "INT", "BININT",
    "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT", "NONE", "NEWTRUE",
    "NEWFALSE",
}  # fmt: skip
_MUTATORS = {"APPEND": 1, "SETITEM": 2}  # pop this many, then mutate the object below
_MARK_MUTATORS = {"APPENDS", "SETITEMS", "ADDITEMS"}
_LATIN1 = {"latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"}
_TEXT_CODECS = _LATIN1 | {"utf-8", "utf8", "ascii"}


def _line_pair(data: Buffer, pos: int) -> tuple[str, str]:
    """The two newline-ended fields after a GLOBAL / INST opcode, decoded as pickle does."""
    first_end = data.find(b"\n", pos + 1)
    second_end = data.find(b"\n", first_end + 1) if first_end >= 0 else -1
    if second_end < 0:
        raise ValueError(f"a GLOBAL at byte {pos} without its two lines")
    module = bytes(data[pos + 1 : first_end]).decode("utf-8", "replace")
    name = bytes(data[first_end + 1 : second_end]).decode("utf-8", "replace")
    return module, name


def resolve_name(module: str, name: str) -> tuple[str, str]:
    """The module and name Python 3 looks up for a pickled global (protocol 0-2 renames)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


class _Walker:
    def __init__(self, data: Buffer, record: PickleRecord) -> None:
        self.data = data
        self.rec = record
        self.stack: list[Any] = []
        self.meta: list[list[Any]] = []
        self.memo: dict[int, Any] = {}

    def pop(self) -> Any:
        return self.stack.pop() if self.stack else _UNKNOWN

    def pop_mark(self) -> list[Any]:
        items = self.stack
        self.stack = self.meta.pop() if self.meta else []
        return items

    def top(self) -> Any:
        return self.stack[-1] if self.stack else _UNKNOWN

    def add_global(self, module: str, name: str, pos: int, opcode: str) -> GlobalRef:
        module, name = resolve_name(module, name)
        ref = GlobalRef(module, name, pos, opcode)
        self.rec.globals.append(ref)
        return ref

    def call(self, opcode: str, pos: int, callee: Any, args: list[Any] | None = None) -> _Made:
        target = callee if isinstance(callee, GlobalRef) else None
        self.rec.calls.append(Call(opcode, pos, target))
        if target is None:
            self.rec.unresolved.append((pos, f"{opcode} calls an object made inside the pickle"))
        made = _Made(target)
        if target is not None and target.qualified in {"_codecs.encode", "codecs.encode"}:
            return self._encode(args or [], made, pos)
        return made

    def _encode(self, args: list[Any], made: _Made, pos: int) -> Any:
        """Protocol 2 writes bytes as ``_codecs.encode(text, "latin1")``: keep the bytes.

        Any other encoding is a codec lookup chosen by the file (which imports modules).
        """
        named = [a.value for a in args[1:2] if isinstance(a, _Const)]
        if len(args) > 1 and not (named and str(named[0]).lower() in _TEXT_CODECS):
            self.rec.unresolved.append((pos, "codecs.encode with a codec chosen by the file"))
        if args and isinstance(args[0], _Const) and isinstance(args[0].value, str):
            enc = args[1].value if len(args) > 1 and isinstance(args[1], _Const) else "utf-8"
            if isinstance(enc, str) and enc.lower() in _LATIN1:
                try:
                    return self.const(args[0].value.encode("latin-1"), made)
                except UnicodeEncodeError:
                    return made
        return made

    def const(self, value: Any, made: Any = None) -> _Const:
        if isinstance(value, bytes | bytearray) and _looks_like_pickle(value):
            self.rec.embedded.append((self.rec.end, bytes(value)))
        return _Const(value)

    def step(self, op: pickletools.OpcodeInfo, arg: Any, pos: int) -> None:
        """One opcode's effect on the stack and memo (the commonest opcodes tested first)."""
        name = op.name
        self.rec.end = pos
        if name in _CONST_OPS:
            self.stack.append(self.const(arg))
        elif name == "MARK":
            self.meta.append(self.stack)
            self.stack = []
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            self.memo[int(arg)] = self.top()
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self.top()
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            self.stack.append(self.memo.get(int(arg), _UNKNOWN))
        elif name in _TUPLES:
            n = _TUPLES[name]
            items = self.pop_mark() if n < 0 else [self.pop() for _ in range(n)][::-1]
            self.stack.append(_Tuple(tuple(items)))
        elif name == "BINPERSID":
            self.pop()
            self.stack.append(_Made(None))
        elif name in ("GLOBAL", "INST"):
            module, attr = _line_pair(self.data, pos)
            ref = self.add_global(module, attr, pos, name)
            if name == "INST":
                args = self.pop_mark()
                self.stack.append(self.call(name, pos, ref, args))
            else:
                self.stack.append(ref)
        elif name == "STACK_GLOBAL":
            attr, module = self.pop(), self.pop()
            if all(isinstance(x, _Const) and isinstance(x.value, str) for x in (module, attr)):
                self.stack.append(self.add_global(module.value, attr.value, pos, name))
            else:
                self.rec.unresolved.append((pos, "STACK_GLOBAL with a name that is not text"))
                self.stack.append(_UNKNOWN)
        elif name.startswith("EXT"):
            self.stack.append(self.add_global("copyreg", f"_extension_registry[{arg}]", pos, name))
        elif name == "REDUCE":
            args, callee = self.pop(), self.pop()
            self.stack.append(self.call(name, pos, callee, _tuple_items(args)))
        elif name == "NEWOBJ":
            _args, cls = self.pop(), self.pop()
            self.stack.append(self.call(name, pos, cls))
        elif name == "NEWOBJ_EX":
            _kw, _args, cls = self.pop(), self.pop(), self.pop()
            self.stack.append(self.call(name, pos, cls))
        elif name == "OBJ":
            items = self.pop_mark()
            self.stack.append(self.call(name, pos, items[0] if items else _UNKNOWN))
        elif name == "BUILD":
            self.pop()
            self._mutate(name, pos, self.top())
        elif name in _MUTATORS:
            for _ in range(_MUTATORS[name]):
                self.pop()
            self._mutate(name, pos, self.top())
        elif name in _MARK_MUTATORS:
            self.pop_mark()
            self._mutate(name, pos, self.top())
        elif name == "DUP":
            self.stack.append(self.top())
        elif name == "POP":
            if self.stack:
                self.stack.pop()
            else:
                self.pop_mark()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "PROTO":
            self.rec.protocol = int(arg)
        elif name == "STOP":
            self.pop()
        else:  # containers, tuples, PERSID, FRAME, buffers: only their stack shape matters
            self._generic(op)

    def _mutate(self, opcode: str, pos: int, target: Any) -> None:
        if isinstance(target, GlobalRef):  # e.g. BUILD setting attributes of a function
            self.rec.calls.append(Call(opcode, pos, target, on_global_itself=True))
        elif isinstance(target, _Made) and target.by is not None:
            self.rec.calls.append(Call(opcode, pos, target.by))

    def _generic(self, op: pickletools.OpcodeInfo) -> None:
        before = list(op.stack_before)
        if pickletools.markobject in before:
            self.pop_mark()
            before = before[: before.index(pickletools.markobject)]
        for _ in before:
            self.pop()
        for _ in op.stack_after:
            self.stack.append(_Made(None))


def _tuple_items(value: Any) -> list[Any]:
    return list(value.items) if isinstance(value, _Tuple) else []


def _looks_like_pickle(value: bytes | bytearray) -> bool:
    return len(value) >= 4 and value[:1] == b"\x80" and value[1] <= 5 and value[-1:] == b"."


def record_pickle(data: Buffer, start: int = 0) -> PickleRecord:
    """Walk one pickle of ``data`` (bytes, or a file's mmap: only the pickle's pages are read)
    from ``start`` to its STOP; never raises on bad input.

    Returns:
        A :class:`PickleRecord`; ``record.error`` says why reading stopped early, if it did.
    """
    record = PickleRecord()
    stream: Any = data if isinstance(data, mmap.mmap) else io.BytesIO(data)
    stream.seek(start)
    walker = _Walker(data, record)
    try:
        for op, arg, pos in pickletools.genops(stream):
            assert pos is not None
            if op.name not in record.opcodes:
                record.opcodes[op.name] = pos
            walker.step(op, arg, pos)
        record.end = stream.tell()
    except (ValueError, EOFError, KeyError, IndexError, UnicodeDecodeError, OverflowError) as e:
        record.error = f"{type(e).__name__}: {e}"
    return record
