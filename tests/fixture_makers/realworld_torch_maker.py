"""Real-world training states, plain PyTorch and ColossalAI side.

Usage: ``python tests/fixture_makers/realworld_torch_maker.py OUT_DIR``

Every state is written by a tiny training run the way training code writes it; the corpus
contract (``setup``, ``expect``, ``resume_of``, ``id_names``) is in tests/fixture_makers/README.md
and tests/realworld_check.py. ``id_names`` comes from the live objects: the parameter names of
the module whose ``state_dict()`` was saved, walked in ``optimizer.param_groups`` order and
numbered as ``torch.optim.Optimizer.state_dict`` numbers them.

Setups (each: a base state, then states saved after resuming from it):

* ``nanogpt_onefile``: a nanoGPT GPT (``transformer.h.N.attn.c_attn``, ``ln_1``, ``wte``/``wpe``,
  ``lm_head`` tied to ``wte``), ``configure_optimizers`` as nanoGPT (decay / no-decay groups by
  ``p.dim() >= 2`` over a dict of named params), AdamW, a warm-up + cosine ``LambdaLR``; ONE file
  ``torch.save({'model', 'optimizer', 'scheduler', 'iter_num', 'best_val_loss', 'model_args',
  'config'})``. No RNG state (nanoGPT re-seeds every run).
* ``nanogpt_files``: the same loop saved as ``step_N/{model.pt, optimizer.pt, scheduler.pt,
  meta.pt}``; meta.pt holds step, epoch and the torch / numpy / python RNG states.
* ``compile_onefile``: the model wrapped by ``torch.compile`` (keys ``_orig_mod.``), saved raw as
  nanoGPT does. SUBSTITUTED: ``backend="eager"`` (dynamo traces, no inductor code generation),
  which keeps the maker fast; the wrapper and the saved keys are those of the default backend.
* ``ddp_files``: DistributedDataParallel on a gloo world of 1 (keys ``module.``), separate files.
* ``ddp_compile_onefile``: compile, then DDP, as nanoGPT's train.py does (``module._orig_mod.``).
* ``colossalai_meta_sharded`` / ``colossalai_meta_unsharded``: ColossalAI 0.5.0 Booster +
  TorchDDPPlugin (gloo world of 1, in this process), a tiny HF Llama, AdamW with decay / no-decay
  groups, ColossalAI's CosineAnnealingWarmupLR; ``global_stepN/{model, optim, lr_scheduler,
  meta.pt}`` (``booster.save_model`` / ``save_optimizer`` / ``save_lr_scheduler``, sharded or one
  file each). SUBSTITUTED on resume: colossalai's CPU accelerator ``synchronize`` raises, and
  ``booster.load_optimizer`` calls it; it is made a no-op for the loads (SETUP.md).
* ``colossalchat``: the ColossalChat layout ``epoch-E_step-S/{modeling, optimizer, lr_scheduler,
  running_states.json}`` (sharded, as ColossalChat saves).

Planted faults, made the way they happen on resume: the scheduler not loaded; the optimizer not
loaded (saved 1 and 3 steps after the resume); the optimizer rebuilt with its params in another
order (the groups built walking the blocks top-down) and its old state loaded by position; the
RNG/meta file not saved. A reorder that moves a state onto a param of another shape makes
AdamW's first step raise, so a run that goes on (and saves) is one whose reorder only swaps
same-shaped params: here every block's params trade places with the mirrored block's
(``"shape_visible": false`` marks such a state: its files alone cannot show the fault).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _manifest import fresh_dir, launcher_env, main_out_dir, run_maker
from torch import nn
from torch.nn import functional as F

SEED = 1337
GPT_ARGS: dict[str, Any] = dict(
    block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=True
)
TRAIN_CONFIG: dict[str, Any] = dict(
    batch_size=4,
    learning_rate=6e-4,
    min_lr=6e-5,
    warmup_iters=2,
    lr_decay_iters=20,
    weight_decay=0.1,
    beta1=0.9,
    beta2=0.95,
    grad_clip=1.0,
    eval_interval=4,
    dataset="random_tokens",
)
BASE_STEPS = 4  # nanoGPT-style runs save the base state at iter 4
CAI_BASE_STEPS = 3
EPOCH = 0

# (variant, expect, steps after the resume, load optimizer, load scheduler, blocks reversed,
#  save the meta/RNG file)
Variant = tuple[str, str, int, bool, bool, bool, bool]
RESUME_CLEAN: Variant = ("resume_clean", "clean", 3, True, True, False, True)
SCHED_NOT_LOADED: Variant = (
    "scheduler_not_loaded",
    "scheduler_not_restored",
    3,
    True,
    False,
    False,
    True,
)
OPTIM_NOT_LOADED_1: Variant = (
    "optimizer_not_loaded_1",
    "optimizer_moments_reset",
    1,
    False,
    True,
    False,
    True,
)
OPTIM_NOT_LOADED_3: Variant = (
    "optimizer_not_loaded_3",
    "optimizer_moments_reset",
    3,
    False,
    True,
    False,
    True,
)
PARAM_ORDER: Variant = ("param_order", "param_order_changed", 3, True, True, True, True)
RNG_MISSING: Variant = ("rng_missing", "rng_state_missing", 3, True, True, False, False)


# ----------------------------------------------------------------------------------------------
# nanoGPT's model (karpathy/nanoGPT model.py, trimmed to what training needs)
# ----------------------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, a: Mapping[str, Any]) -> None:
        super().__init__()
        self.c_attn = nn.Linear(a["n_embd"], 3 * a["n_embd"], bias=a["bias"])
        self.c_proj = nn.Linear(a["n_embd"], a["n_embd"], bias=a["bias"])
        self.resid_dropout = nn.Dropout(a["dropout"])
        self.n_head, self.n_embd, self.dropout = a["n_head"], a["n_embd"], a["dropout"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class MLP(nn.Module):
    def __init__(self, a: Mapping[str, Any]) -> None:
        super().__init__()
        self.c_fc = nn.Linear(a["n_embd"], 4 * a["n_embd"], bias=a["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * a["n_embd"], a["n_embd"], bias=a["bias"])
        self.dropout = nn.Dropout(a["dropout"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, a: Mapping[str, Any]) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(a["n_embd"], bias=a["bias"])
        self.attn = CausalSelfAttention(a)
        self.ln_2 = LayerNorm(a["n_embd"], bias=a["bias"])
        self.mlp = MLP(a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, a: Mapping[str, Any]) -> None:
        super().__init__()
        self.args = dict(a)
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(a["vocab_size"], a["n_embd"]),
                wpe=nn.Embedding(a["block_size"], a["n_embd"]),
                drop=nn.Dropout(a["dropout"]),
                h=nn.ModuleList([Block(a) for _ in range(a["n_layer"])]),
                ln_f=LayerNorm(a["n_embd"], bias=a["bias"]),
            )
        )
        self.lm_head = nn.Linear(a["n_embd"], a["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * a["n_layer"]))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(
        self,
        weight_decay: float,
        learning_rate: float,
        betas: tuple[float, float],
        blocks_reversed: bool = False,
    ) -> torch.optim.AdamW:
        """nanoGPT's: decay / no-decay groups by ``p.dim() >= 2`` over a dict of named params.

        ``blocks_reversed``: the planted fault, the dict built walking the blocks top-down.
        """
        param_dict = {pn: p for pn, p in self.named_parameters()}
        if blocks_reversed:
            n_layer = self.args["n_layer"]
            param_dict = {m: param_dict[m] for m in (_mirror_block(n, n_layer) for n in param_dict)}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def _mirror_block(name: str, n_layer: int) -> str:
    """``transformer.h.0.x`` -> ``transformer.h.<n_layer-1>.x``; other names unchanged."""
    m = re.match(r"(.*\.h\.)(\d+)(\..*)", name)
    return f"{m[1]}{n_layer - 1 - int(m[2])}{m[3]}" if m else name


def lr_factor(it: int) -> float:
    """nanoGPT's get_lr (linear warm-up, cosine decay to min_lr) as a LambdaLR factor."""
    c = TRAIN_CONFIG
    lr, min_lr = float(c["learning_rate"]), float(c["min_lr"])
    if it < c["warmup_iters"]:
        return (it + 1) / (c["warmup_iters"] + 1)
    if it > c["lr_decay_iters"]:
        return min_lr / lr
    ratio = (it - c["warmup_iters"]) / (c["lr_decay_iters"] - c["warmup_iters"])
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return (min_lr + coeff * (lr - min_lr)) / lr


