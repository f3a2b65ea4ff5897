"""Real-world training states, ColossalAI writers the other makers do not cover.

Usage: ``python tests/fixture_makers/realworld_colossal_extra_maker.py OUT_DIR``

Everything is written by the real ColossalAI 0.5.0 on CPU (gloo). The corpus contract
(``setup``, ``expect``, ``resume_of``, ``id_names``) is in tests/realworld_check.py.

* ``lora_ddp``: ``Booster(TorchDDPPlugin())``, ``booster.enable_lora(model, lora_config=...)``
  (PEFT ``get_peft_model`` on a tiny HF Llama, transformers 5, LoRA on q/v), AdamW over the
  trainable (LoRA) params, ColossalAI's ``CosineAnnealingWarmupLR``; saved as ColossalChat
  saves a LoRA run: ``epoch-E_step-S/{modeling/ (booster.save_lora_as_pretrained:
  adapter_config.json, adapter_model.safetensors, README.md), optimizer/ (sharded
  save_optimizer), lr_scheduler, running_states.json}``. Resumes: ``enable_lora(model,
  pretrained_dir=modeling)`` (PEFT ``from_pretrained(is_trainable=True)``) then
  ``load_optimizer`` / ``load_lr_scheduler``; planted faults: the scheduler not loaded, the
  optimizer not loaded. SUBSTITUTED on resume (as in realworld_torch_maker.py): the CPU
  accelerator's ``synchronize`` raises and ``load_optimizer`` calls it; a no-op for the loads.
* ``moe_pp2``: ``MoeHybridParallelPlugin(tp_size=1, pp_size=2, ep_size=1, zero_stage=0,
  precision="fp32")`` on a tiny HF Mixtral (transformers 4.51.3 from the side folder, as the
  HybridParallel cases), ``booster.execute_pipeline`` for 2 steps under 2 processes, then
  ``save_model(shard=True)`` and ``save_optimizer(shard=True)``: MoE names
  ``pytorch_model-stage-0000S-0000E-shard-00001.bin`` (``S`` = pp rank + 1, ``E`` = ep rank + 1),
  ``pytorch_optim-stage-...``, the merged index and ``pytorch_optim_group.bin``. Shims:
  ``torch.distributed.is_hccl_available`` (torch 2.13 lacks it) and ``Tensor.cuda`` the
  identity (``MoECheckpointIO.gather_from_sharded_optimizer_state`` calls ``v.cuda()``; nothing
  is gathered at ep 1, zero 0). A base state only.

What does not run here (tried): ``TorchFSDPPlugin`` (torch's FSDP refuses the CPU: "FSDP needs
a non-CPU accelerator device"); MoE with ``ep_size > 1`` (plain DDP is refused for it, "dp_group
and moe_dp_group are expected to be the same", and ZeRO needs bf16/fp16, which asserts a
CUDA/NPU accelerator here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import (
    free_port,
    fresh_dir,
    launcher_env,
    leave_worker,
    main_out_dir,
    path_first,
    run_maker,
    side_folder,
    tensor_entry,
    torchrun_cmd,
)

SEED = 1234
CHILD_FLAG = "--moe-child"
BASE_STEPS, RESUME_STEPS = 4, 3
LLAMA_KW: dict[str, Any] = dict(
    vocab_size=64,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=32,
)
LORA_LABEL = "ColossalAI TorchDDPPlugin enable_lora, ColossalChat layout"
MOE_LABEL = "ColossalAI MoeHybridParallelPlugin pp=2, sharded model + optimizer"
# (variant, expect, load optimizer, load scheduler)
LORA_VARIANTS: tuple[tuple[str, str, bool, bool], ...] = (
    ("resume_clean", "clean", True, True),
    ("scheduler_not_loaded", "scheduler_not_restored", True, False),
    ("optimizer_not_loaded", "optimizer_moments_reset", False, True),
)


def batch(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + step)
    return torch.randint(0, LLAMA_KW["vocab_size"], (2, 8), generator=g)


# ----------------------------------------------------------------------------------------------
# LoRA through the Booster (this process, gloo world of 1)
# ----------------------------------------------------------------------------------------------


class LoraRun:
    def __init__(self, booster: Any, pretrained: Path | None = None) -> None:
        from colossalai.nn.lr_scheduler import CosineAnnealingWarmupLR
        from peft import LoraConfig
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(SEED)
        model = LlamaForCausalLM(LlamaConfig(**LLAMA_KW))
        lora = LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        )
        if pretrained is None:
            model = booster.enable_lora(model, lora_config=lora)
        else:
            model = booster.enable_lora(model, pretrained_dir=str(pretrained))
        self.peft = model
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95))
        scheduler = CosineAnnealingWarmupLR(optimizer, total_steps=20, warmup_steps=2)
        self.booster = booster
        self.model, self.optimizer, _, _, self.scheduler = booster.boost(
            model, optimizer, lr_scheduler=scheduler
        )
        self.step = 0

    def train(self, steps: int) -> None:
        self.model.train()
        for _ in range(steps):
            ids = batch(self.step)
            loss = self.model(input_ids=ids, labels=ids).loss
            self.booster.backward(loss, self.optimizer)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()
            self.step += 1

    def save(self, root: Path) -> Path:
        """ColossalChat's save_checkpoint, with the LoRA adapter in ``modeling/``."""
        folder = root / f"epoch-0_step-{self.step}"
        (folder / "modeling").mkdir(parents=True, exist_ok=True)
        self.booster.save_lora_as_pretrained(
            self.model, str(folder / "modeling"), use_safetensors=True
        )
        self.booster.save_optimizer(self.optimizer, str(folder / "optimizer"), shard=True)
        self.booster.save_lr_scheduler(self.scheduler, str(folder / "lr_scheduler"))
        running = {"epoch": 0, "step": self.step, "sample_start_index": self.step * 2}
        (folder / "running_states.json").write_text(json.dumps(running), encoding="utf-8")
        return folder

    def load(self, folder: Path, load_opt: bool, load_sched: bool) -> None:
        from colossalai.accelerator.cpu_accelerator import CpuAccelerator

        self.step = json.loads((folder / "running_states.json").read_text())["step"]
        if load_opt:
            real_sync = CpuAccelerator.synchronize
            CpuAccelerator.synchronize = lambda self, device=None: None  # type: ignore[method-assign]
            try:
                self.booster.load_optimizer(self.optimizer, str(folder / "optimizer"))
            finally:
                CpuAccelerator.synchronize = real_sync  # type: ignore[method-assign]
        if load_sched:
            self.booster.load_lr_scheduler(self.scheduler, str(folder / "lr_scheduler"))

    def id_names(self) -> dict[str, str]:
        """Optimizer ids -> the names ``save_lora_as_pretrained`` gives the adapter weights."""
        names = {id(p): n for n, p in self.peft.named_parameters()}
        out: dict[str, str] = {}
        i = 0
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                out[str(i)] = names[id(p)].replace(".default.", ".")
                i += 1
        return out

    def optimizer_step(self) -> float:
        st = (
            self.optimizer.optim.state if hasattr(self.optimizer, "optim") else self.optimizer.state
        )
        return max((float(s["step"]) for s in st.values()), default=0.0)


