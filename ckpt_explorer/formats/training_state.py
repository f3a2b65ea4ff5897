"""Training-state folders, composed from what their children are (see ``readers/bundle.py``).

Each child is detected by the registry's other entries; a child is a part when its kind is a
state kind (model, optimizer, scheduler, RNG, run state, adapter, args) or when it is the
DeepSpeed tag folder that ``latest`` names. The folder's own weights (an HF model, or a PEFT
adapter) are its model part. Opening opens every part with its own entry and joins the views.
"""

from __future__ import annotations

from ..errors import CkptExplorerError
from ..io.location import Location
from ..readers import bundle
from ..readers.deepspeed import folder as deepspeed
from ..readers.hf import peft_adapter
from ..readers.hf.sharded_index import TMP_DIR
from ..types import Detection
from ..view import CheckpointView
from .registry import FormatSpec, spec_for, specs

NAME = "training-state"  # the registry entry (formats/__init__.py)
PartSpec = tuple[Location, Detection, FormatSpec]


def _detect_child(
    child: Location, target: str, skip: tuple[str, ...] = (NAME,)
) -> tuple[Detection, FormatSpec] | None:
    """The first entry (but those in ``skip``) that recognises ``child``; None when none does
    or a probe fails on it (a child that cannot be read is no part)."""
    for spec in specs(target):
        if spec.name in skip:
            continue
        try:
            detection = spec.probe(child)
        except (CkptExplorerError, OSError):
            return None
        if detection is not None:
            return detection, spec
    return None


def find_parts(path: Location) -> dict[str, PartSpec]:
    """Name -> (path, detection, entry) of the state parts in ``path``."""
    children = bundle.children(path)
    if children is None:
        return {}
    parts: dict[str, PartSpec] = {}
    own = _detect_child(path, "dir", (NAME, "peft-adapter", "deepspeed"))
    owned: set[str] = set()
    if own is not None and own[0].family in bundle.OWN_MODEL_FAMILIES:
        parts["model"] = (path, *own)
        owned = bundle.own_model_files(path)
    else:
        adapter = peft_adapter.probe(path)
        if adapter is not None:
            parts["adapter"] = (path, adapter, spec_for(adapter, "dir"))
            owned = set(bundle.ADAPTER_OWN_FILES)
    for child in children:
        if child.name in owned or child.name in bundle.IGNORED or child.name == TMP_DIR:
            continue
        found = _detect_child(child, "dir" if child.is_dir() else "file")
        if found is None:
            continue
        if found[0].family == bundle.DEEPSPEED:
            if child.name != deepspeed.latest_tag(path):
                continue
        elif found[0].kind not in bundle.STATE_KINDS:
            continue
        name = child.name if child.name not in parts else f"{child.name}#2"
        parts[name] = (child, *found)
    # EMA copies last: the trained model comes first where one model is picked (names, checks)
    return dict(sorted(parts.items(), key=lambda kv: bundle.ema_config(kv[1][:2]) is not None))


def _detected(parts: dict[str, PartSpec]) -> dict[str, bundle.Part]:
    return {name: (child, detection) for name, (child, detection, _) in parts.items()}


def probe(path: Location) -> Detection | None:
    """A training state when ``path`` holds state parts of two kinds or more."""
    return bundle.training_state_detection(path, _detected(find_parts(path)))


def open_training_state(path: Location, detection: Detection) -> CheckpointView:
    """Every part opened by its own entry, joined into one view (parts kept by name)."""
    views = {
        name: spec.open(child, found) for name, (child, found, spec) in find_parts(path).items()
    }
    return bundle.bundle_view(path, detection, views)
