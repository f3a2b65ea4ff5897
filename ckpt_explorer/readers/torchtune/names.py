"""torchtune's own parameter names and order, rebuilt from the HF names its checkpointer wrote.

torchtune trains its own modules (``TransformerDecoder``: ``tok_embeddings``, ``layers.N.attn.
{q,k,v,output}_proj``, ``layers.N.mlp.w{1,2,3}``, ``layers.N.{sa,mlp}_norm.scale``,
``norm.scale``, ``output``) and numbers the optimizer over ``model.parameters()`` in that
module order, while ``FullModelHFCheckpointer`` saves the weights under HF names
(``tune_to_hf``: the inverse of ``torchtune.models.convert_weights._FROM_HF``; q/k rows are
permuted back to HF's rotary layout, shapes unchanged). So the optimizer's ids are named here by

1. mapping every HF key of the epoch's weights to its torchtune name with that table (the
   llama-family one, which llama2/3/3.2, mistral, gemma and qwen2 (q/k/v biases) use); LoRA
   parameters come from ``adapter_model.pt`` under torchtune's own names, else from the PEFT
   keys of ``adapter_model.safetensors`` (``lora_A`` -> ``lora_a``);
2. ordering the names as torchtune's modules register their parameters (the attention's
   q, k, v, output projections, then the MLP's w1, w2, w3, then sa_norm and mlp_norm per layer;
   within a linear ``weight``, ``bias``, ``lora_a``, ``lora_b``, ``magnitude``);
3. aligning the param groups with that order under every state's shape
   (:func:`.param_names.name_ids`): an id is named only when exactly one parameter fits.

Any key outside the table (another architecture: phi3's fused qkv, gemma2's extra norms, a
vision encoder) or a checkpointer ``model_type`` outside :data:`KNOWN_MODEL_TYPES` gives no
order at all, so no id is named rather than one named wrong. Optimizer moments of q/k
projections are in torchtune's row order, the saved weights in HF's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from ...types import ParamName, TensorRecord
from ...view import CheckpointView
from ..param_alignment import ParamOrder, Shape
from ..param_names import name_ids

KNOWN_MODEL_TYPES = frozenset({"LLAMA2", "LLAMA3", "LLAMA3_2", "MISTRAL", "QWEN2", "GEMMA"})
_L = r"model\.layers\.(\d+)\."
# HF module -> torchtune module ({0}: layer index, {1}: the matched projection)
HF_MODULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"model\.embed_tokens"), "tok_embeddings"),
    (re.compile(_L + r"self_attn\.(q_proj|k_proj|v_proj)"), "layers.{0}.attn.{1}"),
    (re.compile(_L + r"self_attn\.o_proj"), "layers.{0}.attn.output_proj"),
    (re.compile(_L + r"mlp\.gate_proj"), "layers.{0}.mlp.w1"),
    (re.compile(_L + r"mlp\.down_proj"), "layers.{0}.mlp.w2"),
    (re.compile(_L + r"mlp\.up_proj"), "layers.{0}.mlp.w3"),
    (re.compile(_L + r"input_layernorm"), "layers.{0}.sa_norm"),
    (re.compile(_L + r"post_attention_layernorm"), "layers.{0}.mlp_norm"),
    (re.compile(r"model\.norm"), "norm"),
    (re.compile(r"lm_head"), "output"),
)
DROPPED = re.compile(_L + r"self_attn\.rotary_emb\.inv_freq$")  # _FROM_HF maps it to None
NORMS = ("sa_norm", "mlp_norm", "norm")
BIASED = ("q_proj", "k_proj", "v_proj")  # qwen2's _FROM_HF
TOP = {"tok_embeddings": 0, "layers": 1, "norm": 2, "output": 3}
IN_LAYER = (
    "attn.q_proj",
    "attn.k_proj",
    "attn.v_proj",
    "attn.output_proj",
    "mlp.w1",
    "mlp.w2",
    "mlp.w3",
    "sa_norm",
    "mlp_norm",
)
LEAVES = {
    "weight": 0,
    "scale": 0,
    "bias": 1,
    "lora_a.weight": 2,
    "lora_b.weight": 3,
    "magnitude": 4,
}
TUNE_NAME = re.compile(
    r"^(?:(tok_embeddings|norm|output)|layers\.(\d+)\.("
    + "|".join(re.escape(m) for m in IN_LAYER)
    + r"))\.(weight|scale|bias|lora_a\.weight|lora_b\.weight|magnitude)$"
)


def hf_to_tune(key: str) -> tuple[bool, str | None]:
    """(known, torchtune name) of an HF key; ``(True, None)`` for a key torchtune drops."""
    if DROPPED.match(key):
        return True, None
    module, _, leaf = key.rpartition(".")
    for pattern, target in HF_MODULES:
        m = pattern.fullmatch(module)
        if m is None:
            continue
        name = target.format(*m.groups())
        last = name.rsplit(".", 1)[-1]
        if leaf == "weight":
            return True, f"{name}.scale" if last in NORMS else f"{name}.weight"
        if leaf == "bias" and last in BIASED:
            return True, f"{name}.bias"
        return False, None
    return False, None


def peft_to_tune(key: str) -> str | None:
    """The torchtune name of a PEFT adapter key (``base_model.model.<hf module>.lora_A.weight``
    -> ``<tune module>.lora_a.weight``), None when it does not map."""
    body = key.removeprefix("base_model.model.")
    for peft, tune in (
        (".lora_A.weight", "lora_a.weight"),
        (".lora_B.weight", "lora_b.weight"),
        (".lora_magnitude_vector", "magnitude"),
    ):
        if body.endswith(peft):
            known, name = hf_to_tune(body[: -len(peft)] + ".weight")
            if not known or name is None or not name.endswith(".weight"):
                return None
            return name[: -len("weight")] + tune
    return None


def order_key(name: str) -> tuple[int, int, int, int] | None:
    """Where ``name`` sits in torchtune's parameter order (None: not a known torchtune name)."""
    m = TUNE_NAME.match(name)
    if m is None:
        return None
    top, layer, module, leaf = m.groups()
    if top is not None:
        return (TOP[top], 0, 0, LEAVES[leaf])
    return (TOP["layers"], int(layer), IN_LAYER.index(module), LEAVES[leaf])


