"""An allow-list unpickler that reads pickle *structure* and never runs code from the file.

Tensors become :class:`LazyTensor` records pointing at their storage (no bytes are read);
torch storages become :class:`StorageRef`; any global that is not on the allow-list becomes an
inert :class:`OpaqueObject` subclass named after it, so a DeepSpeed ``ZeroStageEnum`` or an
``os.system`` payload is *listed*, never imported or called.

The unpickler is CPython's pure-Python one (its memo is a dict, so a memo index of 2^28 costs
nothing, where the C unpickler allocates a 4 GB table), with the opcodes that call, hash or copy
restricted to what checkpoints use and charged to a :class:`~.pickle_limits.WorkBudget`.

torch is never imported here: dtypes, ``torch.Size`` and ``torch.device`` become the plain
stand-ins of :mod:`.torch_names`. numpy is imported only when a pickle names a numpy global.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import io
import pickle
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..types import shape_numel
from .pickle_cycles import cut_back_references
from .pickle_limits import (
    TEXT_ENCODINGS,
    GuardedConstructor,
    WorkBudget,
    charge_hash,
    charge_walk,
    normalized_encoding,
)
from .torch_names import DTYPES, STORAGE_DTYPES, DType, Size, make_device

# Modules whose globals in a checkpoint can only mean an attempt to run code.
_DANGEROUS_MODULES = {
    "os",
    "posix",
    "nt",
    "subprocess",
    "sys",
    "shutil",
    "socket",
    "importlib",
    "runpy",
    "pickle",
    "_pickle",
    "marshal",
    "code",
    "codeop",
    "pty",
    "ctypes",
    "webbrowser",
    "multiprocessing",
    "asyncio",
    "threading",
    "types",
    "operator",
    "functools",
    "pdb",
    "timeit",
}
_DANGEROUS_BUILTINS = {
    "eval",
    "exec",
    "compile",
    "open",
    "__import__",
    "getattr",
    "setattr",
    "delattr",
    "globals",
    "locals",
    "vars",
    "input",
    "breakpoint",
    "memoryview",
    "print",
    "help",
    "exit",
    "quit",
    "type",
    "object",
    "super",
    "classmethod",
    "staticmethod",
    "property",
}
_SAFE_BUILTINS = {
    "slice": slice,
    "complex": complex,
    "int": int,
    "float": float,
    "bool": bool,
    "range": range,
}
# Builtins that copy (or hash) their argument: resolved to a GuardedConstructor per unpickler.
_COPYING_BUILTINS: dict[str, tuple[Any, bool]] = {
    "set": (set, True),
    "frozenset": (frozenset, True),
    "dict": (dict, True),
    "list": (list, False),
    "tuple": (tuple, False),
    "bytes": (bytes, False),
    "bytearray": (bytearray, False),
    "str": (str, False),
}
MAX_TENSOR_DIMS = 64


@dataclass(frozen=True)
class StorageRef:
    """A torch storage named by a persistent id: where its bytes are, not the bytes.

    ``dtype`` is the storage's element type (``uint8`` for untyped storages) and
    ``numel`` counts elements of that type.
    """

    key: str
    dtype: DType
    location: str
    numel: int
    view_offset: int = 0  # legacy format only: element offset of a storage view in its root

    @property
    def nbytes(self) -> int:
        return self.numel * _itemsize(self.dtype)


@dataclass
class LazyTensor:
    """A tensor described by its storage, offset, shape and stride; no data attached."""

    storage: StorageRef
    storage_offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: DType
    requires_grad: bool = False
    is_parameter: bool = False
    subclass: str = ""  # qualified name of a tensor subclass, if one was pickled

    @property
    def numel(self) -> int:
        return shape_numel(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * _itemsize(self.dtype)

    @property
    def itemsize(self) -> int:
        return _itemsize(self.dtype)

    def byte_offset_in_storage(self) -> int:
        """Bytes from the start of the storage record to the first element."""
        storage_itemsize = _itemsize(self.storage.dtype)
        return (self.storage.view_offset * storage_itemsize) + self.storage_offset * self.itemsize

    def is_contiguous_view(self) -> bool:
        """True when the tensor's elements are one dense row-major block of its storage."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def max_storage_index(self) -> int:
        """One past the last storage element this view touches (0 for empty tensors)."""
        if self.numel == 0:
            return self.storage_offset
        last = self.storage_offset
        for size, stride in zip(self.shape, self.stride, strict=True):
            last += (size - 1) * stride
        return last + 1


