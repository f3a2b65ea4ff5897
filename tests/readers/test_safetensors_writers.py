"""A safetensors file is credited to a writer only on positive evidence.

ColossalAI's async writer is recognised by its own header text (Python's json.dumps with
``{"format": "pt"}`` first) together with its layout; a file from another writer — here the
model that the silero-vad wheel ships, tensors in insertion order and no metadata — is plain
safetensors with its unusual layout stated, never "ColossalAI".
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ckpt_explorer import detect_format, open_checkpoint


def _silero_file() -> Path:
    spec = importlib.util.find_spec("silero_vad")  # locates the package without importing it
    assert spec is not None and spec.submodule_search_locations, "silero-vad is a test tool"
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad_16k.safetensors"


def test_a_foreign_writer_is_not_called_colossalai():
    path = _silero_file()
    detection = detect_format(path)
    assert detection.family == "safetensors"
    assert "ColossalAI" not in detection.explain()
    assert "write order" in detection.explain()
    assert "other than the safetensors library" in detection.detail
    view = open_checkpoint(path)
    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(view.names())
        for name in list(f.keys())[:5]:
            assert torch.equal(view.load(name), f.get_tensor(name))


def test_the_reference_writer_is_plain_safetensors(tmp_path: Path):
    save_file({"b": torch.ones(3), "a": torch.zeros(2, 2, dtype=torch.float16)}, tmp_path / "x")
    detection = detect_format(tmp_path / "x")
    assert (detection.family, detection.detail) == ("safetensors", "")