def torchtune_order(
    model: Iterable[TensorRecord],
    adapter: Iterable[TensorRecord],
    peft: Iterable[TensorRecord],
    model_type: str | None,
    tied: bool,
    source: str,
) -> tuple[ParamOrder | None, str]:
    """torchtune's parameters (names, shapes) in its order, or None with the reason.

    Args:
        model: the epoch's weights under HF names (a LoRA epoch: the merged weights).
        adapter: ``adapter_model.pt`` records (torchtune names); preferred over ``peft``.
        peft: ``adapter_model.safetensors`` records (PEFT names).
        model_type: the checkpointer's ``model_type`` from torchtune_config.yaml, if known.
        tied: ``tie_word_embeddings`` in config.json (torchtune's output is then no parameter).
        source: where the files are, for the order's description.
    """
    if model_type is not None and model_type.upper() not in KNOWN_MODEL_TYPES:
        return None, f"model_type {model_type} is not a llama-family model"
    params: dict[str, Shape] = {}
    for r in model:
        known, name = hf_to_tune(r.name)
        if not known:
            return None, f"{r.name} has no torchtune name in the llama-family table"
        if name is None or (tied and name == "output.weight"):
            continue
        params[name] = tuple(r.shape)
    lora = list(adapter)
    if lora:
        for r in lora:
            params[r.name] = tuple(r.shape)
    else:
        for r in peft:
            name = peft_to_tune(r.name)
            if name is None:
                return None, f"adapter key {r.name} has no torchtune name"
            params[name] = tuple(r.shape)
    keys = {n: order_key(n) for n in params}
    unknown = [n for n, k in keys.items() if k is None]
    if unknown:
        return None, f"{unknown[0]} is not a torchtune TransformerDecoder parameter"
    names = sorted(params, key=lambda n: keys[n] or (0, 0, 0, 0))
    return (
        ParamOrder(
            tuple(names),
            tuple(params[n] for n in names),
            True,
            f"torchtune's module order ({model_type or 'llama-family'}) of the names mapped "
            f"from {source} by torchtune's _FROM_HF table",
        ),
        "",
    )


def name_optimizer(
    optimizer: CheckpointView, order: ParamOrder | None, reason: str = ""
) -> CheckpointView:
    """``optimizer`` with its ids aligned to ``order`` (aligned, ambiguous or unknown); without
    an order every id is ``unknown`` for ``reason``, decided here: no other order (an HF
    model's, whose MLP order is not torchtune's) may name them later."""
    info = optimizer.optimizer
    assert info is not None
    if order is not None:
        return optimizer.with_optimizer(name_ids(info, optimizer.tensors, order))
    ids = [p for g in info.param_groups for p in g.get("params", ()) if isinstance(p, int)]
    names = {p: ParamName(None, "unknown") for p in ids or info.state_ids}
    return optimizer.with_optimizer(
        replace(info, names=names, param_names={}, name_source=f"not named: {reason}")
    )
