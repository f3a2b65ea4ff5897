"""Real-world training states, torchtune side.

Usage: ``python tests/fixture_makers/realworld_tune_maker.py OUT_DIR``

Every state is written by torchtune 0.6.1 itself (installed ``--no-deps --target
.venv/side/torchtune`` with torchao 0.11, torchdata and datasets, see scripts/setup_env.sh):
its own recipes ``full_finetune_single_device.py`` and ``lora_finetune_single_device.py``
(loaded from the wheel's ``recipes/`` folder, as ``tune run`` runs them), their ``setup`` and
``train``, on CPU in fp32, with ``FullModelHFCheckpointer``. The inputs are made here: a tiny
HF Llama written by transformers' ``save_pretrained`` (``config.json`` + ``model.safetensors``),
a SentencePiece tokenizer trained by ``sentencepiece`` on a few lines, and a local JSON-lines
text dataset (``text_completion_dataset``, read by datasets from disk). The corpus contract
(``setup``, ``expect``, ``resume_of``, ``id_names``) is in tests/realworld_check.py.

What the recipes write (torchtune 0.6.1): ``<output_dir>/epoch_N/`` with
``model-00001-of-00001.safetensors`` + ``model.safetensors.index.json`` (weights converted back
to HF names by ``tune_to_hf``: q/k rows permuted back) and the copied ``config.json`` /
``generation_config.json``; for LoRA also ``adapter_model.pt`` (torchtune names),
``adapter_model.safetensors`` and ``adapter_config.json`` (PEFT names), the ``model-*`` shard
holding the merged weights; and ``<output_dir>/recipe_state/recipe_state.pt`` (one file, over-
written at every intermediate epoch) = ``{'seed', 'epochs_run', 'total_epochs',
'max_steps_per_epoch', 'dataloader', 'optimizer'}``. There is no ``lr_scheduler`` key: the
recipes rebuild the scheduler at resume with ``last_epoch = epochs_run * steps_per_epoch - 1``;
no RNG state either (``seed`` only). A case's path is the run's ``output_dir``.

The optimizer's ids are numbered over torchtune's own module names (``tok_embeddings``,
``layers.N.attn.q_proj``, ``layers.N.mlp.w1``, ``norm.scale``, ``output``), not the HF names
the weights are saved under: ``id_names`` holds those torchtune names, and ``hf_names`` maps
each to the HF key of the saved weights (torchtune's ``_FROM_HF`` table, inverted) or, for a
LoRA param, to its PEFT key in ``adapter_model.safetensors`` (``tune_to_peft_adapter_weights``).

Setups: ``full`` (full fine-tune, AdamW, cosine warm-up) and ``lora`` (LoRA on q/v, rank 4; the
recipe gives AdamW all model params: the frozen base ones sit in its groups with no state). Each: a base run of 4 epochs x 2 steps stopped after
its 2nd epoch save (a preempted job: ``recipe_state.pt`` says ``epochs_run`` 2), then a resume
(``resume_from_checkpoint: True`` in a copy of the output folder, ``checkpoint_files`` pointing
at ``epoch_1/``) stopped after its next save. Planted fault (full): the optimizer not loaded,
made the way it happens with torchtune: the fine-tune restarted from ``epoch_1``'s weights with
``resume_from_checkpoint: False`` (fresh optimizer, ``epochs_run`` and the schedule from 0:
``also`` scheduler_not_restored; its files alone are a plausible fresh run, so
``"shape_visible": false``). No scheduler-only fault: torchtune saves no scheduler state.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import fresh_dir, main_out_dir, run_maker, side_folder, tensor_entry

SEED = 1234
VOCAB, DIM, N_LAYER, HEADS, KV_HEADS, FFN, SEQ = 64, 16, 2, 4, 2, 32, 32
EPOCHS, STEPS_PER_EPOCH, BASE_EPOCHS = 4, 2, 2
TEXT = [f"the quick brown fox {i} jumps over the lazy dog number {i * 7 % 13}" for i in range(64)]

# setup key -> (label, recipe file, recipe class)
PLAN: dict[str, tuple[str, str, str]] = {
    "full": (
        "torchtune full_finetune_single_device, FullModelHFCheckpointer",
        "full_finetune_single_device.py",
        "FullFinetuneRecipeSingleDevice",
    ),
    "lora": (
        "torchtune lora_finetune_single_device, FullModelHFCheckpointer",
        "lora_finetune_single_device.py",
        "LoRAFinetuneRecipeSingleDevice",
    ),
}
# setup -> ((variant, expect), ...)
VARIANTS: dict[str, tuple[tuple[str, str], ...]] = {
    "full": (("resume_clean", "clean"), ("optimizer_not_loaded", "optimizer_moments_reset")),
    "lora": (("resume_clean", "clean"),),
}


class Preempted(Exception):
    """Raised right after a save: the job is stopped there, as a preempted job is."""


def recipe_class(file: str, name: str) -> Any:
    import torchtune

    path = Path(torchtune.__file__).resolve().parent.parent / "recipes" / file
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def inputs(root: Path) -> dict[str, Path]:
    """The tokenizer, the data and the base HF model the recipes start from."""
    import sentencepiece as spm
    from transformers import LlamaConfig, LlamaForCausalLM

    (root / "corpus.txt").write_text("\n".join(TEXT), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(root / "corpus.txt"),
        model_prefix=str(root / "tokenizer"),
        vocab_size=VOCAB,
        model_type="bpe",
        bos_id=1,
        eos_id=2,
        unk_id=0,
        pad_id=-1,
        minloglevel=2,
    )
    with open(root / "data.json", "w", encoding="utf-8") as f:
        for t in TEXT:
            f.write(json.dumps({"text": t}) + "\n")
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=DIM,
        intermediate_size=FFN,
        num_hidden_layers=N_LAYER,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=SEQ * 2,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    torch.manual_seed(SEED)
    LlamaForCausalLM(config).save_pretrained(root / "base_hf")
    return {
        "tokenizer": root / "tokenizer.model",
        "data": root / "data.json",
        "base_hf": root / "base_hf",
    }


def recipe_config(
    key: str, run_dir: Path, paths: Mapping[str, Path], resume: bool, ckpt_dir: Path, files: list
) -> Any:
    from omegaconf import OmegaConf

    model: dict[str, Any] = {
        "vocab_size": VOCAB,
        "num_layers": N_LAYER,
        "num_heads": HEADS,
        "num_kv_heads": KV_HEADS,
        "embed_dim": DIM,
        "intermediate_dim": FFN,
        "max_seq_len": SEQ * 2,
    }
    if key == "lora":
        model.update(
            _component_="torchtune.models.llama2.lora_llama2",
            lora_attn_modules=["q_proj", "v_proj"],
            apply_lora_to_mlp=False,
            apply_lora_to_output=False,
            lora_rank=4,
            lora_alpha=8.0,
            lora_dropout=0.0,
        )
    else:
        model["_component_"] = "torchtune.models.llama2.llama2"
    return OmegaConf.create(
        {
            "output_dir": str(run_dir),
            "tokenizer": {
                "_component_": "torchtune.models.llama2.llama2_tokenizer",
                "path": str(paths["tokenizer"]),
                "max_seq_len": SEQ,
            },
            "dataset": {
                "_component_": "torchtune.datasets.text_completion_dataset",
                "source": "json",
                "data_files": str(paths["data"]),
                "column": "text",
                "split": "train",
                "packed": False,
            },
            "seed": SEED,
            "shuffle": True,
            "model": model,
            "checkpointer": {
                "_component_": "torchtune.training.FullModelHFCheckpointer",
                "checkpoint_dir": str(ckpt_dir),
                "checkpoint_files": files,
                "recipe_checkpoint": None,
                "output_dir": str(run_dir),
                "model_type": "LLAMA2",
            },
            "resume_from_checkpoint": resume,
            "save_adapter_weights_only": False,
            "batch_size": 4,
            "epochs": EPOCHS,
            "optimizer": {"_component_": "torch.optim.AdamW", "lr": 1e-3, "fused": False},
            "lr_scheduler": {
                "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
                "num_warmup_steps": 2,
            },
            "optimizer_in_bwd": False,
            "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
            "max_steps_per_epoch": STEPS_PER_EPOCH,
            "gradient_accumulation_steps": 1,
            "clip_grad_norm": None,
            "compile": False,
            "device": "cpu",
            "enable_activation_checkpointing": False,
            "enable_activation_offloading": False,
            "dtype": "fp32",
            "metric_logger": {
                "_component_": "torchtune.training.metric_logging.DiskLogger",
                "log_dir": str(run_dir / "logs"),
            },
            "log_every_n_steps": 1,
            "log_peak_memory_stats": False,
            "profiler": {
                "_component_": "torchtune.training.setup_torch_profiler",
                "enabled": False,
            },
        }
    )


def run_recipe(key: str, cfg: Any, saves: int) -> Any:
    """The recipe's own setup and train; the job stops after ``saves`` checkpoint saves."""
    _, file, name = PLAN[key]
    recipe = recipe_class(file, name)(cfg)
    recipe.setup(cfg)
    save, done = recipe.save_checkpoint, [0]

    def save_then_maybe_stop(epoch: int) -> None:
        save(epoch)
        done[0] += 1
        if done[0] >= saves:
            raise Preempted

    recipe.save_checkpoint = save_then_maybe_stop
    try:
        recipe.train()
    except Preempted:
        pass
    else:
        raise AssertionError(f"{key}: the recipe finished before its save #{saves}")
    return recipe


