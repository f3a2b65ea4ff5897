"""``--to gguf``: a model with Hugging Face names -> one GGUF file, as llama.cpp's converter
writes it, then verified against the source.

What is written follows ``convert_hf_to_gguf.py`` (the llama.cpp project's converter):

- names through the ``gguf`` package's tensor name map (``model.layers.0.self_attn.q_proj``
  -> ``blk.0.attn_q``); a tensor the map does not name is refused (``rotary_emb.inv_freq`` and
  attention bias buffers are left out, as llama.cpp leaves them);
- the converter's changes (:mod:`~ckpt_explorer.readers.gguf.hf`): the Q/K head permutation of
  the LLaMA family, ``1 + w`` norms of Gemma/Nemotron, a MoE layer's experts stacked;
- types: 1-D tensors, ``*_norm.weight`` and non-``.weight`` tensors in F32, the rest in the
  chosen type (``f32``, ``f16``, ``bf16``, ``q8_0``); a row that is not a multiple of Q8_0's
  32-block falls back to F16 (as llama.cpp does); values are quantized by
  ``gguf.quants.quantize`` (the converter's own code, so the bytes are the converter's);
- metadata from ``config.json``: architecture, block count, context length, embedding and
  feed-forward lengths, head counts, key/value lengths, RoPE base and dimension, RMS epsilon,
  vocab size, expert counts, file type; a sentencepiece ``tokenizer.model`` beside the weights
  gives the tokenizer (tokens, scores, types, special ids).

The file is streamed one tensor at a time through ``gguf.GGUFWriter``. Verification reopens
it with the package's GGUF reader: every planned tensor with its type and shape, each key's
value, and each tensor's values against the source after the converter's change: F32/F16/BF16
equal to the rounding of the source bit for bit, Q8_0 within its scheme's bound
(:mod:`~ckpt_explorer.diff.quant_budget`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError, MissingDependencyError
from ..readers.gguf.hf import NORM_PLUS_ONE, QK_PERMUTED, permute_qk
from ..readers.gguf.values import INSTALL
from .plan_types import ConversionPlan, PlannedFile, PlannedTensor

if TYPE_CHECKING:
    import torch

    from ..contracts import Cancel
    from .source_content import SourceContent
    from .writers import Tick

OUTTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}
ALIASES = {"fp32": "f32", "float32": "f32", "fp16": "f16", "float16": "f16", "bfloat16": "bf16"}
DTYPES = {**OUTTYPES, **{a: OUTTYPES[t] for a, t in ALIASES.items()}}
DEFAULT = "f16"  # the converter's classic default
FILE_TYPES = {"F32": 0, "F16": 1, "Q8_0": 7, "BF16": 32}  # gguf.LlamaFileType
# model_type -> the gguf architecture llama.cpp's converter writes it as
ARCHITECTURES = {"mistral": "llama", "mixtral": "llama"}
SKIPPED = (".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")
EXPERT = re.compile(r"^(?P<head>.*\.experts)\.(?P<e>\d+)\.(?P<tail>.+)$")
SUFFIXES = (".weight", ".bias")
# tensors the converter keeps in F32 whatever the outtype (gguf MODEL_TENSOR names)
ALWAYS_F32 = ("FFN_GATE_INP", "FFN_GATE_INP_SHEXP", "POS_EMBD", "TOKEN_TYPES")
KV = "__gguf_kv__"  # PlannedFile.values key: [(key, value, value type, sub type)]
ARCH = "__gguf_arch__"


def gguf_module(path: object = None) -> Any:
    try:
        import gguf
    except ImportError as e:
        raise MissingDependencyError(
            path, "the gguf package to write GGUF files", "it is not installed", INSTALL
        ) from e
    return gguf


@dataclass(frozen=True)
class Layout:
    """Where HF tensors go: the architecture, its name map and the converter's changes."""

    arch: str
    config: dict[str, Any]
    n_head: int | None
    n_kv: int | None
    permuted: bool
    plus_one: bool


