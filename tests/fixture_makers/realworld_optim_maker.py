"""Real-world training states with optimizers other than Adam/AdamW, and two optimizers in one
state.

Usage: ``python tests/fixture_makers/realworld_optim_maker.py OUT_DIR``

Every state is written by a tiny training run (a 2-layer LM: ``embed``, ``blocks.N.norm`` /
``fc`` / ``proj``, ``norm_f``, ``head``) the way nanoGPT-style loops write it: ONE
``torch.save`` file. With one optimizer: ``{'model', 'optimizer', 'scheduler', 'iter_num',
'config'}`` (no ``scheduler`` for schedule-free). With two optimizers, as modded-nanogpt-style
loops save them: ``{'model', 'optimizers': [o.state_dict() for o in opts], 'schedulers':
[s.state_dict() for s in scheds], 'step': n}``. The corpus contract (``setup``, ``expect``,
``resume_of``, ``id_names``) is in tests/realworld_check.py; ``id_names`` comes from the live
objects (the module's parameter names walked in each optimizer's groups, numbered as
``Optimizer.state_dict`` numbers them) and is keyed ``""`` for the file's ``optimizer``, or
``optimizers.<i>`` for the i-th entry of its ``optimizers`` list.

Setups (all real optimizers, CPU): torch ``SGD`` with momentum (its state is
``momentum_buffer`` only: no step counter), ``Adagrad``, ``RMSprop`` (momentum, centered),
``NAdam``, ``RAdam`` (decoupled weight decay), ``Adafactor`` (factored ``row_var`` /
``col_var`` for matrices, ``variance`` for vectors), ``AdamW`` with the head's params added later
through ``add_param_group`` (after 2 steps: the head's states have 2 steps fewer; the
``LambdaLR`` is remade over the 3 groups at that step, the new group with its ``initial_lr``),
``schedulefree.AdamWScheduleFree`` (its ``z`` / ``exp_avg_sq`` states and the group's ``k``,
``weight_sum``, ``lr_max``; saved in train mode), bitsandbytes ``AdamW8bit`` (runs on CPU in
bitsandbytes 0.50: its per-param state is ``step`` plus ``__bnb_optimizer_quant_state__`` with
uint8 ``state1`` / ``state2``, ``qmap1`` / ``qmap2``, ``absmax1`` / ``absmax2``),
``SparseAdam`` for an ``nn.Embedding(sparse=True)`` beside Adam for the dense rest (two
optimizers), and ``torch.optim.Muon`` for the blocks' matrices beside AdamW for the rest (two
optimizers, each with its own ``LambdaLR``). Every setup but schedule-free has a warm-up +
cosine ``LambdaLR`` per optimizer.

Per setup: a base state after 4 steps, then states saved 3 steps after resuming from it:
clean; the scheduler(s) not loaded (``iter_num`` 7, ``last_epoch`` 3); the optimizer(s) not
loaded (fresh SGD momentum buffers, schedule-free's ``k`` restarted, ...); the optimizer(s)
rebuilt with their params in another order (layer 0's and layer 1's same-shaped params trade
places in the groups) and the old state loaded by position (``"shape_visible": false``).
Schedule-free has no scheduler, so no scheduler fault.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import fresh_dir, main_out_dir, run_maker
from _models import TinyLM, token_batch, warmup_cosine
from torch import nn

SEED = 1234
VOCAB, DIM, N_LAYER, SEQ, BATCH = 32, 16, 2, 8, 4
BASE_STEPS, RESUME_STEPS, ADD_GROUP_AT = 4, 3, 2
LR, WARMUP, TOTAL = 1e-2, 2, 20

# setup key -> (label, optimizers in the file)
PLAN: dict[str, tuple[str, int]] = {
    "sgd_momentum": ("torch SGD momentum, one-file torch.save", 1),
    "adagrad": ("torch Adagrad, one-file torch.save", 1),
    "rmsprop": ("torch RMSprop (momentum, centered), one-file torch.save", 1),
    "nadam": ("torch NAdam, one-file torch.save", 1),
    "radam": ("torch RAdam (decoupled weight decay), one-file torch.save", 1),
    "adafactor": ("torch Adafactor, one-file torch.save", 1),
    "adamw_add_group": ("torch AdamW + add_param_group after 2 steps, one-file torch.save", 1),
    "schedulefree": ("schedulefree AdamWScheduleFree, one-file torch.save", 1),
    "bnb_adamw8bit": ("bitsandbytes AdamW8bit, one-file torch.save", 1),
    "sparse_adam": ("torch SparseAdam (sparse embedding) + Adam, two optimizers", 2),
    "muon_adamw": ("torch Muon (matrices) + AdamW (the rest), two optimizers", 2),
}
# (variant, expect, load optimizer, load scheduler, reorder)
# optimizers that keep no step counter: a fresh one looks like a restored one in one file
NO_STEP_COUNTER = frozenset({"sgd_momentum"})
VARIANTS: tuple[tuple[str, str, bool, bool, bool], ...] = (
    ("resume_clean", "clean", True, True, False),
    ("scheduler_not_loaded", "scheduler_not_restored", True, False, False),
    ("optimizer_not_loaded", "optimizer_moments_reset", False, True, False),
    ("param_order", "param_order_changed", True, True, True),
)


def lr_factor(step: int) -> float:
    return warmup_cosine(step, WARMUP, TOTAL)


def batch(step: int) -> torch.Tensor:
    return token_batch(step, SEED, VOCAB, BATCH, SEQ)


def _mirror(name: str) -> str:
    for a, b in (("blocks.0.", "blocks.1."), ("blocks.1.", "blocks.0.")):
        if name.startswith(a):
            return b + name[len(a) :]
    return name


class Run:
    """One training job: model, optimizer(s), scheduler(s), the step counter."""

    def __init__(self, key: str, reorder: bool = False) -> None:
        torch.manual_seed(SEED)
        self.key = key
        self.model = TinyLM(VOCAB, DIM, N_LAYER, sparse=key == "sparse_adam")
        named = list(self.model.named_parameters())
        if reorder:  # the groups walk layer 1 where layer 0 was (same shapes), and back
            by_name = dict(named)
            named = [(_mirror(n), by_name[_mirror(n)]) for n, _ in named]
        self.named = named
        self.opts = self._optimizers(key, named)
        self.scheds = (
            []
            if key == "schedulefree"
            else [torch.optim.lr_scheduler.LambdaLR(o, lr_factor) for o in self.opts]
        )
        self.step = 0

    def _optimizers(self, key: str, named: list[tuple[str, nn.Parameter]]) -> list[Any]:
        decay = [p for _, p in named if p.ndim >= 2]
        no_decay = [p for _, p in named if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
        o = torch.optim
        if key == "sgd_momentum":
            return [o.SGD(groups, lr=LR, momentum=0.9, nesterov=True)]
        if key == "adagrad":
            return [o.Adagrad(groups, lr=LR)]
        if key == "rmsprop":
            return [o.RMSprop(groups, lr=LR, momentum=0.9, centered=True)]
        if key == "nadam":
            return [o.NAdam(groups, lr=LR)]
        if key == "radam":
            return [o.RAdam(groups, lr=LR, decoupled_weight_decay=True)]
        if key == "adafactor":
            return [o.Adafactor(groups, lr=LR)]
        if key == "adamw_add_group":  # the head joins later (see train)
            head = self.model.head.weight
            body = {**groups[0], "params": [p for p in decay if p is not head]}
            return [o.AdamW([body, groups[1]], lr=LR)]
        if key == "schedulefree":
            import schedulefree

            opt = schedulefree.AdamWScheduleFree(groups, lr=LR, warmup_steps=WARMUP)
            opt.train()
            return [opt]
        if key == "bnb_adamw8bit":
            import bitsandbytes as bnb

            return [bnb.optim.AdamW8bit(groups, lr=LR, min_8bit_size=16)]
        if key == "sparse_adam":
            emb = self.model.embed.weight
            dense = [{**g, "params": [p for p in g["params"] if p is not emb]} for g in groups]
            return [o.SparseAdam([emb], lr=LR), o.Adam(dense, lr=LR)]
        if key == "muon_adamw":
            hidden = [p for n, p in named if p.ndim == 2 and n.startswith("blocks.")]
            rest = [p for n, p in named if not (p.ndim == 2 and n.startswith("blocks."))]
            return [o.Muon(hidden, lr=0.02, momentum=0.95), o.AdamW(rest, lr=LR)]
        raise KeyError(key)

    def add_head_group(self, resuming: bool = False) -> None:
        """The head joins the optimizer; the scheduler is remade over the groups it has now
        (torch's LambdaLR zips its lambdas with the groups strictly): at the current step
        during training, fresh when resuming (its state is then loaded, or not)."""
        lr = LR * 0.5
        self.opts[0].add_param_group({"params": [self.model.head.weight], "lr": lr})
        self.opts[0].param_groups[-1]["initial_lr"] = lr
        self.scheds[0] = torch.optim.lr_scheduler.LambdaLR(
            self.opts[0], lr_factor, last_epoch=-1 if resuming else self.step - 1
        )

    def train(self, steps: int) -> None:
        for _ in range(steps):
            if self.key == "adamw_add_group" and self.step == ADD_GROUP_AT:
                self.add_head_group()
            loss = self.model(batch(self.step))
            loss.backward()
            for opt in self.opts:
                opt.step()
            for sched in self.scheds:
                sched.step()
            for opt in self.opts:
                opt.zero_grad(set_to_none=True)
            self.step += 1

    def state(self) -> dict[str, Any]:
        if len(self.opts) == 1:
            state: dict[str, Any] = {"model": self.model.state_dict()}
            state["optimizer"] = self.opts[0].state_dict()
            if self.scheds:
                state["scheduler"] = self.scheds[0].state_dict()
            state["iter_num"] = self.step
            state["config"] = {"learning_rate": LR, "warmup_iters": WARMUP, "lr_decay_iters": TOTAL}
            return state
        return {
            "model": self.model.state_dict(),
            "optimizers": [o.state_dict() for o in self.opts],
            "schedulers": [s.state_dict() for s in self.scheds],
            "step": self.step,
        }

    def resume(self, path: Path, load_opt: bool, load_sched: bool) -> None:
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.step = int(state.get("iter_num", state.get("step", 0)))
        if self.key == "adamw_add_group" and self.step >= ADD_GROUP_AT:
            self.add_head_group(resuming=True)  # the optimizer rebuilt as it was
        osds = [state["optimizer"]] if "optimizer" in state else state["optimizers"]
        ssds = [state["scheduler"]] if "scheduler" in state else state.get("schedulers", [])
        if load_opt:
            for opt, osd in zip(self.opts, osds, strict=True):
                opt.load_state_dict(osd)
        if load_sched:
            for sched, ssd in zip(self.scheds, ssds, strict=True):
                sched.load_state_dict(ssd)

    def id_names(self) -> dict[str, dict[str, str]]:
        names = {id(p): n for n, p in self.model.named_parameters()}
        out: dict[str, dict[str, str]] = {}
        for i, opt in enumerate(self.opts):
            ids: dict[str, str] = {}
            n = 0
            for group in opt.param_groups:
                for p in group["params"]:
                    ids[str(n)] = names[id(p)]
                    n += 1
            out["" if len(self.opts) == 1 else f"optimizers.{i}"] = ids
        return out


def _summary(run: Run) -> dict[str, Any]:
    """Counters from the live objects, for the tests and the doctor's truth."""
    out: dict[str, Any] = {"iter_num": run.step}
    out["scheduler_last_epoch"] = [s.last_epoch for s in run.scheds]
    steps: list[Any] = []
    for opt in run.opts:
        found = [st["step"] for st in opt.state.values() if "step" in st]
        steps.append(max((float(s) for s in found), default=None))
    out["optimizer_step"] = steps
    out["lr"] = [[g["lr"] for g in o.param_groups] for o in run.opts]
    if run.key == "schedulefree":
        out["schedulefree_k"] = run.opts[0].param_groups[0]["k"]
    return out


def setup_cases(out: Path, key: str) -> dict[str, Any]:
    label, _ = PLAN[key]
    root = fresh_dir(out / key)
    cases: dict[str, Any] = {}

    def record(case_id: str, run: Run, path: Path, expect: str, **kw: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(run.state(), path)
        cases[case_id] = {
            "path": path.relative_to(out).as_posix(),
            "family": "torch-zip",
            "kind": "training_state",
            "setup": label,
            "expect": expect,
            "id_names": run.id_names(),
            "global_steps": run.step,
            **_summary(run),
            **kw,
        }

    base = Run(key)
    base.train(BASE_STEPS)
    base_id = f"{key}_base"
    base_path = root / "base" / "ckpt.pt"
    record(base_id, base, base_path, "clean")
    results: dict[str, Run] = {}
    for name, expect, load_opt, load_sched, reorder in VARIANTS:
        if key == "schedulefree" and not load_sched:
            continue
        run = Run(key, reorder=reorder)
        run.resume(base_path, load_opt, load_sched)
        run.train(RESUME_STEPS)
        kw: dict[str, Any] = {"resume_of": base_id}
        if reorder:
            kw["shape_visible"] = False
        if not load_opt and key in NO_STEP_COUNTER:
            kw["state_shows"] = False  # no counter: one state cannot show the restart
        record(f"{key}_{name}", run, root / name / "ckpt.pt", expect, **kw)
        results[name] = run
    _check_faults(key, results)
    return cases


def _check_faults(key: str, runs: Mapping[str, Run]) -> None:
    """The faults are real: the state they leave differs from the clean resume's."""
    clean = runs["resume_clean"]
    fresh = runs["optimizer_not_loaded"]
    for a, b in zip(clean.opts, fresh.opts, strict=True):
        sa, sb = a.state_dict()["state"], b.state_dict()["state"]
        if key == "schedulefree":
            if a.param_groups[0]["k"] == b.param_groups[0]["k"]:
                raise AssertionError("schedulefree: k did not restart")
            continue
        first = next(iter(sa))
        ta, tb = _tensors(sa[first]), _tensors(sb[first])
        if not ta or all(torch.equal(ta[n], tb[n]) for n in ta):
            raise AssertionError(f"{key}: the optimizer fault left the state as it was")
    faulty = runs.get("scheduler_not_loaded")
    if faulty is not None and faulty.scheds[0].last_epoch == clean.scheds[0].last_epoch:
        raise AssertionError(f"{key}: the scheduler fault did not change last_epoch")


def _tensors(state: Mapping[str, Any], prefix: str = "") -> dict[str, torch.Tensor]:
    """The non-scalar tensors of one param's state, nested dicts (bitsandbytes) flattened."""
    out: dict[str, torch.Tensor] = {}
    for name, v in state.items():
        if isinstance(v, Mapping):
            out.update(_tensors(v, f"{prefix}{name}."))
        elif isinstance(v, torch.Tensor) and v.ndim:
            out[prefix + name] = v
    return out


def planned_cases() -> dict[str, dict[str, Any]]:
    """Case id -> {"setup", "expect", "resume_of"?}: what a run of this maker writes."""
    plan: dict[str, dict[str, Any]] = {}
    for key, (label, _) in PLAN.items():
        plan[f"{key}_base"] = {"setup": label, "expect": "clean"}
        for name, expect, _, load_sched, _ in VARIANTS:
            if key == "schedulefree" and not load_sched:
                continue
            plan[f"{key}_{name}"] = {"setup": label, "expect": expect, "resume_of": f"{key}_base"}
    return plan


def _case(key: str) -> Callable[[Path], Mapping[str, Any]]:
    return lambda out: setup_cases(out, key)


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {key: _case(key) for key in PLAN}


def main(argv: list[str]) -> int:
    from importlib.metadata import version as dist_version

    version = (
        f"torch {torch.__version__}, schedulefree {dist_version('schedulefree')}, "
        f"bitsandbytes {dist_version('bitsandbytes')}"
    )
    return run_maker(main_out_dir(argv), "realworld_optim", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
