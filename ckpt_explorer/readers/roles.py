"""Roles of training-state files decided by content: RNG states, run position, training args.

What the writers really save (read from their sources):

- HF Trainer ``_save_rng_state``: ``torch.save({"python": random.getstate(), "numpy":
  np.random.get_state(), "cpu": torch.random.get_rng_state(), "cuda": ...})`` as
  ``rng_state.pth`` (``rng_state_<rank>.pth`` when distributed); ``trainer_state.json`` holds
  ``global_step``; ``training_args.bin`` is a pickled ``TrainingArguments`` object.
- accelerate ``save_accelerator_state``: ``random_states_<rank>.pkl`` = ``torch.save({"step":
  accelerator.step, "random_state": ..., "numpy_random_seed": ..., "torch_manual_seed": ...})``
  where ``step`` is accelerate's gradient-accumulation counter, not the run position.
- ColossalAI / plain loops: ``meta.pt`` with ``epoch``/``step`` and torch/numpy/python RNG states.

RNG states are recognised by their shape, whatever the key: a Mersenne-Twister ``random``
state (version 3, 625 words), a numpy ``('MT19937', keys, pos, ...)`` tuple or bit-generator
state dict, a torch generator state (uint8 vector of 5056 bytes on CPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..io.safe_pickle import LazyTensor, OpaqueObject
from ..types import TensorRecord, Traits

# Key names that name RNG states in the wild (used beside the content checks).
RNG_KEYS = {
    "torch_rng",
    "cuda_rng",
    "rng_state",
    "cpu_rng_state",
    "cuda_rng_state",
    "numpy_rng",
    "python_rng",
    "random_rng",
    "np_rng",
    "py_rng",
}
# Keys that give the run position (``iter_num``: nanoGPT's optimizer-step counter).
# "iteration": Megatron's common.pt / model_optim_rng.pt and detectron2's checkpointer
POSITION_KEYS = ("global_step", "global_steps", "step", "iter_num", "iteration")
META_KEYS = {
    "epoch",
    "step",
    "global_step",
    "global_steps",
    "iter_num",
    "sample_start_index",
    "consumed_samples",
}
# Keys that hold where a run is, in a training state's own entries (``step`` of torchtitan's
# ``train_state``, nanoGPT's ``iter_num``, DeepSpeed's ``global_steps``, meta.pt's ``epoch``).
RUN_KEYS = ("global_step", "global_steps", "step", "iter_num", "epoch", "sample_start_index")
# Optimizer states that are moments of the gradient (Adam's, SGD's momentum).
MOMENTS = ("exp_avg", "exp_avg_sq", "momentum_buffer")
TORCH_CPU_RNG_BYTES = 5056  # torch's CPU Mersenne-Twister generator state
TORCH_CUDA_RNG_BYTES = 16  # Philox seed + offset
ARGS_FIELDS = {
    "output_dir",
    "learning_rate",
    "per_device_train_batch_size",
    "num_train_epochs",
    "max_steps",
    "seed",
    "gradient_accumulation_steps",
    "save_steps",
}
TRAINER_STATE_KEYS = {"log_history", "max_steps", "trial_name", "best_model_checkpoint"}
ACCELERATE_RNG_KEYS = {"random_state", "numpy_random_seed", "torch_manual_seed"}

DETAIL_TRAINER_STATE = "HF Trainer state (trainer_state.json)"
DETAIL_ACCELERATE_RNG = "accelerate RNG states (step = gradient-accumulation counter)"
# A run position from which the recipe rebuilds its LR scheduler at resume (torchtune saves
# no scheduler state by design: last_epoch = epochs_run × steps per epoch − 1).
DETAIL_SCHEDULER_FROM_POSITION = (
    "torchtune run position and seed (no RNG state; the LR scheduler is rebuilt from it)"
)
DETAIL_ZERO_OPTIMIZER = "DeepSpeed ZeRO optimizer states"
DETAIL_DEEPSPEED_MODEL = "DeepSpeed model states"

# The traits a file's content gives, beside the detail that describes it to people.
CONTENT_TRAITS = {
    DETAIL_TRAINER_STATE: Traits(trainer_state=True),
    DETAIL_ACCELERATE_RNG: Traits(accelerate_rng=True),
    DETAIL_SCHEDULER_FROM_POSITION: Traits(scheduler_from_position=True),
    DETAIL_ZERO_OPTIMIZER: Traits(flat_optimizer=True),
    DETAIL_DEEPSPEED_MODEL: Traits(module_prefix="module."),
}


def content_traits(detail: str) -> Traits:
    """The traits of a file classified with ``detail`` (none for most)."""
    return CONTENT_TRAITS.get(detail, Traits())


def _is_python_rng(v: Any) -> bool:
    return (
        isinstance(v, tuple)
        and len(v) == 3
        and isinstance(v[0], int)
        and v[0] == 3
        and isinstance(v[1], tuple)
        and len(v[1]) == 625
        and all(isinstance(x, int) for x in v[1][:8])
    )


def _is_numpy_rng(v: Any) -> bool:
    if isinstance(v, tuple | list) and len(v) >= 3 and isinstance(v[0], str):
        return v[0] == "MT19937"
    return isinstance(v, dict) and isinstance(v.get("bit_generator"), str) and "state" in v


def _is_torch_rng(v: Any, strict: bool = True) -> bool:
    if isinstance(v, list | tuple) and v:
        return all(_is_torch_rng(x, strict=False) for x in v)
    if not isinstance(v, LazyTensor) or str(v.dtype) != "torch.uint8" or len(v.shape) != 1:
        return False
    sizes = (TORCH_CPU_RNG_BYTES,) if strict else (TORCH_CPU_RNG_BYTES, TORCH_CUDA_RNG_BYTES)
    return v.shape[0] in sizes


def rng_kind(value: Any) -> str | None:
    """``"python"``, ``"numpy"`` or ``"torch"`` when ``value`` is that RNG's saved state."""
    if _is_python_rng(value):
        return "python"
    if _is_numpy_rng(value):
        return "numpy"
    if _is_torch_rng(value):
        return "torch"
    return None