def truth(recipe: Any) -> dict[str, str]:
    names = {id(p): n for n, p in recipe._model.named_parameters()}
    out: dict[str, str] = {}
    i = 0
    for group in recipe._optimizer.param_groups:
        for p in group["params"]:
            out[str(i)] = names[id(p)]
            i += 1
    return out


def hf_names(base_hf: Path) -> dict[str, str]:
    """torchtune name -> the HF key its weight is saved under (torchtune's own table)."""
    from safetensors import safe_open
    from torchtune.models.convert_weights import _FROM_HF, get_mapped_key

    with safe_open(str(base_hf / "model.safetensors"), "pt") as f:
        return {get_mapped_key(k, _FROM_HF): k for k in f.keys()}  # noqa: SIM118


def peft_names(recipe: Any) -> dict[str, str]:
    """torchtune LoRA param name -> its key in adapter_model.safetensors (torchtune's own
    ``tune_to_peft_adapter_weights``, which keeps the order of the names it is given)."""
    from torchtune.models.convert_weights import tune_to_peft_adapter_weights

    adapter = {n: t for n, t in recipe._model.state_dict().items() if "lora_" in n}
    converted = tune_to_peft_adapter_weights(
        adapter, num_heads=HEADS, num_kv_heads=KV_HEADS, dim=DIM
    )
    return dict(zip(adapter, converted, strict=True))


