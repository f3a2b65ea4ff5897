"""LitGPT checkpoint folders: ``lit_model.pth`` beside ``model_config.yaml`` (readers/litgpt.py).

The real step folders (pretrain's full state) are scored in test_realworld_writer_profiles.py;
here a converted/downloaded model folder (``lit_model.pth`` holding the weights alone, written
with ``torch.save`` of a module's ``state_dict`` as LitGPT's converters write it) and the
folders that are not LitGPT's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from ckpt_explorer import open_checkpoint
from ckpt_explorer.errors import FormatDetectionError

CONFIG = {"name": "tiny", "n_layer": 1, "n_embd": 8, "block_size": 16, "padded_vocab_size": 32}


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 8), torch.nn.Linear(8, 32))
    sd = model.state_dict()
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(sd, folder / "lit_model.pth")
    return sd


def test_model_folder_opens_as_litgpt_model(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints" / "tiny"
    sd = _weights(folder)
    (folder / "model_config.yaml").write_text(yaml.safe_dump(CONFIG))
    (folder / "tokenizer.json").write_text("{}")
    view = open_checkpoint(folder)
    assert (view.family, view.kind) == ("litgpt", "model")
    names = sorted(r.name for r in view.tensors)
    assert names == sorted(f"lit_model.pth/{k}" for k in sd)
    assert view.values["model_config.yaml/n_layer"] == 1
    assert any("model_config.yaml" in e for e in view.detection.evidence)


def test_without_litgpt_config_it_is_no_litgpt_folder(tmp_path: Path) -> None:
    """``lit_model.pth`` alone, or beside a YAML that is not a litgpt Config: not this family
    (the file itself still opens as a torch file)."""
    folder = tmp_path / "plain"
    _weights(folder)
    with pytest.raises(FormatDetectionError):
        open_checkpoint(folder)
    (folder / "model_config.yaml").write_text(yaml.safe_dump({"hidden": 8, "layers": 1}))
    with pytest.raises(FormatDetectionError):
        open_checkpoint(folder)
    assert open_checkpoint(folder / "lit_model.pth").family == "torch-zip"
