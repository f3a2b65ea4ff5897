"""All-zero tensors that are zero by design are no warning (BART's final_logits_bias, a
1 x vocab buffer); a zeroed weight matrix still is."""

from __future__ import annotations

from pathlib import Path

import torch

from ckpt_explorer import validate_checkpoint


def _bart(tmp_path: Path, zero_a_matrix: bool) -> Path:
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    cfg = BartConfig(
        vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
    )  # fmt: skip
    model = BartForConditionalGeneration(cfg)
    if zero_a_matrix:
        with torch.no_grad():
            model.model.encoder.layers[0].fc1.weight.zero_()
    out = tmp_path / ("zeroed" if zero_a_matrix else "bart")
    model.save_pretrained(out)
    return out


def test_bart_final_logits_bias_is_not_warned(tmp_path: Path) -> None:
    report = validate_checkpoint(_bart(tmp_path, zero_a_matrix=False))
    assert not [f for f in report.findings if f.rule == "numeric.all_zero"], report.findings


def test_a_zeroed_weight_matrix_still_is(tmp_path: Path) -> None:
    report = validate_checkpoint(_bart(tmp_path, zero_a_matrix=True))
    zero = [f.tensor for f in report.findings if f.rule == "numeric.all_zero"]
    assert zero == ["model.encoder.layers.0.fc1.weight"], zero
