"""Run the real loaders on prepared cases and report what each did (tests only).

Usage: ``python tests/loader_oracle.py FAMILY CASES.json RESULT.json`` where FAMILY is
``colossalai`` (Booster + TorchDDPPlugin, gloo world of 1), ``hf`` (transformers from the
environment, torch.load (also with map_location="cpu"), torch.jit.load, DCP, accelerate),
``deepspeed`` (CPU, gloo world of 1). Each case is ``{"id", "loader", "path", "model"}``;
the result maps id -> ``{"ok", "error", "message"}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

LLAMA_KW = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)


def _model(spec: str, path: str) -> Any:
    if spec == "cai_llama":  # tests/fixture_makers/colossalai_maker.py _tiny_llama(tie=True)
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(**LLAMA_KW, tie_word_embeddings=True))
    if spec == "config":
        from transformers import AutoConfig, AutoModelForCausalLM

        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    if spec == "ds_mlp":  # tests/fixture_makers/deepspeed_maker.py, fp32 variants
        from torch import nn

        return nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    raise ValueError(spec)


def _colossalai(cases: list[dict[str, Any]]) -> dict[str, Any]:
    import torch.distributed as dist

    if not hasattr(dist, "is_hccl_available"):
        dist.is_hccl_available = lambda: False
    import colossalai
    from colossalai.accelerator.cpu_accelerator import CpuAccelerator
    from colossalai.booster import Booster
    from colossalai.booster.plugin import TorchDDPPlugin
    from colossalai.nn.lr_scheduler import CosineAnnealingWarmupLR

    CpuAccelerator.synchronize = lambda self, device=None: None  # a CPU-only limitation
    colossalai.launch_from_torch(backend="gloo")
    booster = Booster(plugin=TorchDDPPlugin())
    boosted: dict[str, Any] = {}
    out = {}
    for c in cases:
        spec = c.get("model", "cai_llama")
        key = spec if spec != "config" else f"config:{c['model_path']}"
        if key not in boosted:
            model = _model(spec, c.get("model_path", c["path"]))
            optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
            sched = CosineAnnealingWarmupLR(optim, total_steps=10, warmup_steps=2)
            model, optim, _, _, sched = booster.boost(model, optim, lr_scheduler=sched)
            boosted[key] = (model, optim, sched)
        model, optim, sched = boosted[key]
        loader = c["loader"]
        path = c["path"]
        calls = {
            "colossalai.load_model": lambda m=model, p=path: booster.load_model(m, p),
            "colossalai.load_optimizer": lambda o=optim, p=path: booster.load_optimizer(o, p),
            "colossalai.load_lr_scheduler": lambda s=sched, p=path: booster.load_lr_scheduler(s, p),
        }
        out[c["id"]] = _try(calls[loader])
    return out


def _try(fn: Any) -> dict[str, Any]:
    try:
        result = fn()
    except BaseException as e:
        return {"ok": False, "error": type(e).__name__, "message": str(e)}
    if isinstance(result, tuple) and result and result[0] is None:  # DeepSpeed (None, None)
        return {"ok": False, "error": "", "message": "returned (None, None)"}
    return {"ok": True, "error": "", "message": ""}


def _hf(cases: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for c in cases:
        loader, path = c["loader"], c["path"]
        if loader.startswith("transformers.from_pretrained"):
            from transformers import AutoModelForCausalLM

            kw = {"use_safetensors": False} if "use_safetensors=False" in loader else {}
            out[c["id"]] = _try(lambda: AutoModelForCausalLM.from_pretrained(path, **kw))  # noqa: B023
        elif loader == "torch.load":
            out[c["id"]] = _try(lambda: torch.load(path))  # noqa: B023
        elif loader == "torch.load[map_location=cpu]":
            out[c["id"]] = _try(lambda: torch.load(path, map_location="cpu"))  # noqa: B023
        elif loader == "torch.jit.load":
            out[c["id"]] = _try(lambda: torch.jit.load(path))  # noqa: B023
        elif loader == "dcp.load":
            import torch.distributed.checkpoint as dcp

            out[c["id"]] = _try(lambda: dcp.load({}, checkpoint_id=path))  # noqa: B023
        elif loader == "accelerate.load_state":
            out[c["id"]] = _try(lambda: _accelerate(path))  # noqa: B023
    return out


def _accelerate(path: str) -> None:
    """As tests/fixture_makers/realworld_hf_maker.py's accelerate_cases prepares them."""
    from accelerate import Accelerator
    from transformers import LlamaConfig, LlamaForCausalLM, get_linear_schedule_with_warmup

    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    accelerator = Accelerator(cpu=True)
    model = LlamaForCausalLM(cfg)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay}], lr=1e-3)
    sched = get_linear_schedule_with_warmup(opt, 1, 20)
    accelerator.prepare(model, opt, sched)
    accelerator.load_state(path)


def _deepspeed(cases: list[dict[str, Any]]) -> dict[str, Any]:
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    out = {}
    for c in cases:
        torch.manual_seed(0)
        model = _model("ds_mlp", c["path"])
        groups = [
            {"params": list(model[0].parameters())},
            {"params": list(model[1].parameters()) + list(model[3].parameters()), "lr": 1e-2},
        ]
        config = {
            "train_batch_size": 4,
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": c["stage"]},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 1000,
        }
        engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=torch.optim.AdamW(groups, lr=1e-3), config=config
        )
        out[c["id"]] = _try(lambda: engine.load_checkpoint(c["path"]))  # noqa: B023
    return out


if __name__ == "__main__":
    family, cases_file, result_file = sys.argv[1:4]
    cases = json.loads(Path(cases_file).read_text())
    run = {"colossalai": _colossalai, "hf": _hf, "deepspeed": _deepspeed}[family]
    Path(result_file).write_text(json.dumps(run(cases)))
