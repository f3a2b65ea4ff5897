"""The callables a Hydra / OmegaConf config asks to be instantiated.

``hydra.utils.instantiate(cfg)`` imports the dotted path of every ``_target_`` it meets
(depth first, ``_recursive_`` by default) and calls it with the node's other keys (or
returns a ``functools.partial`` of it with ``_partial_: true``). NeMo's ``restore_from``
loads the ``model_config.yaml`` of a ``.nemo`` archive with ``OmegaConf.load`` and builds the
model from it (``from_config_dict``: ``_target_`` through Hydra, or the older ``cls`` /
``target`` with ``params`` through ``import_class_by_path``), and training scripts do the
same with the config beside a checkpoint. Nothing runs on ``OmegaConf.load`` itself (its
YAML loader is a safe one), so a target is code that runs when asked for: ``code``, unless
it is one of the few inert constructors listed here.

The YAML is composed (scanned and resolved, nothing constructed) with PyYAML's safe loader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .inert import what_it_does

MAX_TARGETS = 12
# constructors that make plain modules or containers from plain arguments
INERT_TARGETS = frozenset(
    {f"torch.nn.{n}" for n in ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding")}
    | {f"torch.nn.{n}" for n in ("LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d")}
    | {f"torch.nn.{n}" for n in ("Dropout", "Identity", "ReLU", "GELU", "SiLU", "Tanh")}
    | {f"torch.nn.{n}" for n in ("Sigmoid", "Softmax", "Sequential", "ModuleList")}
    | {"builtins.dict", "builtins.list", "builtins.tuple", "builtins.int", "builtins.float"}
)
_LEGACY_KEYS = ("cls", "target")  # NeMo's older form, with a sibling "params"


def find_targets(text: str) -> list[tuple[str, str]] | None:
    """(path, dotted name) of every target in the YAML ``text``; None when it does not
    compose as YAML."""
    try:
        import yaml
    except ImportError:
        return None
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    return list(_walk(nodes, yaml))


def _walk(nodes: list[Any], yaml: Any) -> Iterator[tuple[str, str]]:
    seen: set[int] = set()
    todo = [("", n) for n in nodes if n is not None]
    while todo:
        path, node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
            target = keys.get("_target_")
            if target is None and "params" in keys:
                target = next((keys[k] for k in _LEGACY_KEYS if k in keys), None)
            if isinstance(target, yaml.ScalarNode) and isinstance(target.value, str):
                yield path or "/", target.value
            elif target is not None:
                yield path or "/", "(a target that is not a plain name)"
            todo += [(f"{path}/{getattr(k, 'value', '?')}", v) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(f"{path}/{i}", v) for i, v in enumerate(node.value)]


def target_code(text: str) -> list[str]:
    """One message per target of ``text`` that is not an inert constructor (the first
    :data:`MAX_TARGETS`)."""
    if "_target_" not in text and "params" not in text:
        return []
    found = find_targets(text) or []
    out: list[str] = []
    for path, name in found:
        if name in INERT_TARGETS:
            continue
        module, _, attr = name.rpartition(".")
        does = what_it_does(module, attr) if module else "names no module"
        out.append(
            f"at {path}: a Hydra target {name} that hydra.utils.instantiate (NeMo's "
            f"restore_from, a training script's config) imports and calls: it {does}"
        )
        if len(out) == MAX_TARGETS:
            break
    return out


__all__ = ["INERT_TARGETS", "find_targets", "target_code"]
