"""A Megatron model as the Hugging Face model it is: HF names, HF layouts, an HF config.

:func:`megatron_hf` maps the ``model`` part of a megatron-dist / megatron-legacy training
state (megatron-core ``GPTModel`` names) onto the state_dict of the HF class that
:mod:`.hf_config` picks. Each HF record loads its values from the Megatron tensor it
comes from, when asked:

- ``linear_qkv`` holds, per query group, its q heads then one k and one v head, ``head_dim``
  rows each. Llama's ``q_proj`` / ``k_proj`` / ``v_proj`` take the rows of each kind, group
  after group. GPT-2's ``c_attn`` is [all q | all k | all v], transposed: ``Conv1D`` stores
  [in, out]. Its bias takes the same rows;
- SwiGLU's ``linear_fc1`` (the gate rows, then the up rows) -> ``gate_proj`` / ``up_proj``;
- the other linears are renamed (GPT-2: transposed), the norms and embeddings renamed;
- ``output_layer`` -> ``lm_head``, unless the embeddings are tied.

Every Megatron tensor must find its place (``_extra_state`` holds no weights), with the shape
the args give it. Otherwise :class:`CkptExplorerError` is raised: nothing is half-mapped.
:func:`hf_view` gives the mapped model as a view (what a diff against an HF folder compares).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...errors import CkptExplorerError
from ...types import Detection, TensorRecord, shape_numel
from ...view import CheckpointView
from .hf_config import HINT, LLAMA, HfSpec, hf_spec

if TYPE_CHECKING:
    import torch

FAMILIES = ("megatron-dist", "megatron-legacy")
FLOATS = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# a layer's norms under the local spec's own names, or as the TE spec's fused linears save them
NORMS = {
    "input": ("input_layernorm.", "self_attention.linear_qkv.layer_norm_"),
    "pre_mlp": ("pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_"),
}
Loader = Callable[[], "torch.Tensor"]


@dataclass(frozen=True)
class HfModel:
    """The HF model a Megatron model maps to.

    Attributes:
        spec: the architecture and its sizes.
        config: ``config.json``.
        records: the HF state_dict in HF module order, each loading its own values.
        sources: HF name -> what it is made of, in words.
        left_out: Megatron tensors with no HF place that hold no weights of their own.
    """

    spec: HfSpec
    config: dict[str, Any]
    records: tuple[TensorRecord, ...]
    sources: dict[str, str]
    left_out: tuple[str, ...]


def is_megatron(view: CheckpointView) -> bool:
    return view.family in FAMILIES and "model" in view.parts


def _qkv_rows(spec: HfSpec, kinds: str, transpose: bool) -> Callable[[Any], Any]:
    """``linear_qkv`` (weight or bias) -> the rows of ``kinds`` ("q", "k", "v", "qkv")."""

    def take(t: Any) -> Any:
        import torch

        per = spec.heads // spec.groups
        rest = tuple(t.shape[1:])
        grouped = t.reshape(spec.groups, per + 2, spec.head_dim, *rest)
        where = {"q": slice(0, per), "k": slice(per, per + 1), "v": slice(per + 1, per + 2)}
        out = torch.cat([grouped[:, where[k]].reshape(-1, *rest) for k in kinds])
        return out.t() if transpose else out

    return take


def _half(i: int) -> Callable[[Any], Any]:
    return lambda t: t.chunk(2, dim=0)[i]


def _transposed(t: Any) -> Any:
    return t.t()


class _Mapper:
    """Builds the HF records of one model part, checking each source's shape."""

    def __init__(self, view: CheckpointView, model: CheckpointView, spec: HfSpec) -> None:
        self.view, self.model, self.spec = view, model, spec
        self.by_name = {r.name: r for r in model.tensors}
        self.used: set[str] = set()
        self.records: list[TensorRecord] = []
        self.sources: dict[str, str] = {}
        self.keep_offsets = view.family == "megatron-legacy"  # torch-zip offsets (fast path)

    def source(self, name: str, shape: tuple[int, ...]) -> TensorRecord:
        record = self.by_name.get(name)
        if record is None:
            raise CkptExplorerError(
                self.view.path,
                f"{name} in the model (megatron-core GPTModel names; the args describe a "
                f"{self.spec.architecture}-style model)",
                f"{len(self.by_name)} other tensors, e.g. {next(iter(self.by_name), 'none')}",
                HINT,
            )
        if tuple(record.shape) != shape or record.dtype not in FLOATS:
            raise CkptExplorerError(
                self.view.path,
                f"{name} of shape {list(shape)} (from the args), floating point",
                f"{record.dtype} {list(record.shape)}",
                HINT,
            )
        self.used.add(name)
        return record

    def one_of(self, names: tuple[str, ...], shape: tuple[int, ...]) -> TensorRecord:
        present = [n for n in names if n in self.by_name]
        if len(present) != 1:
            raise CkptExplorerError(
                self.view.path,
                "one of " + " / ".join(names),
                ", ".join(present) or "neither",
                HINT,
            )
        return self.source(present[0], shape)

    def add(
        self,
        hf: str,
        src: TensorRecord,
        shape: tuple[int, ...] | None = None,
        take: Callable[[Any], Any] | None = None,
        how: str = "",
    ) -> None:
        shape = tuple(src.shape) if shape is None else shape
        if take is None and shape == tuple(src.shape):
            offset = src.offset if self.keep_offsets else None
            record = replace(src, name=hf, offset=offset, storage_key=None)
        else:
            record = TensorRecord(
                hf,
                src.dtype,
                shape,
                shape_numel(shape) * FLOATS[src.dtype],
                src.file,
                read_values=_derived(self.model, src.name, take),
            )
        self.records.append(record)
        self.sources[hf] = src.name + (f" ({how})" if how else "")