_DATA = torch.randint(
    0, GPT_ARGS["vocab_size"], (1024,), generator=torch.Generator().manual_seed(7)
)


def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's get_batch: random offsets from the global torch RNG."""
    t = GPT_ARGS["block_size"]
    ix = torch.randint(len(_DATA) - t - 1, (TRAIN_CONFIG["batch_size"],))
    x = torch.stack([_DATA[i : i + t] for i in ix])
    y = torch.stack([_DATA[i + 1 : i + 1 + t] for i in ix])
    return x, y


# ----------------------------------------------------------------------------------------------
# Truth from the live objects
# ----------------------------------------------------------------------------------------------


def id_names(
    named: Iterable[tuple[str, torch.Tensor]], optimizer: torch.optim.Optimizer
) -> dict[str, str]:
    """``{state id: parameter name}`` numbered as ``Optimizer.state_dict`` numbers params."""
    names = {id(p): n for n, p in named}
    out: dict[str, str] = {}
    mapping: dict[int, int] = {}
    start = 0
    for group in optimizer.param_groups:
        for i, p in enumerate(group["params"], start):
            if id(p) not in mapping:
                mapping[id(p)] = i
                out[str(i)] = names[id(p)]
        start += len(group["params"])
    return out


def check_truth(
    truth: Mapping[str, str], osd: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """The saved optimizer has exactly these ids, and each state has its parameter's shape."""
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"optimizer ids {sorted(ids)} != truth ids {sorted(truth)}")
    for sid, state in osd["state"].items():
        want = shapes[truth[str(sid)]]
        got = tuple(state["exp_avg"].shape)
        if got != want:
            raise AssertionError(f"state {sid}: exp_avg {got} != {truth[str(sid)]} {want}")


