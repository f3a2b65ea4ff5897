"""Real-world training states, Hugging Face side.

Usage: ``python tests/fixture_makers/realworld_hf_maker.py OUT_DIR``

Every state is written by a tiny training run through the real library, the way training code
uses it; the corpus contract (``setup``, ``expect``, ``resume_of``, ``id_names``) is in
tests/realworld_check.py. ``id_names`` comes from the live objects: the names of the module whose
weights were saved, walked in ``optimizer.param_groups`` order and numbered as
``torch.optim.Optimizer.state_dict`` numbers params, each checked against the saved files (the
name is a key of the model file; the state has the parameter's shape).

Setups:

* ``trainer``: transformers ``Trainer`` on a GPT-2 (2 layers, n_embd 32, vocab 64, tied
  lm_head), default AdamW (decay / no-decay groups by name), linear schedule with warm-up,
  ``save_steps`` -> ``checkpoint-N``. Resumes with ``train(resume_from_checkpoint=...)``: clean;
  ``scheduler.pt`` deleted before the resume; ``optimizer.pt`` deleted before the resume (saved
  1 and 3 steps after); the optimizer rebuilt by a ``Trainer`` subclass whose
  ``create_optimizer`` walks the blocks top-down (layer-wise-LR-decay style) and loads the old
  state by position; ``rng_state.pth`` deleted from a resumed state.
  Trainer restores optimizer and scheduler together or not at all (``_load_optimizer_and_
  scheduler`` needs both files), so a deleted ``scheduler.pt`` also leaves a fresh optimizer and
  a deleted ``optimizer.pt`` a fresh scheduler: such states name the other fault in ``also``.
* ``accelerate``: ``Accelerator.prepare(model, optimizer, dataloader, scheduler)`` on a tiny
  Llama (``tie_word_embeddings=False``), AdamW with decay / no-decay groups by ``ndim``,
  ``save_state(dir)`` (model.safetensors, optimizer.bin, scheduler.bin, random_states_0.pkl);
  a clean resume through ``load_state``, and one whose scheduler was not passed to ``prepare``
  (accelerate neither restores nor saves an unregistered scheduler).
* ``peft_manual``: PEFT LoRA (r 4 on q_proj / v_proj) on the tiny Llama, a manual loop with
  AdamW over the trainable params; ``save_pretrained`` + ``optimizer.pt`` + ``scheduler.pt`` +
  ``rng_state.pth`` + ``trainer_state.json``-free. Resumes: clean, and one that loads the
  optimizer but forgets the scheduler.
* ``peft_trainer``: the same LoRA model through ``Trainer`` (``checkpoint-N`` with
  ``adapter_model.safetensors`` + optimizer.pt ...).

A reorder that moves a state onto a param of another shape makes AdamW's first step raise, so
a resumed run that goes on and saves only swapped same-shaped params; ``"shape_visible": false``
marks such a state (its files alone cannot show the fault; the pair can).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _manifest import main_out_dir, run_maker
from _models import id_names, tiny_llama, token_dataset

SEED = 0
VOCAB = 64
SEQ = 16
BATCH = 4
LR = 1e-3


# ----------------------------------------------------------------------------------------------
# Tiny models, data and the truth
# ----------------------------------------------------------------------------------------------


def gpt2(seed: int = SEED) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=VOCAB,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(cfg)


def file_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a safetensors model/adapter file (read with safe_open)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118


def check_truth(
    truth: Mapping[str, str], optimizer_file: Path, shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """The saved optimizer has exactly these ids; every name is a key of the model file and every
    state tensor has that parameter's shape."""
    osd = torch.load(optimizer_file, map_location="cpu", weights_only=True)
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{optimizer_file}: ids {sorted(ids)} != truth {sorted(truth)}")
    for sid, name in truth.items():
        if name not in shapes:
            raise AssertionError(f"{optimizer_file}: truth name {name} not in the model file")
        for key, v in osd["state"].get(int(sid), {}).items():
            if isinstance(v, torch.Tensor) and v.ndim and tuple(v.shape) != shapes[name]:
                raise AssertionError(f"{optimizer_file}: state {sid}.{key} shape != {name}")


