"""Parts of real training states by content: HF Trainer, accelerate, a one-file torch.save,
PEFT through Trainer, DCP from get_state_dict; and the false bundle/numeric warnings they used
to get. Every state is written by the real tool, the way training code does it."""

from __future__ import annotations

import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from validate_util import fired

from ckpt_explorer import open_checkpoint
from ckpt_explorer.readers.training_state_file import RUN_PART
from ckpt_explorer.validate import validate_checkpoint
from ckpt_explorer.validate.parts import collect

FALSE_WARNINGS = ("bundle.missing_run_state", "bundle.missing_optimizer", "numeric.all_zero")


def _tiny_gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    return GPT2LMHeadModel(config)


class _Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def _train(model: Any, out: Path, steps: int = 2, lr: float = 1e-3) -> Path:
    """transformers.Trainer for ``steps`` steps, saving at the last: the checkpoint folder."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        str(out),
        per_device_train_batch_size=4,
        max_steps=steps,
        save_steps=steps,
        learning_rate=lr,
        warmup_steps=1,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=_Tokens()).train()
    return out / f"checkpoint-{steps}"


def _problems(report: Any) -> list[Any]:
    """Errors and warnings, security findings aside (judged by their own rules)."""
    return [
        f
        for f in report.findings
        if f.severity in ("error", "warning") and not f.rule.startswith("security.")
    ]


def _copy(src: Path, dest: Path) -> Path:
    out = dest / src.name
    shutil.copytree(src, out)
    return out


@pytest.fixture(scope="session")
def trainer_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(_tiny_gpt2(), tmp_path_factory.mktemp("trainer"))


@pytest.fixture(scope="session")
def peft_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        _tiny_gpt2(), LoraConfig(r=4, target_modules=["c_attn"], task_type="CAUSAL_LM")
    )
    # lr 0 during warm-up's first step keeps lora_B at its PEFT init (zeros) in the save
    return _train(model, tmp_path_factory.mktemp("peft"), steps=1)


@pytest.fixture(scope="session")
def accelerate_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from accelerate import Accelerator

    model = _tiny_gpt2()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2))
    accelerator = Accelerator(cpu=True)
    model, opt, sched = accelerator.prepare(model, opt, sched)
    for _ in range(2):
        ids = torch.randint(0, 64, (4, 8))
        accelerator.backward(model(input_ids=ids, labels=ids).loss)
        opt.step()
        sched.step()
        opt.zero_grad()
    out = tmp_path_factory.mktemp("accelerate") / "state"
    accelerator.save_state(str(out))
    return out


def _one_file_state(scheduler: bool = True) -> dict[str, Any]:
    """A nanoGPT-style loop: decay / no-decay groups by ndim, AdamW, cosine schedule."""
    model = _tiny_gpt2()
    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=1e-3,
    )
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10)
    for _ in range(3):
        ids = torch.randint(0, 64, (4, 8))
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "model_args": {"n_layer": 2, "n_embd": 32},
        "iter_num": 3,
        "best_val_loss": 3.5,
        "config": {"learning_rate": 1e-3},
    }
    if scheduler:
        state["scheduler"] = sched.state_dict()
    return state


@pytest.fixture(scope="session")
def one_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    state = _one_file_state()
    path = tmp_path_factory.mktemp("onefile") / "ckpt.pt"
    torch.save(state, path)
    return path, state


def _dcp_state(folder: Path, extras: dict[str, Any]) -> Path:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0},
        ]
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2))
    for _ in range(3):
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(
            {"model": msd, "optim": osd, "lr_scheduler": sched.state_dict(), **extras},
            checkpoint_id=str(folder),
        )
    return folder


def _roles(view: Any) -> dict[str, str]:
    return {name: part.kind for name, part in view.parts.items()}


# --- HF Trainer ------------------------------------------------------------------------------


def test_trainer_checkpoint_parts_by_content(trainer_ckpt: Path) -> None:
    view = open_checkpoint(trainer_ckpt)
    assert view.kind == "training_state"
    assert _roles(view) == {
        "model": "model",
        "optimizer.pt": "optimizer",
        "rng_state.pth": "rng",
        "scheduler.pt": "scheduler",
        "trainer_state.json": "running_state",
        "training_args.bin": "args",
    }
    rng = view.parts["rng_state.pth"]
    assert any("python RNG state" in e for e in rng.detection.evidence)
    assert any("numpy RNG state" in e for e in rng.detection.evidence)
    assert rng.tensors and not rng.optimizer
    assert "learning_rate" in view.parts["training_args.bin"].detection.evidence[-1]
    parts = collect(view)
    assert [m.label for m in parts.models] == ["model/"]
    assert any(rs.has_rng for rs in parts.run_states)


def test_trainer_checkpoint_validates_clean(trainer_ckpt: Path) -> None:
    report = validate_checkpoint(trainer_ckpt)
    assert not _problems(report), report.findings
    assert not fired(report, "bundle.missing_rng")


def test_trainer_checkpoint_real_faults_still_found(trainer_ckpt: Path, tmp_path: Path) -> None:
    folder = _copy(trainer_ckpt, tmp_path)
    (folder / "rng_state.pth").unlink()
    (f,) = fired(validate_checkpoint(folder, numeric=False), "bundle.missing_rng")
    assert f.severity == "warning" and "rng_state.pth" in f.message
    (folder / "scheduler.pt").unlink()
    report = validate_checkpoint(folder, numeric=False)
    assert fired(report, "bundle.missing_scheduler", severity="warning")
    (folder / "trainer_state.json").unlink()
    report = validate_checkpoint(folder, numeric=False)
    assert fired(report, "bundle.missing_run_state", severity="warning")


def test_unknown_files_are_other_never_model(trainer_ckpt: Path, tmp_path: Path) -> None:
    folder = _copy(trainer_ckpt, tmp_path)
    (folder / "notes.txt").write_text("lr sweep 3\n")
    torch.save({"scale": 1024.0, "growth_factor": 2.0}, folder / "scaler.pt")
    view = open_checkpoint(folder)
    assert "notes.txt" not in view.parts and "scaler.pt" not in view.parts
    assert "notes.txt → other" in view.detection.evidence
    assert "scaler.pt → other" in view.detection.evidence
    assert [n for n, p in view.parts.items() if p.kind == "model"] == ["model"]


def test_final_model_beside_training_args_is_a_model(trainer_ckpt: Path, tmp_path: Path) -> None:
    # what trainer.save_model(output_dir) leaves: weights, config.json, training_args.bin
    folder = _copy(trainer_ckpt, tmp_path)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        (folder / name).unlink()
    view = open_checkpoint(folder)
    assert (view.family, view.kind) == ("hf-single", "model")


# --- accelerate --------------------------------------------------------------------------------


def test_accelerate_save_state_parts(accelerate_state: Path) -> None:
    view = open_checkpoint(accelerate_state)
    assert _roles(view) == {
        "model": "model",
        "optimizer.bin": "optimizer",
        "random_states_0.pkl": "rng",
        "scheduler.bin": "scheduler",
    }
    report = validate_checkpoint(view)
    assert not _problems(report), report.findings
    # random_states_N.pkl's "step" is accelerate's accumulation counter (0 here), no position
    assert not fired(report, "bundle.optimizer_step")


def test_accelerate_without_random_states(accelerate_state: Path, tmp_path: Path) -> None:
    folder = _copy(accelerate_state, tmp_path)
    (folder / "random_states_0.pkl").unlink()
    assert fired(validate_checkpoint(folder, numeric=False), "bundle.missing_run_state")


# --- one-file torch.save -----------------------------------------------------------------------


def test_one_file_training_state_parts(one_file: tuple[Path, dict[str, Any]]) -> None:
    path, state = one_file
    view = open_checkpoint(path)
    assert (view.family, view.kind) == ("torch-zip", "training_state")
    assert _roles(view) == {
        "model": "model",
        "optimizer": "optimizer",
        "scheduler": "scheduler",
        RUN_PART: "running_state",
    }
    names = view.names()  # top-level names as before
    assert names[: len(state["model"])] == [f"model.{k}" for k in state["model"]]
    assert "optimizer.state.0.exp_avg" in names
    model = view.parts["model"]
    assert model.names() == list(state["model"])
    key = "transformer.h.0.attn.c_attn.weight"
    assert torch.equal(model.load(key), state["model"][key])
    opt = view.parts["optimizer"].optimizer
    assert opt is not None and len(opt.param_groups) == 2
    assert [len(g["params"]) for g in opt.param_groups] == [
        len(g["params"]) for g in state["optimizer"]["param_groups"]
    ]
    assert view.parts["scheduler"].values["last_epoch"] == 3
    assert view.parts[RUN_PART].values["iter_num"] == 3


def test_one_file_training_state_validates(one_file: tuple[Path, dict[str, Any]]) -> None:
    path, _ = one_file
    report = validate_checkpoint(path)
    assert not _problems(report), report.findings
    assert "bundle" in report.checked
    assert fired(report, "bundle.missing_rng", severity="info")  # nanoGPT saves no RNG


def test_one_file_without_scheduler(tmp_path: Path) -> None:
    torch.save(_one_file_state(scheduler=False), tmp_path / "ckpt.pt")
    report = validate_checkpoint(tmp_path / "ckpt.pt", numeric=False)
    # the optimizer groups carry initial_lr: a scheduler ran but was not saved; a nanoGPT-style
    # loop saves one only where its author wrote it (its own LR is computed from iter_num), so
    # whether this loop rebuilds it cannot be told from the file: said, not warned
    (f,) = fired(report, "bundle.missing_scheduler", severity="info")
    assert "initial_lr" in f.message and "cannot tell" in f.message


def test_one_file_step_disagreeing_with_optimizer(tmp_path: Path) -> None:
    state = _one_file_state()
    state["iter_num"] = 40
    torch.save(state, tmp_path / "ckpt.pt")
    report = validate_checkpoint(tmp_path / "ckpt.pt", numeric=False)
    (f,) = fired(report, "bundle.optimizer_step")
    assert "step is 3" in f.message and "40" in f.message


# --- PEFT ----------------------------------------------------------------------------------------


def test_peft_trainer_folder_is_a_training_state(peft_ckpt: Path) -> None:
    view = open_checkpoint(peft_ckpt)
    assert view.kind == "training_state"
    roles = _roles(view)
    assert roles.pop("adapter") == "adapter"
    assert roles == {
        "optimizer.pt": "optimizer",
        "rng_state.pth": "rng",
        "scheduler.pt": "scheduler",
        "trainer_state.json": "running_state",
        "training_args.bin": "args",
    }
    assert "README.md → other" in view.detection.evidence
    parts = collect(view)
    assert [m.label for m in parts.models] == ["adapter/"]
    report = validate_checkpoint(view)
    assert not _problems(report), report.findings
    zero_b = [n for n, s in (report.stats or {}).items() if "lora_B" in n and s["all_zero"] is True]
    assert zero_b  # lora_B is still zero, and that is no warning


def test_fresh_lora_adapter_and_a_zero_weight(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        _tiny_gpt2(), LoraConfig(r=4, target_modules=["c_attn"], task_type="CAUSAL_LM")
    )
    model.save_pretrained(tmp_path / "adapter")
    view = open_checkpoint(tmp_path / "adapter")
    assert view.kind == "adapter"
    assert not fired(validate_checkpoint(view), "numeric.all_zero")
    layer = nn.Linear(4, 4)
    nn.init.zeros_(layer.weight)
    torch.save(layer.state_dict(), tmp_path / "zero.pt")
    assert fired(validate_checkpoint(tmp_path / "zero.pt"), "numeric.all_zero", tensor="weight")


# --- DCP (get_state_dict, FQN-keyed optimizer) --------------------------------------------------


def test_dcp_fqn_optimizer_rng_and_step(tmp_path: Path) -> None:
    folder = _dcp_state(tmp_path / "dcp", {"step": 3, "rng": torch.get_rng_state()})
    view = open_checkpoint(folder)
    report = validate_checkpoint(view)
    assert not _problems(report), report.findings
    for rule in ("bundle.missing_optimizer", "bundle.missing_run_state", "bundle.missing_rng"):
        assert not fired(report, rule)
    (opt,) = collect(view).optimizers
    assert sorted(opt.param_names.values()) == sorted(
        ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
    )
    assert [len(g["params"]) for g in opt.groups] == [2, 4]
    assert all(isinstance(p, int) for g in opt.groups for p in g["params"])
    assert set(opt.states) == set(opt.param_names)


def test_dcp_torchtitan_style_train_state(tmp_path: Path) -> None:
    rng = {"python": random.getstate(), "numpy": np.random.get_state()}
    extras = {"train_state": {"step": torch.tensor(3)}, "rng": rng}
    report = validate_checkpoint(_dcp_state(tmp_path / "dcp", extras), numeric=False)
    assert not _problems(report), report.findings
    assert not fired(report, "bundle.missing_rng")


def test_dcp_without_run_state(tmp_path: Path) -> None:
    report = validate_checkpoint(_dcp_state(tmp_path / "dcp", {}), numeric=False)
    assert fired(report, "bundle.missing_run_state")
    assert not fired(report, "bundle.missing_optimizer")


def test_meta_file_with_nested_rng_dict(tmp_path: Path) -> None:
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state()}
    torch.save({"epoch": 1, "step": 5, "rng": rng}, tmp_path / "meta.pt")
    view = open_checkpoint(tmp_path / "meta.pt")
    assert view.kind == "rng"  # not a "model" because a tensor sits in it
    assert view.detection.detail == "RNG states and run position"
