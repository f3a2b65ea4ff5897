"""safetensors' dtype table and one header entry: what the header parsers share."""

from __future__ import annotations

from typing import NamedTuple

# safetensors dtype -> (torch dtype name, bits per element)
DTYPES: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 8),
    "U8": ("uint8", 8),
    "I8": ("int8", 8),
    "I16": ("int16", 16),
    "U16": ("uint16", 16),
    "F16": ("float16", 16),
    "BF16": ("bfloat16", 16),
    "I32": ("int32", 32),
    "U32": ("uint32", 32),
    "F32": ("float32", 32),
    "F64": ("float64", 64),
    "I64": ("int64", 64),
    "U64": ("uint64", 64),
    "C64": ("complex64", 64),
    "F8_E5M2": ("float8_e5m2", 8),
    "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8),
    "F4": ("float4_e2m1fn_x2", 4),
    "F6_E2M3": ("float6_e2m3", 6),
    "F6_E3M2": ("float6_e3m2", 6),
}
TORCH_TO_SAFETENSORS = {name: st for st, (name, _) in DTYPES.items()}


class HeaderEntry(NamedTuple):
    """One tensor of a header (a named tuple: a 90k-tensor header makes 90k of them)."""

    name: str
    dtype: str  # safetensors spelling, e.g. "BF16"
    shape: tuple[int, ...]
    begin: int  # relative to the data buffer
    end: int

    @property
    def torch_dtype(self) -> str:
        return DTYPES[self.dtype][0]
