"""``--to hf`` of a DDP / torch.compile state_dict: wrapper prefixes go, from_pretrained loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_convert import convert

from ckpt_explorer.convert.renames import wrapper_prefix


def _tiny_gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=32, vocab_size=64)
    return GPT2LMHeadModel(cfg).eval()


def _wrapped_state_dict(model: Any, how: str, store: Path) -> dict[str, torch.Tensor]:
    """The state_dict training code saves from ``model`` wrapped the way ``how`` says."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if how == "compile":
        return torch.compile(model).state_dict()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        ddp = DDP(model)
        return (ddp if how == "ddp" else torch.compile(ddp)).state_dict()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("how", "prefix"),
    [("ddp", "module."), ("compile", "_orig_mod."), ("compile_ddp", "_orig_mod.module.")],
)
def test_wrapped_model_to_hf_loads_with_from_pretrained(
    tmp_path: Path, how: str, prefix: str
) -> None:
    from transformers import AutoModelForCausalLM

    model = _tiny_gpt2()
    want = {k: v.detach().clone() for k, v in model.state_dict().items()}
    saved = _wrapped_state_dict(model, how, tmp_path / "store")
    assert all(k.startswith(prefix) for k in saved)
    src = tmp_path / "run"
    src.mkdir()
    torch.save(saved, src / "pytorch_model.bin")
    model.config.save_pretrained(src)
    plan, _ = convert(src, tmp_path / "hf", "hf")
    assert any(repr(prefix) in n for n in plan.notes), plan.notes
    assert {t.name for t in plan.tensors} == set(want)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert set(loaded) == set(want)
    for name, t in want.items():
        assert loaded[name].dtype == t.dtype and torch.equal(loaded[name], t), name


def test_prefix_removed_only_when_every_name_has_it() -> None:
    assert wrapper_prefix(["module.a.weight", "module.b.bias"]) == "module."
    assert wrapper_prefix(["module.a.weight", "b.bias"]) == ""
    assert wrapper_prefix(["_orig_mod.module.a", "_orig_mod.module.b"]) == "_orig_mod.module."
    assert wrapper_prefix(["module._orig_mod.a", "module.b"]) == "module."
    assert wrapper_prefix([]) == ""


def test_other_targets_keep_the_names(tmp_path: Path) -> None:
    model = _tiny_gpt2()
    saved = _wrapped_state_dict(model, "compile", tmp_path / "store")
    torch.save(saved, tmp_path / "model.pt")
    plan, _ = convert(tmp_path / "model.pt", tmp_path / "out.safetensors", "safetensors")
    assert {t.name for t in plan.tensors} == set(saved)
