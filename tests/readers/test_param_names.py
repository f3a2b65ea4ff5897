"""Optimizer id -> parameter name: recorded, aligned per param group, ambiguous or unknown.

Optimizers are real torch optimizers built the way training code builds them (weight-decay /
no-decay groups by ``ndim`` or by name, frozen parameters left out, LoRA through peft); the
truth is read from the live objects, and a name shown as known is never wrong.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_explorer import open_checkpoint
from ckpt_explorer.readers.param_alignment import ParamOrder, align
from ckpt_explorer.types import OptimizerInfo


def _truth(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[int, str]:
    names = {id(p): n for n, p in model.named_parameters()}
    out: dict[int, str] = {}
    for group in opt.param_groups:
        for p in group["params"]:
            out[len(out)] = names[id(p)]
    return out


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn, steps: int = 2) -> None:
    for _ in range(steps):
        loss_fn().backward()
        opt.step()
        opt.zero_grad()


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    model = GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 64, (2, 8))
    return model, lambda: model(ids, labels=ids).loss


def _verdicts(info: OptimizerInfo | None, truth: dict[int, str]) -> dict[str, int]:
    assert info is not None
    out = {"right": 0, "wrong": 0, "ambiguous": 0, "unknown": 0}
    for pid, name in truth.items():
        pn = info.names[pid]
        if pn.known:
            out["right" if pn.name == name else "wrong"] += 1
            assert info.param_names[pid] == pn.name
        elif pn.how == "ambiguous":
            assert name in pn.candidates
            out["ambiguous"] += 1
        else:
            out["unknown"] += 1
    return out


def test_decay_groups_by_ndim_named_from_the_meta_model_and_from_torch_order(tmp_path: Path):
    model, loss = _gpt2()
    named = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [
            {"params": [p for _, p in named if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=1e-3,
    )
    _train(model, opt, loss)
    truth = _truth(model, opt)
    hf = tmp_path / "hf"
    model.save_pretrained(hf)  # name-sorted safetensors + config.json
    torch.save(opt.state_dict(), hf / "optimizer.pt")
    torch.save(model.state_dict(), tmp_path / "model.pt")
    torch.save(opt.state_dict(), tmp_path / "optim.pt")

    bundle = open_checkpoint(hf)
    info = bundle.parts["optimizer.pt"].optimizer
    assert _verdicts(info, truth) == {"right": 28, "wrong": 0, "ambiguous": 0, "unknown": 0}
    assert info is not None and "meta device" in info.name_source
    assert info.param_names[10] == "transformer.h.0.ln_1.weight"  # group 1 starts at id 10

    by_order = open_checkpoint(tmp_path / "optim.pt", model=tmp_path / "model.pt").optimizer
    assert _verdicts(by_order, truth)["wrong"] == 0
    assert _verdicts(by_order, truth)["right"] == 28
    # nanoGPT's c_attn.bias is a parameter, not the attn.bias buffer
    assert "transformer.h.0.attn.c_attn.bias" in by_order.param_names.values()  # type: ignore[union-attr]

    alone = open_checkpoint(tmp_path / "optim.pt").optimizer
    assert _verdicts(alone, truth) == {"right": 0, "wrong": 0, "ambiguous": 0, "unknown": 28}


def test_unordered_model_gives_names_only_where_the_shape_is_unique(tmp_path: Path):
    model, loss = _gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _train(model, opt, loss)
    truth = _truth(model, opt)
    from safetensors.torch import save_file

    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, tmp_path / "model.safetensors")  # no config.json: the order is unknown
    torch.save(opt.state_dict(), tmp_path / "optim.pt")
    info = open_checkpoint(tmp_path / "optim.pt", model=tmp_path / "model.safetensors").optimizer
    v = _verdicts(info, truth)
    shapes = [tuple(p.shape) for p in model.parameters()]
    unique = sum(1 for s in shapes if shapes.count(s) == 1)  # here only wte's
    assert v == {"right": unique, "wrong": 0, "ambiguous": 28 - unique, "unknown": 0}
    assert unique >= 1


def test_frozen_parameters_and_lora(tmp_path: Path):
    from peft import LoraConfig, get_peft_model

    model, _ = _gpt2()
    peft_model = get_peft_model(
        model, LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True)
    )
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-3)
    ids = torch.randint(0, 64, (2, 8))
    _train(peft_model, opt, lambda: peft_model(input_ids=ids, labels=ids).loss)
    truth = _truth(peft_model, opt)
    torch.save(peft_model.state_dict(), tmp_path / "model.pt")  # frozen bases included
    torch.save(opt.state_dict(), tmp_path / "optim.pt")
    info = open_checkpoint(tmp_path / "optim.pt", model=tmp_path / "model.pt").optimizer
    assert _verdicts(info, truth) == {"right": 4, "wrong": 0, "ambiguous": 0, "unknown": 0}


def test_a_permuted_optimizer_is_an_inconsistency_not_a_wrong_name(tmp_path: Path):
    model, loss = _gpt2()
    opt = torch.optim.AdamW(list(model.parameters())[::-1], lr=1e-3)
    _train(model, opt, loss)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    torch.save(opt.state_dict(), tmp_path / "optim.pt")
    info = open_checkpoint(tmp_path / "optim.pt", model=tmp_path / "model.pt").optimizer
    assert info is not None and not info.param_names
    assert {n.how for n in info.names.values()} == {"unknown"}
    (msg,) = info.inconsistencies
    assert "another order" in msg


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_models_and_groups_never_get_a_wrong_name(data):
    """Property: whatever the shapes, frozen parameters and grouping (each group an ordered
    subsequence of the model's order), a known name is the true one and the truth is among
    the candidates of an ambiguous id."""
    n = data.draw(st.integers(1, 14))
    shape_pool = [(2,), (3,), (2, 3), (3, 2), (4,)]
    shapes = [data.draw(st.sampled_from(shape_pool)) for _ in range(n)]
    names = [f"p{i}" for i in range(n)]
    trained = [i for i in range(n) if data.draw(st.booleans()) or i == 0]
    k = data.draw(st.integers(1, 3))
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    group_of = {i: rng.randrange(k) for i in trained}
    groups_idx = [[i for i in trained if group_of[i] == g] for g in range(k)]
    groups_idx = [g for g in groups_idx if g]
    truth: dict[int, int] = {}
    groups: list[list[int]] = []
    for g in groups_idx:
        ids = []
        for i in g:
            truth[len(truth)] = i
            ids.append(len(truth) - 1)
        groups.append(ids)
    stateful = {pid: data.draw(st.booleans()) for pid in truth}
    want = {pid: shapes[truth[pid]] for pid in truth if stateful[pid]}
    ordered = data.draw(st.booleans())
    result = align(groups, want, ParamOrder(tuple(names), tuple(shapes), ordered, "test"))
    assert not result.inconsistencies
    for pid, i in truth.items():
        pn = result.names[pid]
        if pn.known:
            assert pn.name == names[i]
        elif pn.how == "ambiguous":
            assert names[i] in pn.candidates


@pytest.mark.parametrize("ordered", [True, False])
def test_states_that_fit_no_parameter_are_inconsistent(ordered: bool):
    order = ParamOrder(("a", "b"), ((2,), (3,)), ordered, "test")
    result = align([[0, 1]], {0: (2,), 1: (5,)}, order)
    assert result.inconsistencies and not result.names
    assert "[5]" in result.inconsistencies[0]