class OpaqueObject:
    """Inert stand-in for an object of a class that is not on the allow-list.

    It records what the pickle said (constructor args, state, items) and does nothing else.
    """

    __qualified_name__ = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs
        self.state: Any = None
        self.items: dict[Any, Any] = {}
        self.list_items: list[Any] = []

    def __new__(cls, *args: Any, **kwargs: Any) -> OpaqueObject:
        obj = super().__new__(cls)
        obj.args = args
        obj.kwargs = kwargs
        obj.state = None
        obj.items = {}
        obj.list_items = []
        return obj

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items[key] = value

    def append(self, value: Any) -> None:
        self.list_items.append(value)

    def extend(self, values: Any) -> None:
        self.list_items.extend(values)

    @property
    def qualified_name(self) -> str:
        return type(self).__qualified_name__

    def __repr__(self) -> str:
        args = ", ".join(repr(a) for a in self.args[:4])
        return f"<opaque {self.qualified_name}({args})>"


@dataclass
class PickleReport:
    """What an unpickling pass saw besides the object itself."""

    opaque_globals: set[str] = field(default_factory=set)
    dangerous_globals: set[str] = field(default_factory=set)
    storages: dict[str, StorageRef] = field(default_factory=dict)
    back_references: int = 0  # references to an enclosing object, cut (see .pickle_cycles)


@dataclass(frozen=True)
class _StorageType:
    name: str
    dtype: DType


def _itemsize(dtype: DType) -> int:
    return dtype.itemsize


def _rebuild_tensor(
    storage: StorageRef,
    storage_offset: int,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> LazyTensor:
    if not isinstance(storage, StorageRef):
        raise pickle.UnpicklingError(f"a tensor over a {type(storage).__name__} is not allowed")
    for what, dims in (("size", size), ("stride", stride)):
        if not isinstance(dims, tuple | list) or len(dims) > MAX_TENSOR_DIMS:
            raise pickle.UnpicklingError(
                f"a tensor {what} that is not a tuple of at most {MAX_TENSOR_DIMS} ints "
                "is not allowed"
            )
    return LazyTensor(
        storage=storage,
        storage_offset=int(storage_offset),
        shape=tuple(int(s) for s in size),
        stride=tuple(int(s) for s in stride),
        dtype=storage.dtype,
        requires_grad=bool(requires_grad),
    )


def _rebuild_tensor_v3(
    storage: StorageRef,
    storage_offset: int,
    size: Any,
    stride: Any,
    requires_grad: Any,
    backward_hooks: Any,
    dtype: DType,
    metadata: Any = None,
) -> LazyTensor:
    if not isinstance(dtype, DType):
        raise pickle.UnpicklingError(
            f"a tensor dtype that is a {type(dtype).__name__} is not allowed"
        )
    tensor = _rebuild_tensor(storage, storage_offset, size, stride, requires_grad)
    tensor.dtype = dtype
    return tensor


def _rebuild_parameter(
    data: Any, requires_grad: Any, backward_hooks: Any, state: Any = None
) -> Any:
    if isinstance(data, LazyTensor):
        data.is_parameter = True
        data.requires_grad = bool(requires_grad)
    return data


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    rebuilds = func is _rebuild_tensor or func is _rebuild_tensor_v3
    result = func(*args) if rebuilds and type(args) is tuple else OpaqueObject(func, args)
    if isinstance(result, LazyTensor) and new_type is not None:
        result.subclass = getattr(new_type, "__qualified_name__", "") or getattr(
            new_type, "__name__", ""
        )
    return result


def _get_layout(name: str) -> str:
    if not isinstance(name, str):  # str() of a shared structure is a walk without end
        raise pickle.UnpicklingError("a tensor layout not named by a string is not allowed")
    return name


def _codecs_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    if not (isinstance(obj, str) and isinstance(encoding, str) and isinstance(errors, str)):
        raise pickle.UnpicklingError("codecs.encode of anything but text is not allowed")
    if normalized_encoding(encoding) not in TEXT_ENCODINGS:
        raise pickle.UnpicklingError(f"codec {encoding!r} is not allowed")
    return codecs.encode(obj, encoding, errors)


_TORCH_CALLABLES: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch.serialization", "_get_layout"): _get_layout,
    ("torch", "device"): make_device,
    ("_codecs", "encode"): _codecs_encode,
    ("codecs", "encode"): _codecs_encode,
}


