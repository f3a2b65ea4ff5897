"""torch's dtypes, sizes and devices as plain stand-ins, so that listing never imports torch.

A pickle names ``torch.float32`` or ``torch.Size``; reading its *structure* needs only the
name, the element size and the shape. :data:`DTYPES` is a static copy of the installed torch's
dtype table (tests/cli/test_cli_no_torch.py compares it with the live one, so drift is caught);
:meth:`DType.to_torch` gives the real ``torch.dtype`` where a caller needs one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DType:
    """A torch dtype by name: ``str()`` is ``"torch.<name>"``, as ``str(torch.<name>)`` is."""

    name: str  # canonical name, e.g. "float32" (never an alias like "float")
    itemsize: int
    is_floating_point: bool
    is_complex: bool

    def __str__(self) -> str:
        return f"torch.{self.name}"

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def to_torch(self) -> torch.dtype:
        """The real ``torch.dtype`` (imports torch)."""
        return torch_dtype(self.name)


def torch_dtype(name: str, path: object = None) -> torch.dtype:
    """``"bfloat16"`` -> ``torch.bfloat16``; a clear error for dtypes this torch lacks."""
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CkptExplorerError(
            path,
            f"a dtype this torch ({torch.__version__}) supports",
            name,
            "Upgrade torch to read tensors of this dtype; listing still works.",
        )
    return dtype


class Size(tuple[int, ...]):
    """A ``torch.Size`` read from a pickle: a tuple of ints that prints like torch's."""

    def __repr__(self) -> str:
        return f"torch.Size({list(self)!r})"


@dataclass(frozen=True)
class Device:
    """A ``torch.device`` read from a pickle (type and index; nothing is allocated)."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{index})"


# Device types torch.device accepts (from torch's own error message for an unknown one).
DEVICE_TYPES = (
    "cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga",
    "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone",
)  # fmt: skip


def make_device(*args: Any) -> Device:
    """``torch.device(...)`` as torch parses it; RuntimeError where torch raises one."""
    if len(args) == 1 and isinstance(args[0], int) and not isinstance(args[0], bool):
        if args[0] < 0:
            raise RuntimeError("Device index must not be negative")
        return Device("accelerator", args[0])  # torch picks the current accelerator's type
    if not args or len(args) > 2 or not isinstance(args[0], str):
        raise RuntimeError(f"torch.device() with arguments {args!r:.60} is not supported")
    kind, _, index_text = args[0].partition(":")
    if kind not in DEVICE_TYPES:
        raise RuntimeError(
            f"Expected one of {', '.join(DEVICE_TYPES)} device type at start of device string: "
            f"{args[0]:.60}"
        )
    index: int | None = None
    if index_text:
        if not index_text.isdigit():
            raise RuntimeError(f"Invalid device string: '{args[0]:.60}'")
        index = int(index_text)
    if len(args) == 2:
        if index is not None or not (isinstance(args[1], int) or args[1] is None):
            raise RuntimeError("a device index given twice, or not as an int")
        if isinstance(args[1], int) and args[1] < 0:
            raise RuntimeError("Device index must not be negative")
        index = args[1]
    return Device(kind, index)


def _d(name: str, itemsize: int, floating: bool = False, complex_: bool = False) -> DType:
    return DType(name, itemsize, floating, complex_)


# name -> (itemsize, is_floating_point, is_complex), copied from torch 2.13 (see the module doc);
# a table: its rows are alike in shape by nature
_CANONICAL: dict[str, tuple[int, bool, bool]] = {
    "uint8": (1, False, False), "int8": (1, False, False), "int16": (2, False, False),
    "int32": (4, False, False), "int64": (8, False, False), "float16": (2, True, False),
    "float32": (4, True, False), "float64": (8, True, False), "complex32": (4, False, True),
    "complex64": (8, False, True), "complex128": (16, False, True), "bool": (1, False, False),
    "qint8": (1, False, False), "quint8": (1, False, False), "qint32": (4, False, False),
    "bfloat16": (2, True, False), "quint4x2": (1, False, False), "quint2x4": (1, False, False),
    "bits1x8": (1, False, False), "bits2x4": (1, False, False), "bits4x2": (1, False, False),
    "bits8": (1, False, False), "bits16": (2, False, False), "float8_e5m2": (1, True, False),
    "float8_e4m3fn": (1, True, False), "float8_e5m2fnuz": (1, True, False),
    "float8_e4m3fnuz": (1, True, False), "uint16": (2, False, False),
    "uint32": (4, False, False), "uint64": (8, False, False), "uint1": (1, False, False),
    "uint2": (1, False, False), "uint3": (1, False, False), "uint4": (1, False, False),
    "uint5": (1, False, False), "uint6": (1, False, False), "uint7": (1, False, False),
    "int1": (1, False, False), "int2": (1, False, False), "int3": (1, False, False),
    "int4": (1, False, False), "int5": (1, False, False), "int6": (1, False, False),
    "int7": (1, False, False), "float8_e8m0fnu": (1, True, False),
    "float4_e2m1fn_x2": (1, True, False),
}  # fmt: skip
_ALIASES = {
    "short": "int16", "int": "int32", "long": "int64", "half": "float16", "float": "float32",
    "double": "float64", "chalf": "complex32", "cfloat": "complex64", "cdouble": "complex128",
    "bit": "uint1",
}  # fmt: skip

# Every name ``torch.<name>`` is a dtype under (aliases included) -> its stand-in.
DTYPES: dict[str, DType] = {n: _d(n, *v) for n, v in _CANONICAL.items()}
DTYPES.update({alias: DTYPES[name] for alias, name in _ALIASES.items()})

# Legacy typed storage classes (``torch.FloatStorage``) -> their element dtype.
STORAGE_DTYPES: dict[str, DType] = {
    "DoubleStorage": DTYPES["float64"],
    "FloatStorage": DTYPES["float32"],
    "HalfStorage": DTYPES["float16"],
    "BFloat16Storage": DTYPES["bfloat16"],
    "LongStorage": DTYPES["int64"],
    "IntStorage": DTYPES["int32"],
    "ShortStorage": DTYPES["int16"],
    "CharStorage": DTYPES["int8"],
    "ByteStorage": DTYPES["uint8"],
    "BoolStorage": DTYPES["bool"],
    "ComplexDoubleStorage": DTYPES["complex128"],
    "ComplexFloatStorage": DTYPES["complex64"],
    "UntypedStorage": DTYPES["uint8"],
    "QInt8Storage": DTYPES["qint8"],
    "QUInt8Storage": DTYPES["quint8"],
    "QInt32Storage": DTYPES["qint32"],
}


def live_dtypes() -> dict[str, tuple[str, int, bool, bool]]:
    """The installed torch's table: name -> (canonical name, itemsize, floating, complex)."""
    import torch

    return {
        n: (str(v).removeprefix("torch."), v.itemsize, v.is_floating_point, v.is_complex)
        for n, v in vars(torch).items()
        if isinstance(v, torch.dtype)
    }


def static_dtypes() -> dict[str, tuple[str, int, bool, bool]]:
    """:data:`DTYPES` in the form of :func:`live_dtypes`."""
    return {n: (d.name, d.itemsize, d.is_floating_point, d.is_complex) for n, d in DTYPES.items()}
