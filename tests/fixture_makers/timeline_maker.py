"""Run-timeline fixtures: `python tests/fixture_makers/timeline_maker.py OUT_DIR`.

Whole training runs (folders of checkpoints), written by the real tools:
- hf_clean: transformers Trainer, tiny GPT-2 (2 layers, n_embd 16, vocab 64) from a config, AdamW,
  linear schedule with 2 warm-up steps, max_steps 12, save_steps 2 -> checkpoint-2 .. checkpoint-12,
  uninterrupted.
- hf_resumed: checkpoint-2..6 of hf_clean copied (mtimes kept), then a second Trainer with the same
  arguments resumes from checkpoint-6 (resume_from_checkpoint) -> checkpoint-8..12. A correct
  resume: nothing to report.
- hf_no_scheduler: as hf_resumed, but checkpoint-6/scheduler.pt is deleted before resuming. The
  Trainer then loads neither optimizer nor scheduler (it needs both): from step 8 on the
  scheduler and the optimizer count from the resume (expected: lr_restart at step 8).
- hf_no_scheduler_at_4: the same fault, resumed from checkpoint-4: the scheduler at step 6 has
  taken 2 steps, the same count as checkpoint-2's, so only the restart at the checkpoint saved
  without a scheduler explains it (expected: lr_restart and optimizer_reset at step 6).
- hf_no_optimizer: as hf_resumed with checkpoint-6/optimizer.pt deleted (expected:
  optimizer_reset at step 8).
- hf_lr_changed: as hf_resumed, and a TrainerCallback multiplies the restored scheduler's
  base_lrs by 10 at on_train_begin (what "raise the LR on resume" code does; the Trainer itself
  restores base_lrs from scheduler.pt and would ignore a new learning_rate argument)
  (expected: lr_jump at step 8).
- hf_frozen: as hf_clean, but transformer.h.0.ln_1.weight has requires_grad=False (frozen by
  design: not in the optimizer) and the optimizer (AdamW given to the Trainer) puts
  transformer.wpe.weight in a group of its own with lr 0: it has Adam state yet never moves,
  frozen by mistake (expected: frozen at step 4, naming wpe only).
- ds_run: DeepSpeed ZeRO-2 on CPU (gloo, one rank, in a subprocess like deepspeed_maker.py),
  AdamW + DeepSpeed WarmupLR, 8 steps, engine.save_checkpoint(run) every 2 steps -> tags
  global_step2 .. global_step8 and `latest`. Clean.
- cai_run: ColossalAI Booster + TorchDDPPlugin (gloo, one rank, subprocess as in
  colossalai_maker.py), the tiny GPT-2, AdamW + ColossalAI's CosineAnnealingWarmupLR, 8 steps,
  saved every 2 steps the ColossalChat way: epoch-0_step-S/{modeling (sharded), optimizer
  (sharded), lr_scheduler, running_states.json}. Clean.
- cai_no_scheduler: the same loop to step 4, then a restarted job that loads model and optimizer
  from epoch-0_step-4 with the booster but not the LR scheduler (ColossalAI #5151), steps 5-8
  (expected: lr_restart at step 6).
- dcp_run: a plain PyTorch loop (tiny MLP, AdamW with weight-decay / no-decay groups split by
  ndim, LambdaLR warm-up), 8 steps, saved every 2 the torchtitan way: dcp.save({"model":
  get_model_state_dict, "optimizer": get_optimizer_state_dict (FQN-keyed), "scheduler":
  sched.state_dict(), "step": N}) -> step-2 .. step-8 (no process group). Clean.
- dcp_no_optimizer: the same loop to step 4, then a restarted job that dcp.loads model, scheduler
  and step from step-4 but not the optimizer (a fresh AdamW), steps 5-8 (expected:
  optimizer_reset at step 6).
- pt_run: the same loop with OneCycleLR (cycle_momentum: betas change every step), saving
  torch.save({"model", "optimizer", "scheduler", "step"}) to ckpt_{step}.pt in one folder. Clean.
- pt_no_scheduler: the same to step 4, then a restarted job that loads model, optimizer and step
  from ckpt_4.pt but not the scheduler, steps 5-8 (expected: lr_restart at step 6).
Each case's "expected" lists the (step, kind) anomalies that must be found; clean runs list none.
Runs in about 70 s.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from _manifest import cpu_rank_env, fresh_dir, main_out_dir, run_child, run_maker

DS_CHILD_FLAG = "--ds-child"
CAI_CHILD_FLAG = "--cai-child"
MAX_STEPS = 12
SAVE_STEPS = 2
RESUME_AT = 6
LOOP_STEPS = 8  # the plain PyTorch loops (dcp_*, pt_*)
RESUME_LOOP = 4


def _dataset() -> Any:
    class Tiny(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 64, (64, 16), generator=g)

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    return Tiny()


def _trainer(run: Path, callbacks: list[Any] | None = None, frozen: bool = False) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=str(run),
        max_steps=MAX_STEPS,
        save_steps=SAVE_STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        lr_scheduler_type="linear",
        warmup_steps=2,
        logging_steps=1000,
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    optimizers: Any = (None, None)
    if frozen:
        model.transformer.h[0].ln_1.weight.requires_grad_(False)
        wpe = model.transformer.wpe.weight
        rest = [p for p in model.parameters() if p.requires_grad and p is not wpe]
        groups = [{"params": rest}, {"params": [wpe], "lr": 0.0}]
        optimizers = (torch.optim.AdamW(groups, lr=1e-3, weight_decay=0.0), None)
    return Trainer(
        model=model,
        args=args,
        train_dataset=_dataset(),
        callbacks=callbacks,
        optimizers=optimizers,
    )


def _raise_lr() -> Any:
    from transformers import TrainerCallback

    class RaiseLR(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            sched = kw["lr_scheduler"]
            sched.base_lrs = [b * 10 for b in sched.base_lrs]

    return RaiseLR()


def _hf_clean(out: Path) -> dict[str, Any]:
    run = fresh_dir(out / "hf_clean")
    _trainer(run).train()
    return {"hf_clean": _case("hf_clean", [])}


def _hf_frozen(out: Path) -> dict[str, Any]:
    run = fresh_dir(out / "hf_frozen")
    _trainer(run, frozen=True).train()
    return {"hf_frozen": _case("hf_frozen", [[4, "frozen"]])}


def _resumed(
    out: Path, case_id: str, fault: str, expected: list[list[Any]], resume_at: int = RESUME_AT
) -> dict[str, Any]:
    clean = out / "hf_clean"
    if not clean.is_dir():
        _hf_clean(out)
    run = fresh_dir(out / case_id)
    for step in range(SAVE_STEPS, resume_at + 1, SAVE_STEPS):
        shutil.copytree(clean / f"checkpoint-{step}", run / f"checkpoint-{step}")
    resume = run / f"checkpoint-{resume_at}"
    if fault in ("scheduler.pt", "optimizer.pt"):
        (resume / fault).unlink()
    callbacks = [_raise_lr()] if fault == "raise_lr" else None
    _trainer(run, callbacks).train(resume_from_checkpoint=str(resume))
    return {case_id: _case(case_id, expected)}


def _case(case_id: str, expected: list[list[Any]]) -> dict[str, Any]:
    return {"path": case_id, "family": "run", "kind": "training_state", "expected": expected}


def _ds_child(run: Path) -> None:
    import deepspeed.comm.torch

    # DeepSpeed's shared-memory all-reduce kernel (g++, ~50 s) plays no part in the files
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed
    from torch import nn

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 2},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000,
        "scheduler": {
            "type": "WarmupLR",
            "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 4},
        },
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    for step in range(1, 9):
        x = torch.randn(4, 8)
        loss = engine(x).square().mean()
        engine.backward(loss)
        engine.step()
        if step % 2 == 0:
            engine.save_checkpoint(str(run))


def _cai_child(run: Path, mode: str) -> None:
    """``clean``: 8 steps, saved every 2 (sharded model and optimizer). ``no_scheduler``: the
    same up to step 4, then a fresh model/optimizer/scheduler, booster.load_model and
    load_optimizer from epoch-0_step-4 but no load_lr_scheduler (ColossalAI #5151), steps 5-8
    (the optimizer saved unsharded: loading a sharded one needs an accelerator)."""
    import json

    import torch.distributed as dist

    if not hasattr(dist, "is_hccl_available"):  # colossalai 0.5.0 calls it; torch 2.13 lacks it
        dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    import colossalai
    from colossalai.booster import Booster
    from colossalai.booster.plugin import TorchDDPPlugin
    from colossalai.nn.lr_scheduler import CosineAnnealingWarmupLR
    from transformers import GPT2Config, GPT2LMHeadModel

    colossalai.launch_from_torch(backend="gloo")
    shard = mode == "clean"

    def build() -> Any:
        torch.manual_seed(0)
        config = GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
        model = GPT2LMHeadModel(config)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        sched = CosineAnnealingWarmupLR(optim, total_steps=10, warmup_steps=2)
        booster = Booster(plugin=TorchDDPPlugin())
        model, optim, _, _, sched = booster.boost(model, optim, lr_scheduler=sched)
        return booster, model, optim, sched

    def train(first: int, last: int, parts: Any) -> None:
        booster, model, optim, sched = parts
        gen = torch.Generator().manual_seed(first)
        for step in range(first, last + 1):
            ids = torch.randint(0, 64, (4, 16), generator=gen)
            booster.backward(model(input_ids=ids, labels=ids).loss, optim)
            optim.step()
            optim.zero_grad()
            sched.step()
            if step % 2 == 0:
                ts = run / f"epoch-0_step-{step}"
                booster.save_model(model, str(ts / "modeling"), shard=True)
                target = ts / ("optimizer" if shard else "optimizer.bin")
                booster.save_optimizer(optim, str(target), shard=shard)
                booster.save_lr_scheduler(sched, str(ts / "lr_scheduler"))
                running = {"epoch": 0, "step": step, "sample_start_index": 4 * step}
                (ts / "running_states.json").write_text(json.dumps(running, indent=4))

    if mode == "clean":
        train(1, 8, build())
        return
    train(1, 4, build())
    parts = build()  # the restarted job
    resume = run / "epoch-0_step-4"
    parts[0].load_model(parts[1], str(resume / "modeling"))
    parts[0].load_optimizer(parts[2], str(resume / "optimizer.bin"))
    train(5, 8, parts)


def _child_run(
    out: Path, case_id: str, flag: str, mode: str = "", expected: list[list[Any]] | None = None
) -> dict[str, Any]:
    run = fresh_dir(out / case_id)
    cmd = [sys.executable, str(Path(__file__).resolve()), flag, str(run), *([mode] if mode else [])]
    run_child(cmd, cpu_rank_env(OMP_NUM_THREADS="1"), f"{case_id} child")
    return {case_id: _case(case_id, expected or [])}


# ----------------------------------------------------------------------------------------------
# plain PyTorch loops: torch DCP step-N folders and loose ckpt_{step}.pt files
# ----------------------------------------------------------------------------------------------


class _Loop:
    """A plain PyTorch loop: a tiny MLP, AdamW with weight-decay / no-decay groups (split by
    ``ndim``, which interleaves the model order), LambdaLR warm-up or OneCycleLR."""

    def __init__(self, sched: str) -> None:
        from torch import nn

        torch.manual_seed(0)
        self.model = nn.Sequential(
            nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 16), nn.Linear(16, 4)
        )
        named = list(self.model.named_parameters())
        groups = [
            {"params": [p for _, p in named if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0},
        ]
        self.opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))
        self.sched: Any
        if sched == "lambda":
            warmup = 2
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                self.opt, lambda s: min(1.0, (s + 1) / warmup)
            )
        else:
            self.sched = torch.optim.lr_scheduler.OneCycleLR(
                self.opt, max_lr=1e-3, total_steps=LOOP_STEPS + 4
            )
        self.step = 0

    def train_to(self, last: int, save: Any) -> None:
        gen = torch.Generator().manual_seed(self.step)
        while self.step < last:
            x = torch.randn(4, 8, generator=gen)
            self.model(x).square().mean().backward()
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad()
            self.step += 1
            if self.step % SAVE_STEPS == 0:
                save(self)


def _dcp_save(run: Path) -> Any:
    def save(loop: _Loop) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no process group: DCP warns, works
            state = {
                "model": get_model_state_dict(loop.model),
                "optimizer": get_optimizer_state_dict(loop.model, loop.opt),
                "scheduler": loop.sched.state_dict(),
                "step": loop.step,
            }
            dcp.save(state, checkpoint_id=str(run / f"step-{loop.step}"))

    return save


def _dcp_run(out: Path, case_id: str, fault: bool) -> dict[str, Any]:
    """``fault``: a restarted job (torchtitan-style load) restores model, scheduler and step
    from step-4 but not the optimizer, which starts afresh (expected: optimizer_reset at 6)."""
    run = fresh_dir(out / case_id)
    save = _dcp_save(run)
    loop = _Loop("lambda")
    loop.train_to(RESUME_LOOP if fault else LOOP_STEPS, save)
    if not fault:
        return {case_id: _case(case_id, [])}
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        set_model_state_dict,
    )

    loop = _Loop("lambda")  # the restarted job
    state = {
        "model": get_model_state_dict(loop.model),
        "scheduler": loop.sched.state_dict(),
        "step": 0,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, checkpoint_id=str(run / f"step-{RESUME_LOOP}"))
        set_model_state_dict(loop.model, state["model"])
    loop.sched.load_state_dict(state["scheduler"])
    loop.step = int(state["step"])
    if loop.step != RESUME_LOOP:
        raise AssertionError(f"DCP resume read step {loop.step}")
    loop.train_to(LOOP_STEPS, save)
    return {case_id: _case(case_id, [[RESUME_LOOP + SAVE_STEPS, "optimizer_reset"]])}


def _pt_save(run: Path) -> Any:
    def save(loop: _Loop) -> None:
        state = {
            "model": loop.model.state_dict(),
            "optimizer": loop.opt.state_dict(),
            "scheduler": loop.sched.state_dict(),
            "step": loop.step,
        }
        torch.save(state, run / f"ckpt_{loop.step}.pt")

    return save


def _pt_run(out: Path, case_id: str, fault: bool) -> dict[str, Any]:
    """``fault``: a restarted job loads model, optimizer and step from ckpt_4.pt but not the
    scheduler, whose OneCycleLR starts over (expected: lr_restart at 6)."""
    run = fresh_dir(out / case_id)
    save = _pt_save(run)
    loop = _Loop("onecycle")
    loop.train_to(RESUME_LOOP if fault else LOOP_STEPS, save)
    if not fault:
        return {case_id: _case(case_id, [])}
    loop = _Loop("onecycle")  # the restarted job
    state = torch.load(run / f"ckpt_{RESUME_LOOP}.pt", weights_only=True)
    loop.model.load_state_dict(state["model"])
    loop.opt.load_state_dict(state["optimizer"])
    loop.step = int(state["step"])
    loop.train_to(LOOP_STEPS, save)
    return {case_id: _case(case_id, [[RESUME_LOOP + SAVE_STEPS, "lr_restart"]])}


CASES = {
    "hf_clean": _hf_clean,
    "hf_resumed": lambda out: _resumed(out, "hf_resumed", "", []),
    "hf_no_scheduler": lambda out: _resumed(
        out, "hf_no_scheduler", "scheduler.pt", [[8, "lr_restart"], [8, "optimizer_reset"]]
    ),
    "hf_no_scheduler_at_4": lambda out: _resumed(
        out,
        "hf_no_scheduler_at_4",
        "scheduler.pt",
        [[6, "lr_restart"], [6, "optimizer_reset"]],
        resume_at=4,
    ),
    "hf_no_optimizer": lambda out: _resumed(
        out, "hf_no_optimizer", "optimizer.pt", [[8, "optimizer_reset"]]
    ),
    "hf_lr_changed": lambda out: _resumed(out, "hf_lr_changed", "raise_lr", [[8, "lr_jump"]]),
    "hf_frozen": _hf_frozen,
    "ds_run": lambda out: _child_run(out, "ds_run", DS_CHILD_FLAG),
    "cai_run": lambda out: _child_run(out, "cai_run", CAI_CHILD_FLAG, "clean"),
    "cai_no_scheduler": lambda out: _child_run(
        out, "cai_no_scheduler", CAI_CHILD_FLAG, "no_scheduler", [[6, "lr_restart"]]
    ),
    "dcp_run": lambda out: _dcp_run(out, "dcp_run", False),
    "dcp_no_optimizer": lambda out: _dcp_run(out, "dcp_no_optimizer", True),
    "pt_run": lambda out: _pt_run(out, "pt_run", False),
    "pt_no_scheduler": lambda out: _pt_run(out, "pt_no_scheduler", True),
}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == DS_CHILD_FLAG:
        _ds_child(Path(sys.argv[2]))
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == CAI_CHILD_FLAG:
        _cai_child(Path(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    out_dir = main_out_dir(sys.argv)
    import importlib.metadata

    sys.exit(run_maker(out_dir, "timeline", importlib.metadata.version("transformers"), CASES))
