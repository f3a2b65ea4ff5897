"""A folder holding several GGUF exports (a Hub download of several quantizations of one model):
what each export is -- its file, quantization and size -- so that the user can pick one.

An export is one ``.gguf`` file or one split set (``<name>-00001-of-0000N.gguf`` ...; named by
its first file). Its quantization is the header's ``general.file_type`` (llama.cpp's
``llama_ftype``: ``Q4_K_M`` names the mixture ``llama-quantize`` wrote), else the ggml type of
most of its tensor bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ...errors import CkptExplorerError
from ...io.gguf_header import split_names
from ...io.location import Location
from .file import gguf_header, is_gguf_file

# llama.cpp's include/llama.h ``enum llama_ftype`` (general.file_type); gaps are removed types
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}  # fmt: skip
SHOWN = 8  # exports named in the message


@dataclass(frozen=True)
class Export:
    """One export: its first file, how many files, their bytes, its quantization."""

    first: Location
    files: int
    size: int
    quant: str

    def __str__(self) -> str:
        parts = f"{self.files} files, " if self.files > 1 else ""
        return f"{self.first.name} ({parts}{self.quant}, {self.size:,} bytes)"


def _quant(path: Location) -> str:
    try:
        header = gguf_header(path)
    except (CkptExplorerError, OSError):
        return "header unreadable"
    ftype = header.metadata.get("general.file_type")
    if isinstance(ftype, int) and not isinstance(ftype, bool) and ftype in FILE_TYPES:
        return FILE_TYPES[ftype]
    weight: Counter[str] = Counter()
    for t in header.tensors:
        try:
            weight[t.type_name] += t.nbytes
        except KeyError:  # a ggml type not known here: counted by its elements
            weight[t.type_name] += t.numel
    return f"mostly {weight.most_common(1)[0][0]}" if weight else "no tensors"


def gguf_exports(path: Location, headers: int = SHOWN) -> list[Export]:
    """The GGUF exports in folder ``path`` (not its subfolders), by first file name; the
    quantization read from the first ``headers`` exports' headers (a remote folder of many
    quantizations: a few range reads each)."""
    sets: dict[str, list[Location]] = {}
    for child in path.iterdir():
        if child.name.endswith(".gguf") and child.is_file():
            names = split_names(child.name) or [child.name]
            sets.setdefault(names[0], []).append(child)
    found: list[Export] = []
    for first_name, files in sorted(sets.items()):
        first = path / first_name
        if not is_gguf_file(first):
            continue
        size = sum(f.stat().st_size for f in files)
        quant = _quant(first) if len(found) < headers else "not read"
        found.append(Export(first, len(files), size, quant))
    return found


def several_exports(path: Location) -> tuple[str, str] | None:
    """(what was found, what to do) for a folder of two or more GGUF exports; None otherwise."""
    exports = gguf_exports(path)
    if len(exports) < 2:
        return None
    shown = "; ".join(str(e) for e in exports[:SHOWN])
    more = f"; and {len(exports) - SHOWN} more" if len(exports) > SHOWN else ""
    return (
        f"a folder of {len(exports)} GGUF exports: {shown}{more}",
        f"Open one export, e.g. `ckpt-explorer inspect {exports[0].first}` "
        "(a split set: any of its files).",
    )