def _config(plan: ConversionPlan, content: SourceContent) -> dict[str, Any]:
    for name, doc in content.written:
        if name == "config.json":
            return dict(doc)
    for src, name in content.side_files:
        if name == "config.json":
            doc = json.loads(src.read_bytes())
            if isinstance(doc, dict):
                return doc
    raise CkptExplorerError(
        plan.source,
        "a config.json beside the weights (--to gguf takes its architecture and sizes)",
        "none",
        "Convert the Hugging Face folder that holds config.json.",
    )


def _first(config: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    text = config.get("text_config")
    if isinstance(text, dict):
        return _first(text, *keys)
    return None


def layout_of(plan: ConversionPlan, content: SourceContent) -> Layout:
    gguf = gguf_module(plan.source)
    config = _config(plan, content)
    model_type = str(config.get("model_type", ""))
    arch = ARCHITECTURES.get(model_type, model_type)
    arch_enum = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}.get(arch)
    if arch_enum is None:
        raise CkptExplorerError(
            plan.source,
            "a model_type whose GGUF architecture the gguf package names",
            repr(model_type),
            "Use llama.cpp's convert_hf_to_gguf.py for this architecture.",
        )
    n_head = _first(config, "num_attention_heads", "n_head", "n_heads")
    n_kv = _first(config, "num_key_value_heads", "n_kv_heads") or n_head
    return Layout(
        arch,
        config,
        n_head,
        n_kv,
        arch_enum.name in QK_PERMUTED,
        arch_enum.name in NORM_PLUS_ONE,
    )


def _ggml_type(gguf: Any, name: str, shape: tuple[int, ...], outtype: str) -> str:
    """The type the converter stores ``name`` in (see ``prepare_tensors``)."""
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return "F32"
    stem = name.removesuffix(".weight")
    for key in ALWAYS_F32:
        base = gguf.TENSOR_NAMES.get(getattr(gguf.MODEL_TENSOR, key, None), "")
        if base and re.fullmatch(re.escape(base).replace(r"\{bid\}", r"\d+"), stem):
            return "F32"
    if outtype == "Q8_0" and shape[-1] % 32:
        return "F16"  # gguf.QuantError -> the converter falls back to F16
    return outtype


def record_dtype(ggml_type: str) -> str:
    """The dtype the GGUF reader shows for a type (a plain type as its torch name)."""
    return {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}.get(
        ggml_type, ggml_type.lower()
    )


def _nbytes(gguf: Any, ggml_type: str, shape: tuple[int, ...]) -> int:
    qtype = gguf.GGMLQuantizationType[ggml_type]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def _forward(t: PlannedTensor, fn: Callable[[torch.Tensor], torch.Tensor] | None) -> Any:
    assert t.read_values is not None
    load = t.read_values

    def values() -> torch.Tensor:
        x = load()
        return fn(x) if fn is not None else x

    return values


def _stacked(parts: list[PlannedTensor], fn: Callable[[torch.Tensor], torch.Tensor] | None) -> Any:
    def values() -> torch.Tensor:
        import torch

        loaded = []
        for p in parts:
            assert p.read_values is not None
            x = p.read_values()
            loaded.append(fn(x) if fn is not None else x)
        return torch.stack(loaded)

    return values