def _shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in module.named_parameters()}


def rng_states() -> dict[str, Any]:
    return {
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state(),
        "python_rng": random.getstate(),
    }


def restore_rng(meta: Mapping[str, Any]) -> None:
    torch.set_rng_state(meta["torch_rng"])
    np.random.set_state(meta["numpy_rng"])
    random.setstate(meta["python_rng"])


def _own_load(path: Path) -> Any:
    """Load a file this maker has just written (numpy RNG states need the full unpickler)."""
    return torch.load(path, map_location="cpu", weights_only=False)


# ----------------------------------------------------------------------------------------------
# nanoGPT-style loops (plain torch, torch.compile, DDP)
# ----------------------------------------------------------------------------------------------


@dataclass
class Live:
    """A training run in memory: ``model`` is what the script calls ``state_dict()`` on."""

    model: nn.Module
    raw: GPT
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    iter_num: int = 0


def _wrap(raw: GPT, wrap: str) -> nn.Module:
    model: nn.Module = raw
    if "compile" in wrap:
        model = torch.compile(model, backend="eager")  # type: ignore[assignment]
    if "ddp" in wrap:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    return model


def new_run(wrap: str, blocks_reversed: bool = False) -> Live:
    torch.manual_seed(SEED)  # nanoGPT seeds every run before building the model
    raw = GPT(GPT_ARGS)
    c = TRAIN_CONFIG
    optimizer = raw.configure_optimizers(
        c["weight_decay"], c["learning_rate"], (c["beta1"], c["beta2"]), blocks_reversed
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    return Live(_wrap(raw, wrap), raw, optimizer, scheduler)


def train(run: Live, steps: int) -> None:
    run.model.train()
    for _ in range(steps):
        x, y = get_batch()
        _, loss = run.model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), TRAIN_CONFIG["grad_clip"])
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        run.iter_num += 1