def lora_cases(out: Path) -> dict[str, Any]:
    import colossalai
    import torch.distributed as dist
    from colossalai.booster import Booster
    from colossalai.booster.plugin import TorchDDPPlugin

    if not hasattr(dist, "is_hccl_available"):  # colossalai 0.5.0 calls it; torch 2.13 lacks it
        dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    os.environ.update(launcher_env())
    colossalai.launch_from_torch(backend="gloo", seed=SEED)
    root = fresh_dir(out / "lora_ddp")
    cases: dict[str, Any] = {}

    def record(case_id: str, run: LoraRun, path: Path, expect: str, **kw: Any) -> None:
        from safetensors.torch import load_file

        adapter = load_file(path / "modeling" / "adapter_model.safetensors")
        truth = run.id_names()
        missing = [n for n in truth.values() if n not in adapter]
        if missing:
            raise AssertionError(f"{case_id}: optimizer params not in the adapter file: {missing}")
        cases[case_id] = {
            "path": path.relative_to(out).as_posix(),
            "family": "training-state",
            "kind": "training_state",
            "setup": LORA_LABEL,
            "expect": expect,
            "id_names": {"optimizer": truth},
            "global_steps": run.step,
            "optimizer_step": run.optimizer_step(),
            "scheduler_last_epoch": run.scheduler.last_epoch,
            "after_scheduler_last_epoch": run.scheduler.after_scheduler.last_epoch,
            "lr": run.optimizer.param_groups[0]["lr"],
            "adapter_tensors": {n: tensor_entry(t) for n, t in adapter.items()},
            **kw,
        }

    try:
        booster = Booster(plugin=TorchDDPPlugin())
        base = LoraRun(booster)
        base.train(BASE_STEPS)
        base_path = base.save(root / "base")
        record("lora_ddp_base", base, base_path, "clean")
        base_step = base.optimizer_step()
        lrs: dict[str, float] = {}
        for name, expect, load_opt, load_sched in LORA_VARIANTS:
            run = LoraRun(Booster(plugin=TorchDDPPlugin()), pretrained=base_path / "modeling")
            run.load(base_path, load_opt, load_sched)
            if (run.optimizer_step() == base_step) != load_opt:
                raise AssertionError(f"lora {name}: optimizer step {run.optimizer_step()}")
            run.train(RESUME_STEPS)
            path = run.save(root / name)
            record(f"lora_ddp_{name}", run, path, expect, resume_of="lora_ddp_base")
            lrs[name] = run.optimizer.param_groups[0]["lr"]
        # ColossalAI's warm-up scheduler stops its own last_epoch at the warm-up length and
        # counts on in after_scheduler: the learning rate shows the fault
        if lrs["scheduler_not_loaded"] == lrs["resume_clean"]:
            raise AssertionError("lora: the scheduler fault did not change the learning rate")
    finally:
        dist.destroy_process_group()
    return cases


