"""An HF folder whose ``config.json`` has a ``quantization_config``: each weight seen once.

The folder's files are listed by the plain HF readers (one ``model.safetensors`` or an indexed
set); the scheme named by ``quant_method`` then claims each quantized weight's stored parts and
the view lists one record per logical weight (dtype ``<type>/<sharing>``, e.g.
``int4/group32``), whose values load dequantized to float. Everything else (norms,
embeddings, modules the config ignores) is listed as stored.

Listing works on the plain listing's columns and makes no record, weight object or
description a consumer does not ask for: a DeepSeek-V3 export (45,000 FP8 weights in 90,000
tensors) lists at the plain listing's cost. The view's table is columns again (each weight's
``read_values`` comes from one :class:`Dequantize`), :func:`quant_weights` makes a weight when it is
first looked up, and ``values[QUANT_KEY]["weights"]`` a description when it is first read
(:mod:`.lazy`). The config checks run at listing (their findings are the view's warnings),
once per family and shape of weights (:mod:`.checks`).
"""

from __future__ import annotations

import re
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from itertools import accumulate, chain, compress, repeat
from operator import is_, is_not, sub
from typing import TYPE_CHECKING, Any, cast

from ...errors import CkptExplorerError
from ...io.location import Location
from ...record_table import COLUMNS, RecordTable
from ...record_table import _records as make_records
from ...types import Detection, FileInfo, Traits
from ...view import CheckpointView
from ..hf import folder as hf_folder
from ..hf import sharded_index
from ..json_files import optional_json
from . import awq, bnb, compressed, fp8_block, gptq
from .checks import check_config
from .lazy import Described, Weights
from .parts import Grouped, Grouper, Load, PartColumns, QuantWeight, StoredParts
from .runtimes import runtime_notes

if TYPE_CHECKING:
    import torch

FAMILY = "hf-quantized"
QUANT_KEY = "__metadata__.quantization"  # informational in a diff, like file metadata
SCHEMES: dict[str, Grouper] = {
    compressed.METHOD: compressed.group,
    fp8_block.METHOD: fp8_block.group,
    bnb.METHOD: bnb.group,
    gptq.METHOD: gptq.group,
    awq.METHOD: awq.group,
}
# each view this reader opened: its weights and the reader of its stored parts
_OPENED: weakref.WeakKeyDictionary[CheckpointView, tuple[Weights, Load]] = (
    weakref.WeakKeyDictionary()
)


def quant_config(path: Location) -> dict[str, Any] | None:
    config = optional_json(path, "config.json") if (path / "config.json").is_file() else None
    q = config.get("quantization_config") if isinstance(config, dict) else None
    if q is None and (path / "quantize_config.json").is_file():  # AutoGPTQ's own file
        doc = optional_json(path, "quantize_config.json")
        q = {"quant_method": "gptq", **doc} if isinstance(doc, dict) else None
    return q if isinstance(q, dict) and q.get("quant_method") in SCHEMES else None


def _base(path: Location) -> Detection | None:
    return sharded_index.probe_dir(path) or hf_folder.probe(path)


def probe(path: Location) -> Detection | None:
    q = quant_config(path)
    base = _base(path) if q is not None else None
    if q is None or base is None or base.kind != "model":
        return None
    method = q["quant_method"]
    return Detection(
        str(path),
        FAMILY,
        "model",
        (*base.evidence, f"config.json quantization_config: quant_method {method}"),
        method,
        Traits(),
    )


MOVING = ("GPTQModifier", "AWQModifier", "SparseGPTModifier", "SmoothQuantModifier")
MIN_MAX = (None, "minmax", "memoryless_minmax", "static_minmax", "memoryless")
# ``observer: mse`` in a scheme's args, ``weight_observer: mse`` or ``observer: {weights: mse}``
OBSERVER_IN_RECIPE = re.compile(
    r"(?<![\w-])(?:weight_)?observer:\s*(?:\{[^}]*?\bweights:\s*)?['\"]?([A-Za-z_]\w*)"
)


def error_feedback(path: Location, q: dict[str, Any]) -> str:
    """What moved the weights before rounding (GPTQ's error feedback, AWQ / SmoothQuant
    scaling: llm-compressor's ``recipe.yaml`` names its modifiers) or chose a scale other than
    min-max (an MSE observer, named in config.json's weight args or in ``recipe.yaml``); ""
    when the export is plain min-max rounding of the source."""
    found = []
    recipe = path / "recipe.yaml"
    if recipe.is_file() and recipe.stat().st_size < 1 << 20:
        text = recipe.read_bytes().decode("utf-8", "replace")
        found += [m for m in MOVING if m in text]
        named = OBSERVER_IN_RECIPE.findall(text)  # (any quantized role's: the safe side)
        found += [f"observer {o}" for o in named if o.lower() not in (*MIN_MAX, "null", "none")]
    for group in (q.get("config_groups") or {}).values():
        args = group.get("weights") if isinstance(group, dict) else None
        if isinstance(args, dict) and args.get("observer") not in MIN_MAX:
            found.append(f"observer {args.get('observer')}")
    return ", ".join(dict.fromkeys(found))


