"""Real-world training states, Megatron side: megatron-core ``dist_checkpointing`` and the
Megatron-LM legacy layout.

Usage: ``python tests/fixture_makers/realworld_megatron_maker.py OUT_DIR``

Every state is written by a tiny training run of megatron-core's own ``GPTModel`` (local layer
spec, ``TransformerConfig(use_cpu_initialization=True)``, every fusion off) wrapped in
megatron-core's own ``DistributedDataParallel``, with the optimizer from megatron-core's own
``get_megatron_optimizer`` (a ``ChainedOptimizer`` around ``FP32Optimizer``, or around the
``DistributedOptimizer``) and megatron-core's ``OptimizerParamScheduler`` built as Megatron-LM
builds it (``num_steps`` counts samples: ``step(increment=global_batch_size)`` per iteration).
The corpus contract (``setup``, ``expect``, ``resume_of``, ``id_names``) is in
tests/realworld_check.py.

What is real and what follows Megatron-LM's source by hand. Megatron-LM's training package
(``megatron/training``) is not on PyPI; only megatron-core is. Its ``save_checkpoint`` /
``load_checkpoint`` are therefore re-done here, step for step, from
``megatron/training/checkpointing.py`` (NVIDIA/Megatron-LM, commit d98e8a64, 2026-08):
``get_checkpoint_name`` (``iter_{:07d}/mp_rank_{tp:02d}[_{pp:03d}]/model_optim_rng.pt``),
``get_checkpoint_tracker_filename`` (``latest_checkpointed_iteration.txt`` holding the
iteration), ``get_rng_state`` (a list of one dict per DP rank with ``random_rng_state``,
``np_rng_state``, ``torch_rng_state``, ``cuda_rng_state``, ``rng_tracker_states``; for
``torch_dist`` a ``ShardedObject('rng_state', list, (pp, tp), (pp_rank, tp_rank))``),
``generate_state_dict`` (``args``, ``checkpoint_version`` 3.0, ``iteration``, ``model``,
``optimizer``, ``opt_param_scheduler``, ``rng_state``, then
``num_floating_point_operations_so_far``), ``_build_sharded_state_dict_metadata`` (the
``content_metadata``), ``get_distributed_optimizer_checkpoint_name`` (``distrib_optim.pt``
beside ``model_optim_rng.pt``) and the load order of ``load_checkpoint`` (model, then the
optimizer and the scheduler unless ``--no-load-optim``, then the RNG unless
``--no-load-rng``); ``args`` is an ``argparse.Namespace`` with the fields Megatron-LM's
``arguments.py`` defines for this run (``consumed_train_samples`` moved on per iteration as
``train`` does). Everything inside those dicts comes from megatron-core's own objects:
``model.sharded_state_dict()`` / ``state_dict_for_save_checkpoint()``,
``optimizer.sharded_state_dict(...)`` / ``state_dict()`` / ``save_parameter_state(...)``,
``opt_param_scheduler.state_dict()``, ``dist_checkpointing.save`` with
``TorchDistSaveShardedStrategy`` (optionally wrapped in ``FullyParallelSaveStrategyWrapper``)
and ``dist_checkpointing.load``; the legacy files are written with ``torch.save`` as
Megatron-LM writes them.

CUDA shims (none shapes a file): ``torch.cuda.synchronize`` a no-op and
``torch.cuda.current_device`` returning None (so ``device=torch.cuda.current_device()``
allocates on CPU); ``torch.tensor/zeros/empty/ones/full(device="cuda")`` allocate on CPU and
``Tensor.cuda`` is the identity (the optimizers' scratch buffers); ``GlobalMemoryBuffer.
get_tensor`` returns ``torch.empty`` on CPU; each parameter's ``type()`` answers
``torch.cuda.FloatTensor`` (the optimizers' dtype dispatch); a stand-in CUDA generator
(``torch.cuda.manual_seed`` / ``get_rng_state`` and megatron's ``_set_cuda_rng_state``) whose
state is the 16 bytes torch's CUDA generator has (seed u64, offset i64), so that megatron-core's
own ``model_parallel_cuda_manual_seed`` fills the RNG tracker (``model-parallel-rng``,
``data-parallel-rng``, ``expert-parallel-rng``) as on a GPU. Gradient clipping is off
(``clip_grad=0``: megatron-core's clip kernels assert CUDA grads).

Setups (each: a base state after 4 iterations, then states saved after resuming from it):

* ``mcore_gpt``: torch_dist, a GPT (LayerNorm, GELU MLP, biases, learned absolute positions),
  gloo world of 1. Faults: scheduler not loaded (a loop that restores model and optimizer
  only), optimizer not loaded (``--no-load-optim``, which skips the scheduler too: ``also``),
  RNG not saved (``--no-save-rng``). No param-order fault: dist_checkpointing keys the
  optimizer states by parameter (``optimizer.state.exp_avg.<key>``), so a reordered optimizer
  loads right.
* ``mcore_llama``: torch_dist, a Llama-style model (RMSNorm, SwiGLU, GQA 4 heads / 2 groups,
  RoPE, no biases, untied output). The base case also records the HF ``LlamaForCausalLM``
  state_dict that is the same model (``hf_equivalent/model.safetensors``, converted from
  megatron-core's names here, with megatron-core's logits on a probe batch in ``probe.pt``;
  the test checks HF's logits on it).
* ``mcore_gpt_fully_parallel``: the GPT saved through ``FullyParallelSaveStrategyWrapper`` and
  loaded through ``FullyParallelLoadStrategyWrapper``.
* ``mcore_gpt_distopt``: the GPT with the DistributedOptimizer, torch_dist with
  ``distrib_optim_sharding_type`` ``dp_reshardable`` (Megatron-LM's default); one base with
  ``fully_reshardable`` (``--dist-ckpt-optim-fully-reshardable``).
  The DistributedOptimizer setups train in bf16 (``Float16Module``, fp32 main params, grads
  reduced in fp32) as Megatron-LM runs it, and have no clean resume: without TE or Apex,
  megatron-core 0.16.1 builds torch's Adam, whose per-param ``step`` its DistributedOptimizer
  cannot load back (``state_dict`` asserts one step over an empty state; ``distrib_optim.pt``
  holds no ``step`` that ``load_parameter_state`` wants). A resume that does not load the
  optimizer (``--no-load-optim``) runs.
* ``legacy_tp2``: the Llama-style model at tensor parallel 2 (megatron-core's own
  Column/RowParallelLinear and VocabParallelEmbedding, gloo world of 2), ``--ckpt-format torch``:
  ``iter_0000004/mp_rank_0{0,1}/model_optim_rng.pt``. Faults as for ``mcore_gpt`` plus the
  optimizer rebuilt with its params in another order (layer 0's and layer 1's same-shaped
  params trade places in the groups) and its old state loaded by position
  (``"shape_visible": false``).
* ``legacy_tp2_distopt``: the same with the DistributedOptimizer: ``distrib_optim.pt`` beside
  each ``model_optim_rng.pt`` (``save_parameter_state``).
* ``dist_tp2``: the same tp-2 run saved with torch_dist (two ranks, each writing its shards).

The base states of ``mcore_gpt``, ``mcore_llama`` and ``legacy_tp2`` record a probe
(``probe`` in the case: ``probes/<case id>.pt``, the tokens of one batch and megatron-core's
logits on it, at tp 2 gathered over the tensor ranks), the oracle of conversions to HF.

``id_names`` maps the torch optimizer ids of the live optimizer to parameter names (where the
file has integer ids: the legacy ``model_optim_rng.pt``); for torch_dist cases, where the file
keys states by sharded key, ``sharded_keys`` records per parameter (state_dict name) the
sharded key, global shape, global offset and the layer axis the sharded tensors carry, and
``optimizer_keys`` the optimizer state keys of each parameter.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _manifest import free_port, fresh_dir, leave_worker, main_out_dir, run_maker, tensor_entry

EXTRAS = ".megatron-extras"  # children's results, removed when the maker ends
# A child runs from ``-c``: dist_checkpointing's async writer starts a ``spawn`` Manager, which
# re-imports a script ``__main__`` (torch and all) but has nothing to import for ``-c``.
CHILD_CODE = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import realworld_megatron_maker as m; "
    "m._child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])"
)
SEED = 1234
VOCAB, SEQ, MBS = 64, 8, 4
BASE_STEPS = 4
LR, MIN_LR, WARMUP_ITERS, TRAIN_ITERS = 1e-3, 1e-4, 2, 20
CHECKPOINT_VERSION = 3.0

MODELS: dict[str, dict[str, Any]] = {
    "gpt": dict(
        num_layers=2,
        hidden_size=16,
        num_attention_heads=4,
        num_query_groups=4,
        ffn_hidden_size=64,
        normalization="LayerNorm",
        swiglu=False,
        add_bias_linear=True,
        position_embedding_type="learned_absolute",
        untie_embeddings_and_output_weights=True,
    ),
    "llama": dict(
        num_layers=2,
        hidden_size=16,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=32,
        normalization="RMSNorm",
        swiglu=True,
        add_bias_linear=False,
        position_embedding_type="rope",
        untie_embeddings_and_output_weights=True,
    ),
}

# (variant, expect, steps after the resume, load optimizer, load scheduler, save rng, reorder)
Variant = tuple[str, str, int, bool, bool, bool, bool]
RESUME_CLEAN: Variant = ("resume_clean", "clean", 3, True, True, True, False)
SCHED_NOT_LOADED: Variant = (
    "scheduler_not_loaded",
    "scheduler_not_restored",
    3,
    True,
    False,
    True,
    False,
)
NO_LOAD_OPTIM_1: Variant = (
    "optimizer_not_loaded_1",
    "optimizer_moments_reset",
    1,
    False,
    False,
    True,
    False,
)
NO_LOAD_OPTIM_3: Variant = (
    "optimizer_not_loaded_3",
    "optimizer_moments_reset",
    3,
    False,
    False,
    True,
    False,
)
RNG_NOT_SAVED: Variant = ("rng_not_saved", "rng_state_missing", 3, True, True, False, False)
PARAM_ORDER: Variant = ("param_order", "param_order_changed", 3, True, True, True, True)

# setup key -> (label, model, tp, ckpt format, distributed optimizer, save mode, variants)
Setup = tuple[str, str, int, str, bool, str, tuple[Variant, ...]]
PLAN: dict[str, Setup] = {
    "mcore_gpt": (
        "megatron-core dist_checkpointing torch_dist, GPT",
        "gpt",
        1,
        "torch_dist",
        False,
        "plain",
        (RESUME_CLEAN, SCHED_NOT_LOADED, NO_LOAD_OPTIM_1, NO_LOAD_OPTIM_3, RNG_NOT_SAVED),
    ),
    "mcore_llama": (
        "megatron-core dist_checkpointing torch_dist, Llama-style (SwiGLU, GQA, RoPE)",
        "llama",
        1,
        "torch_dist",
        False,
        "plain",
        (RESUME_CLEAN, SCHED_NOT_LOADED),
    ),
    "mcore_gpt_fully_parallel": (
        "megatron-core dist_checkpointing torch_dist, fully parallel save/load",
        "gpt",
        1,
        "torch_dist",
        False,
        "fully_parallel",
        (RESUME_CLEAN,),
    ),
    "mcore_gpt_distopt": (
        "megatron-core dist_checkpointing torch_dist, DistributedOptimizer dp_reshardable",
        "gpt",
        1,
        "torch_dist",
        True,
        "plain",
        (NO_LOAD_OPTIM_3,),
    ),
    "legacy_tp2": (
        "Megatron-LM legacy torch format, tp=2 (mp_rank_00/01/model_optim_rng.pt)",
        "llama",
        2,
        "torch",
        False,
        "plain",
        (
            RESUME_CLEAN,
            SCHED_NOT_LOADED,
            NO_LOAD_OPTIM_1,
            NO_LOAD_OPTIM_3,
            RNG_NOT_SAVED,
            PARAM_ORDER,
        ),
    ),
    "legacy_tp2_distopt": (
        "Megatron-LM legacy torch format, tp=2, DistributedOptimizer (distrib_optim.pt)",
        "llama",
        2,
        "torch",
        True,
        "plain",
        (NO_LOAD_OPTIM_3,),
    ),
    "dist_tp2": (
        "megatron-core dist_checkpointing torch_dist, tp=2 (two ranks' shards)",
        "llama",
        2,
        "torch_dist",
        False,
        "plain",
        (RESUME_CLEAN,),
    ),
}
# setups whose base state gets a probe (tokens + megatron-core's logits: ``probe`` in the case)
PROBED = ("mcore_gpt", "mcore_llama", "legacy_tp2")
# setups run in the same child process (one megatron import each), by world size
CHILDREN: dict[str, tuple[int, tuple[str, ...]]] = {
    "world1": (1, ("mcore_gpt", "mcore_llama", "mcore_gpt_fully_parallel", "mcore_gpt_distopt")),
    "world2": (2, ("legacy_tp2", "legacy_tp2_distopt", "dist_tp2")),
}


# ----------------------------------------------------------------------------------------------
# CUDA shims (the module docstring says which and why)
# ----------------------------------------------------------------------------------------------


class StandInCudaGenerator:
    """The 16-byte state of torch's CUDA generator (seed u64, offset i64); nothing draws."""

    def __init__(self) -> None:
        self.seed, self.offset = 0, 0

    def manual_seed(self, seed: int) -> None:
        self.seed, self.offset = int(seed), 0

    def get_state(self, device: Any = "cuda") -> torch.Tensor:
        return torch.frombuffer(
            bytearray(struct.pack("<Qq", self.seed, self.offset)), dtype=torch.uint8
        )

    def set_state(self, state: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.seed, self.offset = struct.unpack("<Qq", bytes(state.tolist()))


def install_shims() -> None:
    from megatron.core.tensor_parallel import random as tp_random
    from megatron.core.utils import GlobalMemoryBuffer

    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    torch.cuda.current_device = lambda: None  # type: ignore[assignment,return-value]

    def on_cpu(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def make(*args: Any, **kwargs: Any) -> torch.Tensor:
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            return fn(*args, **kwargs)

        return make

    for name in ("tensor", "zeros", "empty", "ones", "full"):
        setattr(torch, name, on_cpu(getattr(torch, name)))
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]

    def get_tensor(self: Any, shape: Any, dtype: Any, name: Any, mem_alloc_context: Any = None):
        return torch.empty(shape, dtype=dtype)

    GlobalMemoryBuffer.get_tensor = get_tensor  # type: ignore[method-assign]
    gen = StandInCudaGenerator()
    torch.cuda.manual_seed = gen.manual_seed  # type: ignore[assignment]
    torch.cuda.get_rng_state = gen.get_state  # type: ignore[assignment]
    torch.cuda.random.get_rng_state = gen.get_state  # type: ignore[assignment]
    torch.cuda.set_rng_state = gen.set_state  # type: ignore[assignment]
    tp_random._set_cuda_rng_state = gen.set_state


def cuda_type(p: torch.nn.Parameter) -> Callable[..., str]:
    name = {torch.bfloat16: "BFloat16Tensor", torch.float16: "HalfTensor"}.get(
        p.dtype, "FloatTensor"
    )
    return lambda *a, **k: f"torch.cuda.{name}"


# ----------------------------------------------------------------------------------------------
# One run: the model, DDP, optimizer and scheduler as Megatron-LM builds them
# ----------------------------------------------------------------------------------------------


def megatron_args(key: str, world: int) -> argparse.Namespace:
    _, model, tp, fmt, distopt, mode, _ = PLAN[key]
    m = MODELS[model]
    return argparse.Namespace(
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        ffn_hidden_size=m["ffn_hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        group_query_attention=m["num_query_groups"] != m["num_attention_heads"],
        num_query_groups=m["num_query_groups"],
        kv_channels=m["hidden_size"] // m["num_attention_heads"],
        max_position_embeddings=SEQ,
        position_embedding_type=m["position_embedding_type"],
        add_position_embedding=m["position_embedding_type"] == "learned_absolute",
        normalization=m["normalization"],
        swiglu=m["swiglu"],
        add_bias_linear=m["add_bias_linear"],
        untie_embeddings_and_output_weights=m["untie_embeddings_and_output_weights"],
        # the rest of arguments.py's architecture fields, at this run's values (the
        # TransformerConfig below: Megatron-LM's defaults, the bias-activation fusions off)
        norm_epsilon=1e-5,
        apply_layernorm_1p=False,
        apply_residual_connection_post_layernorm=False,
        add_qkv_bias=False,
        qk_layernorm=False,
        rotary_base=10000,
        rotary_percent=1.0,
        rotary_interleaved=False,
        rotary_seq_len_interpolation_factor=None,
        use_rope_scaling=False,
        openai_gelu=False,
        squared_relu=False,
        quick_geglu=False,
        bias_gelu_fusion=False,
        bias_swiglu_fusion=False,
        num_experts=None,
        multi_latent_attention=False,
        seq_length=SEQ,
        padded_vocab_size=VOCAB,
        make_vocab_size_divisible_by=128,
        vocab_file=None,
        tokenizer_type="NullTokenizer",
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=1,
        data_parallel_size=world // tp,
        world_size=world,
        micro_batch_size=MBS,
        global_batch_size=MBS * (world // tp),
        train_iters=TRAIN_ITERS,
        lr=LR,
        min_lr=MIN_LR,
        lr_decay_style="cosine",
        lr_warmup_iters=WARMUP_ITERS,
        lr_warmup_init=0.0,
        lr_decay_iters=TRAIN_ITERS,
        weight_decay=0.1,
        start_weight_decay=0.1,
        end_weight_decay=0.1,
        weight_decay_incr_style="constant",
        clip_grad=0.0,
        optimizer="adam",
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-8,
        fp16=False,
        bf16=distopt,
        params_dtype=torch.bfloat16 if distopt else torch.float32,
        accumulate_allreduce_grads_in_fp32=distopt,
        use_distributed_optimizer=distopt,
        ckpt_format=fmt,
        use_dist_ckpt=fmt == "torch_dist",
        ckpt_fully_parallel_save=mode == "fully_parallel",
        ckpt_fully_parallel_load=mode == "fully_parallel",
        dist_ckpt_optim_fully_reshardable=False,
        save=None,
        load=None,
        save_interval=BASE_STEPS,
        no_save_optim=False,
        no_save_rng=False,
        no_load_optim=False,
        no_load_rng=False,
        finetune=False,
        seed=SEED,
        data_parallel_random_init=False,
        consumed_train_samples=0,
        skipped_train_samples=0,
        consumed_valid_samples=0,
        iteration=0,
    )


def transformer_config(model: str, tp: int, bf16: bool) -> Any:
    from megatron.core.transformer.transformer_config import TransformerConfig
    from torch.nn import functional as F

    m = MODELS[model]
    return TransformerConfig(
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        num_query_groups=m["num_query_groups"],
        ffn_hidden_size=m["ffn_hidden_size"],
        normalization=m["normalization"],
        gated_linear_unit=m["swiglu"],
        activation_func=F.silu if m["swiglu"] else F.gelu,
        add_bias_linear=m["add_bias_linear"],
        tensor_model_parallel_size=tp,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        use_cpu_initialization=True,
        perform_initialization=True,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )


def batch(iteration: int) -> torch.Tensor:
    """The global batch of an iteration (a data loader that resumes at consumed samples)."""
    g = torch.Generator().manual_seed(SEED + iteration)
    return torch.randint(0, VOCAB, (MBS, SEQ + 1), generator=g)


class MegatronRun:
    """model, DDP, optimizer and scheduler of one training job (Megatron-LM's setup_model_and_
    optimizer with megatron-core's classes)."""

    def __init__(self, key: str, world: int) -> None:
        from megatron.core import tensor_parallel
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
        from megatron.core.transformer.module import Float16Module

        self.key = key
        _, model_kind, tp, fmt, distopt, mode, _ = PLAN[key]
        self.fmt, self.distopt, self.mode, self.tp = fmt, distopt, mode, tp
        self.args = megatron_args(key, world)
        a = self.args
        # Megatron-LM's _set_random_seed: python, numpy, torch, then the model-parallel CUDA seeds
        random.seed(SEED)
        np.random.seed(SEED)
        torch.manual_seed(SEED)
        tensor_parallel.model_parallel_cuda_manual_seed(SEED)
        self.bf16 = distopt  # Megatron-LM runs the distributed optimizer with --bf16
        self.config = transformer_config(model_kind, tp, self.bf16)
        spec = get_gpt_layer_local_spec(normalization=MODELS[model_kind]["normalization"])
        self.model = GPTModel(
            self.config,
            spec,
            vocab_size=VOCAB,
            max_sequence_length=SEQ,
            position_embedding_type=a.position_embedding_type,
            share_embeddings_and_output_weights=not a.untie_embeddings_and_output_weights,
        )
        # Megatron-LM's get_model: Float16Module for bf16, then DDP (grads reduced in fp32)
        wrapped = Float16Module(self.config, self.model) if self.bf16 else self.model
        self.ddp = DistributedDataParallel(
            self.config,
            DistributedDataParallelConfig(
                use_distributed_optimizer=distopt,
                overlap_grad_reduce=False,
                grad_reduce_in_fp32=self.bf16,
            ),
            wrapped,
        )
        for p in self.model.parameters():
            p.type = cuda_type(p)  # type: ignore[method-assign]
        self.opt_config = OptimizerConfig(
            optimizer="adam",
            lr=LR,
            min_lr=MIN_LR,
            weight_decay=a.weight_decay,
            adam_beta1=a.adam_beta1,
            adam_beta2=a.adam_beta2,
            adam_eps=a.adam_eps,
            clip_grad=a.clip_grad,
            bf16=self.bf16,
            params_dtype=a.params_dtype,
            use_distributed_optimizer=distopt,
        )
        self.optimizer = get_megatron_optimizer(self.opt_config, [self.ddp])
        gbs = a.global_batch_size
        self.scheduler = OptimizerParamScheduler(
            self.optimizer,
            init_lr=a.lr_warmup_init,
            max_lr=a.lr,
            min_lr=a.min_lr,
            lr_warmup_steps=a.lr_warmup_iters * gbs,
            lr_decay_steps=a.lr_decay_iters * gbs,
            lr_decay_style=a.lr_decay_style,
            start_wd=a.start_weight_decay,
            end_wd=a.end_weight_decay,
            wd_incr_steps=a.train_iters * gbs,
            wd_incr_style=a.weight_decay_incr_style,
        )
        self.iteration = 0
        self.flops = 0.0
        mask = torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool).tril().logical_not()
        self.mask = mask

    # -- training -----------------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(SEQ).expand(tokens.shape[0], SEQ)
        out = self.ddp(tokens[:, :-1], pos, self.mask, labels=tokens[:, 1:])
        return out.float().mean()

    def train(self, steps: int) -> None:
        a = self.args
        for _ in range(steps):
            self.ddp.zero_grad_buffer()
            self.optimizer.zero_grad()
            loss = self.forward(batch(self.iteration))
            loss.backward()
            self.ddp.finish_grad_sync()
            ok, _, _ = self.optimizer.step()
            if not ok:
                raise RuntimeError("optimizer step skipped")
            self.scheduler.step(increment=a.global_batch_size)
            self.iteration += 1
            a.iteration = self.iteration
            a.consumed_train_samples += a.global_batch_size
            self.flops += (
                6.0 * a.global_batch_size * SEQ * sum(p.numel() for p in self.model.parameters())
            )

    def inner_optimizers(self) -> list[torch.optim.Optimizer]:
        return [o.optimizer for o in self.optimizer.chained_optimizers]

    def reorder_params(self) -> None:
        """The fault: the groups list layer 1's params where layer 0's were, and back."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        by_name = dict(self.model.named_parameters())
        for opt in self.inner_optimizers():
            for group in opt.param_groups:
                group["params"] = [by_name[_mirror(names[id(p)])] for p in group["params"]]

    # -- the truth from the live objects --------------------------------------------------------

    def id_names(self) -> dict[str, str]:
        """torch optimizer id -> parameter name. The DistributedOptimizer's torch optimizer
        holds views of this rank's shard of each parameter: its ``model_fp32_groups`` /
        ``model_float16_groups`` say which parameter each view is of."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        out: dict[str, str] = {}
        i = 0
        for chained in self.optimizer.chained_optimizers:
            if self.distopt:
                groups = [
                    [*fp32, *fp16]
                    for fp32, fp16 in zip(
                        chained.model_fp32_groups, chained.model_float16_groups, strict=True
                    )
                ]
            else:
                groups = [g["params"] for g in chained.optimizer.param_groups]
            for params in groups:
                for p in params:
                    out[str(i)] = names[id(p)]
                    i += 1
        return out

    def sharded_truth(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Per parameter name: its ShardedTensor (key, shapes, offsets, layer axis); per
        torch optimizer id: the state keys the FP32 optimizer's sharded_state_dict gives it."""
        from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory

        def entry(st: Any) -> dict[str, Any]:
            rid = st.replica_id
            return {
                "key": st.key,
                "global_shape": list(st.global_shape),
                "global_offset": list(st.global_offset),
                "local_shape": list(st.local_shape),
                "prepend_axis_num": st.prepend_axis_num,
                "replica_id": list(rid) if isinstance(rid, tuple) else rid,
                "dtype": str(st.dtype).removeprefix("torch."),
            }

        sd = self.model.sharded_state_dict(metadata=self.sharded_metadata())
        # a parameter's shards as saved: one ShardedTensor, or (SwiGLU's linear_fc1) the two
        # chunks its ShardedTensorFactory builds (gate and up, at offsets r and r + tp)
        keys: dict[str, Any] = {}
        for name, st in sd.items():
            if isinstance(st, ShardedTensor):
                keys[name] = [entry(st)]
            elif isinstance(st, ShardedTensorFactory):
                keys[name] = [entry(t) for t in st.build()]
        optim: dict[str, Any] = {}
        if not self.distopt:
            osd = self.optimizer.state_dict()
            for sid, name in self.id_names().items():
                state = osd["state"].get(int(sid), {})
                key = keys[name][0]["key"]
                optim[sid] = {
                    "param": name,
                    "keys": {s: f"optimizer.state.{s}.{key}" for s in state if s != "step"},
                }
        return keys, optim

    # -- Megatron-LM's get_rng_state / generate_state_dict / save / load -------------------------

    def rng_state(self) -> Any:
        from megatron.core import parallel_state as mpu
        from megatron.core import tensor_parallel
        from megatron.core.dist_checkpointing.mapping import ShardedObject

        state = {
            "random_rng_state": random.getstate(),
            "np_rng_state": np.random.get_state(),
            "torch_rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.cuda.get_rng_state(),
            "rng_tracker_states": tensor_parallel.get_cuda_rng_tracker().get_states(),
        }
        states = [state]
        if self.fmt == "torch_dist":
            return ShardedObject(
                "rng_state",
                states,
                (
                    mpu.get_pipeline_model_parallel_world_size(),
                    mpu.get_tensor_model_parallel_world_size(),
                ),
                (mpu.get_pipeline_model_parallel_rank(), mpu.get_tensor_model_parallel_rank()),
                replica_id=mpu.get_data_parallel_rank(with_context_parallel=True),
            )
        return states

    def sharded_metadata(self) -> dict[str, Any]:
        from megatron.core import parallel_state as mpu

        meta: dict[str, Any] = {}
        if self.args.use_distributed_optimizer:
            meta["distrib_optim_sharding_type"] = (
                "fully_reshardable"
                if self.args.dist_ckpt_optim_fully_reshardable
                else "dp_reshardable"
            )
            if self.args.dist_ckpt_optim_fully_reshardable:
                meta["distrib_optim_fully_reshardable_mem_efficient"] = False
        meta["singleton_local_shards"] = False
        meta["chained_optim_avoid_prefix"] = True
        meta["dp_cp_group"] = mpu.get_data_parallel_group(with_context_parallel=True)
        return meta

    def generate_state_dict(self, rng: Any, is_loading: bool = False, optim: bool = True) -> dict:
        a = self.args
        sd: dict[str, Any] = {"args": a, "checkpoint_version": CHECKPOINT_VERSION}
        sd["iteration"] = self.iteration
        meta = self.sharded_metadata() if self.fmt == "torch_dist" else None
        if self.fmt == "torch_dist":
            sd["model"] = self.model.sharded_state_dict(metadata=meta)
        else:
            sd["model"] = self.model.state_dict_for_save_checkpoint()
        if optim:
            if self.fmt == "torch_dist":
                sd["optimizer"] = self.optimizer.sharded_state_dict(
                    sd, is_loading=is_loading, metadata=meta
                )
            else:
                sd["optimizer"] = self.optimizer.state_dict()
            sd["opt_param_scheduler"] = self.scheduler.state_dict()
        if rng:
            sd["rng_state"] = rng
        return sd

    def checkpoint_name(self, save_dir: Path, iteration: int) -> Path:
        from megatron.core import parallel_state as mpu

        base = save_dir / f"iter_{iteration:07d}"
        if self.fmt == "torch_dist":
            return base
        return base / f"mp_rank_{mpu.get_tensor_model_parallel_rank():02d}" / "model_optim_rng.pt"

    def save(self, save_dir: Path, save_rng: bool = True) -> Path:
        import torch.distributed as dist
        from megatron.core import dist_checkpointing
        from megatron.core import parallel_state as mpu
        from megatron.core.dist_checkpointing.strategies.fully_parallel import (
            FullyParallelSaveStrategyWrapper,
        )
        from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
        from megatron.core.dist_checkpointing.utils import _clean_metadata_for_serialization

        self.args.save = str(save_dir)
        self.args.no_save_rng = not save_rng
        rng = self.rng_state() if save_rng else None
        name = self.checkpoint_name(save_dir, self.iteration)
        if self.distopt and self.fmt == "torch":
            name.parent.mkdir(parents=True, exist_ok=True)
            self.optimizer.save_parameter_state(str(name.parent / "distrib_optim.pt"))
        if mpu.get_data_parallel_rank() == 0 or self.fmt == "torch_dist":
            sd = self.generate_state_dict(rng)
            sd["num_floating_point_operations_so_far"] = self.flops
            if self.fmt == "torch_dist":
                if dist.get_rank() == 0:
                    name.mkdir(parents=True, exist_ok=True)
                dist.barrier()
                strategy: Any = TorchDistSaveShardedStrategy("torch_dist", 1)
                if self.mode == "fully_parallel":
                    strategy = FullyParallelSaveStrategyWrapper(
                        strategy, mpu.get_data_parallel_group(with_context_parallel=True)
                    )
                dist_checkpointing.save(
                    sd,
                    str(name),
                    strategy,
                    validate_access_integrity=True,
                    content_metadata=_clean_metadata_for_serialization(self.sharded_metadata()),
                )
            else:
                name.parent.mkdir(parents=True, exist_ok=True)
                torch.save(sd, name)
        dist.barrier()
        if dist.get_rank() == 0:
            (save_dir / "latest_checkpointed_iteration.txt").write_text(str(self.iteration))
        dist.barrier()
        return save_dir / f"iter_{self.iteration:07d}"

    def load(self, load_dir: Path, load_optim: bool, load_sched: bool, load_rng: bool) -> None:
        """Megatron-LM's load_checkpoint; ``load_sched=False`` with ``load_optim`` is a loop
        that restores model and optimizer but forgets the scheduler."""
        from megatron.core import dist_checkpointing, tensor_parallel
        from megatron.core import parallel_state as mpu
        from megatron.core.dist_checkpointing.strategies.fully_parallel import (
            FullyParallelLoadStrategyWrapper,
        )

        a = self.args
        a.load, a.no_load_optim, a.no_load_rng = str(load_dir), not load_optim, not load_rng
        iteration = int((load_dir / "latest_checkpointed_iteration.txt").read_text().strip())
        name = self.checkpoint_name(load_dir, iteration)
        if self.fmt == "torch_dist":
            rng = self.rng_state() if load_rng else None
            template = self.generate_state_dict(rng, is_loading=True, optim=load_optim)
            strategy = None
            if self.mode == "fully_parallel":
                from megatron.core.dist_checkpointing.serialization import (
                    get_default_load_sharded_strategy,
                )

                strategy = FullyParallelLoadStrategyWrapper(
                    get_default_load_sharded_strategy(str(name)),
                    mpu.get_data_parallel_group(with_context_parallel=True),
                )
            state = dist_checkpointing.load(template, str(name), strategy)
        else:
            state = torch.load(name, map_location="cpu", weights_only=False)
        if state["checkpoint_version"] != CHECKPOINT_VERSION:
            raise AssertionError(f"checkpoint_version {state['checkpoint_version']}")
        self.iteration = int(state["iteration"])
        a.iteration = self.iteration
        ckpt_args = state["args"]
        for field in ("num_layers", "hidden_size", "num_attention_heads"):
            if getattr(ckpt_args, field) != getattr(a, field):
                raise AssertionError(f"{field} differs from the checkpoint's args")
        a.consumed_train_samples = ckpt_args.consumed_train_samples
        self.flops = float(state.get("num_floating_point_operations_so_far", 0))
        self.model.load_state_dict(state["model"], strict=True)
        if load_optim:
            self.optimizer.load_state_dict(state["optimizer"])
            if self.distopt and self.fmt == "torch":
                self.optimizer.load_parameter_state(str(name.parent / "distrib_optim.pt"))
            if load_sched:
                self.scheduler.load_state_dict(state["opt_param_scheduler"])
        if load_rng and "rng_state" in state:
            rs = state["rng_state"][0]
            random.setstate(rs["random_rng_state"])
            np.random.set_state(rs["np_rng_state"])
            torch.set_rng_state(rs["torch_rng_state"])
            torch.cuda.set_rng_state(rs["cuda_rng_state"])
            tensor_parallel.get_cuda_rng_tracker().set_states(rs["rng_tracker_states"])

    def optimizer_step(self) -> float:
        """The AdamW step count the live optimizer holds (0 when it has no state)."""
        steps = [
            float(st["step"])
            for opt in self.inner_optimizers()
            for st in opt.state.values()
            if "step" in st
        ]
        return max(steps, default=0.0)


def _mirror(name: str) -> str:
    """``decoder.layers.0.x`` <-> ``decoder.layers.1.x`` (two layers)."""
    for a, b in (
        ("decoder.layers.0.", "decoder.layers.1."),
        ("decoder.layers.1.", "decoder.layers.0."),
    ):
        if name.startswith(a):
            return b + name[len(a) :]
    return name


# ----------------------------------------------------------------------------------------------
# The child: every setup of one world size, run after run
# ----------------------------------------------------------------------------------------------


def _setup_cases(key: str, world: int, out: Path, extras: Path) -> dict[str, Any]:
    import torch.distributed as dist

    label, _, tp, fmt, distopt, _, variants = PLAN[key]
    root = out / key
    rank = dist.get_rank()
    if rank == 0:
        fresh_dir(root)
    dist.barrier()
    cases: dict[str, Any] = {}
    family = "megatron-dist" if fmt == "torch_dist" else "megatron-legacy"

    def record(case_id: str, run: MegatronRun, path: Path, expect: str, **kw: Any) -> None:
        case: dict[str, Any] = {
            "path": path.relative_to(out).as_posix(),
            "family": family,
            "kind": "training_state",
            "setup": label,
            "expect": expect,
            "global_steps": run.iteration,
            "consumed_train_samples": run.args.consumed_train_samples,
            "scheduler_num_steps": run.scheduler.num_steps,
            "optimizer_step": run.optimizer_step(),
            "lr": [g["lr"] for o in run.inner_optimizers() for g in o.param_groups],
            "tp": tp,
            "ckpt_format": fmt,
            "distributed_optimizer": distopt,
            "save_dir": path.parent.relative_to(out).as_posix(),
            **kw,
        }
        truth = run.id_names()
        # each tensor-parallel rank holds its own shards: the truth is gathered from every rank
        mine = {
            "model_tensors": {
                n: tensor_entry(t)
                for n, t in run.model.state_dict().items()
                if isinstance(t, torch.Tensor)
            },
            "sharded": run.sharded_truth() if fmt == "torch_dist" else None,
            "buffer_layout": buffer_layout(run) if distopt else None,
        }
        ranks: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, mine)
        if fmt == "torch":
            files = [f"mp_rank_{r:02d}/model_optim_rng.pt" for r in range(tp)]
            case["id_names"] = {} if distopt else {f: truth for f in files}
            case["optimizer_ids"] = truth
            case["files"] = files + (
                [f"mp_rank_{r:02d}/distrib_optim.pt" for r in range(tp)] if distopt else []
            )
            case["model_tensors"] = {
                f: r["model_tensors"] for f, r in zip(files, ranks, strict=True)
            }
            if distopt:
                case["buffer_layout"] = {
                    f: r["buffer_layout"] for f, r in zip(files, ranks, strict=True)
                }
        else:
            case["id_names"] = {"": truth}
            case["sharded_keys"] = [r["sharded"][0] for r in ranks]
            case["optimizer_keys"] = [r["sharded"][1] for r in ranks]
            case["model_tensors"] = [r["model_tensors"] for r in ranks]
            if distopt:
                case["buffer_layout"] = [r["buffer_layout"] for r in ranks]
        cases[case_id] = case

    base = MegatronRun(key, world)
    if key == "mcore_gpt_distopt":
        fr = MegatronRun(key, world)
        fr.args.dist_ckpt_optim_fully_reshardable = True
        fr.train(BASE_STEPS)
        path = fr.save(root / "fully_reshardable")
        record(f"{key}_fully_reshardable_base", fr, path, "clean")
        cases[f"{key}_fully_reshardable_base"]["setup"] = label.replace(
            "dp_reshardable", "fully_reshardable"
        )
    base.train(BASE_STEPS)
    base_path = base.save(root / "base")
    base_id = f"{key}_base"
    record(base_id, base, base_path, "clean")
    if key in PROBED:
        hf_probe(base, extras / f"{base_id}_model.pt")
    base_step = base.optimizer_step()
    del base
    results: dict[str, MegatronRun] = {}
    for v in variants:
        name, expect, steps, load_opt, load_sched, save_rng, reorder = v
        run = MegatronRun(key, world)
        if reorder:
            run.reorder_params()
        run.load(root / "base", load_opt, load_sched, load_rng=True)
        # the fault is real: the optimizer state after the load
        if (run.optimizer_step() == base_step) != load_opt:
            raise AssertionError(f"{key} {name}: optimizer step {run.optimizer_step()} after load")
        run.train(steps)
        path = run.save(root / name, save_rng=save_rng)
        kw: dict[str, Any] = {"resume_of": base_id}
        if not load_opt:
            kw["also"] = ["scheduler_not_restored"]
        if reorder:
            kw["shape_visible"] = False
        record(f"{key}_{name}", run, path, expect, **kw)
        results[name] = run
    if "scheduler_not_loaded" in results:
        clean, faulty = results["resume_clean"], results["scheduler_not_loaded"]
        if clean.scheduler.num_steps == faulty.scheduler.num_steps:
            raise AssertionError(f"{key}: the scheduler fault did not change num_steps")
    return cases


def buffer_layout(run: MegatronRun) -> dict[str, Any]:
    """Where each parameter lies in DDP's flat grad/param buffer (what distrib_optim.pt's
    per-bucket ``param`` / ``exp_avg`` / ``exp_avg_sq`` vectors are laid out by)."""
    names = {id(p): n for n, p in run.model.named_parameters()}
    out: dict[str, Any] = {}
    for gi, buf in enumerate(run.ddp.buffers):
        out[str(gi)] = {
            "param_dtype": str(buf.param_dtype).removeprefix("torch."),
            "grad_dtype": str(buf.grad_dtype).removeprefix("torch."),
            "numel": buf.numel,
            "numel_unpadded": buf.numel_unpadded,
            "buckets": [
                {"numel": b.grad_data.numel(), "numel_unpadded": b.numel_unpadded}
                for b in buf.buckets
            ],
            "params": {
                names[id(p)]: {"start": s, "end": e, "bucket": bi}
                for p, (s, e, bi) in buf.param_index_map.items()
            },
        }
    return out


def hf_probe(run: MegatronRun, path: Path) -> None:
    """The logits of one batch (and, at tp 1, the plain model state_dict), for the
    HF-equivalence checks done in the parent. Every tensor rank runs the forward; at tp > 1
    each holds its vocab slice of the logits (``parallel_output``), gathered here; rank 0
    writes."""
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu

    tokens = batch(10_000)[:, :-1]
    with torch.no_grad():
        pos = torch.arange(SEQ).expand(tokens.shape[0], SEQ)
        logits = run.model(tokens, pos, run.mask).contiguous()
        if run.tp > 1:
            parts = [torch.empty_like(logits) for _ in range(run.tp)]
            dist.all_gather(parts, logits, group=mpu.get_tensor_model_parallel_group())
            logits = torch.cat(parts, dim=-1)
    if dist.get_rank() != 0:
        return
    data: dict[str, Any] = {"tokens": tokens, "logits": logits.clone()}
    if run.tp == 1:
        sd = run.model.state_dict()
        data["state_dict"] = {k: v.clone() for k, v in sd.items() if isinstance(v, torch.Tensor)}
    torch.save(data, path)


def _child(child: str, rank: int, port: int, out: str, result: str) -> None:
    warnings.simplefilter("ignore")
    world, keys = CHILDREN[child]
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch.distributed as dist

    install_shims()
    dist.init_process_group("gloo")
    from megatron.core import parallel_state

    tp = PLAN[keys[0]][2]
    parallel_state.initialize_model_parallel(tp, 1, create_gloo_process_groups=True)
    cases: dict[str, Any] = {}
    extras = Path(result).parent
    for key in keys:
        cases.update(_setup_cases(key, world, Path(out), extras))
    if rank == 0:
        Path(result).write_text(json.dumps(cases, allow_nan=False))
    dist.barrier()
    dist.destroy_process_group()
    leave_worker()


def _run_child(child: str, out: Path, tmp: Path) -> dict[str, Any]:
    world, _ = CHILDREN[child]
    port = free_port()
    result = tmp / f"{child}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD_CODE, child, str(r), str(port), str(out), str(result)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode != 0 for p in procs) or not result.is_file():
        raise RuntimeError(
            f"megatron child {child} exited with {[p.returncode for p in procs]}:\n"
            + "\n".join(log[-4000:] for log in logs)
        )
    return dict(json.loads(result.read_text()))


# ----------------------------------------------------------------------------------------------
# The HF equivalent of the Llama-style model (parent process)
# ----------------------------------------------------------------------------------------------


def mcore_to_hf_llama(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """megatron-core GPTModel (local spec, SwiGLU, GQA) -> HF LlamaForCausalLM names."""
    m = MODELS["llama"]
    nh, ng, h = m["num_attention_heads"], m["num_query_groups"], m["hidden_size"]
    hd = h // nh
    out = {"model.embed_tokens.weight": sd["embedding.word_embeddings.weight"]}
    for i in range(m["num_layers"]):
        p = f"decoder.layers.{i}."
        q = f"model.layers.{i}."
        qkv = sd[p + "self_attention.linear_qkv.weight"].view(ng, nh // ng + 2, hd, h)
        out[q + "input_layernorm.weight"] = sd[p + "input_layernorm.weight"]
        out[q + "self_attn.q_proj.weight"] = qkv[:, : nh // ng].reshape(nh * hd, h)
        out[q + "self_attn.k_proj.weight"] = qkv[:, nh // ng].reshape(ng * hd, h)
        out[q + "self_attn.v_proj.weight"] = qkv[:, nh // ng + 1].reshape(ng * hd, h)
        out[q + "self_attn.o_proj.weight"] = sd[p + "self_attention.linear_proj.weight"]
        out[q + "post_attention_layernorm.weight"] = sd[p + "pre_mlp_layernorm.weight"]
        gate, up = sd[p + "mlp.linear_fc1.weight"].chunk(2, dim=0)
        out[q + "mlp.gate_proj.weight"] = gate
        out[q + "mlp.up_proj.weight"] = up
        out[q + "mlp.down_proj.weight"] = sd[p + "mlp.linear_fc2.weight"]
    out["model.norm.weight"] = sd["decoder.final_layernorm.weight"]
    out["lm_head.weight"] = sd["output_layer.weight"]
    return {k: v.contiguous() for k, v in out.items()}


HF_LLAMA_CONFIG: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=MODELS["llama"]["hidden_size"],
    intermediate_size=MODELS["llama"]["ffn_hidden_size"],
    num_hidden_layers=MODELS["llama"]["num_layers"],
    num_attention_heads=MODELS["llama"]["num_attention_heads"],
    num_key_value_heads=MODELS["llama"]["num_query_groups"],
    max_position_embeddings=SEQ,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
)


def record_probe(out: Path, case_id: str, case: dict[str, Any]) -> None:
    """``probes/<case id>.pt``: the probe batch's tokens and megatron-core's logits for the
    base model (at tp 2 gathered over the tensor ranks), the oracle of conversions to HF."""
    data = torch.load(out / EXTRAS / f"{case_id}_model.pt", weights_only=True)
    dst = out / "probes" / f"{case_id}.pt"
    dst.parent.mkdir(exist_ok=True)
    torch.save({"tokens": data["tokens"], "logits": data["logits"]}, dst)
    case["probe"] = dst.relative_to(out).as_posix()


def hf_equivalent(out: Path, probe: Path, case: dict[str, Any]) -> None:
    """The HF LlamaForCausalLM weights that are the base Llama-style model, with megatron-core's
    logits on a probe batch; tests/test_realworld_megatron.py builds ``LlamaForCausalLM(
    LlamaConfig(**config))``, loads the weights and compares the logits (transformers is not
    imported here: with deepspeed installed its import alone costs seconds of CPU)."""
    from safetensors.torch import save_file

    data = torch.load(probe, weights_only=True)
    hf_sd = mcore_to_hf_llama(data["state_dict"])
    dst = out / case["save_dir"] / "hf_equivalent"
    dst.mkdir(parents=True, exist_ok=True)
    save_file(hf_sd, dst / "model.safetensors", metadata={"format": "pt"})
    torch.save({"tokens": data["tokens"], "logits": data["logits"]}, dst / "probe.pt")
    case["hf_equivalent"] = {
        "path": dst.relative_to(out).as_posix(),
        "weights": "model.safetensors",
        "probe": "probe.pt",
        "config": HF_LLAMA_CONFIG,
        "tensors": {n: tensor_entry(t) for n, t in hf_sd.items()},
    }


# ----------------------------------------------------------------------------------------------


def planned_cases() -> dict[str, dict[str, Any]]:
    """Case id -> {"setup", "expect", "resume_of"?}: what a run of this maker writes."""
    plan: dict[str, dict[str, Any]] = {}
    for key, (label, *_, variants) in PLAN.items():
        if key == "mcore_gpt_distopt":
            fr_label = label.replace("dp_reshardable", "fully_reshardable")
            plan[f"{key}_fully_reshardable_base"] = {"setup": fr_label, "expect": "clean"}
        plan[f"{key}_base"] = {"setup": label, "expect": "clean"}
        for v in variants:
            plan[f"{key}_{v[0]}"] = {"setup": label, "expect": v[1], "resume_of": f"{key}_base"}
    return plan


_FUTURES: dict[str, Future[dict[str, Any]]] = {}


def _case(child: str) -> Callable[[Path], Mapping[str, Any]]:
    def make(out: Path) -> dict[str, Any]:
        cases = _FUTURES[child].result()
        for key in PROBED:
            if f"{key}_base" in cases:
                record_probe(out, f"{key}_base", cases[f"{key}_base"])
        if child == "world1":
            probe = out / EXTRAS / "mcore_llama_base_model.pt"
            hf_equivalent(out, probe, cases["mcore_llama_base"])
        return cases

    return make


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {c: _case(c) for c in CHILDREN}


def main(argv: list[str]) -> int:
    from importlib.metadata import version as dist_version

    out = main_out_dir(argv)
    out.mkdir(parents=True, exist_ok=True)
    extras = fresh_dir(out / EXTRAS)
    version = f"torch {torch.__version__}, megatron-core {dist_version('megatron-core')}"
    jobs = int(os.environ.get("MEGATRON_MAKER_JOBS", "2"))
    pool = ThreadPoolExecutor(max_workers=jobs)
    for child in CHILDREN:
        _FUTURES[child] = pool.submit(_run_child, child, out, extras)
    try:
        return run_maker(out, "realworld_megatron", version, CASES)
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(extras, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
