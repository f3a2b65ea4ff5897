"""transformers ``AutoModel*.from_pretrained(folder)``, 5.x and 4.x, restated from
``modeling_utils._get_resolved_checkpoint_files`` and ``utils/hub.get_checkpoint_shard_files``.

Local folder order (both): ``model.safetensors``, ``model.safetensors.index.json``, then (unless
``use_safetensors=True``) ``pytorch_model.bin``, ``pytorch_model.bin.index.json``; a variant
inserts ``.<variant>`` before the extension. Shards are ``sorted(set(weight_map.values()))``.
The config is read first. Without ``config.json`` or its ``model_type``, 5.x raises
``Unrecognized model``; 4.x (``AutoConfig.from_pretrained``'s fallback) takes the longest of its
model-type names found anywhere in the path string it is given (``bert`` in ``bert-run/``,
``t5`` in a random temp name) and builds that architecture, else raises the same error: the
outcome hangs on the string the user passes and on the 4.x release's list of names, so the
4.x verdict is ``cannot_tell`` there.
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
NO_CONFIG = (
    "ValueError",
    "Unrecognized model in {p}. Should have a `model_type` key in its config.json",
)
NO_CONFIG_FIX = "Add the model's config.json (with model_type) beside the weights."
PATH_GUESS = (
    "{why}: transformers 4 then builds the architecture whose model-type "
    "name is the longest one found in the path string passed to it (bert in bert-run/), "
    "whatever the weights are, or raises ValueError: Unrecognized model when none is there"
)


def _config_state(p: Path) -> str:
    """``ok``, ``no_type`` (JSON without model_type), ``missing`` or ``invalid`` (not JSON)."""
    cfg = p / "config.json"
    if not cfg.is_file():
        return "missing"
    try:
        doc = json.loads(cfg.read_text(encoding="utf-8"))
    except ValueError:  # transformers' own check: JSONDecodeError, UnicodeDecodeError
        return "invalid"
    except OSError:
        return "missing"
    return "ok" if isinstance(doc, dict) and "model_type" in doc else "no_type"


def from_pretrained(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.form not in ("hf-model", "colossalai-model") or not p.is_dir():
        return []
    # a diffusers model folder (config.json with _class_name) is diffusers' from_pretrained's
    meant = layout.form == "hf-model" and model_config(p) is None
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
    config = _config_state(p)
    if config == "invalid":
        said = f"It looks like the config file at '{p / 'config.json'}' is not a valid JSON file."
        return v.fails(("config.json",), "OSError", said, "Write config.json again.", meant=meant)
    if config != "ok" and major == 4:
        why = "config.json has no model_type" if config == "no_type" else "no config.json"
        return v.cannot_tell(PATH_GUESS.format(why=why), NO_CONFIG_FIX, meant=meant)
    if config != "ok":
        return v.fails((), NO_CONFIG[0], NO_CONFIG[1].format(p=p), NO_CONFIG_FIX, meant=meant)
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
