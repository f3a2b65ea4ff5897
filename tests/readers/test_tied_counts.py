"""Element counts with tied weights: a ``.bin`` of T5 holds ``shared``, both ``embed_tokens``
and ``lm_head`` as four names of one storage; they are one parameter, as transformers counts."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ckpt_explorer import open_checkpoint
from ckpt_explorer.inspect_report import inspect_report
from ckpt_explorer.ui.tables import model_parameter_count


def test_tied_t5_bin_counts_each_parameter_once(tmp_path: Path) -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    model = T5ForConditionalGeneration(cfg)
    path = tmp_path / "pytorch_model.bin"
    torch.save(model.state_dict(), path)
    truth = sum(p.numel() for p in model.parameters())  # tied parameters appear once
    view = open_checkpoint(path)
    assert len(view.tensors) > len(list(model.parameters()))  # the aliases are listed
    assert view.element_count == truth
    assert json.loads(json.dumps(inspect_report(view), default=str))["parameter_count"] == truth
    counted = model_parameter_count(view)
    assert counted is not None and counted[0] == truth