def setup_cases(out: Path, key: str, paths: Mapping[str, Path], names: Mapping[str, str]):
    label = PLAN[key][0]
    root = fresh_dir(out / key)
    cases: dict[str, Any] = {}
    shard = "model-00001-of-00001.safetensors"

    def record(case_id: str, recipe: Any, run_dir: Path, expect: str, **kw: Any) -> None:
        state = torch.load(run_dir / "recipe_state" / "recipe_state.pt", weights_only=False)
        ids = truth(recipe)
        peft = peft_names(recipe) if key == "lora" else {}
        osd = recipe._optimizer.state_dict()
        step = max(float(s["step"]) for s in osd["state"].values())
        if float(max(float(s["step"]) for s in state["optimizer"]["state"].values())) != step:
            raise AssertionError(f"{case_id}: recipe_state.pt holds another optimizer step")
        cases[case_id] = {
            "path": run_dir.relative_to(out).as_posix(),
            "family": "torchtune",
            "kind": "training_state",
            "setup": label,
            "expect": expect,
            "id_names": {"recipe_state/recipe_state.pt": ids},
            "hf_names": {n: peft.get(n) or names[n] for n in ids.values()},
            "epochs_run": state["epochs_run"],
            "global_steps": recipe.global_step,
            "optimizer_step": step,
            "lr": [g["lr"] for g in recipe._optimizer.param_groups],
            "recipe_state_keys": sorted(state),
            "latest_epoch_dir": f"epoch_{state['epochs_run'] - 1}",
            "model_tensors": {n: tensor_entry(t) for n, t in recipe._model.state_dict().items()},
            **kw,
        }

    base_dir = root / "base"
    base = run_recipe(
        key,
        recipe_config(key, base_dir, paths, False, paths["base_hf"], ["model.safetensors"]),
        BASE_EPOCHS,
    )
    base_id = f"{key}_base"
    record(base_id, base, base_dir, "clean")
    base_step = cases[base_id]["optimizer_step"]
    last = f"epoch_{BASE_EPOCHS - 1}"
    for name, expect in VARIANTS[key]:
        run_dir = root / name
        if name == "resume_clean":  # torchtune resumes in the run's own output folder
            shutil.copytree(base_dir, run_dir)
            # LoRA resumes read the base weights from checkpoint_dir, the adapter from the run
            files = ["model.safetensors"] if key == "lora" else [f"{last}/{shard}"]
            cfg = recipe_config(key, run_dir, paths, True, paths["base_hf"], files)
            recipe = run_recipe(key, cfg, 1)
            if recipe.epochs_run != BASE_EPOCHS + 1:
                raise AssertionError(f"{key}: epochs_run {recipe.epochs_run} after the resume")
            record(f"{key}_{name}", recipe, run_dir, expect, resume_of=base_id)
        else:  # the fine-tune restarted from epoch_1's weights, without the recipe state
            cfg = recipe_config(key, run_dir, paths, False, base_dir / last, [shard])
            recipe = run_recipe(key, cfg, 1)
            record(
                f"{key}_{name}",
                recipe,
                run_dir,
                expect,
                resume_of=base_id,
                also=["scheduler_not_restored"],
                shape_visible=False,
            )
            if cases[f"{key}_{name}"]["optimizer_step"] >= base_step:
                raise AssertionError(f"{key}: the restarted optimizer did not start over")
    return cases


