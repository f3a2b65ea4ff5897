"""Model-vs-config, tied-weight and numeric rules on edited transformers outputs."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from validate_util import copy_case, fired

from ckpt_explorer.validate import validate_checkpoint


@pytest.fixture
def llama(real_checkpoints, tmp_path):
    """transformers 5 save_pretrained of a tiny Llama (tie_word_embeddings false)."""
    return copy_case(real_checkpoints, "hf", "llama_single", tmp_path)


def _edit(folder, fn):
    path = folder / "model.safetensors"
    tensors = {k: v.clone() for k, v in load_file(path).items()}
    fn(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def _config(folder, **changes):
    path = folder / "config.json"
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))
    return doc


def test_clean_llama_has_no_findings_above_info(llama):
    report = validate_checkpoint(llama)
    assert not report.by_severity("error") and not report.by_severity("warning")


def test_vocab_padding_left_in(llama):
    def pad(t):
        emb = t["model.embed_tokens.weight"]
        t["model.embed_tokens.weight"] = torch.cat([emb, torch.zeros(28, emb.shape[1])])

    _edit(llama, pad)
    report = validate_checkpoint(llama, numeric=False)
    (f,) = fired(report, "config.vocab_padding", tensor="model.embed_tokens.weight")
    assert "128 rows" in f.message and "vocab_size 100" in f.message


def test_dropped_layer(llama):
    _edit(llama, lambda t: [t.pop(k) for k in list(t) if k.startswith("model.layers.1.")])
    report = validate_checkpoint(llama, numeric=False)
    (f,) = fired(report, "config.missing_layers", tensor="model.layers.1")
    assert "missing 1" in f.message


def test_wrong_dtype_in_config(llama):
    _config(llama, dtype="bfloat16")
    report = validate_checkpoint(llama, numeric=False)
    (f,) = fired(report, "config.dtype", file="config.json")
    assert "bfloat16" in f.message and "float32" in f.message


def test_untied_lm_head_while_config_ties(llama):
    _config(llama, tie_word_embeddings=True)
    report = validate_checkpoint(llama, numeric=False)
    assert fired(report, "tied.lm_head_differs", tensor="lm_head.weight")
    assert not report.ok


def test_lm_head_missing_while_config_unties(llama):
    _edit(llama, lambda t: t.pop("lm_head.weight"))
    report = validate_checkpoint(llama, numeric=False)
    assert fired(report, "tied.lm_head_missing", tensor="lm_head.weight")


def test_tied_and_omitted_or_shared_is_clean(real_checkpoints):
    for case in ("gpt2_sharded", "gpt2_bin_sharded"):  # transformers 5 omits, 4 shares storage
        root, manifest = real_checkpoints("hf")
        report = validate_checkpoint(root / manifest["cases"][case]["path"], numeric=False)
        assert not [f for f in report.findings if f.rule.startswith("tied.")], case


def test_retied_lm_head_equal_to_embedding_is_clean(llama):
    _edit(llama, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
    _config(llama, tie_word_embeddings=True)
    report = validate_checkpoint(llama, numeric=False)
    assert not [f for f in report.findings if f.rule.startswith("tied.")]


def test_nan_and_inf_in_one_tensor(llama):
    name = "model.layers.0.self_attn.q_proj.weight"

    def poison(t):
        t[name][0, 0] = float("nan")
        t[name][1, 1] = float("inf")

    _edit(llama, poison)
    report = validate_checkpoint(llama)
    (f,) = fired(report, "numeric.nonfinite", tensor=name)
    assert "1 NaN and 1 Inf" in f.message
    assert fired(validate_checkpoint(llama, numeric=False), "numeric.nonfinite") == []


def test_all_zero_weight_matrix(llama):
    name = "model.layers.1.mlp.down_proj.weight"
    _edit(llama, lambda t: t[name].zero_())
    report = validate_checkpoint(llama)
    assert fired(report, "numeric.all_zero", tensor=name, severity="warning")


def test_extreme_magnitude_and_float64(llama):
    name = "model.norm.weight"
    _edit(llama, lambda t: t.update({name: t[name].double() * 1e6}))
    report = validate_checkpoint(llama)
    (f,) = fired(report, "numeric.extreme", tensor=name)
    assert "1e+06" in f.message
    assert report.stats[name]["max"] == pytest.approx(1e6)


def test_numeric_scan_is_chunked():
    from ckpt_explorer.validate.numeric import tensor_stats

    t = torch.randn(1000, dtype=torch.float64)
    t[777] = float("nan")
    s = tensor_stats(t, chunk_elements=64)
    assert s.nan == 1 and s.inf == 0
    finite = t[~torch.isnan(t)]
    assert s.min == float(finite.min()) and s.max == float(finite.max())
    assert tensor_stats(torch.zeros(10, 10, dtype=torch.bfloat16), 7).all_zero


def test_hf_load_clean_and_missing_key(llama):
    pytest.importorskip("transformers")
    clean = validate_checkpoint(llama, numeric=False, hf_load=True)
    assert "hf_load" in clean.checked and clean.ok, clean.findings
    name = "model.layers.0.mlp.up_proj.weight"
    _edit(llama, lambda t: t.pop(name))
    report = validate_checkpoint(llama, numeric=False, hf_load=True)
    assert fired(report, "hf_load.missing_keys", tensor=name)
