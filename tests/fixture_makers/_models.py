"""Tiny models and data shared by the fixture makers (built with the real libraries).

- :class:`TinyLM`: a 2-block pre-norm language model (``embed``, ``blocks.N.norm`` / ``fc`` /
  ``proj``, ``norm_f``, ``head``) trained by the DeepSpeed, DCP and optimizer makers, with its
  decay / no-decay groups, a warm-up + cosine LR factor, a resumable batch per step and the
  optimizer's ``{state id: parameter name}`` truth;
- :func:`tiny_llama` and :func:`token_dataset`: the HF Trainer makers' Llama and data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(F.gelu(self.fc(self.norm(x))))


class TinyLM(nn.Module):
    """``forward(idx)`` is the next-token loss (logits in float32, whatever the module dtype);
    ``sparse``: a sparse embedding (``SparseAdam``)."""

    def __init__(self, vocab: int, dim: int, n_layer: int, sparse: bool = False) -> None:
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, dim, sparse=sparse)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(n_layer)])
        self.norm_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm_f(x)).float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab), idx[:, 1:].reshape(-1))


def decay_groups(model: nn.Module) -> list[dict[str, Any]]:
    """Weight decay for matrices, none for norms and biases (split by ``p.ndim``)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [
        {"params": [p for _, p in named if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0},
    ]


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to 10 %: a LambdaLR factor (wrap it in a plain
    function: LambdaLR saves a callable object's attributes in its state_dict)."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    ratio = min(1.0, (step - warmup) / (total - warmup))
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * ratio))


def token_batch(step: int, seed: int, vocab: int, batch: int, seq: int) -> torch.Tensor:
    """The batch of a global step (a data loader that resumes at the right sample)."""
    g = torch.Generator().manual_seed(seed + step)
    return torch.randint(0, vocab, (batch, seq), generator=g)


def id_names(
    named: Iterable[tuple[str, torch.Tensor]], groups: Iterable[Mapping[str, Any]]
) -> dict[str, str]:
    """``{state id: parameter name}`` numbered as ``Optimizer.state_dict`` numbers the params
    of ``groups`` (an optimizer's ``param_groups``); ``named``: ``named_parameters()``."""
    names = {id(p): n for n, p in named}
    out: dict[str, str] = {}
    seen: set[int] = set()
    start = 0
    for group in groups:
        for i, p in enumerate(group["params"], start):
            if id(p) not in seen:
                seen.add(id(p))
                out[str(i)] = names[id(p)]
        start += len(group["params"])
    return out


def tiny_llama(seed: int, vocab: int) -> Any:
    """A 2-layer ``LlamaForCausalLM`` (hidden 32, 4 heads, 2 KV heads), seeded, untied."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return LlamaForCausalLM(cfg)


def token_dataset(n: int, seed: int, vocab: int, seq: int) -> list[dict[str, torch.Tensor]]:
    """Random token sequences (labels = inputs, as causal-LM fine-tuning scripts do)."""
    g = torch.Generator().manual_seed(seed)
    return [
        {"input_ids": x, "labels": x.clone()}
        for x in torch.randint(0, vocab, (n, seq), generator=g)
    ]
