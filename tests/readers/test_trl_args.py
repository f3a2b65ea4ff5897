"""TRL's trainer configs (SFTConfig, DPOConfig: dataclass subclasses of TrainingArguments) in
a checkpoint's training_args.bin are known inert: no code-execution finding, and the refusal
of a plain torch.load is the same info the Trainer's own arguments get."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from ckpt_explorer import validate_checkpoint
from ckpt_explorer.security import CODE, REFUSED
from ckpt_explorer.security.scan import scan_paths

DATA = Path(__file__).parent.parent / "data" / "trl-1.16.0"


@pytest.mark.parametrize("name", ["sft_training_args.bin", "dpo_training_args.bin"])
def test_trl_config_is_inert(name: str, tmp_path: Path) -> None:
    report = scan_paths([DATA / name])
    assert report.exit_code == 0, [f.message for v in report.verdicts for f in v.findings]
    # beside the weights it trained, as Trainer.save_model writes them
    ckpt = tmp_path / "final_model"
    ckpt.mkdir()
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2, 2)}, ckpt / "model.safetensors")
    shutil.copy(DATA / name, ckpt / "training_args.bin")
    findings = validate_checkpoint(ckpt, numeric=False).findings
    assert not [f for f in findings if f.rule == CODE]
    refused = [f for f in findings if f.rule == REFUSED]
    assert refused and {f.severity for f in refused} == {"info"}
    assert "trl.trainer" in refused[0].message
