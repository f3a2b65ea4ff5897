"""A GGUF tensor's values, on demand: plain types as views of the file, quantized types
dequantized to float32 by the ``gguf`` package (llama.cpp's own Python library).

Plain types (F32, F16, BF16, F64, I8-I64) need no dependency: they load as the mapped views
every reader gives (big-endian files byte-swapped). A block-quantized type (Q8_0, Q4_K, IQ2_XS
...) is dequantized by ``gguf.quants.dequantize``, exactly as ``gguf.GGUFReader`` users do;
without the package the load says what to install. Listing never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, cast

from ...errors import CkptExplorerError, MissingDependencyError
from ...io.gguf_header import GGML_TYPES, TensorInfo
from ...io.mapped import MappedFile, MappedTensor

if TYPE_CHECKING:
    import torch

# ggml types stored as plain elements -> torch dtype name
PLAIN = {
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F64": "float64",
    "I8": "int8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
}
INSTALL = "Install the gguf package (pip install 'ckpt-explorer[gguf]') to dequantize it."


def record_dtype(info: TensorInfo) -> str:
    """The dtype a record shows: the torch name of a plain type, else the ggml type in lower
    case (``q8_0``, ``q4_k``): its values load as float32."""
    return PLAIN.get(info.type_name, info.type_name.lower())


def is_plain(info: TensorInfo) -> bool:
    return info.type_name in PLAIN


class Dequantized(NamedTuple):
    """A record's loader for a block-quantized tensor: float32 values of ``shape``."""

    mapped: MappedFile
    offset: int
    nbytes: int
    ggml_type: int
    shape: tuple[int, ...]
    byteorder: str = "little"

    def __call__(self) -> torch.Tensor:
        import numpy as np
        import torch

        quants = gguf_quants(self.mapped.path)
        name, _, _ = GGML_TYPES[self.ggml_type]
        if self.byteorder != "little":
            raise CkptExplorerError(
                self.mapped.path,
                f"a little-endian {name} tensor to dequantize",
                "a big-endian file",
                "Block scales of a big-endian file are swapped by its writer; convert it with "
                "gguf's gguf_convert_endian first.",
            )
        raw = np.frombuffer(self.mapped.byte_view(self.offset, self.nbytes), dtype=np.uint8)
        inner = self.shape[-1] if self.shape else 1
        rows = raw.reshape(_rows(self.shape), -1)  # one row of whole blocks per line
        try:
            values = quants.dequantize(rows, quants_type(self.ggml_type))
        except NotImplementedError as e:
            raise MissingDependencyError(
                self.mapped.path,
                f"a gguf package that dequantizes {name}",
                f"gguf {_gguf_version()}: {e}",
                "Upgrade gguf (pip install -U gguf).",
            ) from e
        out = np.ascontiguousarray(values, dtype=np.float32).reshape(*self.shape[:-1], inner)
        return torch.from_numpy(out)


def _rows(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape[:-1]:
        n *= d
    return n


def tensor_read_values(
    mapped: MappedFile, info: TensorInfo, data_start: int, byteorder: str
) -> Callable[[], torch.Tensor]:
    """The loader of one tensor of a file whose data section starts at ``data_start``."""
    offset = data_start + info.offset
    if is_plain(info):
        plain = MappedTensor(
            mapped, offset, info.nbytes, PLAIN[info.type_name], info.shape, byteorder=byteorder
        )
        return cast("Callable[[], torch.Tensor]", plain)
    quant = Dequantized(mapped, offset, info.nbytes, info.ggml_type, info.shape, byteorder)
    return cast("Callable[[], torch.Tensor]", quant)


def gguf_quants(path: object = None):  # type: ignore[no-untyped-def]
    """``gguf.quants``, or a :class:`MissingDependencyError` that says what to install."""
    try:
        from gguf import quants
    except ImportError as e:
        raise MissingDependencyError(
            path, "the gguf package", "it is not installed", INSTALL
        ) from e
    return quants


def quants_type(ggml_type: int):  # type: ignore[no-untyped-def]
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType(ggml_type)


def _gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        return "(unknown version)"
