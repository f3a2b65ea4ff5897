"""Does ``quantization_config`` agree with the files?

Each finding is a dict ``{"rule", "module", "message"}``:

- a stored part that disagrees with the scheme's sizes (packed width vs bits and shape, one
  scale per group / block / row, GPTQ / AWQ codes, zeros and scales per group of input columns, bitsandbytes' absmax per block, its quant type);
- a module the config's ``ignore`` list names that is stored quantized;
- a module the config targets by regex, or a Linear-like ``*proj`` weight under a ``Linear``
  target, stored in float (it would load unquantized, or not at all).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from itertools import compress
from operator import ne
from typing import Any, cast

from .parts import Grouped, PartColumns, QuantWeight, StoredParts

RULE_PARTS = "quantized.parts_disagree"
RULE_IGNORED = "quantized.ignored_but_quantized"
RULE_MISSING = "quantized.target_not_quantized"


def _finding(rule: str, module: str, message: str) -> dict[str, str]:
    return {"rule": rule, "module": module, "message": f"{module}: {message}"}


def _matches(pattern: str, module: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return module == pattern or module.endswith("." + pattern)


def _ignore_list(q: dict[str, Any]) -> list[str]:
    found = []
    for key in ("ignore", "modules_to_not_convert", "llm_int8_skip_modules", "ignored_layers"):
        value = q.get(key)
        if isinstance(value, list):
            found += [v for v in value if isinstance(v, str)]
    return found


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _expected_parts(w: QuantWeight, q: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """role -> the shape the scheme gives that part for this weight's shape."""
    p = w.params
    if len(w.shape) != 2:
        return {}
    rows, cols = w.shape
    want: dict[str, tuple[int, ...]] = {}
    strategy = p.get("strategy")
    if w.scheme == "compressed-tensors":
        if strategy == "group":
            want["weight_scale"] = (rows, _cdiv(cols, int(p["group_size"])))
        elif strategy == "channel":
            want["weight_scale"] = (rows, 1)
        elif strategy == "block":
            bh, bw = p["block_structure"]
            want["weight_scale"] = (_cdiv(rows, bh), _cdiv(cols, bw))
        if "weight_packed" in w.parts:
            want["weight_packed"] = (rows, _cdiv(cols * w.bits, 32))
    elif w.scheme == "fp8":
        want["weight_scale_inv"] = (_cdiv(rows, p["block_rows"]), _cdiv(cols, p["block_cols"]))
    elif w.scheme in ("gptq", "awq"):  # stored transposed: [in, out] codes
        groups = _cdiv(cols, int(p["group_size"]))
        packed_out = _cdiv(rows * w.bits, 32)
        want["scales"] = (groups, rows)
        want["qzeros"] = (groups, packed_out)
        if w.scheme == "gptq":
            want["qweight"] = (_cdiv(cols * w.bits, 32), rows)
            want["g_idx"] = (cols,)
        else:
            want["qweight"] = (cols, packed_out)
    elif w.scheme == "bitsandbytes" and w.bits == 4:
        if not p.get("double_quant"):
            want["absmax"] = (_cdiv(rows * cols, int(p["blocksize"])),)
    elif w.scheme == "bitsandbytes":
        want["SCB"] = (rows,)
    return want


def _shape_findings(
    w: QuantWeight, q: dict[str, Any], shape_of: Callable[[str], tuple[int, ...] | None]
) -> list[dict[str, str]]:
    module = w.name.removesuffix(".weight")
    found = []
    try:
        expected = _expected_parts(w, q)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        return [_finding(RULE_PARTS, module, f"the scheme's sizes cannot be read ({e!r})")]
    for role, shape in expected.items():
        have = shape_of(w.parts.get(role, ""))
        if have is not None and tuple(have) != shape and math.prod(have) != math.prod(shape):
            found.append(
                _finding(
                    RULE_PARTS,
                    module,
                    f"{role} has shape {list(have)}; {w.storage_type} {w.block} of a "
                    f"{list(w.shape)} weight needs {list(shape)}",
                )
            )
    return found


def _config_findings(w: QuantWeight, q: dict[str, Any]) -> list[dict[str, str]]:
    """What the weight's scheme words (not its parts' shapes) say against the config."""
    module = w.name.removesuffix(".weight")
    found = []
    if w.scheme == "bitsandbytes":
        four = bool(q.get("load_in_4bit") or q.get("_load_in_4bit"))
        if (w.bits == 4) != four:
            found.append(
                _finding(
                    RULE_PARTS,
                    module,
                    f"stored {w.storage_type}, the config says load_in_4bit={four}",
                )
            )
        qtype = q.get("bnb_4bit_quant_type")
        if w.bits == 4 and qtype and qtype != w.storage_type:
            found.append(
                _finding(RULE_PARTS, module, f"stored {w.storage_type}, the config says {qtype}")
            )
    elif w.scheme == "compressed-tensors" and w.params.get("num_bits") != w.bits:
        found.append(_finding(RULE_PARTS, module, "bits disagree with the config group"))
    return found