def case(
    out: Path, path: Path, setup: str, expect: str, truth: dict[str, dict[str, str]], **extra: Any
) -> dict[str, Any]:
    return {
        "path": path.relative_to(out).as_posix(),
        "family": "training-state",
        "kind": "training_state",
        "setup": setup,
        "expect": expect,
        "id_names": truth,
        **extra,
    }


# ----------------------------------------------------------------------------------------------
# transformers Trainer
# ----------------------------------------------------------------------------------------------


def training_args(output_dir: Path, max_steps: int, save_steps: int) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(output_dir),
        max_steps=max_steps,
        save_steps=save_steps,
        save_strategy="steps",
        per_device_train_batch_size=BATCH,
        learning_rate=LR,
        weight_decay=0.01,
        warmup_steps=1,
        lr_scheduler_type="linear",
        logging_steps=1000,
        report_to="none",
        use_cpu=True,
        seed=SEED,
        data_seed=SEED,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def reordered_trainer_class() -> type:
    """A Trainer whose optimizer walks the transformer blocks top-down (as layer-wise LR decay
    code does): block k's params take the ids of block n-1-k's, same shapes, so the old state
    loads by position and training goes on."""
    from transformers import Trainer

    class TopDownTrainer(Trainer):  # type: ignore[misc]
        def create_optimizer(self, model: Any = None) -> Any:
            opt = super().create_optimizer(model)
            names = {id(p): n for n, p in self.model.named_parameters()}
            n_blocks = len(self.model.transformer.h)

            def block(p: torch.Tensor) -> int:
                parts = names[id(p)].split(".")
                return n_blocks - 1 - int(parts[2]) if parts[1] == "h" else -1

            for group in opt.param_groups:
                params = group["params"]
                slots = [i for i, p in enumerate(params) if block(p) >= 0]
                ordered = sorted((params[i] for i in slots), key=block)  # stable: in-block order
                for i, p in zip(slots, ordered, strict=True):
                    params[i] = p
            return opt

    return TopDownTrainer


def trainer_cases(out: Path) -> dict[str, Any]:
    from transformers import Trainer

    root = out / "trainer"
    data = token_dataset(64, SEED, VOCAB, SEQ)
    setup = "HF Trainer"

    def run(
        output_dir: Path, max_steps: int, save_steps: int, resume: Path | None, cls: type = Trainer
    ) -> dict[str, str]:
        model = gpt2()
        trainer = cls(
            model=model, args=training_args(output_dir, max_steps, save_steps), train_dataset=data
        )
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        return id_names(trainer.model.named_parameters(), trainer.optimizer.param_groups)

    def state(
        cid: str, ckpt: Path, truth: dict[str, str], expect: str = "clean", **extra: Any
    ) -> None:
        if (ckpt / "optimizer.pt").is_file():
            check_truth(truth, ckpt / "optimizer.pt", file_shapes(ckpt / "model.safetensors"))
        cases[cid] = case(out, ckpt, setup, expect, {"optimizer.pt": truth}, **extra)

    cases: dict[str, Any] = {}
    base = run(root / "run", 4, 2, None)
    state("trainer_step2", root / "run" / "checkpoint-2", base)
    state("trainer_step4", root / "run" / "checkpoint-4", base)
    a, a_id = root / "run" / "checkpoint-2", "trainer_step2"

    truth = run(root / "resume_clean", 4, 2, a)
    state("trainer_resume_clean", root / "resume_clean" / "checkpoint-4", truth, resume_of=a_id)

    with tempfile.TemporaryDirectory() as tmp:
        for missing in ("scheduler.pt", "optimizer.pt"):
            src = Path(tmp) / missing / "checkpoint-2"
            shutil.copytree(a, src)
            (src / missing).unlink()
            name = f"resume_no_{missing.removesuffix('.pt')}"
            if missing == "scheduler.pt":
                truth = run(root / name, 4, 2, src)
                state(
                    f"trainer_{name}",
                    root / name / "checkpoint-4",
                    truth,
                    "scheduler_not_restored",
                    resume_of=a_id,
                    also=["optimizer_moments_reset"],
                )
            else:  # Trainer keeps save_steps of trainer_state.json (2): the last step saves
                for after in (1, 3):
                    folder = root / f"{name}_{after}step"
                    truth = run(folder, 2 + after, 2, src)
                    for extra_ckpt in folder.glob("checkpoint-*"):
                        if extra_ckpt.name != f"checkpoint-{2 + after}":
                            shutil.rmtree(extra_ckpt)
                    state(
                        f"trainer_{name}_{after}step",
                        folder / f"checkpoint-{2 + after}",
                        truth,
                        "optimizer_moments_reset",
                        resume_of=a_id,
                        also=["scheduler_not_restored"],
                    )

    truth = run(root / "resume_top_down", 3, 2, a, reordered_trainer_class())
    if truth == base:
        raise AssertionError("the top-down optimizer has the original order")
    state(
        "trainer_resume_param_order",
        root / "resume_top_down" / "checkpoint-3",
        truth,
        "param_order_changed",
        resume_of=a_id,
        shape_visible=False,
    )

    src = root / "resume_clean" / "checkpoint-4"
    dst = root / "rng_deleted" / "checkpoint-4"
    shutil.copytree(src, dst)
    (dst / "rng_state.pth").unlink()
    truth = cases["trainer_resume_clean"]["id_names"]["optimizer.pt"]
    state("trainer_rng_deleted", dst, truth, "rng_state_missing", resume_of=a_id)
    return cases