def _safe_numpy_global(module: str, name: str) -> Any:
    """numpy arrays and scalars of plain (non-object) dtypes only (imports numpy)."""
    import numpy as np

    def checked_dtype(*args: Any) -> Any:
        if not args or not isinstance(args[0], str):
            raise pickle.UnpicklingError("a numpy dtype not named by a string is not allowed")
        dt = np.dtype(args[0])
        if dt.hasobject:
            raise pickle.UnpicklingError("numpy object arrays are not allowed")
        # Always a copy: BUILD then sets the state of this object, never numpy's shared one.
        return np.dtype(args[0], bool(args[1]) if len(args) > 1 else False, True)

    def checked_scalar(dtype: Any, data: bytes = b"") -> Any:
        if not isinstance(dtype, np.dtype) or not isinstance(data, bytes):
            raise pickle.UnpicklingError("a numpy scalar not made of a dtype and bytes")
        if dtype.hasobject:
            raise pickle.UnpicklingError("numpy object scalars are not allowed")
        return np.frombuffer(data, dtype=dtype, count=1)[0]

    def checked_reconstruct(cls: Any, shape: Any, dtype: Any) -> Any:
        if cls is not np.ndarray:
            raise pickle.UnpicklingError("only numpy.ndarray may be reconstructed")
        # numpy pickles an empty array here and fills it from BUILD's bytes.
        if not (isinstance(shape, tuple) and len(shape) <= 1 and all(s == 0 for s in shape)):
            raise pickle.UnpicklingError("numpy _reconstruct of a non-empty shape is not allowed")
        return np.ndarray.__new__(np.ndarray, shape, dtype)

    table = {
        "_reconstruct": checked_reconstruct,
        "scalar": checked_scalar,
        "ndarray": np.ndarray,
        "dtype": checked_dtype,
    }
    if name in table:
        return table[name]
    if module == "numpy.dtypes" and name.endswith("DType"):
        dtype_class = getattr(np.dtypes, name, None)
        if dtype_class is not None and name != "ObjectDType":
            return dtype_class
    return None


# The pure-Python unpickler's opcode handlers; typeshed does not describe them.
_BASE_DISPATCH: dict[int, Any] = pickle._Unpickler.dispatch  # type: ignore[attr-defined]
_base_instantiate: Any = pickle._Unpickler._instantiate  # type: ignore[attr-defined]


