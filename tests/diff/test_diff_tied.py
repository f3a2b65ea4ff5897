"""Diff against a file written by safetensors' ``save_model``, which drops one name of each
tied pair and records it in ``__metadata__`` (``{"head.weight": "emb.weight"}``): the dropped
name pairs with the kept tensor."""

from __future__ import annotations

from pathlib import Path

import torch

from ckpt_explorer import diff_checkpoints


class TiedLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(32, 8)
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 32, bias=False)
        self.head.weight = self.emb.weight  # tied, as LMs tie their output layer


def _saved(tmp_path: Path) -> tuple[TiedLM, Path, Path]:
    from safetensors.torch import save_model

    torch.manual_seed(0)
    model = TiedLM()
    torch.save(model.state_dict(), tmp_path / "model.pt")
    save_model(model, str(tmp_path / "model.safetensors"))
    return model, tmp_path / "model.pt", tmp_path / "model.safetensors"


def test_tied_alias_pairs_with_the_kept_tensor(tmp_path: Path) -> None:
    _, pt, st = _saved(tmp_path)
    for a, b in ((pt, st), (st, pt)):
        result = diff_checkpoints(a, b)
        assert result.equal, [(r.name, r.status) for r in result.tensors]
        assert not [r for r in result.tensors if r.status.startswith("only")]


def test_a_head_that_differs_from_the_kept_tensor_is_still_a_change(tmp_path: Path) -> None:
    """Control: A's head.weight no longer equals the embedding B kept for it."""
    model, pt, st = _saved(tmp_path)
    state = model.state_dict()
    state["head.weight"] = state["head.weight"].clone() + 1.0
    torch.save(state, pt)
    result = diff_checkpoints(pt, st)
    changed = {r.name for r in result.tensors if r.status == "changed"}
    assert not result.equal and "head.weight" in changed