def all_cases(out: Path) -> dict[str, Any]:
    inputs_dir = fresh_dir(out / "inputs")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HF_DATASETS_CACHE"] = str(inputs_dir / "hf_datasets_cache")
    paths = inputs(inputs_dir)
    names = hf_names(paths["base_hf"])
    cases: dict[str, Any] = {}
    for key in PLAN:
        cases.update(setup_cases(out, key, paths, names))
    shutil.rmtree(inputs_dir / "hf_datasets_cache", ignore_errors=True)
    return cases


def planned_cases() -> dict[str, dict[str, Any]]:
    """Case id -> {"setup", "expect", "resume_of"?}: what a run of this maker writes."""
    plan: dict[str, dict[str, Any]] = {}
    for key, (label, _, _) in PLAN.items():
        plan[f"{key}_base"] = {"setup": label, "expect": "clean"}
        for name, expect in VARIANTS[key]:
            plan[f"{key}_{name}"] = {"setup": label, "expect": expect, "resume_of": f"{key}_base"}
    return plan


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"torchtune": all_cases}


def main(argv: list[str]) -> int:
    sys.path.insert(0, side_folder("torchtune", "TORCHTUNE_SIDE_DIR", "torchtune"))
    from importlib.metadata import version as dist_version

    import torchtune

    version = f"torch {torch.__version__}, torchtune {torchtune.__version__}"
    version += f", torchao {dist_version('torchao')}"
    return run_maker(main_out_dir(argv), "realworld_tune", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
