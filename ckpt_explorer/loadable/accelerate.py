"""accelerate ``Accelerator.load_state(folder)`` (``checkpointing.load_accelerator_state``):
per prepared model ``model[_i].safetensors`` else ``pytorch_model[_i].bin``, then
``optimizer[_i].bin``, ``scheduler[_i].bin``, ``random_states_<rank>.pkl`` (silently skipped
when absent), all through ``torch.load(weights_only=True)``."""

from __future__ import annotations

import re
from pathlib import Path

from .files import Listing, refused_global
from .verdicts import Layout, LoaderCall, Verdict

LOADER = "accelerate.load_state"
FSDP_MODEL = "pytorch_model_fsdp"  # FULL .bin, _rank<N>.bin and SHARDED _<i>/ folders


def _count(listing: Listing, pattern: str) -> int:
    """How many prepared objects the numbered files imply: the highest index + 1, at most one
    more than the files there are (a name like ``model_99999999999.bin`` sizes nothing)."""
    rx = re.compile(pattern)
    idx = {int(m.group(1) or 0) for n in listing.files if (m := rx.fullmatch(n))}
    return min(max(idx) + 1, len(listing.files) + 1) if idx else 0


def load_state(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.form != "accelerate-state":
        return []
    listing = Listing.of(p)
    if any(n.startswith(FSDP_MODEL) for n in (*listing.files, *listing.dirs)):
        return []  # saved through the FSDP plugin (load_fsdp_model's names): not modelled
    call = f"accelerator.load_state({str(p)!r})"
    models = max(_count(listing, r"(?:model|pytorch_model)(?:_(\d+))?\.(?:safetensors|bin)"), 1)
    optims = max(_count(listing, r"optimizer(?:_(\d+))?\.bin"), 1)
    reads: list[str] = []
    for i in range(models):
        end = f"_{i}" if i else ""
        st, pt = f"model{end}.safetensors", f"pytorch_model{end}.bin"
        reads.append(st if listing.has(st) else pt)
    reads += [f"optimizer{'_' + str(i) if i else ''}.bin" for i in range(optims)]
    scheds = _count(listing, r"scheduler(?:_(\d+))?\.bin")
    reads += [f"scheduler{'_' + str(i) if i else ''}.bin" for i in range(scheds)]
    notes = [f"for {models} prepared model(s), {optims} optimizer(s), {scheds} scheduler(s)"]
    if not scheds:
        notes.append("a prepared scheduler fails: FileNotFoundError (no scheduler.bin)")
    if not listing.has("random_states_0.pkl"):
        notes.append("random_states_0.pkl is absent: RNG states are silently not restored")
    else:
        reads.append("random_states_0.pkl")
    v = LoaderCall(LOADER, call, target)
    for name in reads:
        f = p / name
        if not f.is_file():
            message = f"[Errno 2] No such file or directory: '{f}'"
            fix = "Save with accelerator.save_state, or prepare fewer objects."
            return [v.fails(reads, "FileNotFoundError", message, fix, meant=True, notes=notes)]
        if name.endswith(".bin") and refused_global(f) is not None:
            message = "Weights only load failed"
            return [v.fails(reads, "UnpicklingError", message, meant=True, notes=notes)]
    return [v.loads(reads, meant=True, notes=notes)]