# ----------------------------------------------------------------------------------------------
# accelerate
# ----------------------------------------------------------------------------------------------


def accelerate_cases(out: Path) -> dict[str, Any]:
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    root = out / "accelerate"
    setup = "accelerate save_state"

    def run(save_dir: Path, steps: int, resume: Path | None, register_scheduler: bool = True):
        accelerator = Accelerator(cpu=True)
        set_seed(SEED)
        model = tiny_llama(SEED, VOCAB)
        decay = [p for p in model.parameters() if p.ndim >= 2]
        no_decay = [p for p in model.parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
            lr=LR,
        )
        scheduler = get_linear_schedule_with_warmup(optimizer, 1, 20)
        loader = DataLoader(token_dataset(64, SEED, VOCAB, SEQ), batch_size=BATCH, shuffle=True)
        if register_scheduler:
            model, optimizer, loader, scheduler = accelerator.prepare(
                model, optimizer, loader, scheduler
            )
        else:  # the scheduler is stepped but accelerate does not know it
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        if resume is not None:
            accelerator.load_state(str(resume))
        model.train()
        batches = iter(loader)
        for _ in range(steps):
            loss = model(**next(batches)).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        accelerator.save_state(str(save_dir))
        named = accelerator.unwrap_model(model).named_parameters()
        truth = id_names(named, optimizer.param_groups)
        check_truth(truth, save_dir / "optimizer.bin", file_shapes(save_dir / "model.safetensors"))
        return {"optimizer.bin": truth}

    cases: dict[str, Any] = {}
    a = root / "step2"
    cases["accelerate_step2"] = case(out, a, setup, "clean", run(a, 2, None))
    b = root / "resume_clean"
    cases["accelerate_resume_clean"] = case(
        out, b, setup, "clean", run(b, 2, a), resume_of="accelerate_step2"
    )
    c = root / "resume_scheduler_not_prepared"
    cases["accelerate_resume_scheduler_not_prepared"] = case(
        out,
        c,
        setup,
        "scheduler_not_restored",
        run(c, 2, a, register_scheduler=False),
        resume_of="accelerate_step2",
    )
    d = root / "rng_deleted"
    shutil.copytree(b, d)
    for f in d.glob("random_states_*.pkl"):
        f.unlink()
    cases["accelerate_rng_deleted"] = case(
        out,
        d,
        setup,
        "rng_state_missing",
        cases["accelerate_resume_clean"]["id_names"],
        resume_of="accelerate_step2",
    )
    return cases


# ----------------------------------------------------------------------------------------------
# PEFT LoRA
# ----------------------------------------------------------------------------------------------


def lora_config() -> Any:
    from peft import LoraConfig

    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])


def adapter_key(name: str) -> str:
    """A PeftModel parameter name as the adapter file names it (peft drops the adapter name)."""
    return name.replace(".default", "")