def _derived(model: CheckpointView, name: str, take: Callable[[Any], Any] | None) -> Loader:
    def load() -> torch.Tensor:
        t = model.load(name)
        return (take(t) if take is not None else t).contiguous()

    return load


def _layers(m: _Mapper) -> None:
    s = m.spec
    h, q_rows, kv_rows = s.hidden, s.heads * s.head_dim, s.groups * s.head_dim
    qkv_shape = (q_rows + 2 * kv_rows, h)
    fc1_rows = s.ffn * (2 if s.swiglu else 1)
    norm_parts = ("weight",) if s.swiglu else ("weight", "bias")
    for i in range(s.layers):
        p = f"decoder.layers.{i}."

        def norm(kind: str, part: str, p: str = p) -> TensorRecord:
            return m.one_of(tuple(p + alias + part for alias in NORMS[kind]), (h,))

        qkv = m.source(p + "self_attention.linear_qkv.weight", qkv_shape)
        proj = m.source(p + "self_attention.linear_proj.weight", (h, q_rows))
        fc1 = m.source(p + "mlp.linear_fc1.weight", (fc1_rows, h))
        fc2 = m.source(p + "mlp.linear_fc2.weight", (h, s.ffn))
        if s.architecture == LLAMA:
            o = f"model.layers.{i}."
            for kind, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
                how = f"the {kind} rows of each query group"
                m.add(
                    o + f"self_attn.{kind}_proj.weight",
                    qkv,
                    (rows, h),
                    _qkv_rows(s, kind, False),
                    how,
                )
            m.add(o + "self_attn.o_proj.weight", proj)
            m.add(o + "mlp.gate_proj.weight", fc1, (s.ffn, h), _half(0), "first half: gate")
            m.add(o + "mlp.up_proj.weight", fc1, (s.ffn, h), _half(1), "second half: up")
            m.add(o + "mlp.down_proj.weight", fc2)
            m.add(o + "input_layernorm.weight", norm("input", "weight"))
            m.add(o + "post_attention_layernorm.weight", norm("pre_mlp", "weight"))
            continue
        o = f"transformer.h.{i}."
        qkv_b = m.source(p + "self_attention.linear_qkv.bias", (qkv_shape[0],))
        for part in norm_parts:
            m.add(o + f"ln_1.{part}", norm("input", part))
        how = "[q | k | v] of the heads, transposed (Conv1D)"
        m.add(o + "attn.c_attn.weight", qkv, qkv_shape[::-1], _qkv_rows(s, "qkv", True), how)
        m.add(o + "attn.c_attn.bias", qkv_b, None, _qkv_rows(s, "qkv", False), "[q | k | v]")
        m.add(o + "attn.c_proj.weight", proj, (q_rows, h), _transposed, "transposed")
        m.add(o + "attn.c_proj.bias", m.source(p + "self_attention.linear_proj.bias", (h,)))
        for part in norm_parts:
            m.add(o + f"ln_2.{part}", norm("pre_mlp", part))
        m.add(o + "mlp.c_fc.weight", fc1, (h, s.ffn), _transposed, "transposed")
        m.add(o + "mlp.c_fc.bias", m.source(p + "mlp.linear_fc1.bias", (s.ffn,)))
        m.add(o + "mlp.c_proj.weight", fc2, (s.ffn, h), _transposed, "transposed")
        m.add(o + "mlp.c_proj.bias", m.source(p + "mlp.linear_fc2.bias", (h,)))


