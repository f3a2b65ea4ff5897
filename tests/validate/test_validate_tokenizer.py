"""``tokenizer.ids_past_embedding`` on tokenizers and models saved by transformers itself:
GPT-2 (byte-level BPE), Llama-style (sentencepiece BPE) and T5 (sentencepiece Unigram with 100
extra ids, smaller than its embedding) say nothing; tokens added with ``add_tokens`` and no
``resize_token_embeddings`` before the save are reported, and the real model raises IndexError
on them."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer.validate import validate_checkpoint
from ckpt_explorer.validate.tokenizer import RULE, token_ids

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

CORPUS = [f"the quick brown fox {i} jumps over the lazy dog {i * 7}" for i in range(300)]
SMALL = dict(num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


def _spm(tmp: Path, cls: Any, file: str, kind: str, size: int, **kw: Any) -> Any:
    """``cls.from_pretrained`` of a folder holding a sentencepiece model trained here."""
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(CORPUS))
    src = tmp / f"{kind}_src"
    src.mkdir()
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(src / "sp"), vocab_size=size, model_type=kind,
        minloglevel=2, **kw.pop("ids"),
    )  # fmt: skip
    shutil.move(src / "sp.model", src / file)
    return cls.from_pretrained(src, **kw)


def gpt2(tmp: Path) -> tuple[Any, Any]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=alphabet
    )
    bpe.train_from_iterator(CORPUS, trainer)
    end = "<|endoftext|>"
    tok = GPT2TokenizerFast(tokenizer_object=bpe, bos_token=end, eos_token=end, unk_token=end)
    config = GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64)
    return tok, GPT2LMHeadModel(config)


def llama(tmp: Path) -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    ids = dict(bos_id=1, eos_id=2, unk_id=0, pad_id=-1)
    tok = _spm(tmp, LlamaTokenizer, "tokenizer.model", "bpe", 100, ids=ids)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, num_key_value_heads=1, **SMALL)
    return tok, LlamaForCausalLM(config)


def t5(tmp: Path) -> tuple[Any, Any]:
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    ids = dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    tok = _spm(tmp, T5Tokenizer, "spiece.model", "unigram", 120, ids=ids, extra_ids=100)
    config = T5Config(vocab_size=256, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    return tok, T5ForConditionalGeneration(config)  # 256 rows over 220 ids, as T5's 32128


def _save(tmp: Path, name: str, tok: Any, model: Any) -> Path:
    out = tmp / name
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _found(folder: Path) -> list[Any]:
    report = validate_checkpoint(folder, numeric=False)
    assert "tokenizer" in report.checked
    return [f for f in report.findings if f.rule.startswith("tokenizer.")]


def _max_id(folder: Path) -> int:
    """The largest id transformers' own tokenizer, loaded back, gives."""
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = AutoTokenizer.from_pretrained(folder)
    return max(tok.get_vocab().values())


@pytest.mark.parametrize("make", [gpt2, llama, t5], ids=["gpt2", "llama", "t5"])
def test_real_tokenizers_say_nothing(tmp_path: Path, make: Any) -> None:
    tok, model = make(tmp_path)
    folder = _save(tmp_path, "model", tok, model)
    ours = max(i for _, _, i in token_ids(folder))
    assert ours == _max_id(folder) == len(tok) - 1
    assert ours < model.get_input_embeddings().weight.shape[0]
    assert _found(folder) == []


@pytest.mark.parametrize("make", [gpt2, llama, t5], ids=["gpt2", "llama", "t5"])
def test_added_tokens_without_resize(tmp_path: Path, make: Any) -> None:
    """add_tokens, then save without resize_token_embeddings: the finding names the new ids;
    the real model raises IndexError on them. With the resize, nothing is said."""
    tok, model = make(tmp_path)
    rows = model.get_input_embeddings().weight.shape[0]
    new = [f"<tool_{i}>" for i in range(rows - len(tok) + 2)]  # two past the last row
    tok.add_tokens(new)
    folder = _save(tmp_path, "forgot", tok, model)
    found = _found(folder)
    assert [(f.rule, f.severity) for f in found] == [(RULE, "error")]
    assert f"past {found[0].tensor}'s {rows} rows" in found[0].message
    assert f"'{new[-1]}' ({rows + 1})" in found[0].message
    assert _max_id(folder) == rows + 1
    from transformers import AutoModel, AutoTokenizer

    loaded = AutoModel.from_pretrained(folder)
    ids = AutoTokenizer.from_pretrained(folder).convert_tokens_to_ids([new[-1]])
    with pytest.raises(IndexError, match="index out of range"):
        loaded.get_input_embeddings()(torch.tensor([ids]))
    model.resize_token_embeddings(len(tok))
    assert _found(_save(tmp_path, "resized", tok, model)) == []


def test_no_tokenizer_no_area(tmp_path: Path) -> None:
    _, model = gpt2(tmp_path)
    model.save_pretrained(tmp_path / "bare")
    report = validate_checkpoint(tmp_path / "bare", numeric=False)
    assert "tokenizer" not in report.checked