# ----------------------------------------------------------------------------------------------
# MoE, pipeline parallel 2 (two processes under torchrun, transformers 4.51.3)
# ----------------------------------------------------------------------------------------------


def _moe_child(out: str, result: str) -> None:
    import torch.distributed as dist

    dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    import colossalai
    from colossalai.booster import Booster
    from colossalai.booster.plugin import MoeHybridParallelPlugin
    from transformers import MixtralConfig, MixtralForCausalLM

    colossalai.launch_from_torch(backend="gloo", seed=SEED)
    torch.manual_seed(SEED)
    config = MixtralConfig(**LLAMA_KW, num_local_experts=2, num_experts_per_tok=1)
    model = MixtralForCausalLM(config)
    names = {id(p): n for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    truth = {str(i): names[id(p)] for i, p in enumerate(optimizer.param_groups[0]["params"])}
    plugin = MoeHybridParallelPlugin(
        tp_size=1,
        pp_size=2,
        ep_size=1,
        zero_stage=0,
        precision="fp32",
        microbatch_size=1,
        num_microbatches=2,
    )
    booster = Booster(plugin=plugin)
    model, optimizer, _, _, _ = booster.boost(model, optimizer)
    for step in range(2):
        ids = batch(step)
        it = iter([{"input_ids": ids, "labels": ids}])
        booster.execute_pipeline(it, model, lambda o, i: o.loss, optimizer, return_loss=True)
        optimizer.step()
        optimizer.zero_grad()
    folder = Path(out) / "moe_pp2" / "base"
    booster.save_model(model, str(folder / "modeling"), shard=True)
    booster.save_optimizer(optimizer, str(folder / "optimizer"), shard=True)
    dist.barrier()
    if dist.get_rank() == 0:
        Path(result).write_text(json.dumps({"truth": truth, "steps": 2}))
    dist.barrier()
    dist.destroy_process_group()
    leave_worker()


_MOE: dict[str, Any] = {}


def start_moe(out: Path) -> None:
    """Start the 2-process MoE job; it runs while this process makes the LoRA cases."""
    fresh_dir(out / "moe_pp2")
    result = out / ".moe-result.json"
    env = path_first(
        dict(os.environ), side_folder("transformers", "CAI_TRANSFORMERS4_DIR", "transformers4")
    )
    env["OMP_NUM_THREADS"] = "1"
    script = (str(Path(__file__).resolve()), CHILD_FLAG, str(out), str(result))
    cmd = torchrun_cmd(2, free_port(), *script)
    log = open(out / ".moe-log.txt", "w+", encoding="utf-8")  # noqa: SIM115
    _MOE.update(proc=subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log=log)
    _MOE["result"] = result


def moe_cases(out: Path) -> dict[str, Any]:
    proc, log, result = _MOE["proc"], _MOE["log"], _MOE["result"]
    proc.wait(timeout=600)
    log.seek(0)
    text = log.read()
    log.close()
    (out / ".moe-log.txt").unlink()
    if proc.returncode != 0 or not result.is_file():
        raise RuntimeError(f"MoE job exited {proc.returncode}:\n{text[-6000:]}")
    data = json.loads(result.read_text())
    result.unlink()
    folder = out / "moe_pp2" / "base"
    return {
        "moe_pp2_base": {
            "path": folder.relative_to(out).as_posix(),
            "family": "training-state",
            "kind": "training_state",
            "setup": MOE_LABEL,
            "expect": "clean",
            "id_names": {"optimizer": data["truth"]},
            "global_steps": data["steps"],
            "model_files": sorted(p.name for p in (folder / "modeling").iterdir()),
            "optimizer_files": sorted(p.name for p in (folder / "optimizer").iterdir()),
        }
    }


# ----------------------------------------------------------------------------------------------


def planned_cases() -> dict[str, dict[str, Any]]:
    """Case id -> {"setup", "expect", "resume_of"?}: what a run of this maker writes."""
    plan: dict[str, dict[str, Any]] = {"lora_ddp_base": {"setup": LORA_LABEL, "expect": "clean"}}
    for name, expect, _, _ in LORA_VARIANTS:
        plan[f"lora_ddp_{name}"] = {
            "setup": LORA_LABEL,
            "expect": expect,
            "resume_of": "lora_ddp_base",
        }
    plan["moe_pp2_base"] = {"setup": MOE_LABEL, "expect": "clean"}
    return plan


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {
    "lora_ddp": lora_cases,
    "moe_pp2": moe_cases,
}


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == CHILD_FLAG:
        _moe_child(argv[2], argv[3])
        return 0
    import colossalai

    out = main_out_dir(argv)
    out.mkdir(parents=True, exist_ok=True)
    start_moe(out)
    version = f"torch {torch.__version__}, colossalai {colossalai.__version__}"
    try:
        return run_maker(out, "realworld_colossal_extra", version, CASES)
    finally:
        if _MOE["proc"].poll() is None:
            _MOE["proc"].kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
