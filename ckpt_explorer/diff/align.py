"""Pair the names of checkpoint A with the names of checkpoint B.

Order of attempts, each only over names still unpaired:

0. optimizer states by parameter name, when both sides know the id -> name mapping
   (``state.3.exp_avg`` in A meets ``state.5.exp_avg`` in B when both ids name
   ``layers.0.w``: an optimizer rebuilt with another parameter order is compared correctly;
   ``state.<fqn>.exp_avg`` of a name-keyed optimizer meets the id whose name is ``<fqn>``),
   within one part first, then across parts (a sharded vs a full save) where unique;
1. exact names;
2. the user's rename map (``OLD=NEW``: every occurrence of ``OLD`` in an A name becomes ``NEW``);
3. names with common wrapper prefixes removed (``module.``, ``_orig_mod.``, ``model.``) on
   both sides, so ``module.model.layers.0.w`` meets ``layers.0.w``;
4. the same without a bundle part (``modeling/x`` meets ``model/x`` or a bare ``x``).

Steps 3 and 4 pair a name only when its normalised form is unique on both sides, so an
ambiguous normalisation leaves both names unpaired (reported as only in A / only in B).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")


@dataclass(frozen=True)
class Pair:
    """One aligned name: ``a`` or ``b`` is None for a name present on one side only.

    ``how`` is ``"param_name"``, ``"exact"``, ``"rename"``, ``"prefix"``, ``"part"``,
    ``"tied"`` (a tied alias recorded by safetensors' ``save_model``) or ``"unpaired"``.
    """

    a: str | None
    b: str | None
    how: str


def split_part(name: str) -> tuple[str, str]:
    """``"optimizer/state.0.exp_avg"`` -> ``("optimizer", "state.0.exp_avg")``."""
    part, sep, rest = name.partition("/")
    return (part, rest) if sep else ("", name)


def strip_wrappers(name: str) -> str:
    """Remove leading wrapper prefixes, repeatedly (``module._orig_mod.model.x`` -> ``x``)."""
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix) and len(name) > len(prefix):
                name = name[len(prefix) :]
                changed = True
    return name


def apply_rename(name: str, rename: Mapping[str, str]) -> str:
    for old, new in rename.items():
        if old in name:
            name = name.replace(old, new)
    return name


def parse_rename(items: Iterable[str]) -> dict[str, str]:
    """``["old.=new.", ...]`` -> ``{"old.": "new."}`` (CLI ``--rename`` values)."""
    from ..errors import CkptExplorerError

    out: dict[str, str] = {}
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old:
            raise CkptExplorerError(
                None, "--rename OLD=NEW", repr(item), "Give the part of A's names to replace."
            )
        out[old] = new
    return out


def _unique_index(names: Iterable[str], key: Callable[[str], str]) -> dict[str, str]:
    """normalised -> name, for normalised forms held by exactly one name."""
    seen: dict[str, str] = {}
    dup: set[str] = set()
    for n in names:
        k = key(n)
        if k in seen:
            dup.add(k)
        seen[k] = n
    return {k: v for k, v in seen.items() if k not in dup}


def _prefix_key(name: str) -> str:
    part, rest = split_part(name)
    return f"{part}/{strip_wrappers(rest)}" if part else strip_wrappers(rest)


def _part_key(name: str) -> str:
    return strip_wrappers(split_part(name)[1])


def _same(key: str) -> str:
    return key


def _no_part(key: str) -> str:
    return key[key.find("state[") :]


def align_names(
    names_a: Sequence[str],
    names_b: Sequence[str],
    rename: Mapping[str, str] | None = None,
    param_keys_a: Mapping[str, str] | None = None,
    param_keys_b: Mapping[str, str] | None = None,
) -> list[Pair]:
    """Pairs in A's order, then B's unpaired names in B's order.

    ``param_keys_a``/``param_keys_b`` map optimizer-state names to a key built from the
    parameter name (see :func:`param_name_keys`); those pair first.
    """
    set_b = set(names_b)
    matched: dict[str, tuple[str, str]] = {}
    used_b: set[str] = set()
    for param_key in (_same, _no_part):  # then across parts (a sharded vs a full optimizer save)
        keys_a = {n: param_key(k) for n, k in (param_keys_a or {}).items() if n not in matched}
        keys_b = {n: param_key(k) for n, k in (param_keys_b or {}).items() if n not in used_b}
        index_a = _unique_index(keys_a, keys_a.__getitem__)
        index_b = _unique_index(keys_b, keys_b.__getitem__)
        for k, na in index_a.items():
            nb = index_b.get(k)
            if nb is not None and nb in set_b:
                matched[na] = (nb, "param_name")
                used_b.add(nb)
    for n in names_a:
        if n in matched:
            continue
        if n in set_b and n not in used_b:
            matched[n] = (n, "exact")
            used_b.add(n)
    if rename:
        for n in names_a:
            if n in matched:
                continue
            target = apply_rename(n, rename)
            if target in set_b and target not in used_b:
                matched[n] = (target, "rename")
                used_b.add(target)
    for how, key in (("prefix", _prefix_key), ("part", _part_key)):
        rest_a = [n for n in names_a if n not in matched]
        rest_b = [n for n in names_b if n not in used_b]
        if not rest_a or not rest_b:
            break
        index_a = _unique_index((apply_rename(n, rename) if rename else n for n in rest_a), key)
        renamed = {apply_rename(n, rename) if rename else n: n for n in rest_a}
        index_b = _unique_index(rest_b, key)
        for k, na in index_a.items():
            nb = index_b.get(k)
            if nb is not None:
                matched[renamed[na]] = (nb, how)
                used_b.add(nb)
    pairs = [
        Pair(n, matched[n][0], matched[n][1]) if n in matched else Pair(n, None, "unpaired")
        for n in names_a
    ]
    pairs += [Pair(None, n, "unpaired") for n in names_b if n not in used_b]
    return pairs


def param_name_keys(
    names: Iterable[str], param_state: Callable[[str], tuple[str, str] | None]
) -> dict[str, str]:
    """``[part/]<optimizer state>`` -> ``[part/]state[<param name>].<state>`` where
    ``param_state`` (the view's slot of the name) gives its parameter and state names."""
    keys: dict[str, str] = {}
    for n in names:
        found = param_state(n)
        if found is None:
            continue
        pname, state = found
        part, _ = split_part(n)
        keys[n] = f"{part}/state[{pname}].{state}" if part else f"state[{pname}].{state}"
    return keys
