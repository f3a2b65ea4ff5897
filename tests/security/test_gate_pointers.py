"""Pointer files that loaders follow, resolved as the loaders resolve them.

A DeepSpeed save (tests/fixture_makers/deepspeed_maker.py) whose ``latest`` is rewritten to
``../elsewhere`` is followed by DeepSpeed's own reader in a child process, which unpickles the
payload found there; the gate must call ``latest`` unverified and name the target. The same
save as written, a transformers sharded save and an mmengine-style work dir pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from ckpt_explorer.security import scan_paths


class _Mark:
    """Pickled only here: unpickling it makes the marker folder."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (self.marker,))


def _verdicts(folder: Path) -> dict[str, Any]:
    return {Path(v.path).relative_to(folder).as_posix(): v for v in scan_paths([folder]).verdicts}


def _deepspeed_copy(tmp_path: Path, real_checkpoints: Any) -> Path:
    root, _ = real_checkpoints("deepspeed")
    run = tmp_path / "run"
    shutil.copytree(root / "ds_zero1", run / "ckpt")
    return run / "ckpt"


def test_a_deepspeed_save_as_written_passes(tmp_path: Path, real_checkpoints: Any) -> None:
    ckpt = _deepspeed_copy(tmp_path, real_checkpoints)
    assert (ckpt / "latest").read_text().strip() == "global_step2"
    report = scan_paths([ckpt])
    assert report.exit_code == 0, [(v.path, v.reasons) for v in report.verdicts]


def test_a_deepspeed_latest_leading_out_is_unverified(
    tmp_path: Path, real_checkpoints: Any
) -> None:
    ckpt = _deepspeed_copy(tmp_path, real_checkpoints)
    elsewhere = ckpt.parent / "elsewhere"
    elsewhere.mkdir()
    marker = tmp_path / "MARK"
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"):
        torch.save({"module": _Mark(marker)}, elsewhere / name)
    (ckpt / "latest").write_text("../elsewhere")
    done = subprocess.run(
        [sys.executable, "-c",
         "from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint "
         "as load; load('ckpt')"],
        cwd=ckpt.parent, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
    )  # fmt: skip
    assert marker.exists(), done.stderr[-3000:]  # DeepSpeed's reader followed the tag
    found = _verdicts(ckpt)
    latest = found["latest"]
    assert latest.verdict == "unverified"
    said = latest.reasons[0]
    assert "DeepSpeed" in said and "'../elsewhere'" in said and str(elsewhere) in said
    assert scan_paths([ckpt]).exit_code == 1
    (ckpt / "latest").write_text(f"{elsewhere}\n")  # an absolute tag: os.path.join keeps it
    assert _verdicts(ckpt)["latest"].verdict == "unverified"
    (ckpt / "latest").write_text("global_step9")  # missing, but inside: nothing to judge
    assert _verdicts(ckpt)["latest"].verdict == "data"
    # the whole run scanned: the target is inside the root, judged where it lies
    (ckpt / "latest").write_text("../elsewhere")
    run = _verdicts(ckpt.parent)
    assert run["ckpt/latest"].verdict == "data"
    assert run["elsewhere/mp_rank_00_model_states.pt"].verdict == "unsafe"


def _sharded(out: Path) -> None:
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, vocab_size=64)  # fmt: skip
    BertModel(config).save_pretrained(out, max_shard_size="20KB")


def test_a_sharded_index_leading_out_is_unverified(tmp_path: Path) -> None:
    out = tmp_path / "model"
    _sharded(out)
    index = out / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    assert len(set(doc["weight_map"].values())) > 1  # really sharded
    assert scan_paths([out]).exit_code == 0
    first = next(iter(doc["weight_map"]))
    doc["weight_map"][first] = "../elsewhere/model-00001.safetensors"
    index.write_text(json.dumps(doc))
    v = _verdicts(out)["model.safetensors.index.json"]
    assert v.verdict == "unverified"
    assert "load_checkpoint_in_model" in v.reasons[0]
    assert str(tmp_path / "elsewhere" / "model-00001.safetensors") in v.reasons[0]


def test_mmengine_last_checkpoint(tmp_path: Path) -> None:
    """mmengine writes the absolute path of the checkpoint in its work dir."""
    work = tmp_path / "work_dir"
    work.mkdir()
    torch.save({"state_dict": {"w": torch.ones(2)}}, work / "epoch_2.pth")
    (work / "last_checkpoint").write_text(str(work / "epoch_2.pth"))
    assert _verdicts(work)["last_checkpoint"].verdict == "data"
    other = tmp_path / "other.pth"
    torch.save({"state_dict": {}}, other)
    (work / "last_checkpoint").write_text(str(other))
    v = _verdicts(work)["last_checkpoint"]
    assert v.verdict == "unverified" and "mmengine" in v.reasons[0]
    # a work dir copied from another machine: the old absolute path, missing here
    (work / "last_checkpoint").write_text("/no/such/machine/work_dir/epoch_2.pth")
    assert _verdicts(work)["last_checkpoint"].verdict == "data"