def rng_entries(root: dict[Any, Any], key_hint: bool = True, depth: int = 0) -> dict[str, str]:
    """Key -> RNG kind for the entries of ``root`` that are RNG states.

    A torch uint8 vector of 16 bytes (a CUDA state) counts only beside another RNG state or
    under a key from :data:`RNG_KEYS`; a dict of RNG states (``{"rng": {"torch": ...}}``)
    counts as one entry ("nested").
    """
    found: dict[str, str] = {}
    for k, v in root.items():
        kind = rng_kind(v)
        if kind is None and key_hint and str(k) in RNG_KEYS and isinstance(v, LazyTensor):
            kind = "torch"
        if kind is None and depth < 2 and isinstance(v, dict) and v:
            inner = rng_entries(v, key_hint, depth + 1)
            if inner and len(inner) == len(v):
                kind = "nested (" + ", ".join(sorted(set(inner.values()))) + ")"
        if kind is not None:
            found[str(k)] = kind
    if found:
        for k, v in root.items():
            if str(k) not in found and _is_torch_rng(v, strict=False):
                found[str(k)] = "torch"
    return found


def is_rng_file(root: Any) -> tuple[bool, list[str]]:
    """Whether a torch.save root is an RNG (+ run position) dict, with the evidence.

    Every tensor in it must be an RNG state (a dict also holding weights is not an RNG file).
    """
    if not isinstance(root, dict):
        return False, []
    found = rng_entries(root)
    if not found:
        return False, []
    others = [v for k, v in root.items() if str(k) not in found]
    if any(isinstance(v, LazyTensor | dict | OpaqueObject) for v in others):
        return False, []
    evidence = [f"{k!r}: {kind} RNG state" for k, kind in found.items()]
    if set(map(str, root)) >= ACCELERATE_RNG_KEYS:
        evidence.append("accelerate save_state layout (random_state, numpy_random_seed, ...)")
    return True, evidence


def is_rng_tensor(record: TensorRecord) -> bool:
    """A listed tensor that is an RNG state: under a key of :data:`RNG_KEYS` (first or last
    name component), or torch's CPU generator state under whatever name."""
    parts = record.name.split(".")
    if parts[-1] in RNG_KEYS or parts[0] in RNG_KEYS:
        return True
    return record.dtype == "uint8" and record.shape == (TORCH_CPU_RNG_BYTES,)


def has_rng_state(records: Iterable[TensorRecord], values: Mapping[str, Any]) -> bool:
    """An RNG state among a view's entries, by content or by a known RNG key name."""
    if any(k.split(".")[-1] in RNG_KEYS or k.split(".")[0] in RNG_KEYS for k in values):
        return True
    if any(is_rng_tensor(r) for r in records):
        return True
    return any(rng_kind(v) is not None for v in values.values())


def is_accelerate_rng(root: Any) -> bool:
    return isinstance(root, dict) and set(map(str, root)) >= ACCELERATE_RNG_KEYS


def is_training_args(root: Any) -> tuple[bool, str]:
    """A pickled arguments object (``TrainingArguments``, an ``argparse.Namespace``, ...)."""
    if not isinstance(root, OpaqueObject):
        return False, ""
    state = root.state if isinstance(root.state, dict) else {}
    fields = ARGS_FIELDS & set(map(str, state))
    name = root.qualified_name
    if len(fields) >= 3 or (name.endswith(("Arguments", "Namespace")) and state):
        shown = ", ".join(sorted(fields)[:4]) or f"{len(state)} fields"
        return True, f"pickled {name} ({shown})"
    return False, ""


def is_trainer_state(doc: Any) -> bool:
    """``trainer_state.json`` of the HF Trainer (``TrainerState.save_to_json``)."""
    return (
        isinstance(doc, dict) and "global_step" in doc and len(TRAINER_STATE_KEYS & set(doc)) >= 2
    )


def position_keys(values: dict[str, Any]) -> list[str]:
    """Run-position keys present in ``values`` with an integer value."""
    return [
        k
        for k in POSITION_KEYS
        if isinstance(values.get(k), int) and not isinstance(values.get(k), bool)
    ]