def save_state(run: Live, folder: Path, layout: str, save_meta: bool = True) -> tuple[Path, str]:
    """Save as nanoGPT one file or as separate files; return (case path, optimizer location)."""
    osd = run.optimizer.state_dict()
    if layout == "onefile":
        path = folder / "ckpt.pt"
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "model": run.model.state_dict(),
                "optimizer": osd,
                "scheduler": run.scheduler.state_dict(),
                "iter_num": run.iter_num,
                "best_val_loss": 1e9,
                "model_args": GPT_ARGS,
                "config": TRAIN_CONFIG,
            },
            path,
        )
        return path, ""
    path = folder / f"step_{run.iter_num}"
    path.mkdir(parents=True)
    torch.save(run.model.state_dict(), path / "model.pt")
    torch.save(osd, path / "optimizer.pt")
    torch.save(run.scheduler.state_dict(), path / "scheduler.pt")
    if save_meta:
        torch.save({"step": run.iter_num, "epoch": EPOCH, **rng_states()}, path / "meta.pt")
    return path, "optimizer.pt"


def resume(path: Path, layout: str, wrap: str, v: Variant) -> Live:
    """Resume from a saved state as a training script does, with the variant's fault."""
    _, _, _, load_opt, load_sched, reversed_, _ = v
    run = new_run(wrap, blocks_reversed=reversed_)
    if layout == "onefile":
        ck = _own_load(path)
        model_sd, osd, ssd, it = ck["model"], ck["optimizer"], ck["scheduler"], ck["iter_num"]
    else:
        model_sd = torch.load(path / "model.pt", map_location="cpu", weights_only=True)
        osd = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        ssd = torch.load(path / "scheduler.pt", map_location="cpu", weights_only=True)
        meta = _own_load(path / "meta.pt")
        it = meta["step"]
        restore_rng(meta)
    if "compile" in wrap:  # nanoGPT strips the "unwanted prefix" and loads the raw model
        for prefix in ("module.", "_orig_mod."):
            model_sd = {k.removeprefix(prefix): v for k, v in model_sd.items()}
        run.raw.load_state_dict(model_sd)
    else:
        run.model.load_state_dict(model_sd)
    if load_opt:
        run.optimizer.load_state_dict(osd)
    if load_sched:
        run.scheduler.load_state_dict(ssd)
    run.iter_num = it
    return run


def nanogpt_setup(
    out: Path, key: str, setup: str, layout: str, wrap: str, variants: Iterable[Variant]
) -> dict[str, Any]:
    """A base state, then one state per variant resumed from it."""
    root = fresh_dir(out / key)
    family = "torch-zip" if layout == "onefile" else "training-state"
    cases: dict[str, Any] = {}

    def record(
        case_id: str, run: Live, folder: Path, expect: str, save_meta: bool, **kw: Any
    ) -> Path:
        path, loc = save_state(run, folder, layout, save_meta)
        truth = id_names(run.model.named_parameters(), run.optimizer)
        check_truth(truth, run.optimizer.state_dict(), _shapes(run.model))
        cases[case_id] = {
            "path": path.relative_to(out).as_posix(),
            "family": family,
            "kind": "training_state",
            "setup": setup,
            "expect": expect,
            "id_names": {loc: truth},
            **kw,
        }
        return path

    base = new_run(wrap)
    train(base, BASE_STEPS)
    base_id = f"{key}_base"
    base_path = record(base_id, base, root / "base", "clean", True)
    for v in variants:
        name, expect, steps, _, _, reversed_, save_meta = v
        run = resume(base_path, layout, wrap, v)
        train(run, steps)
        extra = {"shape_visible": False} if reversed_ else {}
        record(f"{key}_{name}", run, root / name, expect, save_meta, resume_of=base_id, **extra)
    return cases