def _tied_copy(view: CheckpointView, args: dict[str, Any]) -> None:
    """A tied model saves ``output_layer.weight`` only from a last pipeline stage that does
    not hold the embedding (pp > 1): at pp 1 the args and the tensors disagree."""
    pp = args.get("pipeline_model_parallel_size")
    if not isinstance(pp, int) or pp <= 1:
        raise CkptExplorerError(
            view.path,
            "no output_layer.weight: the args tie the output layer to the word embeddings "
            "(untie_embeddings_and_output_weights False)",
            f"output_layer.weight saved, pipeline_model_parallel_size {pp!r}",
            "The args and the tensors disagree about tied embeddings; nothing was converted.",
        )


def megatron_hf(view: CheckpointView) -> HfModel:
    """The HF model of a Megatron training state ``view`` (see the module docstring).

    Raises:
        CkptExplorerError: not a Megatron state with a model and args, args that no supported
            HF class computes exactly, or tensors that do not fit the model the args describe.
    """
    model, args = view.parts.get("model"), view.parts.get("args")
    if not is_megatron(view) or model is None or args is None:
        raise CkptExplorerError(
            view.path,
            "a Megatron training state with a model and its args",
            f"{view.family} with parts {', '.join(view.parts) or 'none'}",
        )
    spec = hf_spec(args.values, view.path)
    m = _Mapper(view, model, spec)
    emb = m.by_name.get("embedding.word_embeddings.weight")
    vocab = spec.vocab if spec.vocab is not None else (emb.shape[0] if emb is not None else 0)
    h = spec.hidden
    emb = m.source("embedding.word_embeddings.weight", (vocab, h))
    llama = spec.architecture == LLAMA
    m.add("model.embed_tokens.weight" if llama else "transformer.wte.weight", emb)
    if not llama:
        pos = m.source("embedding.position_embeddings.weight", (spec.positions, h))
        m.add("transformer.wpe.weight", pos)
    _layers(m)
    final = "model.norm." if llama else "transformer.ln_f."
    for part in ("weight",) if llama else ("weight", "bias"):
        m.add(final + part, m.source(f"decoder.final_layernorm.{part}", (h,)))
    left_out: list[str] = []
    if not spec.tied:
        m.add("lm_head.weight", m.source("output_layer.weight", (vocab, h)))
    elif "output_layer.weight" in m.by_name:
        _tied_copy(view, args.values)
        m.source("output_layer.weight", (vocab, h))
        left_out.append(
            "output_layer.weight (the last pipeline stage's copy of the tied word embeddings; "
            "lm_head ties to embed_tokens)"
        )
    extra = [n for n in m.by_name if n not in m.used and not n.endswith("._extra_state")]
    if extra:
        raise CkptExplorerError(
            view.path,
            f"only the tensors of the {spec.architecture}-style model its args describe",
            f"{len(extra)} more with no place in {spec.architecture}, e.g. {', '.join(extra[:3])}",
            HINT,
        )
    config = spec.config(vocab, emb.dtype)
    return HfModel(spec, config, tuple(m.records), m.sources, tuple(left_out))


def hf_view(view: CheckpointView) -> CheckpointView:
    """The model of Megatron training state ``view`` as its HF model (records with HF names
    that load the converted values); raises as :func:`megatron_hf` does."""
    hf = megatron_hf(view)
    model = view.parts["model"]
    arch = hf.spec.architecture
    evidence = (
        *view.detection.evidence,
        f"model seen as HF {arch}: {len(hf.records)} tensors mapped from megatron-core names",
    )
    detection = Detection(str(view.path), view.family, "model", evidence, f"{arch} (from Megatron)")
    values = {"config.json": hf.config}  # as an HF folder's view holds its config
    return CheckpointView(
        view.path, detection, model.files, hf.records, values, warnings=model.warnings
    )