def _parts_findings(g: Grouped, q: dict[str, Any], stored: StoredParts) -> list[dict[str, str]]:
    """Each weight's shape and config findings, worked out for the weights that may have some
    (:func:`_suspects`): the others are passed without making their objects."""
    found = []
    for i in _suspects(g, q, stored):
        w = g.weight(i)
        found += _shape_findings(w, q, stored.shape) + _config_findings(w, q)
    return found


Wanted = list[tuple[int, tuple[int, ...]]] | None  # (part position, expected shape)s


def _suspects(g: Grouped, q: dict[str, Any], stored: StoredParts) -> list[int]:
    """The weights that may have findings, in order: the expected part shapes are worked out
    once per family and shape, the config's words once per family; a weight whose parts have
    those shapes, in a family with nothing to say, has none."""
    n = len(g)
    first = dict(
        zip(
            zip(reversed(g.family), reversed(g.shapes), strict=True),
            range(n - 1, -1, -1),
            strict=True,
        )
    )
    wanted: dict[tuple[int, tuple[int, ...]], Wanted] = {
        key: _roles_wanted(g, i, q) for key, i in first.items()
    }
    quiet = {f: not _config_findings(g.families[f], q) for f in {k[0] for k in first}}
    doubtful = {k for k, want in wanted.items() if want is None or not quiet[k[0]]}
    index, shapes = stored.positions, stored.shapes
    if isinstance(g.parts, PartColumns):
        out: set[int] = set()
        if doubtful:
            out.update(
                i for i, k in enumerate(zip(g.family, g.shapes, strict=True)) if k in doubtful
            )
        for at, column in enumerate(g.parts.columns):
            need = {k: s for k, want in wanted.items() for a, s in want or () if a == at}
            if not need:
                continue
            found = list(map(index.get, column))
            if None in found:  # a part not stored: weight by weight below
                break
            have = map(tuple, map(shapes.__getitem__, cast(list[int], found)))
            expected = map(need.get, zip(g.family, g.shapes, strict=True))
            out.update(compress(range(n), map(ne, have, expected)))
        else:
            return sorted(out)
    out_list = []
    for i, (key, parts) in enumerate(
        zip(zip(g.family, g.shapes, strict=True), g.parts, strict=True)
    ):
        want = wanted[key]
        if key in doubtful or want is None:
            out_list.append(i)
            continue
        for at, shape in want:
            row = index.get(parts[at])
            if row is not None and tuple(shapes[row]) != shape:
                out_list.append(i)
                break
    return out_list


_UNSEEN: Any = object()


def _roles_wanted(g: Grouped, i: int, q: dict[str, Any]) -> Wanted:
    """(position in the weight's parts, expected shape) of each part with an expected shape;
    None when the scheme's sizes cannot be read."""
    try:
        expected = _expected_parts(g.weight(i), q)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    roles = g.roles[g.family[i]]
    return [(roles.index(role), shape) for role, shape in expected.items() if role in roles]


def check_config(
    q: dict[str, Any],
    weights: Grouped,
    names: Sequence[str],
    stored: StoredParts,
) -> list[dict[str, str]]:
    """Findings for ``q`` (the quantization_config) against the grouped ``weights``, the
    view's tensor ``names`` (logical weights and the float tensors) and the ``stored``
    tensors (the parts' shapes)."""
    found = []
    ignore = _ignore_list(q)
    quantized = {n.removesuffix(".weight") for n in weights.names}
    if ignore:
        for module in sorted(quantized):
            if any(_matches(p, module) for p in ignore):
                found.append(
                    _finding(RULE_IGNORED, module, "the config ignores it, the files quantize it")
                )
    found += _parts_findings(weights, q, stored)
    targets = []
    for group in (q.get("config_groups") or {}).values():
        if isinstance(group, dict):
            targets += [t for t in group.get("targets") or [] if isinstance(t, str)]
    if not targets:  # nothing is targeted: no float module can be missing
        return found
    floats = [n.removesuffix(".weight") for n in names if n.endswith(".weight")]
    for module in floats:
        if module in quantized or any(_matches(p, module) for p in ignore):
            continue
        regex = any(t.startswith("re:") and _matches(t, module) for t in targets)
        linear = "Linear" in targets and module.rsplit(".", 1)[-1].endswith("proj")
        if regex or linear:
            found.append(
                _finding(RULE_MISSING, module, "the config targets it, the files keep it in float")
            )
    return found
