"""An HF folder whose ``config.json`` has a ``quantization_config``: each weight seen once.

The folder's files are listed by the plain HF readers (one ``model.safetensors`` or an indexed
set); the scheme named by ``quant_method`` then claims each quantized weight's stored parts and
the view lists one record per logical weight (dtype ``<type>/<sharing>``, e.g.
``int4/group32``), whose values load dequantized to float. Everything else (norms,
embeddings, modules the config ignores) is listed as stored.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...errors import CkptExplorerError
from ...io.location import Location
from ...types import Detection, FileInfo, TensorRecord, Traits
from ...view import CheckpointView
from ..hf import folder as hf_folder
from ..hf import sharded_index
from ..json_files import optional_json
from . import awq, bnb, compressed, fp8_block, gptq
from .checks import check_config
from .parts import Grouper, Load, QuantWeight
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
_WEIGHTS: weakref.WeakKeyDictionary[CheckpointView, dict[str, QuantWeight]] = (
    weakref.WeakKeyDictionary()
)
_PART_LOADS: weakref.WeakKeyDictionary[CheckpointView, Load] = weakref.WeakKeyDictionary()


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


def error_feedback(path: Location, q: dict[str, Any]) -> str:
    """What moved the weights before rounding (GPTQ's error feedback, AWQ / SmoothQuant
    scaling: llm-compressor's ``recipe.yaml`` names its modifiers) or chose a scale other than
    min-max (an MSE observer); "" when the export is plain min-max rounding of the source."""
    found = []
    recipe = path / "recipe.yaml"
    if recipe.is_file() and recipe.stat().st_size < 1 << 20:
        text = recipe.read_bytes().decode("utf-8", "replace")
        found += [m for m in MOVING if m in text]
    for group in (q.get("config_groups") or {}).values():
        args = group.get("weights") if isinstance(group, dict) else None
        if isinstance(args, dict) and args.get("observer") not in MIN_MAX:
            found.append(f"observer {args.get('observer')}")
    return ", ".join(dict.fromkeys(found))


def quant_weights(view: CheckpointView) -> dict[str, QuantWeight] | None:
    """The quantized weights of a view this reader opened (None for any other view)."""
    return _WEIGHTS.get(view)


def part_loader(view: CheckpointView) -> Load | None:
    """The stored parts' values by their stored names (None for any other view)."""
    return _PART_LOADS.get(view)


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
    raw = {r.name: r for r in base.tensors}
    weights = SCHEMES[q["quant_method"]](raw, q, base.load)
    moved = error_feedback(path, q)
    if moved:
        weights = [replace(w, params={**w.params, "moved_by": moved}) for w in weights]
    by_part = {part: w for w in weights for part in w.parts.values()}
    records: list[TensorRecord] = []
    seen: set[str] = set()
    for rec in base.tensors:
        w = by_part.get(rec.name)
        if w is None:
            records.append(rec)
        elif w.name not in seen:
            seen.add(w.name)
            nbytes = sum(raw[p].nbytes for p in w.parts.values())
            records.append(
                replace(
                    rec,
                    name=w.name,
                    dtype=w.label,
                    shape=w.shape,
                    nbytes=nbytes,
                    offset=None,
                    storage_key=None,
                    loader=_loader(path, w, base.load),
                )
            )
    values = dict(base.values)
    values["config.json"] = config
    shapes = {n: tuple(r.shape) for n, r in raw.items()}
    checks = check_config(q, weights, [r.name for r in records], shapes)
    values[QUANT_KEY] = {
        "method": q["quant_method"],
        "weights": {w.name: w.describe() for w in weights},
        "checks": checks,
        "runtimes": runtime_notes(q, weights),
    }
    files = list(base.files)
    if not any(f.path == "config.json" for f in files):
        files.append(FileInfo("config.json", (path / "config.json").stat().st_size))
    kinds = sorted({w.label for w in weights})
    readers = ", ".join(n["runtime"] for n in values[QUANT_KEY]["runtimes"] if n["reads"])
    evidence = (
        *detection.evidence,
        f"{len(weights)} quantized weights: {', '.join(kinds)}",
        *([f"read by {readers} (their documentation; unverified here)"] if readers else []),
    )
    view = CheckpointView(
        path,
        replace(detection, evidence=evidence),
        tuple(files),
        tuple(records),
        values,
        warnings=(*base.warnings, *(c["message"] for c in checks)),
    )
    _WEIGHTS[view] = {w.name: w for w in weights}
    _PART_LOADS[view] = base.load
    return view


def _loader(
    path: Location, w: QuantWeight, load: Callable[[str], torch.Tensor]
) -> Callable[[], torch.Tensor]:
    def values() -> torch.Tensor:
        try:
            return w.values(load)
        except (RuntimeError, ValueError, IndexError, KeyError) as e:
            raise CkptExplorerError(
                path,
                f"the parts of {w.name} ({w.kind} {w.block}) to dequantize",
                f"parts that do not fit together: {e}",
                "compare the parts' shapes with quantization_config (validate lists them)",
            ) from e

    return values
