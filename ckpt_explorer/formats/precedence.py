"""Probes of one family that yield to another family: the priority between families.

Each reader recognises its own family wherever it finds it; which family a folder *is* when two
could claim it is decided here, over the readers' results:

- a DeepSpeed save folder whose ``latest`` names a tag folder, beside another tool's training
  state (HF Trainer's ``checkpoint-N``: weights, ``scheduler.pt``, ``rng_state.pth`` ...), is
  that training state, the tag folder one of its parts;
- a PEFT adapter folder beside a Trainer's optimizer, scheduler and RNG files is a training
  state whose model part is the adapter;
- a save folder whose ``latest_universal`` names a universal checkpoint is DeepSpeed's ZeRO
  checkpoint when its ``latest`` names an existing tag (what DeepSpeed loads by default).
"""

from __future__ import annotations

from ..io.location import Location
from ..readers.deepspeed import folder as deepspeed
from ..readers.deepspeed import universal as deepspeed_universal
from ..readers.hf import peft_adapter
from ..types import Detection
from . import training_state


def probe_deepspeed(path: Location) -> Detection | None:
    """A DeepSpeed checkpoint, unless the save folder is another tool's training state."""
    detection = deepspeed.probe(path)
    if (
        detection is not None
        and deepspeed.latest_tag(path) is not None
        and deepspeed.beside_other_files(path)
        and training_state.probe(path) is not None
    ):
        return None
    return detection


def probe_peft_adapter(path: Location) -> Detection | None:
    """A PEFT adapter folder, unless a Trainer saved its training state beside the adapter."""
    detection = peft_adapter.probe(path)
    if detection is None or training_state.probe(path) is not None:
        return None
    return detection


def probe_universal(path: Location) -> Detection | None:
    """A universal checkpoint folder, or a save folder whose ``latest_universal`` names one
    while its ``latest`` names no existing ZeRO tag."""
    found = deepspeed_universal.universal_dir(path)
    if found is None:
        return None
    if found[1] is not None and deepspeed.latest_tag(path) is not None:
        return None  # 'latest' names the ZeRO checkpoint: that one is what DeepSpeed loads
    return deepspeed_universal.universal_detection(path, found)
