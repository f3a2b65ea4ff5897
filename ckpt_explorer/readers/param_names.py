"""Parameter names for optimizer ids, decided once and carried on the view.

Sources, strongest first: names the files record (DCP FQN keys, DeepSpeed ``param_shapes``:
filled by those readers); then the model's parameter order — the model built from
``config.json`` on the meta device when transformers knows the architecture (no weights read),
else the model checkpoint's own tensor order when its family keeps it, else its tensors without
order (shapes only). :mod:`.param_alignment` turns an order into names or inconsistencies.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import replace

from ..io.location import Location
from ..types import OptimizerInfo, ParamName, TensorRecord
from ..view import CheckpointView
from .hf import diffusers_config
from .optimizer_info import keeps_parameter_order, split_state_name
from .param_alignment import ParamOrder, Shape, align
from .part_pairing import paired

# Optimizer states shaped like their parameter (Adam(W), SGD, RMSprop, Adagrad, Adadelta,
# Adamax, ASGD, Rprop, Lion, LAMB, ColossalAI HybridAdam/CPUAdam, schedule-free's ``z``, torch
# Adafactor's ``variance`` of a vector, bitsandbytes' 8-bit ``state1`` / ``state2``). A factored
# second moment gives the shape too: rows x columns (torch Adafactor's ``row_var`` (r, 1) and
# ``col_var`` (1, c); transformers' ``exp_avg_sq_row`` (r,) and ``exp_avg_sq_col`` (c,)).
# Scalars say nothing about the parameter's shape.
PARAM_SHAPED = frozenset(
    {
        "exp_avg",
        "exp_avg_sq",
        "max_exp_avg_sq",
        "momentum_buffer",
        "square_avg",
        "grad_avg",
        "acc_delta",
        "sum",
        "exp_inf",
        "ax",
        "prev",
        "step_size",
        "z",
        "variance",
        "__bnb_optimizer_quant_state__.state1",
        "__bnb_optimizer_quant_state__.state2",
    }
)
FACTORED = (("row_var", "col_var"), ("exp_avg_sq_row", "exp_avg_sq_col"))
FLOAT_PREFIXES = ("float", "bfloat", "complex")
# Tensors that are buffers in common models (tried without them first, never excluded for good).
BUFFER_SUFFIXES = (
    "running_mean",
    "running_var",
    "num_batches_tracked",
    "inv_freq",
    "position_ids",
    "masked_bias",
    "_float_tensor",
)
MAX_META_LAYERS = 1024


def wanted_shapes(records: Iterable[TensorRecord], prefix: str = "") -> dict[int, Shape | None]:
    """Per id, the shape its parameter must have (from param-shaped states that agree)."""
    seen: dict[int, set[Shape]] = {}
    factored: dict[int, dict[str, Shape]] = {}
    for r in records:
        if not r.name.startswith(prefix):
            continue
        parsed = split_state_name(r.name[len(prefix) :])
        if parsed is not None and parsed[1] in PARAM_SHAPED:
            seen.setdefault(parsed[0], set()).add(tuple(r.shape))
        elif parsed is not None and any(parsed[1] in pair for pair in FACTORED):
            factored.setdefault(parsed[0], {})[parsed[1]] = tuple(r.shape)
    for pid, states in factored.items():
        for rows, cols in FACTORED:
            shape = _factored_shape(states.get(rows), states.get(cols))
            if shape is not None:
                seen.setdefault(pid, set()).add(shape)
    return {pid: next(iter(s)) if len(s) == 1 else None for pid, s in seen.items()}


def _factored_shape(rows: Shape | None, cols: Shape | None) -> Shape | None:
    """The parameter's shape from a factored second moment's row and column shapes."""
    if rows is None or cols is None or not rows or not cols:
        return None
    if len(rows) == len(cols) >= 2 and rows[-1] == 1 and cols[-2] == 1:
        return (*rows[:-1], cols[-1])  # torch: (..., r, 1) and (..., 1, c)
    if len(rows) == len(cols) >= 1 and rows[:-1] == cols[:-1]:
        return (*rows, cols[-1])  # transformers: (..., r) and (..., c)
    return None


def is_buffer_name(name: str) -> bool:
    """True for tensor names that are buffers in common models (by their last component)."""
    last = name.rsplit(".", 1)[-1]
    if last in BUFFER_SUFFIXES:
        return True
    # GPT-2 style causal-mask buffer ``...attn.bias`` (not ``...c_attn.bias``, a parameter)
    return name == "attn.bias" or name.endswith(".attn.bias")


def order_from_records(records: Iterable[TensorRecord], ordered: bool, source: str) -> ParamOrder:
    """Candidate parameters of a model checkpoint: float tensors, tied aliases counted once."""
    names: list[str] = []
    shapes: list[Shape] = []
    buffers: set[int] = set()
    seen: set[tuple[str | None, str, int | None]] = set()
    for r in records:
        if not r.dtype.startswith(FLOAT_PREFIXES):
            continue
        if r.storage_key is not None:
            alias = (r.storage_key, r.file, r.offset)
            if alias in seen:
                continue  # a tied duplicate of a tensor already listed
            seen.add(alias)
        if is_buffer_name(r.name):
            buffers.add(len(names))
        names.append(r.name)
        shapes.append(tuple(r.shape))
    return ParamOrder(tuple(names), tuple(shapes), ordered, source, frozenset(buffers))


@functools.lru_cache(maxsize=8)
def _meta_parameters(config_text: str) -> tuple[tuple[str, Shape], ...] | None:
    """``named_parameters()`` of the transformers model that ``config.json`` describes, built
    on the meta device (no weights, no download); None when it cannot be built."""
    try:
        config = json.loads(config_text)
        if "_diffusers_version" in config:  # a diffusers model: built by diffusers
            return diffusers_config.meta_parameters(config)
        archs = config.get("architectures") or []
        layers = max(
            (v for k, v in config.items() if "layers" in k and isinstance(v, int)), default=0
        )
        if not archs or not isinstance(archs[0], str) or layers > MAX_META_LAYERS:
            return None
        import torch
        import transformers
        from transformers.utils import logging as hf_logging

        cls = getattr(transformers, archs[0], None)
        model_type = config.pop("model_type", None)
        if cls is None or not isinstance(model_type, str):
            return None
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            cfg = transformers.AutoConfig.for_model(model_type, **config)
            with torch.device("meta"):
                model = cls(cfg)
        finally:
            hf_logging.set_verbosity(verbosity)
        return tuple((n, tuple(p.shape)) for n, p in model.named_parameters())
    except Exception:
        return None


def order_from_config(
    config_path: Location, model_records: list[TensorRecord]
) -> ParamOrder | None:
    """The parameter order of the model built from ``config_path`` on the meta device, when its
    names are the checkpoint's own (every parameter present in ``model_records``, if any)."""
    try:
        if config_path.stat().st_size > 1 << 20:
            return None
        text = config_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    params = _meta_parameters(text)
    if not params:
        return None
    shapes = {r.name: tuple(r.shape) for r in model_records}
    if shapes and any(shapes.get(n) != s for n, s in params):
        return None  # other names (a wrapper prefix) or another model: the file's order rules
    return ParamOrder(
        tuple(n for n, _ in params),
        tuple(s for _, s in params),
        True,
        f"parameter order of {_class_name(json.loads(text))} built from "
        f"{config_path.name} on the meta device",
    )