class SafeUnpickler(pickle._Unpickler):
    """Unpickler that resolves only allow-listed globals; everything else becomes opaque.

    Every failure, refusal included, is a ``pickle.UnpicklingError``; refusals say "not allowed".
    """

    dispatch: ClassVar[dict[int, Any]] = dict(_BASE_DISPATCH)
    stack: list[Any]
    metastack: list[list[Any]]

    def __init__(self, file: Any, report: PickleReport | None = None) -> None:
        super().__init__(file)
        self.report = report if report is not None else PickleReport()
        self._opaque_classes: dict[str, type[OpaqueObject]] = {}
        self.budget = WorkBudget(_input_size(file))

    def load(self) -> Any:
        try:
            root = super().load()
            cut = cut_back_references(root, _slots)
            if cut:
                self.report.back_references += cut
            charge_walk(self.budget, root, _children)
        except (
            EOFError,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
            OverflowError,
            LookupError,
            RuntimeError,  # as torch's constructors raise, e.g. torch.device("nonsense")
            struct.error,
        ) as e:
            raise pickle.UnpicklingError(f"{type(e).__name__}: {e}") from e
        return root

    def find_class(self, module: str, name: str) -> Any:
        # Protocol 0-2 pickles name Python 2 modules (``__builtin__``, ``copy_reg``).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        key = (module, name)
        if key in _TORCH_CALLABLES:
            return _TORCH_CALLABLES[key]
        if module == "builtins" and name in _SAFE_BUILTINS:
            return _SAFE_BUILTINS[name]
        if module == "builtins" and name in _COPYING_BUILTINS:
            ctor, hashes = _COPYING_BUILTINS[name]
            return GuardedConstructor(ctor, self.budget, hashes)
        if key == ("torch", "Size"):
            return GuardedConstructor(Size, self.budget, hashes=False)
        if key == ("collections", "OrderedDict"):
            return GuardedConstructor(collections.OrderedDict, self.budget, hashes=True)
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name, STORAGE_DTYPES[name])
        if module in {"torch.storage", "torch"} and name in {"UntypedStorage", "_UntypedStorage"}:
            return _StorageType(name, DTYPES["uint8"])
        if module == "torch" and name in DTYPES:
            return DTYPES[name]
        if module.split(".")[0] == "numpy":
            found = _safe_numpy_global(module, name)
            if found is not None:
                return found
        if module == "copyreg" and name == "_reconstructor":
            return _safe_reconstructor
        return self._opaque(module, name)

    def _opaque(self, module: str, name: str) -> type[OpaqueObject]:
        qualified = f"{module}.{name}"
        self.report.opaque_globals.add(qualified)
        top = module.split(".")[0]
        if top in _DANGEROUS_MODULES or (module == "builtins" and name in _DANGEROUS_BUILTINS):
            self.report.dangerous_globals.add(qualified)
        cls = self._opaque_classes.get(qualified)
        if cls is None:
            safe_name = "".join(c if c.isalnum() else "_" for c in name) or "Opaque"
            cls = type(safe_name, (OpaqueObject,), {"__qualified_name__": qualified})
            self._opaque_classes[qualified] = cls
        return cls

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            return OpaqueObject("persistent_id", pid)
        if len(pid) == 5:  # zip format: ('storage', type, key, location, numel)
            _, storage_type, key, location, numel = pid
            view_offset = 0
        elif len(pid) == 6:  # legacy: ('storage', type, root_key, location, size, view_metadata)
            _, storage_type, key, location, numel, view = pid
            view_offset = 0
            if view is not None:
                _, view_offset, numel = view
        else:
            raise pickle.UnpicklingError(f"unexpected storage persistent id of length {len(pid)}")
        if not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"unknown storage type {type(storage_type).__name__}")
        if not (
            isinstance(key, str | int)
            and isinstance(location, str)
            and _is_int(numel)
            and _is_int(view_offset)
        ):
            raise pickle.UnpicklingError(
                "a storage id not made of a key, location and sizes is not allowed"
            )
        ref = StorageRef(
            key=str(key),
            dtype=storage_type.dtype,
            location=str(location),
            numel=int(numel),
            view_offset=int(view_offset),
        )
        self.report.storages.setdefault(ref.key, ref)
        return ref

    # Opcodes that call, hash or copy: restricted to the objects checkpoints use them on.

    def load_reduce(self) -> None:
        stack = self.stack
        if type(stack[-1]) is not tuple:
            raise pickle.UnpicklingError("REDUCE with arguments that are not a tuple")
        np = sys.modules.get("numpy")  # only a numpy global can have put ndarray here
        if np is not None and stack[-2] is np.ndarray:
            raise pickle.UnpicklingError("calling numpy.ndarray directly is not allowed")
        _BASE_DISPATCH[pickle.REDUCE[0]](self)

    def load_newobj(self) -> None:
        _check_instantiable(self.stack[-2], self.stack[-1])
        _BASE_DISPATCH[pickle.NEWOBJ[0]](self)

    def load_newobj_ex(self) -> None:
        _check_instantiable(self.stack[-3], self.stack[-2])
        _BASE_DISPATCH[pickle.NEWOBJ_EX[0]](self)

    def _instantiate(self, klass: Any, args: Any) -> None:
        _check_instantiable(klass, tuple(args))
        _base_instantiate(self, klass, args)

    def load_build(self) -> None:
        state, inst = self.stack[-1], self.stack[-2]
        if isinstance(inst, LazyTensor):  # a tensor's Python attributes: not kept
            self.stack.pop()
            return
        if not isinstance(inst, _buildable()):
            raise pickle.UnpicklingError(
                f"setting the state of a {type(inst).__name__} is not allowed"
            )
        if not isinstance(inst, OpaqueObject):
            for part in state if isinstance(state, tuple) else (state,):
                if isinstance(part, dict) and not all(type(k) is str for k in part):
                    raise pickle.UnpicklingError("object state with non-text names")
        _BASE_DISPATCH[pickle.BUILD[0]](self)

    def load_setitem(self) -> None:
        _check_target(self.stack[-3], _MAPPINGS, "SETITEM")
        charge_hash(self.budget, self.stack[-2])
        _BASE_DISPATCH[pickle.SETITEM[0]](self)

    def load_setitems(self) -> None:
        _check_target(self.metastack[-1][-1], _MAPPINGS, "SETITEMS")
        for key in self.stack[0::2]:
            charge_hash(self.budget, key)
        _BASE_DISPATCH[pickle.SETITEMS[0]](self)

    def load_dict(self) -> None:
        for key in self.stack[0::2]:
            charge_hash(self.budget, key)
        _BASE_DISPATCH[pickle.DICT[0]](self)

    def load_additems(self) -> None:
        _check_target(self.metastack[-1][-1], (set,), "ADDITEMS")
        for item in self.stack:
            charge_hash(self.budget, item)
        _BASE_DISPATCH[pickle.ADDITEMS[0]](self)

    def load_frozenset(self) -> None:
        for item in self.stack:
            charge_hash(self.budget, item)
        _BASE_DISPATCH[pickle.FROZENSET[0]](self)

    def load_bytearray8(self) -> None:
        """BYTEARRAY8 as CPython reads it, but the bytes are read before the buffer is made:
        pickle.py allocates ``bytearray(n)`` for the n the file claims (2**56 is a MemoryError)."""
        read = self.read  # type: ignore[attr-defined]  # set by pickle._Unpickler.load
        (n,) = struct.unpack("<Q", read(8))
        data = read(n) if n <= sys.maxsize else b""
        if len(data) != n:
            raise pickle.UnpicklingError(f"BYTEARRAY8 of {n} bytes, {len(data)} left")
        self.append(bytearray(data))  # type: ignore[attr-defined]

    def load_append(self) -> None:
        _check_target(self.stack[-2], _SEQUENCES, "APPEND")
        _BASE_DISPATCH[pickle.APPEND[0]](self)

    def load_appends(self) -> None:
        _check_target(self.metastack[-1][-1], _SEQUENCES, "APPENDS")
        _BASE_DISPATCH[pickle.APPENDS[0]](self)


