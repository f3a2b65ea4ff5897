"""Real-world training states: transformers ``Trainer`` with a DeepSpeed config, on CPU.

Usage: ``python tests/fixture_makers/realworld_trainer_ds_maker.py OUT_DIR``

The corpus contract (``setup``, ``expect``, ``resume_of``, ``id_names``) is in
tests/realworld_check.py. Each run is a child process (DS_ACCELERATOR=cpu, gloo, a world of 1,
env RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT as a launcher sets them): a tiny Llama
(``tie_word_embeddings=False``), ``TrainingArguments(deepspeed={...})`` with ZeRO-2 or ZeRO-3
(``stage3_gather_16bit_weights_on_model_save`` true, so ZeRO-3 writes ``model.safetensors``
too), Trainer's own AdamW (decay / no-decay groups by name) and linear schedule with warm-up,
``save_steps=2``: ``zero<S>/checkpoint-2`` and ``checkpoint-4`` (max_steps 4), then a second
process resumes from ``checkpoint-4`` with ``train(resume_from_checkpoint=...)`` to step 6
(``checkpoint-6``) and calls ``trainer.save_model(zero<S>/final_model)``.

A ``checkpoint-N`` holds model.safetensors, config.json, scheduler.pt, rng_state.pth,
trainer_state.json, training_args.bin, ``latest``, DeepSpeed's ``global_stepN/`` (model states
and ZeRO optimizer states) and the copied zero_to_fp32.py. ``id_names`` is keyed by rank 0's
optimizer file inside ``global_stepN/``: the names of the model's parameters, walked in the
order of the optimizer Trainer builds (recorded in ``create_optimizer``) and numbered as
``torch.optim.Optimizer.state_dict`` numbers params; checked against the saved model states'
``param_shapes`` (same names, same order, the model's shapes). Cases ``*_final_model`` are
the save_model folders (family hf-single, kind model). ``state_parts``: part name -> family of
each part the checkpoint folder holds. Runs in about 40-70 s (4 processes, 2 at a time).
"""

from __future__ import annotations

import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from _manifest import cpu_rank_env, leave_worker, main_out_dir, run_child, run_maker
from _models import id_names, tiny_llama, token_dataset

CHILD_FLAG = "--trainer-ds-child"
SEED = 0
VOCAB = 64
SEQ = 16
STAGES = (2, 3)
SETUP = "HF Trainer + DeepSpeed ZeRO-{}"


# ----------------------------------------------------------------------------------------- child


def ds_config(stage: int) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 2,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
    }


def check_param_shapes(ckpt: Path, truth: dict[str, str], shapes: dict[str, list[int]]) -> None:
    """The saved model states' ``param_shapes`` name the truth's params in id order, with the
    model's shapes (DeepSpeed's own file, loaded here with weights_only=False: it is ours)."""
    tag = (ckpt / "latest").read_text().strip()
    files = sorted((ckpt / tag).glob("*model_states.pt"))
    sd = torch.load(files[0], map_location="cpu", weights_only=False)
    saved = [(n, list(s)) for group in sd["param_shapes"] for n, s in group.items()]
    want = [(truth[str(i)], shapes[truth[str(i)]]) for i in range(len(truth))]
    if saved != want:
        raise AssertionError(f"{files[0]}: param_shapes {saved} != truth {want}")


def _child(stage: int, run_dir: Path, max_steps: int, resume: str, result_path: Path) -> None:
    import deepspeed.comm.torch

    # skip the CPU shared-memory kernel JIT (multi-rank all-reduce speed only; via sys.modules:
    # the attribute deepspeed.comm.torch is the torch package itself)
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed
    import transformers
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(run_dir),
        max_steps=max_steps,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        weight_decay=0.1,
        warmup_steps=2,
        lr_scheduler_type="linear",
        save_steps=2,
        save_strategy="steps",
        logging_steps=1000,
        report_to="none",
        deepspeed=ds_config(stage),
        seed=SEED,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    model = tiny_llama(SEED, VOCAB)
    shapes = {n: list(p.shape) for n, p in model.named_parameters()}
    truth: dict[str, str] = {}

    class RecordingTrainer(Trainer):  # type: ignore[misc]
        def create_optimizer(self, model: Any = None) -> Any:
            opt = super().create_optimizer(model)
            truth.update(id_names(self.model.named_parameters(), opt.param_groups))
            return opt

    trainer = RecordingTrainer(
        model=model, args=args, train_dataset=token_dataset(64, SEED, VOCAB, SEQ)
    )
    trainer.train(resume_from_checkpoint=resume or None)
    saved = ("checkpoint-6",) if resume else ("checkpoint-2", "checkpoint-4")
    for ckpt in (run_dir / name for name in saved):
        check_param_shapes(ckpt, truth, shapes)
    if resume:
        trainer.save_model(str(run_dir / "final_model"))
    result = {
        "truth": truth,
        "versions": f"transformers {transformers.__version__}, deepspeed {deepspeed.__version__}",
    }
    result_path.write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------- parent