def _gloo_world_of_one() -> None:
    os.environ.update(launcher_env())
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)


ALL_FAULTS = (RESUME_CLEAN, SCHED_NOT_LOADED, OPTIM_NOT_LOADED_1, OPTIM_NOT_LOADED_3, PARAM_ORDER)

# setup key -> (setup label, layout, wrappers, variants resumed from the base state)
NANO_PLAN: dict[str, tuple[str, str, str, tuple[Variant, ...]]] = {
    "nanogpt_onefile": ("nanoGPT one file", "onefile", "", ALL_FAULTS),
    "nanogpt_files": ("nanoGPT separate files + meta.pt", "files", "", (*ALL_FAULTS, RNG_MISSING)),
    "compile_onefile": (
        "nanoGPT torch.compile one file",
        "onefile",
        "compile",
        (RESUME_CLEAN, SCHED_NOT_LOADED),
    ),
    "ddp_files": (
        "nanoGPT DDP separate files + meta.pt",
        "files",
        "ddp",
        (RESUME_CLEAN, OPTIM_NOT_LOADED_3),
    ),
    "ddp_compile_onefile": (
        "nanoGPT torch.compile + DDP one file",
        "onefile",
        "compile+ddp",
        (RESUME_CLEAN,),
    ),
}


def case_nanogpt(key: str) -> Callable[[Path], Mapping[str, Any]]:
    label, layout, wrap, variants = NANO_PLAN[key]

    def make(out: Path) -> dict[str, Any]:
        if "ddp" not in wrap:
            return nanogpt_setup(out, key, label, layout, wrap, variants)
        _gloo_world_of_one()
        try:
            return nanogpt_setup(out, key, label, layout, wrap, variants)
        finally:
            torch.distributed.destroy_process_group()

    return make


# ----------------------------------------------------------------------------------------------
# ColossalAI 0.5.0 Booster + TorchDDPPlugin
# ----------------------------------------------------------------------------------------------

LLAMA_KW: dict[str, Any] = dict(
    vocab_size=64,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
)
SHARD_MB = 0.01  # MiB per shard: several shards for the tiny model


@dataclass
class CaiRun:
    booster: Any
    model: Any  # ModelWrapper
    optimizer: Any  # OptimizerWrapper
    scheduler: Any
    step: int = 0


