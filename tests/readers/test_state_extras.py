"""What a training state carries beside its tensors, weighed as the writer meant it.

- HF ``Trainer(save_only_model=True)`` writes weights-only checkpoints by design: the missing
  optimizer and scheduler are info (the run asked for it), not a warning.
- Training loops that save ``{"model", "optimizer", "epoch", "scaler", "args": Namespace}`` in
  one file (MAE's ``misc.save_model``, timm, fairseq) are refused by a plain
  ``torch.load(weights_only=True)`` because of the argparse ``Namespace``; the loop reads it
  back itself, so that is info; a model file holding the same object stays an error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ckpt_explorer import open_checkpoint, validate_checkpoint
from ckpt_explorer.security import REFUSED


def _loud(findings: list) -> list[tuple[str, str, str]]:
    return [(f.severity, f.rule, f.message) for f in findings if f.severity != "info"]


def test_trainer_save_only_model_is_not_warned(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32))
    g = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": x, "labels": x.clone()} for x in torch.randint(0, 32, (16, 8), generator=g)
    ]
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        save_steps=2,
        save_only_model=True,
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=data).train()
    ckpt = tmp_path / "run" / "checkpoint-2"
    assert not (ckpt / "optimizer.pt").exists()  # what save_only_model means
    report = validate_checkpoint(ckpt)
    assert not _loud(report.findings), _loud(report.findings)
    missing = [f for f in report.findings if f.rule == "bundle.missing_optimizer"]
    assert len(missing) == 1 and "save_only_model=True" in missing[0].message


def _train_and_save(path: Path, with_state: bool) -> None:
    """A few steps of a plain loop, saved the way MAE's misc.save_model saves them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args([])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(3):
        loss = model(torch.randn(4, 6)).square().mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    if with_state:
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": 1,
                "scaler": scaler.state_dict(),
                "args": args,
            },
            path,
        )
    else:
        torch.save({"model": model.state_dict(), "args": args}, path)


def test_args_namespace_in_a_one_file_training_state_is_info(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint-1.pth"
    _train_and_save(path, with_state=True)
    assert open_checkpoint(path).kind == "training_state"
    report = validate_checkpoint(path)
    assert not _loud(report.findings), _loud(report.findings)
    refused = [f for f in report.findings if f.rule == REFUSED]
    assert len(refused) == 1 and "argparse.Namespace" in refused[0].message
    assert refused[0].severity == "info" and "--model-only" in refused[0].hint


def test_args_namespace_in_a_model_file_stays_an_error(tmp_path: Path) -> None:
    """Control: a file of weights (no optimizer, no run state) that plain torch.load refuses."""
    path = tmp_path / "model.pth"
    _train_and_save(path, with_state=False)
    assert open_checkpoint(path).kind != "training_state"
    refused = [f for f in validate_checkpoint(path).findings if f.rule == REFUSED]
    assert [f.severity for f in refused] == ["error"]


def _accumulating_loop(path: Path, record_k: bool) -> None:
    """A plain AMP loop with gradient accumulation over 4 micro-steps whose saved ``step``
    counts micro-steps (as many loops do), with or without the k it used."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, 0.1, 1.0, 10)
    scaler = torch.amp.GradScaler("cpu")
    k, micro = 4, 0
    for _ in range(12):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean() / k
        scaler.scale(loss).backward()
        micro += 1
        if micro % k == 0:
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            sched.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    state.update(lr_scheduler=sched.state_dict(), scaler=scaler.state_dict(), step=micro)
    if record_k:
        state["grad_accum_steps"] = k
    torch.save(state, path)


def test_recorded_gradient_accumulation_explains_the_steps(tmp_path: Path) -> None:
    """Run position 12 micro-steps, optimizer step 3, grad_accum_steps = 4 saved: info; the
    same file without the recorded k, from a writer no profile knows: info "cannot tell" (the
    files cannot say whether ``step`` counts micro-steps), never a warning."""
    with_k, without_k = tmp_path / "with.pt", tmp_path / "without.pt"
    _accumulating_loop(with_k, record_k=True)
    _accumulating_loop(without_k, record_k=False)
    found = [f for f in validate_checkpoint(with_k).findings if f.rule == "bundle.optimizer_step"]
    assert [f.severity for f in found] == ["info"] and "grad_accum_steps = 4" in found[0].message
    assert not _loud(validate_checkpoint(with_k).findings)
    found = [
        f for f in validate_checkpoint(without_k).findings if f.rule == "bundle.optimizer_step"
    ]
    assert [f.severity for f in found] == ["info"] and "cannot tell" in found[0].message