def _class_name(config: dict[str, object]) -> object:
    archs = config.get("architectures")
    return archs[0] if isinstance(archs, list) and archs else config.get("_class_name")


def model_order(
    model: CheckpointView | None, config_dirs: Iterable[Location] = ()
) -> ParamOrder | None:
    """The best parameter order known for ``model`` (and/or a ``config.json`` nearby)."""
    records = [r for r in model.tensors] if model is not None else []
    dirs = list(config_dirs)
    if model is not None:
        dirs.append(model.path if model.path.is_dir() else model.path.parent)
    for d in dict.fromkeys(dirs):
        if (d / "config.json").is_file():
            order = order_from_config(d / "config.json", records)
            if order is not None:
                return order
    if model is None:
        return None
    ordered = keeps_parameter_order(model.family, (f.path for f in model.files))
    how = "tensor order of" if ordered else "tensors (unordered) of"
    return order_from_records(records, ordered, f"{how} {model.path.name}")


def name_ids(
    info: OptimizerInfo, records: Iterable[TensorRecord], order: ParamOrder | None, prefix: str = ""
) -> OptimizerInfo:
    """``info`` with every id named: recorded names kept, the rest aligned under ``order``."""
    if _all_recorded(info):
        return info
    groups = [
        [p for p in g.get("params", ()) if isinstance(p, int) and not isinstance(p, bool)]
        for g in info.param_groups
    ]
    groups = [g for g in groups if g]
    if not groups:
        groups = [list(info.state_ids)]
    if order is None:
        names = {p: ParamName(None, "unknown") for g in groups for p in g}
        return replace(info, names=names, param_names={}, inconsistencies=())
    result = align(groups, wanted_shapes(records, prefix), order)
    names = result.names or {p: ParamName(None, "unknown") for g in groups for p in g}
    known = {p: n.name for p, n in names.items() if n.known and n.name is not None}
    return replace(
        info,
        names=names,
        param_names=known,
        name_source=order.source,
        inconsistencies=result.inconsistencies,
    )