def plan_gguf(
    plan: ConversionPlan, content: SourceContent, tensors: list[PlannedTensor], shard: int | None
) -> None:
    """One GGUF file at the destination (a split set is not written: no shard size)."""
    if shard is not None:
        raise CkptExplorerError(
            plan.destination, "--to gguf without --max-shard-size", "a shard size"
        )
    gguf = gguf_module(plan.source)
    layout = layout_of(plan, content)
    outtype = DTYPES[(plan.options.get("dtype") or DEFAULT).lower()]
    arch_enum = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[layout.arch]
    blocks = int(_first(layout.config, "num_hidden_layers", "n_layer", "n_layers") or 0)
    tmap = gguf.get_tensor_name_map(arch_enum, blocks)
    q_stem = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ATTN_Q].rsplit(".", 1)[-1]
    k_stem = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ATTN_K].rsplit(".", 1)[-1]
    out: list[PlannedTensor] = []
    experts: dict[str, dict[int, PlannedTensor]] = {}
    unmapped: list[str] = []
    for t in tensors:
        if t.name.endswith(SKIPPED):
            plan.dropped.append(f"{t.name} (llama.cpp leaves it out)")
            continue
        name = tmap.get_name(t.name, try_suffixes=SUFFIXES)
        m = EXPERT.match(t.name) if name is None else None
        if m is not None:
            name = tmap.get_name(f"{m['head']}.{m['tail']}", try_suffixes=SUFFIXES)
            if name is not None:
                experts.setdefault(name, {})[int(m["e"])] = t
                continue
        if name is None:
            unmapped.append(t.name)
            continue
        out.append(_output(gguf, layout, name, t, [t], outtype, q_stem, k_stem))
    for name, by_index in experts.items():
        parts = [by_index[i] for i in sorted(by_index)]
        if sorted(by_index) != list(range(len(parts))):
            unmapped.append(f"{name}: experts {sorted(by_index)} are not 0..{len(parts) - 1}")
            continue
        out.append(_output(gguf, layout, name, parts[0], parts, outtype, q_stem, k_stem))
    if unmapped:
        raise CkptExplorerError(
            plan.source,
            f"tensors the gguf name map of {layout.arch} names",
            f"{len(unmapped)} it does not, e.g. {unmapped[0]}",
            "Use llama.cpp's convert_hf_to_gguf.py for this model.",
        )
    kv = metadata(plan, content, layout, outtype)
    plan.files = [
        PlannedFile(plan.destination.name, "gguf", tuple(out), values={KV: kv, ARCH: layout.arch})
    ]
    plan.notes.append(
        f"GGUF {layout.arch}, {outtype}"
        + ("; Q/K rows permuted per head as llama.cpp does" if layout.permuted else "")
        + ("; norms stored as 1 + w" if layout.plus_one else "")
    )


def _output(
    gguf: Any,
    layout: Layout,
    name: str,
    first: PlannedTensor,
    parts: list[PlannedTensor],
    outtype: str,
    q_stem: str,
    k_stem: str,
) -> PlannedTensor:
    fn: Callable[[torch.Tensor], torch.Tensor] | None = None
    stem = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else name
    what = ""
    if layout.permuted and name.endswith(".weight") and stem in (q_stem, k_stem):
        heads = layout.n_head if stem == q_stem else layout.n_kv
        if heads:
            fn = _bind_permute(int(heads))
            what = f"; Q/K permuted, {heads} heads"
    elif layout.plus_one and first.name.endswith("norm.weight"):
        fn, what = _plus_one, "; stored as 1 + w"
    shape = tuple(first.shape) if len(parts) == 1 else (len(parts), *first.shape)
    gtype = _ggml_type(gguf, name, shape, outtype)
    source = first.name if len(parts) == 1 else f"{len(parts)} experts, {first.name} ..."
    loader = _forward(first, fn) if len(parts) == 1 else _stacked(parts, fn)
    return PlannedTensor(
        name=name,
        source=f"{source} ({gtype}{what})",
        dtype=record_dtype(gtype),
        shape=shape,
        nbytes=_nbytes(gguf, gtype, shape),
        read_values=loader,
    )


def _bind_permute(n: int) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda w: permute_qk(w, n)


def _plus_one(w: torch.Tensor) -> torch.Tensor:
    return w.float() + 1


