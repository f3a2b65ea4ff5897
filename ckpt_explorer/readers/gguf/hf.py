"""A GGUF export seen as the Hugging Face model it was converted from.

llama.cpp's ``convert_hf_to_gguf.py`` renames every HF tensor through the ``gguf`` package's
tensor name map (``model.layers.0.self_attn.q_proj.weight`` -> ``blk.0.attn_q.weight``) and
changes some on the way. The changes undone here are the ones its converters make:

- **Q/K head permutation**: the LLaMA-family converters reorder the rows of ``q_proj`` and
  ``k_proj`` inside each head (HF's rotate-half RoPE layout -> GGML's interleaved pairs):
  ``w.reshape(n_head, 2, head_dim // 2, ...).swapaxes(1, 2)`` (``n_head`` is the KV head
  count for ``k_proj``);
- **stacked experts**: a MoE layer's per-expert ``experts.<e>.<w>`` are stacked into one
  ``ffn_<w>_exps`` tensor (expert first);
- **norm offsets**: architectures whose norm computes ``x * (1 + w)`` (Gemma 1-3, Nemotron)
  store ``1 + w`` for every ``*norm.weight``.

:func:`pair_export` pairs the HF names of a source with the export's tensors, each with what
was done to it; a tensor that cannot be paired is given with the reason. :func:`hf_view` is the
export as a view under HF names (what a diff against the HF folder compares), each record
loading the export's values with the transform undone. The name map needs the ``gguf``
package; listing a GGUF does not.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...errors import MissingDependencyError
from ...types import Detection, TensorRecord, Traits
from ...view import CheckpointView
from .values import INSTALL

if TYPE_CHECKING:
    import torch

# gguf MODEL_ARCH names whose converter permutes Q/K (LlamaModel.permute and its copies)
QK_PERMUTED = (
    "LLAMA",
    "ARCEE",
    "AFMOE",
    "GRANITE",
    "GRANITE_MOE",
    "GRANITE_SWA",
    "SMOLLM3",
    "LLAMA_EMBED",
    "NANBEIGE",
    "LLADA",
    "DECI",
    "DEEPSEEK",
    "BAILINGMOE",
)
# ... and whose converter stores 1 + w for every *norm.weight
NORM_PLUS_ONE = ("GEMMA", "GEMMA2", "GEMMA3", "NEMOTRON")
EXPERT = re.compile(r"^(?P<head>.*\.experts)\.(?P<e>\d+)\.(?P<tail>.+)$")
SUFFIXES = (".weight", ".bias")

Fn = Callable[["torch.Tensor"], "torch.Tensor"]


@dataclass(frozen=True)
class ExportSource:
    """Where one HF tensor is in the export, and what the converter did to it.

    Attributes:
        hf: the HF name.
        gguf: the export's tensor.
        ggml_type: its ggml type name (``Q8_0``, ``F16`` ...).
        expert: the index in a stacked expert tensor, None otherwise.
        transform: what was done, in words ("" for a plain copy).
        forward: the converter's change (HF values -> the export's layout of this tensor).
        inverse: undoes it (the export's values -> HF layout).
    """

    hf: str
    gguf: str
    ggml_type: str
    expert: int | None = None
    transform: str = ""
    forward: Fn | None = None
    inverse: Fn | None = None

    def describe(self) -> str:
        where = self.gguf + (f"[{self.expert}]" if self.expert is not None else "")
        return where + (f" ({self.transform})" if self.transform else "")


@dataclass
class ExportPairing:
    """Every HF name paired with the export or not, and why."""

    architecture: str
    sources: dict[str, ExportSource] = field(default_factory=dict)
    only_hf: dict[str, str] = field(default_factory=dict)  # HF name -> why unpaired
    only_gguf: dict[str, str] = field(default_factory=dict)  # export tensor -> why unpaired


_PAIRINGS: weakref.WeakKeyDictionary[CheckpointView, tuple[CheckpointView, ExportPairing]] = (
    weakref.WeakKeyDictionary()
)


def is_gguf(view: CheckpointView) -> bool:
    return view.family == "gguf"


def export_of(view: CheckpointView) -> tuple[CheckpointView, ExportPairing] | None:
    """(the GGUF view, the pairing) behind a view made by :func:`hf_view`, else None."""
    return _PAIRINGS.get(view)


def _gguf_module(path: object) -> Any:
    try:
        import gguf
    except ImportError as e:
        raise MissingDependencyError(
            path,
            "the gguf package to pair GGUF names with HF names",
            "it is not installed",
            INSTALL,
        ) from e
    return gguf


def permute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """What the LLaMA converters do to q_proj / k_proj (``n_head``: heads of that tensor)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def unpermute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    return (
        w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _plus_one(w: torch.Tensor) -> torch.Tensor:
    return w + 1


def _minus_one(w: torch.Tensor) -> torch.Tensor:
    return w - 1


def _int(md: dict[str, Any], key: str) -> int | None:
    v = md.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def pair_export(
    export: CheckpointView, hf_names: list[str], hf_shapes: dict[str, tuple[int, ...]]
) -> ExportPairing:
    """Pair ``hf_names`` (a source's tensors) with the tensors of the GGUF view ``export``."""
    gguf = _gguf_module(export.path)
    md = {k.removeprefix("__metadata__."): v for k, v in export.values.items()}
    arch = md.get("general.architecture")
    pairing = ExportPairing(str(arch or ""))
    by_name = {r.name: r for r in export.tensors}
    arch_enum = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}.get(arch)
    if arch_enum is None:
        why = f"general.architecture {arch!r} is not one the gguf package maps"
        pairing.only_hf = dict.fromkeys(hf_names, why)
        pairing.only_gguf = dict.fromkeys(by_name, why)
        return pairing
    blocks = _int(md, f"{arch}.block_count") or 0
    tmap = gguf.get_tensor_name_map(arch_enum, blocks)
    n_head = _int(md, f"{arch}.attention.head_count")
    n_kv = _int(md, f"{arch}.attention.head_count_kv") or n_head
    permuted = arch_enum.name in QK_PERMUTED
    plus_one = arch_enum.name in NORM_PLUS_ONE
    q_name = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ATTN_Q]
    k_name = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ATTN_K]
    used: set[str] = set()
    for hf in hf_names:
        expert = None
        target = tmap.get_name(hf, try_suffixes=SUFFIXES)
        m = EXPERT.match(hf) if target is None else None
        if m is not None:
            target = tmap.get_name(f"{m['head']}.{m['tail']}", try_suffixes=SUFFIXES)
            expert = int(m["e"]) if target is not None else None
        if target is None:
            pairing.only_hf[hf] = f"the gguf name map of {arch} has no name for it"
            continue
        record = by_name.get(target)
        if record is None:
            why = f"the export has no {target}"
            if target.startswith("output.") and "token_embd.weight" in by_name:
                why += " (tied: llama.cpp uses token_embd.weight for the output)"
            pairing.only_hf[hf] = why
            continue
        transform, forward, inverse = "", None, None
        head_count = None
        if permuted and target.endswith(".weight"):
            stem = target.rsplit(".", 2)[-2]
            if stem == q_name.rsplit(".", 1)[-1]:
                head_count = n_head
            elif stem == k_name.rsplit(".", 1)[-1]:
                head_count = n_kv
        if head_count:
            transform = f"Q/K rows permuted per head, {head_count} heads"
            forward = _bind(permute_qk, head_count)
            inverse = _bind(unpermute_qk, head_count)
        elif plus_one and hf.endswith("norm.weight"):
            transform, forward, inverse = "stored as 1 + w", _plus_one, _minus_one
        shape = tuple(record.shape[1:]) if expert is not None else tuple(record.shape)
        if expert is not None and (not record.shape or expert >= record.shape[0]):
            pairing.only_hf[hf] = f"expert {expert} is past the {record.shape[:1]} of {target}"
            continue
        if hf in hf_shapes and tuple(hf_shapes[hf]) != shape:
            pairing.only_hf[hf] = f"{target} has shape {list(shape)}, not {list(hf_shapes[hf])}"
            continue
        gtype = (
            record.dtype.upper() if record.dtype not in _PLAIN_NAMES else _PLAIN_NAMES[record.dtype]
        )
        if expert is not None:
            transform = f"expert {expert} of the stacked tensor" + (
                f"; {transform}" if transform else ""
            )
        pairing.sources[hf] = ExportSource(hf, target, gtype, expert, transform, forward, inverse)
        used.add(target)
    for name in by_name:
        if name not in used:
            pairing.only_gguf[name] = "no tensor of the source maps to it"
    return pairing


