"""An allow-list unpickler that reads pickle *structure* and never runs code from the file.

Tensors become :class:`LazyTensor` records pointing at their storage (no bytes are read);
torch storages become :class:`StorageRef`; any global that is not on the allow-list becomes an
inert :class:`OpaqueObject` subclass named after it, so a DeepSpeed ``ZeroStageEnum`` or an
``os.system`` payload is *listed*, never imported or called.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import io
import pickle
from dataclasses import dataclass, field
from typing import Any

import torch

from ..types import shape_numel

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
    "set": set,
    "frozenset": frozenset,
    "slice": slice,
    "complex": complex,
    "bytearray": bytearray,
    "bytes": bytes,
    "tuple": tuple,
    "list": list,
    "dict": dict,
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "range": range,
}


@dataclass(frozen=True)
class StorageRef:
    """A torch storage named by a persistent id: where its bytes are, not the bytes.

    ``dtype`` is the storage's element type (``torch.uint8`` for untyped storages) and
    ``numel`` counts elements of that type.
    """

    key: str
    dtype: torch.dtype
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
    dtype: torch.dtype
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


_STORAGE_DTYPES: dict[str, torch.dtype] = {
    "DoubleStorage": torch.float64,
    "FloatStorage": torch.float32,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "ComplexDoubleStorage": torch.complex128,
    "ComplexFloatStorage": torch.complex64,
    "UntypedStorage": torch.uint8,
    "QInt8Storage": torch.qint8,
    "QUInt8Storage": torch.quint8,
    "QInt32Storage": torch.qint32,
}


@dataclass(frozen=True)
class _StorageType:
    name: str
    dtype: torch.dtype


def _itemsize(dtype: torch.dtype) -> int:
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
    dtype: torch.dtype,
    metadata: Any = None,
) -> LazyTensor:
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
    result = func(*args) if func in _REBUILDERS else OpaqueObject(func, args)
    if isinstance(result, LazyTensor) and new_type is not None:
        result.subclass = getattr(new_type, "__qualified_name__", "") or getattr(
            new_type, "__name__", ""
        )
    return result


def _get_layout(name: str) -> str:
    return str(name)


def _codecs_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    if encoding.lower().replace("-", "") not in {"latin1", "utf8", "ascii"}:
        raise pickle.UnpicklingError(f"codec {encoding!r} is not allowed")
    return codecs.encode(obj, encoding, errors)


_REBUILDERS = {_rebuild_tensor, _rebuild_tensor_v3}

_TORCH_CALLABLES: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch.serialization", "_get_layout"): _get_layout,
    ("torch", "Size"): torch.Size,
    ("torch", "device"): torch.device,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): _codecs_encode,
    ("codecs", "encode"): _codecs_encode,
}


def _safe_numpy_global(module: str, name: str) -> Any:
    """numpy arrays and scalars of plain (non-object) dtypes only."""
    import numpy as np

    def checked_dtype(*args: Any) -> Any:
        dt = np.dtype(*args[:1])
        if dt.hasobject:
            raise pickle.UnpicklingError("numpy object arrays are not allowed")
        return np.dtype(*args)

    def checked_scalar(dtype: Any, data: bytes = b"") -> Any:
        if dtype.hasobject:
            raise pickle.UnpicklingError("numpy object scalars are not allowed")
        return np.frombuffer(data, dtype=dtype, count=1)[0]

    def checked_reconstruct(cls: Any, shape: Any, dtype: Any) -> Any:
        if cls is not np.ndarray:
            raise pickle.UnpicklingError("only numpy.ndarray may be reconstructed")
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


class SafeUnpickler(pickle.Unpickler):
    """Unpickler that resolves only allow-listed globals; everything else becomes opaque."""

    def __init__(self, file: Any, report: PickleReport | None = None) -> None:
        super().__init__(file)
        self.report = report if report is not None else PickleReport()
        self._opaque_classes: dict[str, type[OpaqueObject]] = {}

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
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name, _STORAGE_DTYPES[name])
        if module in {"torch.storage", "torch"} and name in {"UntypedStorage", "_UntypedStorage"}:
            return _StorageType(name, torch.uint8)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
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
            raise pickle.UnpicklingError(f"unknown storage type {storage_type!r}")
        ref = StorageRef(
            key=str(key),
            dtype=storage_type.dtype,
            location=str(location),
            numel=int(numel),
            view_offset=int(view_offset),
        )
        self.report.storages.setdefault(ref.key, ref)
        return ref


def _safe_reconstructor(cls: Any, base: Any, state: Any) -> Any:
    if isinstance(cls, type) and issubclass(cls, OpaqueObject):
        obj = cls.__new__(cls)
        obj.state = state
        return obj
    raise pickle.UnpicklingError("copyreg._reconstructor on a non-opaque class is not allowed")


def safe_loads(data: bytes, report: PickleReport | None = None) -> Any:
    """Unpickle ``data`` with the allow-list; raises ``pickle.UnpicklingError`` on refusal."""
    return SafeUnpickler(io.BytesIO(data), report).load()