def metadata(
    plan: ConversionPlan, content: SourceContent, layout: Layout, outtype: str
) -> list[tuple[str, Any, str, str | None]]:
    """The key/values the converter writes for this model: ``(key, value, type, sub type)``."""
    c, a = layout.config, layout.arch
    kv: list[tuple[str, Any, str, str | None]] = [
        ("general.type", "model", "STRING", None),
        ("general.name", Path(str(plan.source)).name.split(".")[0] or "model", "STRING", None),
    ]

    def u32(key: str, *names: str) -> None:
        v = _first(c, *names)
        if isinstance(v, int) and not isinstance(v, bool):
            kv.append((f"{a}.{key}", v, "UINT32", None))

    def f32(key: str, v: Any) -> None:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            kv.append((f"{a}.{key}", float(v), "FLOAT32", None))

    u32("block_count", "num_hidden_layers", "n_layer", "n_layers")
    u32("context_length", "max_position_embeddings", "n_ctx", "n_positions")
    u32("embedding_length", "hidden_size", "n_embd", "dim")
    u32("feed_forward_length", "intermediate_size", "n_inner", "hidden_dim")
    u32("attention.head_count", "num_attention_heads", "n_head", "n_heads")
    u32("attention.head_count_kv", "num_key_value_heads", "n_kv_heads")
    rope = _first(c, "rope_parameters") or {}
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    f32("rope.freq_base", theta if theta is not None else _first(c, "rope_theta"))
    f32("attention.layer_norm_rms_epsilon", _first(c, "rms_norm_eps"))
    u32("attention.key_length", "head_dim")
    u32("attention.value_length", "head_dim")
    u32("expert_count", "num_local_experts", "num_experts")
    u32("expert_used_count", "num_experts_per_tok")
    kv.append(("general.file_type", FILE_TYPES[outtype], "UINT32", None))
    u32("vocab_size", "vocab_size")
    head_dim = _first(c, "head_dim")
    if head_dim is None and _first(c, "hidden_size") and layout.n_head:
        head_dim = int(_first(c, "hidden_size")) // int(layout.n_head)
    if isinstance(head_dim, int):
        kv.append((f"{a}.rope.dimension_count", head_dim, "UINT32", None))
    kv.append(("general.quantization_version", 2, "UINT32", None))
    kv += tokenizer(plan, content)
    return kv


def tokenizer(
    plan: ConversionPlan, content: SourceContent
) -> list[tuple[str, Any, str, str | None]]:
    """A sentencepiece ``tokenizer.model`` beside the weights, as the converter writes it
    (``tokenizer.ggml.model`` "llama"); nothing (and a note) when there is none or the
    sentencepiece package is missing."""
    folder = None
    for src, name in content.side_files:
        if name == "config.json":
            folder = src.parent
    local = folder.local_path() if folder is not None else None
    model = Path(local) / "tokenizer.model" if local is not None else None
    if model is None or not model.is_file():
        plan.notes.append("no tokenizer.model beside the weights: the GGUF has no tokenizer")
        return []
    try:
        import sentencepiece  # parses the model's protobuf; runs nothing from it
    except ImportError:
        plan.notes.append("sentencepiece is not installed: the GGUF has no tokenizer")
        return []
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(float(sp.get_score(i)))
        kind = 1  # NORMAL
        if sp.is_unknown(i):
            kind = 2
        elif sp.is_control(i):
            kind = 3
        elif sp.is_unused(i):
            kind = 5
        elif sp.is_byte(i):
            kind = 6
        types.append(kind)
    kv: list[tuple[str, Any, str, str | None]] = [
        ("tokenizer.ggml.model", "llama", "STRING", None),
        ("tokenizer.ggml.pre", "default", "STRING", None),
        ("tokenizer.ggml.tokens", tokens, "ARRAY", "STRING"),
        ("tokenizer.ggml.scores", scores, "ARRAY", "FLOAT32"),
        ("tokenizer.ggml.token_type", types, "ARRAY", "INT32"),
    ]
    config = _config(plan, content)
    for key, tid in (("bos", sp.bos_id()), ("eos", sp.eos_id()), ("padding", -1)):
        named = config.get(f"{'pad' if key == 'padding' else key}_token_id")
        tid = named if isinstance(named, int) and not isinstance(named, bool) else tid
        if tid >= 0:  # the converter's SpecialVocab: config.json's ids first
            kv.append((f"tokenizer.ggml.{key}_token_id", tid, "UINT32", None))
    return kv