for _opcode, _method in {
    pickle.REDUCE: SafeUnpickler.load_reduce,
    pickle.NEWOBJ: SafeUnpickler.load_newobj,
    pickle.NEWOBJ_EX: SafeUnpickler.load_newobj_ex,
    pickle.BUILD: SafeUnpickler.load_build,
    pickle.SETITEM: SafeUnpickler.load_setitem,
    pickle.SETITEMS: SafeUnpickler.load_setitems,
    pickle.DICT: SafeUnpickler.load_dict,
    pickle.ADDITEMS: SafeUnpickler.load_additems,
    pickle.FROZENSET: SafeUnpickler.load_frozenset,
    pickle.BYTEARRAY8: SafeUnpickler.load_bytearray8,
    pickle.APPEND: SafeUnpickler.load_append,
    pickle.APPENDS: SafeUnpickler.load_appends,
}.items():
    SafeUnpickler.dispatch[_opcode[0]] = _method

_MAPPINGS = (dict, OpaqueObject)
_SEQUENCES = (list, OpaqueObject)


def _buildable() -> tuple[type, ...]:
    """Objects BUILD may set the state of (numpy's only once a pickle has imported numpy)."""
    np = sys.modules.get("numpy")
    return (OpaqueObject, dict) if np is None else (OpaqueObject, dict, np.ndarray, np.dtype)


