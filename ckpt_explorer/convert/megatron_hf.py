"""A Megatron training state as the source of ``--to hf``: its model as the HF model it is.

The tensors and ``config.json`` come from :mod:`..readers.megatron.hf`. Split and transposed
tensors (q/k/v out of ``linear_qkv``, gate/up out of ``linear_fc1``, GPT-2's ``Conv1D``
weights) have no byte range of their own. Their loader cuts them from the Megatron tensor, and
verification compares the written tensor with that cut, made afresh from the source. The
dtypes are the model's as stored: bf16 weights stay bf16, and the fp32 master copies in the
optimizer are not used. The optimizer, scheduler, RNG state, run state and args are left out,
each named.
"""

from __future__ import annotations

from ..io.location import Location
from ..readers.megatron.hf import megatron_hf
from ..view import CheckpointView
from .fastpath import record_pieces
from .plan_types import PlannedTensor, format_bytes
from .source_content import SourceContent


def megatron_hf_source(view: CheckpointView) -> SourceContent:
    """The HF model of Megatron training state ``view`` for a conversion.

    Raises:
        CkptExplorerError: the model is not one ckpt_explorer converts to HF
            (see :mod:`..readers.megatron.hf_config`).
    """
    hf = megatron_hf(view)
    model = view.parts["model"]
    memo: dict[str, tuple[str | Location, str, int]] = {}
    tensors = [
        PlannedTensor(
            r.name,
            hf.sources[r.name],
            r.dtype,
            tuple(r.shape),
            r.nbytes,
            record_pieces(model.path, r, memo) if r.offset is not None else None,
            read_values=r.read_values,
        )
        for r in hf.records
    ]
    content = SourceContent("model", tensors, written=[("config.json", hf.config)])
    cut = sum(1 for t in tensors if "(" in t.source)
    content.notes.append(
        f"Megatron -> HF {hf.spec.architecture}: {len(tensors)} tensor(s) under HF names, "
        f"{cut} of them cut or transposed from fused Megatron tensors; config.json from the args"
    )
    content.notes += list(hf.spec.notes)
    content.dropped += list(hf.left_out)
    content.parts_left_out += [
        f"part {n} ({p.kind}, {len(p.tensors)} tensor(s), {format_bytes(p.tensor_bytes)})"
        for n, p in view.parts.items()
        if n != "model" and p.kind != "rank_file"  # not the raw rank files it merges
    ]
    return content