def write(
    root: Path, pf: PlannedFile, tick: Tick | None, cancel: Cancel | None, sync: bool
) -> None:
    """Stream ``pf`` into a GGUF file: header and key/values, tensor infos, then each
    tensor loaded, changed and quantized in turn."""
    import numpy as np
    import torch

    from ..contracts import is_cancelled
    from .writers import ConversionCancelled, fsync_path

    gguf = gguf_module(root)
    path = root / pf.name
    writer = gguf.GGUFWriter(path, pf.values[ARCH])
    try:
        for key, value, vtype, sub in pf.values[KV]:
            writer.add_key_value(
                key,
                value,
                gguf.GGUFValueType[vtype],
                sub_type=gguf.GGUFValueType[sub] if sub else None,
            )
        for t in pf.tensors:
            qtype = gguf.GGMLQuantizationType[_type_of(t)]
            byte_shape = gguf.quant_shape_to_byte_shape(t.shape, qtype)
            if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                dtype = np.float32 if qtype == gguf.GGMLQuantizationType.F32 else np.float16
                writer.add_tensor_info(t.name, t.shape, np.dtype(dtype), t.nbytes, qtype)
            else:
                writer.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), t.nbytes, qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in pf.tensors:
            if cancel is not None and is_cancelled(cancel):
                raise ConversionCancelled(path, "the job to finish", "a cancel request")
            assert t.read_values is not None
            x = t.read_values().detach()
            if x.dtype not in (torch.float16, torch.float32):
                x = x.to(torch.float32)  # as the converter does before quantizing
            data = gguf.quants.quantize(
                x.contiguous().numpy(), gguf.GGMLQuantizationType[_type_of(t)]
            )
            writer.write_tensor_data(np.ascontiguousarray(data))
            if tick is not None:
                tick(t.nbytes)
    finally:
        writer.close()
    if sync:
        fsync_path(path)


def _type_of(t: PlannedTensor) -> str:
    return {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}.get(t.dtype, t.dtype.upper())


def verify(
    plan: ConversionPlan, output: Path, files: Iterable[PlannedFile] | None = None
) -> list[str]:
    """Mismatches between the GGUF at ``output`` and its plan (empty: verified)."""
    from ..api import open_checkpoint
    from ..diff.quant_budget import BEYOND, EXACT, FLOATS, budget

    try:
        view = open_checkpoint(output)
    except CkptExplorerError as e:
        return [f"the output does not open: {e}"]
    problems: list[str] = []
    listed = {r.name: r for r in view.tensors}
    chosen = list(plan.files if files is None else files)
    for pf in chosen:
        for t in pf.tensors:
            unlike = t.unlike(listed.get(t.name))
            if unlike is not None:
                problems.append(unlike)
                continue
            assert t.read_values is not None
            gtype = _type_of(t)
            got = view.load(t.name)
            b = budget(gtype, t.read_values(), got)
            if gtype in FLOATS and b.verdict != EXACT:
                problems.append(
                    f"{t.name}: not the {gtype} rounding of the source (max error {b.max_error:.3g})"
                )
            elif b.verdict == BEYOND:
                problems.append(
                    f"{t.name}: {gtype} error {b.max_error:.3g} beyond its budget "
                    f"(x{b.ratio:.3g}: {b.rule})"
                )
        problems += _check_kv(pf, output)
    names = {t.name for pf in chosen for t in pf.tensors}
    extra = [n for n in listed if n not in names]
    if extra:
        problems.append(f"{len(extra)} unplanned tensor(s) in the output, e.g. {extra[0]}")
    return problems


def _check_kv(pf: PlannedFile, output: Path) -> list[str]:
    """Each planned key holds its value (long arrays: their length and first items)."""
    from ..io.gguf_header import ArraySummary
    from ..io.location import as_location
    from ..readers.gguf.file import gguf_header

    values = gguf_header(as_location(output)).metadata
    problems = []
    want = [("general.architecture", pf.values[ARCH], "STRING", None), *pf.values[KV]]
    for key, value, vtype, _ in want:
        got = values.get(key)
        if isinstance(got, ArraySummary):
            ok = got.count == len(value) and list(got.head) == list(value[: len(got.head)])
        elif vtype == "FLOAT32":
            import numpy as np

            ok = isinstance(got, float) and got == float(np.float32(value))
        else:
            ok = got == value
        if not ok:
            problems.append(f"{key}: {got!r:.60} written, {value!r:.60} planned")
    return problems