def _cai_groups(model: nn.Module, blocks_reversed: bool) -> list[dict[str, Any]]:
    """HF-style decay / no-decay groups by name (norms and biases get no decay)."""
    named = list(model.named_parameters())
    if blocks_reversed:  # the planted fault: the groups built walking the layers top-down
        by_name = dict(named)
        n_layer = LLAMA_KW["num_hidden_layers"]
        named = [(m, by_name[m]) for m in (_mirror_llama(n, n_layer) for n, _ in named)]
    no_decay = ("bias", "norm")
    return [
        {
            "params": [p for n, p in named if not any(k in n for k in no_decay)],
            "weight_decay": 0.01,
        },
        {"params": [p for n, p in named if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]


def _mirror_llama(name: str, n_layer: int) -> str:
    m = re.match(r"(.*\.layers\.)(\d+)(\..*)", name)
    return f"{m[1]}{n_layer - 1 - int(m[2])}{m[3]}" if m else name


def cai_new_run(blocks_reversed: bool = False) -> CaiRun:
    from colossalai.booster import Booster
    from colossalai.booster.plugin import TorchDDPPlugin
    from colossalai.nn.lr_scheduler import CosineAnnealingWarmupLR
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    model = LlamaForCausalLM(LlamaConfig(**LLAMA_KW))
    optimizer = torch.optim.AdamW(_cai_groups(model, blocks_reversed), lr=1e-3, betas=(0.9, 0.95))
    scheduler = CosineAnnealingWarmupLR(optimizer, total_steps=20, warmup_steps=2)
    booster = Booster(plugin=TorchDDPPlugin())
    model, optimizer, _, _, scheduler = booster.boost(model, optimizer, lr_scheduler=scheduler)
    return CaiRun(booster, model, optimizer, scheduler)


def cai_train(run: CaiRun, steps: int) -> None:
    run.model.train()
    for _ in range(steps):
        ids = torch.randint(0, LLAMA_KW["vocab_size"], (2, 8))
        run.booster.backward(run.model(input_ids=ids, labels=ids).loss, run.optimizer)
        run.optimizer.step()
        run.optimizer.zero_grad()
        run.scheduler.step()
        run.step += 1


# layout -> (folder name, model, optimizer, scheduler, run-state file, sharded)
CAI_LAYOUTS = {
    "meta_sharded": ("global_step{n}", "model", "optim", "lr_scheduler", "meta.pt", True),
    "meta_unsharded": (
        "global_step{n}",
        "model.pt",
        "optimizer.pt",
        "lr_scheduler.pt",
        "meta.pt",
        False,
    ),
    "chat": (
        "epoch-{e}_step-{n}",
        "modeling",
        "optimizer",
        "lr_scheduler",
        "running_states.json",
        True,
    ),
}


def cai_save(run: CaiRun, folder: Path, layout: str, save_meta: bool) -> tuple[Path, str]:
    dirname, m, o, s, meta, shard = CAI_LAYOUTS[layout]
    path = folder / dirname.format(n=run.step, e=EPOCH)
    path.mkdir(parents=True)
    kw: dict[str, Any] = {"shard": shard}
    if shard:
        kw["size_per_shard"] = SHARD_MB
    run.booster.save_model(run.model, str(path / m), **kw)
    run.booster.save_optimizer(run.optimizer, str(path / o), **kw)
    run.booster.save_lr_scheduler(run.scheduler, str(path / s))
    if not save_meta:
        return path, o
    if meta == "meta.pt":
        torch.save({"epoch": EPOCH, "step": run.step, **rng_states()}, path / meta)
    else:  # ColossalChat's running_states.json (no RNG state)
        running = {"epoch": EPOCH, "step": run.step, "sample_start_index": run.step * 2}
        (path / meta).write_text(json.dumps(running, indent=4), encoding="utf-8")
    return path, o


def cai_resume(path: Path, layout: str, v: Variant) -> CaiRun:
    from colossalai.accelerator.cpu_accelerator import CpuAccelerator

    _, _, _, load_opt, load_sched, reversed_, _ = v
    _, m, o, s, meta, _ = CAI_LAYOUTS[layout]
    run = cai_new_run(blocks_reversed=reversed_)
    run.booster.load_model(run.model, str(path / m))
    if load_opt:
        real_sync = CpuAccelerator.synchronize
        CpuAccelerator.synchronize = lambda self, device=None: None  # type: ignore[method-assign]
        try:
            run.booster.load_optimizer(run.optimizer, str(path / o))
        finally:
            CpuAccelerator.synchronize = real_sync  # type: ignore[method-assign]
    if load_sched:
        run.booster.load_lr_scheduler(run.scheduler, str(path / s))
    if meta == "meta.pt":
        state = _own_load(path / meta)
        restore_rng(state)
    else:
        state = json.loads((path / meta).read_text(encoding="utf-8"))
    run.step = int(state["step"])
    return run


def cai_setup(
    out: Path, key: str, layout: str, setup: str, variants: Iterable[Variant]
) -> dict[str, Any]:
    root = fresh_dir(out / key)
    cases: dict[str, Any] = {}

    def record(
        case_id: str, run: CaiRun, folder: Path, expect: str, save_meta: bool, **kw: Any
    ) -> Path:
        path, loc = cai_save(run, folder, layout, save_meta)
        raw = run.model.unwrap()
        truth = id_names(raw.named_parameters(), run.optimizer.unwrap())
        check_truth(truth, run.optimizer.unwrap().state_dict(), _shapes(raw))
        cases[case_id] = {
            "path": path.relative_to(out).as_posix(),
            "family": "training-state",
            "kind": "training_state",
            "setup": setup,
            "expect": expect,
            "id_names": {loc: truth},
            **kw,
        }
        return path

    torch.manual_seed(SEED)
    base = cai_new_run()
    cai_train(base, CAI_BASE_STEPS)
    base_id = f"{key}_base"
    base_path = record(base_id, base, root / "base", "clean", True)
    for v in variants:
        name, expect, steps, _, _, reversed_, save_meta = v
        run = cai_resume(base_path, layout, v)
        cai_train(run, steps)
        extra = {"shape_visible": False} if reversed_ else {}
        record(f"{key}_{name}", run, root / name, expect, save_meta, resume_of=base_id, **extra)
    return cases


# setup key -> (setup label, layout, variants resumed from the base state)
CAI_PLAN: dict[str, tuple[str, str, tuple[Variant, ...]]] = {
    "colossalai_meta_sharded": (
        "ColossalAI Booster TorchDDP sharded + meta.pt",
        "meta_sharded",
        (*ALL_FAULTS, RNG_MISSING),
    ),
    "colossalai_meta_unsharded": (
        "ColossalAI Booster TorchDDP one file each + meta.pt",
        "meta_unsharded",
        (RESUME_CLEAN, SCHED_NOT_LOADED, OPTIM_NOT_LOADED_1),
    ),
    "colossalai_chat": (
        "ColossalChat epoch-E_step-S (Booster TorchDDP)",
        "chat",
        (RESUME_CLEAN, SCHED_NOT_LOADED, OPTIM_NOT_LOADED_3),
    ),
}


def case_colossalai(out: Path) -> dict[str, Any]:
    import colossalai
    import torch.distributed as dist

    if not hasattr(dist, "is_hccl_available"):  # colossalai 0.5.0 calls it; torch 2.13 lacks it
        dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    os.environ.update(launcher_env())
    colossalai.launch_from_torch(backend="gloo", seed=SEED)
    cases: dict[str, Any] = {}
    try:
        for key, (label, layout, variants) in CAI_PLAN.items():
            cases.update(cai_setup(out, key, layout, label, variants))
    finally:
        dist.destroy_process_group()
    return cases


def planned_cases() -> dict[str, dict[str, Any]]:
    """Case id -> {"setup", "expect", "resume_of"?}: what a run of this maker writes."""
    plan: dict[str, dict[str, Any]] = {}
    setups = [(k, v[0], v[3]) for k, v in NANO_PLAN.items()]
    setups += [(k, v[0], v[2]) for k, v in CAI_PLAN.items()]
    for key, label, variants in setups:
        plan[f"{key}_base"] = {"setup": label, "expect": "clean"}
        for v in variants:
            plan[f"{key}_{v[0]}"] = {"setup": label, "expect": v[1], "resume_of": f"{key}_base"}
    return plan


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {
    **{key: case_nanogpt(key) for key in NANO_PLAN},
    "colossalai": case_colossalai,
}


def main(argv: list[str]) -> int:
    import colossalai

    version = f"torch {torch.__version__}, colossalai {colossalai.__version__}"
    return run_maker(main_out_dir(argv), "realworld_torch", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
