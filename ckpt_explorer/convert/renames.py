"""Wrapper prefixes that training code adds to every parameter name, removed for ``--to hf``.

``DistributedDataParallel`` saves ``module.<name>``, ``torch.compile`` saves
``_orig_mod.<name>``, and wrapping one in the other stacks them. ``from_pretrained`` knows
neither, so an HF folder must hold the bare names. A prefix is removed only when every model
tensor carries it (a model whose own first module is called ``module`` keeps its names when
any tensor lacks the prefix).
"""

from __future__ import annotations

from dataclasses import replace

from .plan_types import PlannedTensor

WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def wrapper_prefix(names: list[str]) -> str:
    """The stack of wrapper prefixes every name starts with (``""`` when there is none)."""
    stripped = ""
    while names:
        found = next((p for p in WRAPPER_PREFIXES if all(n.startswith(p) for n in names)), None)
        if found is None or any(n == found for n in names):
            break
        stripped += found
        names = [n[len(found) :] for n in names]
    return stripped


def unwrap_names(tensors: list[PlannedTensor], notes: list[str]) -> list[PlannedTensor]:
    """``tensors`` named without their common wrapper prefix; says so in ``notes``."""
    prefix = wrapper_prefix([t.name for t in tensors])
    if not prefix:
        return tensors
    notes.append(
        f"names lose the wrapper prefix {prefix!r} (DDP 'module.' / torch.compile "
        f"'_orig_mod.') on all {len(tensors)} tensor(s), so from_pretrained finds them"
    )
    return [replace(t, name=t.name[len(prefix) :]) for t in tensors]