def _check_target(obj: Any, allowed: tuple[type, ...], opcode: str) -> None:
    if not isinstance(obj, allowed):
        raise pickle.UnpicklingError(f"{opcode} on a {type(obj).__name__} is not allowed")


def _check_instantiable(cls: Any, args: Any) -> None:
    """NEWOBJ / OBJ / INST: only the inert stand-ins may be instantiated this way."""
    if not (isinstance(cls, type) and issubclass(cls, OpaqueObject)):
        raise pickle.UnpicklingError(f"instantiating {cls!r:.60} is not allowed")
    if type(args) is not tuple:
        raise pickle.UnpicklingError("constructor arguments that are not a tuple")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _children(obj: Any) -> list[Any]:
    """What a reader may visit under ``obj`` (the references :func:`_slots` gives); tensors,
    storages and arrays are leaves."""
    return [value for value, _ in _slots(obj)]


def _set_item(holder: Any, key: Any) -> Any:
    def replace(value: Any) -> None:
        holder[key] = value

    return replace


def _set_state(obj: OpaqueObject) -> Any:
    def replace(value: Any) -> None:
        obj.state = value

    return replace


def _slots(obj: Any) -> Iterator[tuple[Any, Any]]:
    """(value, replace) for each reference ``obj`` holds (see :mod:`.pickle_cycles`)."""
    if isinstance(obj, dict):
        for key in list(obj):
            yield key, None
            yield obj[key], _set_item(obj, key)
    elif isinstance(obj, list):
        for i, value in enumerate(list(obj)):
            yield value, _set_item(obj, i)
    elif isinstance(obj, tuple | set | frozenset):
        for value in obj:
            yield value, None
    elif isinstance(obj, OpaqueObject):
        for value in obj.args:
            yield value, None
        yield from _slots(obj.kwargs)
        yield obj.state, _set_state(obj)
        yield from _slots(obj.items)
        yield from _slots(obj.list_items)


def _input_size(file: Any) -> int:
    """Bytes from the read position to the end (0 when the stream cannot tell)."""
    try:
        here = file.tell()
        end = file.seek(0, io.SEEK_END)
        file.seek(here)
        return max(0, int(end) - int(here))
    except (AttributeError, OSError, ValueError):
        return 0


def _safe_reconstructor(cls: Any, base: Any, state: Any) -> Any:
    if isinstance(cls, type) and issubclass(cls, OpaqueObject):
        obj = cls.__new__(cls)
        obj.state = state
        return obj
    raise pickle.UnpicklingError("copyreg._reconstructor on a non-opaque class is not allowed")


def safe_loads(data: bytes, report: PickleReport | None = None) -> Any:
    """Unpickle ``data`` with the allow-list; raises ``pickle.UnpicklingError`` on refusal."""
    return SafeUnpickler(io.BytesIO(data), report).load()
