"""Real ColossalAI 0.5.0 ``HybridParallelPlugin(tp_size=2)`` + ``booster.boost`` outcomes.

Usage: ``python tests/fixture_makers/fit_maker.py OUT_DIR``

Under ``torch.distributed.run --nproc-per-node 2`` (gloo, CPU, transformers 4.51.3 first on
PYTHONPATH), for each tiny Llama / Qwen2 / Mistral / Mixtral / GPT-2 model built from a
transformers config with a real head ratio: rank 0 saves it with ``save_pretrained`` to
``OUT_DIR/<case>/``, then both ranks try ``booster.boost`` at tp 2. ``manifest.json`` records, per
case, whether boost succeeded, the exception otherwise, and after a success the parameter elements
each rank holds and the rows of its embedding (the padded vocab split). ``ckpt-explorer fit``'s
verdicts and numbers are checked against these in tests/test_fit.py.

CPU shims (see the project's SETUP notes): colossalai's CpuAccelerator RNG methods raise "not
supported for cpu accelerator" when ShardFormer builds ``VocabParallelEmbedding1D``; they are
pointed at torch's CPU RNG. ``torch.distributed.is_hccl_available`` (absent in torch 2.13) returns
False.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

TP = 2
TIMEOUT_S = 600
# case -> (config class, kwargs); vocab 1000 pads to 1024 at tp 2
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama_32h_8kv": (
        "LlamaConfig",
        dict(hidden_size=256, num_attention_heads=32, num_key_value_heads=8, intermediate_size=512),
    ),
    "llama_4h_1kv": (
        "LlamaConfig",
        dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, intermediate_size=128),
    ),
    "llama_odd_intermediate": (
        "LlamaConfig",
        dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=129),
    ),
    "qwen2_28h_4kv": (
        "Qwen2Config",
        dict(hidden_size=224, num_attention_heads=28, num_key_value_heads=4, intermediate_size=448),
    ),
    "qwen2_6h_3kv": (
        "Qwen2Config",
        dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, intermediate_size=96),
    ),
    "mistral_32h_8kv": (
        "MistralConfig",
        dict(hidden_size=256, num_attention_heads=32, num_key_value_heads=8, intermediate_size=512),
    ),
    "mistral_12h_3kv": (
        "MistralConfig",
        dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=3, intermediate_size=192),
    ),
    "mixtral_32h_8kv_4e": (
        "MixtralConfig",
        dict(
            hidden_size=256,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=128,
            num_local_experts=4,
            num_experts_per_tok=2,
        ),
    ),
    "gpt2_4h": ("GPT2Config", dict(n_embd=64, n_head=4, n_layer=2, n_positions=64)),
    "gpt2_3h": ("GPT2Config", dict(n_embd=48, n_head=3, n_layer=2, n_positions=64)),
}
COMMON = dict(vocab_size=1000)
SAVE_CASE = "llama_32h_8kv"  # also saved from tp 2: does the file keep the padded vocab rows?
DECODER = dict(num_hidden_layers=2, max_position_embeddings=64)
# pipeline cases (tp 1, pp 2): same Llama shape, 2 layers vs 1 layer
PP_CASES = {"llama_2layers_pp2": 2, "llama_1layer_pp2": 1}
CASES.update({k: ("LlamaConfig", dict(CASES["llama_32h_8kv"][1])) for k in PP_CASES})


def _config(name: str) -> Any:
    import transformers

    cls, kw = CASES[name]
    extra = {} if cls == "GPT2Config" else dict(DECODER)
    if name in PP_CASES:
        extra["num_hidden_layers"] = PP_CASES[name]
    return getattr(transformers, cls)(**COMMON, **extra, **kw)


def _shims() -> None:
    import torch
    import torch.distributed as dist
    from colossalai.accelerator.cpu_accelerator import CpuAccelerator

    if not hasattr(dist, "is_hccl_available"):
        dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    patches = {
        "get_rng_state": lambda self, device=None: torch.get_rng_state(),
        "get_rng_state_all": lambda self: [torch.get_rng_state()],
        "set_rng_state": lambda self, s, device=None: torch.set_rng_state(s),
        "set_rng_state_all": lambda self, s: torch.set_rng_state(s[0]),
        "manual_seed": lambda self, s: torch.manual_seed(s),
        "manual_seed_all": lambda self, s: torch.manual_seed(s),
    }
    for k, v in patches.items():
        setattr(CpuAccelerator, k, v)


def _save_at_tp(booster: Any, boosted: Any, out: Path, name: str) -> dict[str, Any]:
    """``booster.save_model`` at tp 2 (sharded); what the saved embedding holds."""
    import torch

    folder = out / f"{name}_saved_tp{TP}"
    booster.save_model(boosted, str(folder), shard=True, size_per_shard=1)
    rows = None
    for f in sorted(folder.glob("pytorch_model-*.bin")):
        for k, t in torch.load(f, map_location="cpu", weights_only=True).items():
            if k.endswith("embed_tokens.weight"):
                rows = int(t.shape[0])
    return {"path": folder.name, "embed_rows": rows}


def _gather(value: int) -> list[int]:
    """``value`` of every rank, by rank (tp ranks at pp 1, pipeline stages at tp 1)."""
    import torch.distributed as dist

    got: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(got, value)
    return [int(v) for v in got]


def worker(out: Path, result: Path) -> None:
    import torch
    import torch.distributed as dist

    _shims()
    import colossalai
    import transformers
    from colossalai.booster import Booster
    from colossalai.booster.plugin import HybridParallelPlugin

    colossalai.launch_from_torch(backend="gloo")
    rank = dist.get_rank()
    cases: dict[str, Any] = {}
    for name in CASES:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(_config(name))
        if rank == 0:
            model.save_pretrained(out / name)
        dist.barrier()
        tp, pp = (1, 2) if name in PP_CASES else (TP, 1)
        entry: dict[str, Any] = {"path": name, "tp": tp, "pp": pp}
        entry["params_total"] = model.num_parameters()
        try:
            micro = {"num_microbatches": 2} if pp > 1 else {}
            plugin = HybridParallelPlugin(tp_size=tp, pp_size=pp, **micro)
            boosted, *_ = Booster(plugin=plugin).boost(model)
            embed = boosted.unwrap().get_input_embeddings().weight
            entry.update(
                boosted=True,
                params_per_rank=_gather(sum(p.numel() for p in boosted.parameters())),
                embed_rows_per_rank=int(embed.shape[0]),
            )
            if name == SAVE_CASE:
                entry["saved_at_tp2"] = _save_at_tp(Booster(plugin=plugin), boosted, out, name)
        except Exception as e:  # the outcome being recorded
            entry.update(boosted=False, error=f"{type(e).__name__}: {e}"[:500])
            entry["traceback_tail"] = traceback.format_exc()[-800:]
        cases[name] = entry
        dist.barrier()
    if rank == 0:
        result.write_text(
            json.dumps(
                {
                    "tool": "colossalai",
                    "version": colossalai.__version__,
                    "transformers": transformers.__version__,
                    "cases": cases,
                },
                indent=2,
            )
        )
    dist.barrier()


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "--worker":
        from _manifest import leave_worker

        worker(Path(argv[2]), Path(argv[3]))
        leave_worker()
        return 0
    if len(argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    from _manifest import free_port, path_first, run_session, side_folder, torchrun_cmd

    out = Path(argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = path_first(
        dict(os.environ), side_folder("transformers", "CAI_TRANSFORMERS4_DIR", "transformers4")
    )
    port = str(free_port())
    env.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    result = out / "manifest.tmp.json"
    script = (str(Path(__file__).resolve()), "--worker", str(out), str(result))
    t0 = time.time()
    run_session(torchrun_cmd(TP, port, *script), env, "torchrun", result, TIMEOUT_S)
    print(f"[fit_maker] {time.time() - t0:.1f}s", file=sys.stderr)
    result.replace(out / "manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