_PLAIN_NAMES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
}


def _bind(fn: Callable[[Any, int], Any], n: int) -> Fn:
    return lambda w: fn(w, n)


def export_values(export: CheckpointView, src: ExportSource) -> torch.Tensor:
    """The export's values of ``src`` in the export's own layout (its expert sliced out)."""
    t = export.load(src.gguf)
    return t[src.expert] if src.expert is not None else t


def _read_values(export: CheckpointView, src: ExportSource) -> Callable[[], torch.Tensor]:
    def load() -> torch.Tensor:
        t = export_values(export, src)
        return (src.inverse(t) if src.inverse is not None else t).contiguous()

    return load


def hf_view(export: CheckpointView, source: CheckpointView) -> CheckpointView:
    """The GGUF view ``export`` under the HF names of ``source``: each paired record loads the
    export's values with the converter's change undone; export tensors that pair with nothing
    keep their GGUF names (they show as only in the export)."""
    names = source.names()
    shapes = {r.name: tuple(r.shape) for r in source.tensors}
    pairing = pair_export(export, names, shapes)
    by_name = {r.name: r for r in export.tensors}
    records: list[TensorRecord] = []
    for hf, src in pairing.sources.items():
        rec = by_name[src.gguf]
        shape = tuple(rec.shape[1:]) if src.expert is not None else tuple(rec.shape)
        nbytes = rec.nbytes // rec.shape[0] if src.expert is not None and rec.shape else rec.nbytes
        records.append(
            replace(
                rec,
                name=hf,
                shape=shape,
                nbytes=nbytes,
                offset=None,
                storage_key=None,
                read_values=_read_values(export, src),
            )
        )
    records += [by_name[n] for n in pairing.only_gguf]
    det = export.detection
    detection = Detection(
        det.path,
        det.family,
        det.kind,
        (*det.evidence, f"seen under the HF names of {source.path}"),
        det.detail,
        Traits(loaded_by=det.traits.loaded_by),
    )
    view = CheckpointView(export.path, detection, export.files, tuple(records), export.values)
    _PAIRINGS[view] = (export, pairing)
    return view