def _run_child(stage: int, run_dir: Path, max_steps: int, resume: Path | None) -> dict[str, Any]:
    env = cpu_rank_env(TOKENIZERS_PARALLELISM="false")
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, str(stage)]
        cmd += [str(run_dir), str(max_steps), str(resume or ""), str(result_path)]
        run_child(cmd, env, f"ZeRO-{stage} child (max_steps {max_steps})", result_path)
        return dict(json.loads(result_path.read_text()))


def _run_stage(out: Path, stage: int) -> dict[str, Any]:
    run_dir = out / f"zero{stage}"
    first = _run_child(stage, run_dir, 4, None)
    second = _run_child(stage, run_dir, 6, run_dir / "checkpoint-4")
    return {"first": first["truth"], "resumed": second["truth"], "versions": first["versions"]}


def _optim_file(ckpt: Path) -> str:
    tag = (ckpt / "latest").read_text().strip()
    return f"{tag}/zero_pp_rank_0_mp_rank_00_optim_states.pt"


def _state_parts(ckpt: Path) -> dict[str, str]:
    tag = (ckpt / "latest").read_text().strip()
    return {
        "model": "hf-single",
        tag: "deepspeed",
        "rng_state.pth": "torch-zip",
        "scheduler.pt": "torch-zip",
        "trainer_state.json": "running-states-json",
        "training_args.bin": "torch-zip",
    }


def stage_cases(out: Path, stage: int, res: dict[str, Any]) -> dict[str, Any]:
    run_dir = out / f"zero{stage}"
    setup = SETUP.format(stage)
    cases: dict[str, Any] = {}
    for step, truth, resume_of in (
        (2, res["first"], None),
        (4, res["first"], None),
        (6, res["resumed"], f"ds_zero{stage}_step4"),
    ):
        ckpt = run_dir / f"checkpoint-{step}"
        cid = f"ds_zero{stage}_resume_clean" if resume_of else f"ds_zero{stage}_step{step}"
        cases[cid] = {
            "path": ckpt.relative_to(out).as_posix(),
            "family": "training-state",
            "kind": "training_state",
            "setup": setup,
            "expect": "clean",
            "id_names": {_optim_file(ckpt): truth},
            "state_parts": _state_parts(ckpt),
            "zero_stage": stage,
            "global_step": step,
            **({"resume_of": resume_of} if resume_of else {}),
        }
    cases[f"ds_zero{stage}_final_model"] = {
        "path": (run_dir / "final_model").relative_to(out).as_posix(),
        "family": "hf-single",
        "kind": "model",
        "setup": setup + " save_model",
        "expect": "clean",
        "id_names": {},
    }
    return cases


_RESULTS: dict[int, Any] = {}


def _all_stages(out: Path) -> dict[int, Any]:
    if not _RESULTS:
        with ThreadPoolExecutor(max_workers=len(STAGES)) as pool:
            futures = {s: pool.submit(_run_stage, out, s) for s in STAGES}
            _RESULTS.update({s: f.result() for s, f in futures.items()})
    return _RESULTS


CASES = {f"zero{s}": (lambda out, s=s: stage_cases(out, s, _all_stages(out)[s])) for s in STAGES}


def main(argv: list[str]) -> int:
    from importlib.metadata import version as dist_version

    out = main_out_dir(argv)
    version = f"transformers {dist_version('transformers')}, deepspeed {dist_version('deepspeed')}"
    return run_maker(out, "realworld_trainer_ds", version, CASES)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == CHILD_FLAG:
        a = sys.argv
        _child(int(a[2]), Path(a[3]), int(a[4]), a[5], Path(a[6]))
        leave_worker()
    sys.exit(main(sys.argv))
