"""Integrity rules, each caught on a real-tool output with the fault planted by editing it."""

from __future__ import annotations

import json
import shutil

import pytest
from validate_util import copy_case, fired

from ckpt_explorer.validate import validate_checkpoint


@pytest.fixture
def gpt2(real_checkpoints, tmp_path):
    return copy_case(real_checkpoints, "hf", "gpt2_sharded", tmp_path)


def test_deleted_shard_is_a_missing_file(gpt2):
    (gpt2 / "model-00002-of-00004.safetensors").unlink()
    report = validate_checkpoint(gpt2)
    assert not report.ok
    assert fired(report, "integrity.missing_file", file="model-00002-of-00004.safetensors")


def test_orphan_shard_beside_the_index(gpt2):
    shutil.copy(
        gpt2 / "model-00004-of-00004.safetensors", gpt2 / "model-00005-of-00005.safetensors"
    )
    report = validate_checkpoint(gpt2)
    assert fired(report, "integrity.orphan_shard", file="model-00005-of-00005.safetensors")
    assert report.ok  # stale but harmless to loaders: a warning


def test_corrupt_total_size_hf_bytes(gpt2):
    index = gpt2 / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    assert doc["metadata"]["total_size"] == 122880
    clean = validate_checkpoint(gpt2, numeric=False)
    (conv,) = fired(clean, "integrity.total_size_convention")
    assert "bytes (HF convention)" in conv.message
    doc["metadata"]["total_size"] = 500000
    index.write_text(json.dumps(doc))
    report = validate_checkpoint(gpt2, numeric=False)
    (f,) = fired(report, "integrity.total_size", file="model.safetensors.index.json")
    assert f.severity == "error" and "500000" in f.message


def test_colossalai_total_size_is_mib(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "general_sharded_bin", tmp_path)
    report = validate_checkpoint(folder, numeric=False)
    (conv,) = fired(report, "integrity.total_size_convention")
    assert "MiB (ColossalAI convention)" in conv.message
    index = folder / "pytorch_model.bin.index.json"
    doc = json.loads(index.read_text())
    doc["metadata"]["total_size"] = doc["metadata"]["total_size"] * 3
    index.write_text(json.dumps(doc))
    assert fired(validate_checkpoint(folder, numeric=False), "integrity.total_size")


def test_truncated_shard(gpt2):
    shard = gpt2 / "model-00003-of-00004.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 100])
    report = validate_checkpoint(gpt2)
    assert fired(report, "integrity.truncated", file="model-00003-of-00004.safetensors")
    assert not report.ok


def test_truncated_single_files(real_checkpoints, tmp_path):
    for tool, case in (("torch", "safetensors"), ("torch", "model_pt")):
        path = copy_case(real_checkpoints, tool, case, tmp_path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) * 2 // 3])
        report = validate_checkpoint(path)
        assert fired(report, "integrity.truncated", file=path.name), (case, report.findings)


def test_leftover_tmp_index_files(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "pipeline_sharded_model", tmp_path)
    root, manifest = real_checkpoints("colossalai")
    interrupted = root / manifest["cases"]["pipeline_interrupted_model"]["path"]
    shutil.copytree(interrupted / "tmp_index_files", folder / "tmp_index_files")
    report = validate_checkpoint(folder, numeric=False)
    (f,) = fired(report, "integrity.tmp_index_files", file="tmp_index_files")
    assert f.severity == "warning"


def test_interrupted_pipeline_save_is_an_error(real_checkpoints):
    root, manifest = real_checkpoints("colossalai")
    report = validate_checkpoint(root / manifest["cases"]["pipeline_interrupted_model"]["path"])
    assert fired(report, "integrity.interrupted_save", severity="error")


def test_tensor_in_another_shard_than_the_index_says(gpt2):
    index = gpt2 / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    name = "transformer.h.0.ln_1.weight"
    assert doc["weight_map"][name] == "model-00001-of-00004.safetensors"
    doc["weight_map"][name] = "model-00002-of-00004.safetensors"
    index.write_text(json.dumps(doc))
    report = validate_checkpoint(gpt2, numeric=False)
    (f,) = fired(report, "integrity.wrong_shard", tensor=name)
    assert "model-00001-of-00004.safetensors" in f.message


def test_tensor_listed_twice_in_the_index(gpt2):
    index = gpt2 / "model.safetensors.index.json"
    text = index.read_text()
    assert '"transformer.wte.weight": "model-00001-of-00004.safetensors"' in text
    line = '    "transformer.wte.weight": "model-00004-of-00004.safetensors",\n'
    index.write_text(text.replace('  "weight_map": {\n', '  "weight_map": {\n' + line, 1))
    report = validate_checkpoint(gpt2, numeric=False)
    assert fired(report, "integrity.duplicate_entry", tensor="transformer.wte.weight")


def test_optimizer_shard_deleted(real_checkpoints, tmp_path):
    folder = copy_case(real_checkpoints, "colossalai", "general_optimizer_sharded", tmp_path)
    (folder / "pytorch_optim-00002.bin").unlink()
    report = validate_checkpoint(folder)
    assert fired(report, "integrity.missing_file", file="pytorch_optim-00002.bin")
    assert not report.ok