def _named_by_parameter(view: CheckpointView) -> bool:
    """False for optimizers whose ids are not parameters: DeepSpeed ZeRO files opened alone
    hold one flat partition per param group; flat buffers that list no id at all (Megatron's
    DistributedOptimizer) have nothing to name."""
    info = view.optimizer
    if (
        info is not None
        and not info.state_ids
        and not any(g.get("params") for g in info.param_groups)
    ):
        return False
    return not view.detection.traits.flat_optimizer


def _all_recorded(info: OptimizerInfo) -> bool:
    """Every id named by the files (DCP / name-keyed optimizers): no model order is needed,
    so none is built (no torch import for listing)."""
    return bool(info.names) and all(n.how == "recorded" for n in info.names.values())


def _decided(info: OptimizerInfo) -> bool:
    """Names already decided by the reader: every id recorded, or named by the reader from
    an order of its own (``name_source`` set, e.g. torchtune's module order): kept."""
    return _all_recorded(info) or (bool(info.names) and bool(info.name_source))


def _model_parts(parts: Mapping[str, CheckpointView]) -> list[CheckpointView]:
    return [p for p in parts.values() if p.kind in ("model", "adapter") and p.tensors]


def attach_names(view: CheckpointView, model: CheckpointView | None = None) -> CheckpointView:
    """``view`` with its optimizer(s) named: its own, or those of its parts.

    Args:
        view: any opened checkpoint.
        model: a separate model checkpoint (``--model``) for an optimizer saved on its own.
    """
    folder = view.path if view.path.is_dir() else view.path.parent
    if view.optimizer is not None and not view.parts:
        if not _named_by_parameter(view) or (model is None and _decided(view.optimizer)):
            return view
        if _all_recorded(view.optimizer):
            return view
        order = model_order(model, [folder])
        return view.with_optimizer(name_ids(view.optimizer, view.tensors, order))
    if not view.parts:
        return view
    models = _model_parts(view.parts)
    if model is not None:
        models = [model]
    named = [
        (name, part)
        for name, part in view.parts.items()
        if part.optimizer is not None
        and not part.parts
        and _named_by_parameter(part)
        and not _all_recorded(part.optimizer)
        and not (model is None and _decided(part.optimizer))
    ]
    by_name = {n: p for n, p in view.parts.items() if any(p is m for m in models)}
    orders: dict[int, ParamOrder | None] = {}
    for name, part in named:
        assert part.optimizer is not None
        own = paired(name, by_name) if model is None else None  # optimizer_1.bin -> model_1
        chosen = by_name[own] if own is not None else _best_model(models)
        if id(chosen) not in orders:
            orders[id(chosen)] = model_order(chosen, [folder])
        order = orders[id(chosen)]
        view.parts[name] = part.with_optimizer(name_ids(part.optimizer, part.tensors, order))
    return view


def _best_model(models: list[CheckpointView]) -> CheckpointView | None:
    """The model part whose order is known best (ordered families first)."""
    if not models:
        return None

    def rank(v: CheckpointView) -> int:
        return 0 if keeps_parameter_order(v.family, (f.path for f in v.files)) else 1

    return sorted(models, key=rank)[0]
