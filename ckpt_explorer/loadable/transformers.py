"""transformers ``AutoModel*.from_pretrained(folder)``, 5.x and 4.x, restated from
``modeling_utils._get_resolved_checkpoint_files`` and ``utils/hub.get_checkpoint_shard_files``.

Local folder order (both): ``model.safetensors``, ``model.safetensors.index.json``, then (unless
``use_safetensors=True``) ``pytorch_model.bin``, ``pytorch_model.bin.index.json``; a variant
inserts ``.<variant>`` before the extension. Shards are ``sorted(set(weight_map.values()))``.
The config is read first: without ``config.json`` (or its ``model_type``) nothing else is read.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..readers.hf.diffusers_config import model_config
from .files import Listing, index_doc, is_safetensors, refused_global, weight_files
from .verdicts import Layout, LoaderCall, Verdict

LOADER = "transformers.from_pretrained"
ORDER = (
    ("model.safetensors", False, True),
    ("model.safetensors.index.json", True, True),
    ("pytorch_model.bin", False, False),
    ("pytorch_model.bin.index.json", True, False),
)
_VARIANT = re.compile(r"(?:model|pytorch_model)\.([^.]+)\.(?:safetensors|bin)(?:\.index\.json)?")
NOT_FOUND = {
    5: "Error no file named model.safetensors, or pytorch_model.bin, found in directory {p}.",
    4: "Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, model.ckpt.index "
    "or flax_model.msgpack found in directory {p}.",
}
NO_CONFIG = {
    5: (
        "ValueError",
        "Unrecognized model in {p}. Should have a `model_type` key in its config.json",
    ),
    4: (
        "ValueError",
        "Unrecognized model in {p}. Should have a `model_type` key in its config.json",
    ),
}


def _config_error(p: Path, major: int) -> tuple[str, str] | None:
    cfg = p / "config.json"
    try:
        doc = json.loads(cfg.read_text(encoding="utf-8")) if cfg.is_file() else None
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or "model_type" not in doc:
        err, text = NO_CONFIG[major]
        return err, text.format(p=p)
    return None


def from_pretrained(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.kind not in ("hf-model", "colossalai-model") or not p.is_dir():
        return []
    # a diffusers model folder (config.json with _class_name) is diffusers' from_pretrained's
    meant = layout.kind == "hf-model" and model_config(p) is None
    out = [_one(p, target, layout, major, meant, None) for major in (5, 4)]
    bin_row = _one(p, target, layout, 5, False, False)
    if bin_row.ok and out[0].ok and bin_row.reads != out[0].reads:
        out.append(bin_row)
    return out


def _one(
    p: Path, target: str, layout: Layout, major: int, meant: bool, use_safetensors: bool | None
) -> Verdict:
    flag = ", use_safetensors=False" if use_safetensors is False else ""
    loader = f"{LOADER}@{major}" + ("[use_safetensors=False]" if flag else "")
    call = f"AutoModel.from_pretrained({str(p)!r}{flag})  # transformers {major}.x"
    v = LoaderCall(loader, call, target)
    listing = Listing.of(p)
    failure = _config_error(p, major)
    if failure is not None:
        fix = "Add the model's config.json (with model_type) beside the weights."
        return v.fails((), *failure, fix, meant=meant)
    for name, sharded, is_st in ORDER:
        if use_safetensors is False and is_st:
            continue
        if not listing.has(name):
            continue
        reads = [name]
        if sharded:
            doc = index_doc(p / name)
            if doc is None:
                message = f"{name} is not a readable index"
                return v.fails((name,), "JSONDecodeError", message, meant=meant)
            reads += weight_files(doc)
        fail = _read(p, reads[1:] if sharded else reads, is_st)
        notes = _skipped(listing, name)
        if fail is not None:
            fix = "Copy the missing file again."
            return v.fails(reads, *fail, fix, meant=meant, notes=notes)
        return v.loads(reads, meant=meant, notes=notes)
    variants = sorted({m.group(1) for n in listing.files if (m := _VARIANT.fullmatch(n))})
    fix = (
        f"Pass variant={variants[0]!r}."
        if variants
        else f"Rebuild the index: `ckpt-explorer repair {p}`."
        if layout.repair
        else "Point it at a folder with the weights."
    )
    return v.fails((), "OSError", NOT_FOUND[major].format(p=p), fix, meant=meant)


def _read(p: Path, files: list[str], safetensors: bool) -> tuple[str, str] | None:
    for name in files:
        f = p / name
        if not f.is_file():
            path = os.path.join(str(p), name)
            if safetensors:
                return "FileNotFoundError", f"No such file or directory: {path}"
            return "FileNotFoundError", f"[Errno 2] No such file or directory: '{path}'"
        if not safetensors and not is_safetensors(f) and refused_global(f) is not None:
            return "UnpicklingError", "Weights only load failed"
    return None


def _skipped(listing: Listing, chosen: str) -> tuple[str, ...]:
    later = [n for n, _, _ in ORDER if listing.has(n) and n != chosen]
    if not later:
        return ()
    return (f"picks {chosen}; {', '.join(later)} beside it is not read",)