def quant_weights(view: CheckpointView) -> Mapping[str, QuantWeight] | None:
    """The quantized weights of a view this reader opened (None for any other view)."""
    opened = _OPENED.get(view)
    return None if opened is None else opened[0]


def part_loader(view: CheckpointView) -> Load | None:
    """The stored parts' values by their stored names (None for any other view)."""
    opened = _OPENED.get(view)
    return None if opened is None else opened[1]


def open_quantized(path: Location, detection: Detection) -> CheckpointView:
    base_det = _base(path)
    assert base_det is not None
    if base_det.family == "hf-single":
        base = hf_folder.open_folder(path, base_det)
    else:
        base = sharded_index.open_sharded(path, base_det)
    config = optional_json(path, "config.json")
    q = quant_config(path)
    assert q is not None
    table = base.tensors  # read as columns: the parts' records are never made
    names = table.column("name", keep=False)  # the base view keeps no copy in its order
    stored = StoredParts(
        names, table.column("dtype", keep=False), table.column("shape", keep=False)
    )
    found = SCHEMES[q["quant_method"]](stored, q, base.load)
    grouped = found if isinstance(found, Grouped) else Grouped.of(found)
    moved = error_feedback(path, q)
    weights = Weights(grouped, {"moved_by": moved} if moved else None)
    records = _table(path, table, stored, grouped, weights, base.load)
    values = dict(base.values)
    values["config.json"] = config
    checks = check_config(q, grouped, records.column("name"), stored)
    used = sorted(set(grouped.family))
    kinds = sorted({grouped.families[f].label for f in used})
    values[QUANT_KEY] = {
        "method": q["quant_method"],
        "weights": Described(grouped.names, weights),
        "checks": checks,
        "runtimes": runtime_notes(q, {grouped.families[f].storage_type for f in used}),
    }
    files = list(base.files)
    if not any(f.path == "config.json" for f in files):
        files.append(FileInfo("config.json", (path / "config.json").stat().st_size))
    readers = ", ".join(n["runtime"] for n in values[QUANT_KEY]["runtimes"] if n["reads"])
    evidence = (
        *detection.evidence,
        f"{len(grouped)} quantized weights: {', '.join(kinds)}",
        *([f"read by {readers} (their documentation; unverified here)"] if readers else []),
    )
    view = CheckpointView(
        path,
        replace(detection, evidence=evidence),
        tuple(files),
        records,
        values,
        warnings=(*base.warnings, *(c["message"] for c in checks)),
    )
    _OPENED[view] = (weights, base.load)
    return view


def _table(
    path: Location,
    table: RecordTable,
    stored: StoredParts,
    grouped: Grouped,
    weights: Weights,
    load: Callable[[str], torch.Tensor],
) -> RecordTable:
    """The view's records in the listing's order: a stored tensor no weight claims as it is,
    each weight once, where its first part is (in that part's file), with its parts' bytes
    and a ``read_values`` that dequantizes them. Kept as columns when the listing is (records are made
    when a consumer asks), each weight's record made once from its row otherwise."""
    rows, order, at, totals = _placed(table, stored, grouped)
    labels = list(map([f.label for f in grouped.families].__getitem__, grouped.family))
    listed = {s: list(s) for s in set(grouped.shapes)}  # as the listing's: one list a shape
    source = Dequantize(path, weights, load)
    new: dict[str, list[Any]] = {  # column -> the weights' values, in the order of `at`
        "name": list(map(grouped.names.__getitem__, order)),
        "dtype": list(map(labels.__getitem__, order)),
        "shape": list(map(listed.__getitem__, map(grouped.shapes.__getitem__, order))),
        "nbytes": list(map(totals.__getitem__, order)),
        "offset": [None] * len(order),
        "mapped": [source] * len(order),
    }
    if not table.columnar:
        files = table.column("file", keep=False)
        new["shape"] = list(map(grouped.shapes.__getitem__, order))  # records hold tuples
        fields = (new[k] for k in ("name", "dtype", "shape", "nbytes"))
        made = iter(
            make_records(
                (n, d, s, b, files[rows[k]], None, None, source.read_values_for(n))
                for k, n, d, s, b in zip(at, *fields, strict=True)
            )
        )
        weight_at = set(at)
        return RecordTable.from_records(
            next(made) if k in weight_at else table[r] for k, r in enumerate(rows)
        )
    columns: dict[str, list[Any]] = {}
    kept = table.take(rows)  # the listing's rows kept, read from its own columns once
    for key in COLUMNS:
        if kept.columnar:
            column = list(kept.column(key, keep=False))
        else:  # some records were made already (a part loaded while grouping)
            column = list(map(table.column(key, keep=False).__getitem__, rows))
        if key in new:
            deque(map(column.__setitem__, at, new[key]), maxlen=0)
        columns[key] = column
    return RecordTable.from_columns(*(columns[k] for k in COLUMNS))


