"""The tiny Llama the quantized-export makers (``quantized_maker``, ``gptq_maker``,
``llmcompressor_maker``) quantize: two layers, hidden 128, norms away from 1 so that a norm
fault shows. Only the makers that import this module hash it into their cache key
(tests/conftest.py): changing it re-makes those fixtures, not every one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

HIDDEN, INTER, VOCAB = 128, 256, 256


def tiny_llama(folder: Path, tokenizer: bool = False) -> dict[str, Any]:
    """``LlamaForCausalLM`` saved by ``save_pretrained`` into ``folder`` (seed 0: weights
    0.05 * N(0, 1), norms 1 + 0.1 * N(0, 1)); with ``tokenizer``, a word-level tokenizer
    (``t0`` .. ``t255``) beside it, for tools that load one. Returns the manifest case."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.05 * torch.randn_like(p))
    model.save_pretrained(folder)
    if tokenizer:
        _word_tokenizer(folder)
    return {"path": folder.name, "family": "hf-single", "kind": "model"}


def _word_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t1"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=words, bos_token="t0", eos_token="t0", pad_token="t0", unk_token="t1"
    ).save_pretrained(folder)
