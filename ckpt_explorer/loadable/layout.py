"""What each target of a table is (by content, damaged layouts included), and its targets:
the path itself and, for a training-state folder, its parts one level down."""

from __future__ import annotations

from pathlib import Path

from ..errors import CkptExplorerError
from ..readers.traits import traits_of
from ..types import Detection, Traits
from . import damaged
from .files import Listing, is_safetensors
from .verdicts import Layout

ACCELERATE_MARKS = ("optimizer.bin", "random_states_0.pkl", "scheduler.bin")
MAX_PARTS = 32
# The layout each real loader is handed (``Traits.loaded_by``); ColossalAI's by what it holds.
_FORM_BY_LOADER = {
    "from_pretrained": "hf-model",
    "dcp": "dcp",
    "deepspeed": "deepspeed",
    "peft": "peft-adapter",
}
INDEX_LOADERS = ("from_pretrained", "colossalai")  # handed an index file of a sharded folder
RUNTIME_LOADERS = ("llama.cpp",)  # inference runtimes: no training loader reads their files


def _form_for_loader(det: Detection, traits: Traits) -> str:
    if traits.loaded_by == "colossalai":
        return "colossalai-optimizer" if det.kind == "optimizer" else "colossalai-model"
    return _FORM_BY_LOADER.get(traits.loaded_by, "")


def _detect(path: Path) -> Detection | None:
    from ..formats import detect

    try:
        return detect(path)[0]
    except CkptExplorerError:
        return None


def _file_form(path: Path, det: Detection | None) -> str:
    if det is None:
        return "other"
    traits = traits_of(det, ())
    if traits.loaded_by in INDEX_LOADERS:
        return _form_for_loader(det, traits)  # an index file handed to the loader
    if traits.loaded_by in RUNTIME_LOADERS:
        return "other"  # read by a runtime this table does not restate (llama.cpp for GGUF)
    if det.kind in ("model", "optimizer", "scheduler"):
        return f"{det.kind}-file"
    if traits.loaded_by == "torch.load":
        return "torch-file"
    return "other"


def layout_of(path: Path) -> Layout:
    """The layout of one target, intact or damaged."""
    det = _detect(path)
    if path.is_file():
        form = _file_form(path, det)
        if form == "other" and is_safetensors(path):
            form = "model-file"
        return Layout(form, det.evidence if det else ())
    listing = Listing.of(path)
    if det is None:
        return damaged.recognise(path, listing) or Layout("other")
    traits = traits_of(det, ())
    if traits.loaded_by == "deepspeed":
        form = "deepspeed" if listing.has("latest") else "deepspeed-tag"
        return Layout(form, det.evidence[:2])
    if _is_accelerate(listing):
        return Layout(
            "accelerate-state", ("model weights beside optimizer.bin / random_states_0.pkl",)
        )
    form = _form_for_loader(det, traits)
    if not form and traits.part_files:
        has_weights = listing.has("model.safetensors") or listing.has("pytorch_model.bin")
        form = "hf-model" if has_weights and listing.has("config.json") else "training-state"
    return Layout(form or "other", det.evidence[:2])


def _is_accelerate(listing: Listing) -> bool:
    weights = any(n.startswith(("model", "pytorch_model")) for n in listing.files)
    return weights and any(listing.has(m) for m in ACCELERATE_MARKS)


def targets(root: Path) -> dict[str, Layout]:
    """``{"": root's layout}`` plus, for a training-state folder, its recognised parts."""
    top = layout_of(root)
    out = {"": top}
    if top.form != "training-state" or not root.is_dir():
        return out
    for child in sorted(root.iterdir())[:MAX_PARTS]:
        if child.name.startswith(".") or child.name.endswith(".json"):
            continue
        lay = layout_of(child)
        if lay.form not in ("other", "torch-file", "peft-adapter"):
            out[child.name] = lay
    return out
