"""Plain values passed between readers and every consumer (diff, validate, convert, ui)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# What a checkpoint holds.
KINDS = (
    "model",
    "optimizer",
    "scheduler",
    "rng",
    "running_state",
    "training_state",
    "adapter",
    "args",
    "object",
    "rank_file",  # one rank's file, its content joined into the logical parts beside it
)

# How an optimizer id's parameter name was decided (see readers/param_names.py).
NAME_HOW = ("recorded", "aligned", "ambiguous", "unknown")

# What an entry of a training state is (see readers/state_map.py).
ROLES = (
    "model",
    "adapter",
    "optimizer",
    "scheduler",
    "rng",
    "running_state",
    "args",
    "other",
)


def shape_numel(shape: tuple[int, ...]) -> int:
    """Number of elements of a tensor of ``shape`` (1 for a scalar)."""
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class Traits:
    """What a reader knows about a checkpoint that consumers act on (they never branch on
    family or detail strings). A reader sets those it decides from content on the
    :class:`Detection`; ``CheckpointView.traits`` adds those of its family.

    Attributes:
        keeps_order: tensors are listed in the model's parameter (``state_dict``) order.
        ema_copy: the weights are an averaged copy of the model (diffusers ``EMAModel``).
        flat_optimizer: optimizer states are flat partitions over many parameters
            (DeepSpeed ZeRO files): ids are partitions, shapes are not the parameters'.
        module_prefix: only tensors under this prefix are model weights (DeepSpeed's module
            copy under ``module.``; the rest of the file is engine bookkeeping).
        position_in_values: the view's own values (not a part) give the run position
            (DeepSpeed's ``global_steps``).
        accelerate_rng: accelerate's ``random_states_<i>.pkl``: one per process, and its
            ``step`` is the gradient-accumulation counter, not the run position.
        trainer_state: the HF Trainer's ``trainer_state.json``.
        scheduler_from_position: the run position from which the recipe rebuilds its LR
            scheduler (torchtune saves no scheduler state by design).
        zero_partitions: the model is gathered from ZeRO fp32 partitions (a DeepSpeed folder).
        fp32_masters: per-parameter fp32 master weights (DeepSpeed universal checkpoint).
        megatron_names: the model is saved under Megatron names that map to an HF model.
        dcp_items: tensors and values are items of ``torch.distributed.checkpoint``: the
            DCP loader reads them (whole ``.distcp`` files), ``dcp_to_torch_save`` writes the
            whole state back at their object paths.
        part_files: a folder whose files are its parts (a training-state folder): a file
            beside them that cannot be read is a part lost.
        loaded_by: the real loader a user hands it to (``from_pretrained``, ``colossalai``,
            ``dcp``, ``deepspeed``, ``peft``, ``torch.load``), "" when none reads it as is.
    """

    keeps_order: bool = False
    ema_copy: bool = False
    flat_optimizer: bool = False
    module_prefix: str = ""
    position_in_values: bool = False
    accelerate_rng: bool = False
    trainer_state: bool = False
    scheduler_from_position: bool = False
    zero_partitions: bool = False
    fp32_masters: bool = False
    megatron_names: bool = False
    dcp_items: bool = False
    part_files: bool = False
    loaded_by: str = ""

    @property
    def step_is_position(self) -> bool:
        """A ``step`` saved here is the run position."""
        return not self.accelerate_rng

    def merged(self, other: Traits) -> Traits:
        """Every trait either holds (``module_prefix``: this one's when set)."""
        out = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            out[f.name] = mine or theirs
        return Traits(**out)


@dataclass(frozen=True)
class Detection:
    """The family of a checkpoint and the evidence that decided it.

    Attributes:
        path: the path that was examined.
        family: format family id, e.g. ``"colossalai-sharded-optimizer"``.
        kind: what it holds, one of :data:`KINDS`.
        evidence: human-readable reasons, strongest first.
        detail: a finer description ("optimizer param-group file", "pipeline, 2 stages"),
            for people to read; what consumers act on is in ``traits``.
        traits: what the reader decided from the content (see :class:`Traits`).
    """

    path: str
    family: str
    kind: str
    evidence: tuple[str, ...]
    detail: str = ""
    traits: Traits = Traits()

    def explain(self) -> str:
        return f"{self.family} ({self.kind}): " + "; ".join(self.evidence)


@dataclass(frozen=True)
class FileInfo:
    """One file of a checkpoint, relative to the checkpoint's root."""

    path: str
    nbytes: int


@dataclass(frozen=True)
class TensorRecord:
    """One tensor as listed from headers, indexes or pickle structure (no tensor bytes read).

    Attributes:
        name: key in the checkpoint (flattened with ``.`` for nested dicts).
        dtype: torch dtype name without the ``torch.`` prefix, e.g. ``"bfloat16"``.
        shape: logical shape.
        nbytes: bytes of the tensor's own elements (numel x itemsize).
        file: file holding it, relative to the checkpoint root.
        offset: absolute byte offset of its first element in ``file`` where the format has one.
        storage_key: shared-storage identity (torch pickles), to tell aliases apart.
        read_values: reads the tensor's values (a torch tensor) when called; None where the
            values cannot be read (it never pretends).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str
    offset: int | None = None
    storage_key: str | None = None
    read_values: Callable[[], torch.Tensor] | None = field(default=None, compare=False, repr=False)

    @property
    def numel(self) -> int:
        return shape_numel(self.shape)


@dataclass(frozen=True)
class ParamName:
    """The parameter behind one optimizer id, and how that was decided.

    Attributes:
        name: the parameter name when it is known (``how`` is ``recorded`` or ``aligned``).
        how: ``recorded`` (the files name it), ``aligned`` (the only assignment consistent
            with the model's parameter order, the param groups and every state's shape),
            ``ambiguous`` (several parameters fit: ``candidates``) or ``unknown``.
        candidates: for ``ambiguous``, the parameters that fit (at most a few are kept).
    """

    name: str | None
    how: str
    candidates: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.name is not None and self.how in ("recorded", "aligned")

    def label(self) -> str:
        """``name`` when known, else ``ambiguous: a | b`` or ``unknown`` (for tables)."""
        if self.known:
            return str(self.name)
        if self.how == "ambiguous" and self.candidates:
            return "ambiguous: " + " | ".join(self.candidates[:3])
        return self.how


@dataclass(frozen=True)
class OptimizerInfo:
    """Structure of an optimizer checkpoint.

    Attributes:
        param_groups: hyperparameters of each group, ``params`` holding the integer ids.
        state_ids: ids that have a state entry, in file order.
        state_names: per id, the state names present (``exp_avg``, ``step``, ...).
        param_names: id -> parameter name, only for ids whose name is known (recorded or
            aligned); never a guess.
        name_source: where the parameter order came from ("" when names were not sought).
        names: per id, the name with how it was decided (including ambiguous/unknown ids).
        inconsistencies: when no assignment of parameters to ids fits the model's order,
            the groups and the state shapes: what does not fit (empty when one does).
        flat: why the states are flat buffers over many parameters (no ids, no
            per-parameter shapes; the groups list no params), "" for per-parameter states.
        padded: the flat buffers hold alignment padding of uninitialised memory, so their
            values cannot be judged (NaN, magnitudes) as a whole.
    """

    param_groups: tuple[dict[str, Any], ...]
    state_ids: tuple[int, ...]
    state_names: dict[int, tuple[str, ...]]
    param_names: dict[int, str] = field(default_factory=dict)
    name_source: str = ""
    names: dict[int, ParamName] = field(default_factory=dict)
    inconsistencies: tuple[str, ...] = ()
    flat: str = ""
    padded: bool = False

    def group_of(self, param_id: int) -> int | None:
        for i, group in enumerate(self.param_groups):
            if param_id in group.get("params", ()):
                return i
        return None


@dataclass(frozen=True)
class Slot:
    """Where one optimizer state entry belongs.

    Attributes:
        optimizer: the key prefix of its optimizer in the view (``""``, ``"optimizer."``,
            ``"optim."``): tells the optimizers of one view apart.
        param_id: the optimizer's id of the parameter (torch's numbering for FQN-keyed
            states).
        state: the state's name (``exp_avg``, ``step``,
            ``__bnb_optimizer_quant_state__.state1``).
    """

    optimizer: str
    param_id: int
    state: str


@dataclass(frozen=True)
class OptimizerState:
    """One optimizer of a view, as its reader found it.

    Attributes:
        prefix: the key prefix of its entries (``""`` for an optimizer file).
        groups: the param groups, ``params`` holding integer ids.
        states: per id, its state tensors by state name.
        scalars: per id, its non-tensor states by state name (an id whose state is empty
            has an empty dict).
        flat: the states are flat buffers over many parameters (ids are not parameters,
            shapes are not theirs).
        param_names: id -> parameter name, where the files or the model's order name it.
    """

    prefix: str
    groups: tuple[dict[str, Any], ...]
    states: dict[int, dict[str, TensorRecord]]
    scalars: dict[int, dict[str, Any]]
    flat: bool = False
    param_names: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SchedulerState:
    """One LR scheduler of a view: its key prefix and its fields (prefix removed)."""

    prefix: str
    values: dict[str, Any]


@dataclass(frozen=True)
class RunState:
    """Run-position entries of a view under one key prefix.

    Attributes:
        prefix: their common key prefix (``""``, ``"train_state."``).
        entries: key (``step``, ``epoch``) -> the entry's full name in the view: a plain
            value, or a one-element integer tensor.
    """

    prefix: str
    entries: dict[str, str]


@dataclass(frozen=True)
class StateMap:
    """What each entry of one view is, decided once by the readers (``view.state_map``).

    A view with parts holds only what is its own (DeepSpeed's run position in the folder's
    values); its parts have their own maps.

    Attributes:
        model: the model's tensors (adapter weights for an adapter), in the view's order; the
            view's table or its rows when the view's tensors are a table (records made as read).
        optimizers: the optimizers, each with its states by id.
        schedulers: the LR schedulers.
        run: run-position entries by key prefix.
        has_rng: an RNG state is among the entries.
        slots: the name of every optimizer state entry (tensor or value) -> its slot.
        in_parts: names of the view that are a part's entries under a key prefix (a one-file
            training state's ``optimizer.state.0.exp_avg``) -> (the part, its own name).
    """

    model: Sequence[TensorRecord] = ()
    optimizers: tuple[OptimizerState, ...] = ()
    schedulers: tuple[SchedulerState, ...] = ()
    run: tuple[RunState, ...] = ()
    has_rng: bool = False
    slots: dict[str, Slot] = field(default_factory=dict)
    in_parts: dict[str, tuple[str, str]] = field(default_factory=dict)