def _placed(
    table: RecordTable, stored: StoredParts, grouped: Grouped
) -> tuple[list[int], list[int], list[int], list[int]]:
    """(the listing's row of each record, each weight's index in ``grouped`` in the order
    listed, its record's position, its parts' bytes by weight index)."""
    names, nw = stored.names, len(grouped)
    nbytes = table.column("nbytes", keep=False).__getitem__
    hits: list[int | None] = [None] * len(names)
    unique = len(stored.positions) == len(names) and len(set(grouped.names)) == nw
    if unique and isinstance(grouped.parts, PartColumns):  # column by column, in C loops
        columns = [list(map(stored.positions.__getitem__, c)) for c in grouped.parts.columns]
        for column in columns:
            deque(map(hits.__setitem__, column, range(nw)), maxlen=0)
        if len(names) - hits.count(None) == nw * len(columns):  # no part of two weights
            firsts = list(map(min, *columns)) if len(columns) > 1 else columns[0]
            rows = sorted(chain(compress(range(len(names)), map(_IS_NONE, hits)), firsts))
            claimed = list(map(hits.__getitem__, rows))
            at = list(compress(range(len(rows)), map(is_not, claimed, repeat(None))))
            order = cast(list[int], list(filter(_NOT_NONE, claimed)))
            totals = list(map(sum, zip(*(map(nbytes, c) for c in columns), strict=True)))
            return rows, order, at, totals
        hits = [None] * len(names)
    parts = grouped.parts
    flat = list(chain.from_iterable(parts))  # every part, weight after weight
    owners = list(chain.from_iterable(map(repeat, range(nw), map(len, parts))))
    part_rows = list(map(stored.positions.__getitem__, flat))
    if len(stored.positions) == len(names):  # each name once: a part is one row
        deque(map(hits.__setitem__, part_rows, owners), maxlen=0)
    else:  # every copy of a part's name is the part
        hits = list(map(dict(zip(flat, owners, strict=True)).get, names))
    if not unique and len(set(grouped.names)) != nw:  # a weight name twice: listed once
        first: dict[str, int] = {}
        same = [first.setdefault(n, i) for i, n in enumerate(grouped.names)]
        hits = [None if i is None else same[i] for i in hits]
    rows, order, at = [], [], []
    seen = bytearray(nw)
    for row, i in enumerate(hits):
        if i is None:
            rows.append(row)
        elif not seen[i]:
            seen[i] = 1
            order.append(i)
            at.append(len(rows))
            rows.append(row)
    sizes = [0, *accumulate(map(nbytes, part_rows))]
    ends = list(accumulate(map(len, parts)))
    totals = list(map(sub, map(sizes.__getitem__, ends), map(sizes.__getitem__, [0, *ends])))
    return rows, order, at, totals


_IS_NONE = partial(is_, None)
_NOT_NONE = partial(is_not, None)


class Dequantize:
    """Where the quantized records load from: ``read_values_for(name)`` is the record's loader."""

    __slots__ = ("load", "path", "weights")

    def __init__(
        self,
        path: Location,
        weights: Mapping[str, QuantWeight],
        load: Callable[[str], torch.Tensor],
    ) -> None:
        self.path, self.weights, self.load = path, weights, load

    def read_values_for(self, name: str) -> Callable[[], torch.Tensor]:
        return partial(self, name)

    def __call__(self, name: str) -> torch.Tensor:
        w = self.weights[name]
        try:
            return w.values(self.load)
        except (RuntimeError, ValueError, IndexError, KeyError) as e:
            raise CkptExplorerError(
                self.path,
                f"the parts of {w.name} ({w.storage_type} {w.block}) to dequantize",
                f"parts that do not fit together: {e}",
                "compare the parts' shapes with quantization_config (validate lists them)",
            ) from e