def rng_state() -> dict[str, Any]:
    """The RNG states as Trainer saves them in rng_state.pth."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.get_rng_state(),
    }


def peft_manual_cases(out: Path) -> dict[str, Any]:
    from peft import PeftModel, get_peft_model
    from transformers import get_linear_schedule_with_warmup

    root = out / "peft_manual"
    setup = "PEFT LoRA manual loop"
    data = token_dataset(64, SEED, VOCAB, SEQ)

    def run(save_dir: Path, start: int, steps: int, resume: Path | None, load_sched: bool = True):
        torch.manual_seed(SEED + start)
        base = tiny_llama(SEED, VOCAB)
        if resume is None:
            model = get_peft_model(base, lora_config())
        else:
            model = PeftModel.from_pretrained(base, str(resume), is_trainable=True)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
        scheduler = get_linear_schedule_with_warmup(optimizer, 1, 20)
        if resume is not None:
            optimizer.load_state_dict(torch.load(resume / "optimizer.pt", weights_only=True))
            if load_sched:
                scheduler.load_state_dict(torch.load(resume / "scheduler.pt", weights_only=True))
        model.train()
        for step in range(start, start + steps):
            batch = data[step * BATCH : (step + 1) * BATCH]
            ids = torch.stack([b["input_ids"] for b in batch])
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        model.save_pretrained(str(save_dir))
        torch.save(optimizer.state_dict(), save_dir / "optimizer.pt")
        torch.save(scheduler.state_dict(), save_dir / "scheduler.pt")
        torch.save(rng_state(), save_dir / "rng_state.pth")
        named = ((adapter_key(n), p) for n, p in model.named_parameters())
        truth = id_names(named, optimizer.param_groups)
        shapes = file_shapes(save_dir / "adapter_model.safetensors")
        check_truth(truth, save_dir / "optimizer.pt", shapes)
        return {"optimizer.pt": truth}

    cases: dict[str, Any] = {}
    a = root / "step3"
    cases["peft_manual_step3"] = case(out, a, setup, "clean", run(a, 0, 3, None))
    b = root / "resume_clean"
    cases["peft_manual_resume_clean"] = case(
        out, b, setup, "clean", run(b, 3, 2, a), resume_of="peft_manual_step3"
    )
    c = root / "resume_scheduler_not_loaded"
    cases["peft_manual_resume_scheduler_not_loaded"] = case(
        out,
        c,
        setup,
        "scheduler_not_restored",
        run(c, 3, 2, a, load_sched=False),
        resume_of="peft_manual_step3",
    )
    return cases


def peft_trainer_cases(out: Path) -> dict[str, Any]:
    from peft import get_peft_model
    from transformers import Trainer

    root = out / "peft_trainer"
    model = get_peft_model(tiny_llama(SEED, VOCAB), lora_config())
    trainer = Trainer(
        model=model,
        args=training_args(root, 2, 2),
        train_dataset=token_dataset(64, SEED, VOCAB, SEQ),
    )
    trainer.train()
    ckpt = root / "checkpoint-2"
    named = ((adapter_key(n), p) for n, p in trainer.model.named_parameters())
    truth = id_names(named, trainer.optimizer.param_groups)
    check_truth(truth, ckpt / "optimizer.pt", file_shapes(ckpt / "adapter_model.safetensors"))
    return {
        "peft_trainer_step2": case(
            out, ckpt, "PEFT LoRA via Trainer", "clean", {"optimizer.pt": truth}
        )
    }


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {
    "trainer": trainer_cases,
    "accelerate": accelerate_cases,
    "peft_manual": peft_manual_cases,
    "peft_trainer": peft_trainer_cases,
}


def main(argv: list[str]) -> int:
    import accelerate
    import peft
    import transformers

    out = main_out_dir(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(1)
    version = (
        f"transformers {transformers.__version__}, accelerate {accelerate.__version__}, "
        f"peft {peft.__version__}, torch {torch.__version__}"
    )
    rc = run_maker(out, "realworld_hf", version, CASES)
    if rc == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        for cid, c in manifest["cases"].items():
            if c.get("resume_of") and c["resume_of"] not in manifest["cases"]:
                raise AssertionError(f"{cid}: resume_of {c['resume_of']} is not a case")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
