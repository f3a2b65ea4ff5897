"""Real-world states of a plain torch loop: a tied-embedding LM saved mid-epoch under gradient
accumulation.

Usage: ``python tests/fixture_makers/realworld_tiedlm_maker.py OUT_DIR``

``TinyLM`` with its output head tied to the embedding (``head.weight = embed.weight``: the
``state_dict`` lists both names, the optimizer one parameter), AdamW over decay / no-decay
groups, a warm-up + cosine ``LambdaLR`` stepped per optimizer step, ``GRAD_ACCUM`` micro-batches
per optimizer step and a save every ``SAVE_EVERY`` micro-batches, so saves fall inside an
epoch. Each ``ckpt_<micro>.pt`` holds ``model``, ``optimizer``, ``lr_scheduler``, ``epoch``
(the epoch under way), ``batch_idx`` (micro-batches done in that epoch), ``global_step``
(optimizer steps), ``micro_step`` (micro-batches in all), ``grad_accum_steps`` and the CPU RNG
state (``rng_state``).

Cases (the corpus contract is in tests/realworld_check.py):

* ``tiedlm_micro12`` / ``tiedlm_micro24``: one run, clean (epoch 0 and epoch 1, mid-epoch).
* ``tiedlm_resume_clean``: resumed from micro-batch 12 with every part loaded; micro 24.
* ``tiedlm_scheduler_not_restored``: the resume loads all but ``lr_scheduler``; micro 24.
* ``tiedlm_optimizer_not_restored``: the resume loads all but ``optimizer``; micro 24.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import main_out_dir, run_maker
from _models import TinyLM, decay_groups, id_names, token_batch, warmup_cosine

SETUP = "plain torch loop: tied-embedding LM, mid-epoch saves, gradient accumulation"
GRAD_ACCUM, SAVE_EVERY, PER_EPOCH, TOTAL = 4, 12, 20, 24
VOCAB, DIM = 48, 16


def _schedule(step: int) -> float:
    return warmup_cosine(step, 2, 10)


def train(folder: Path, resume: Path | None = None, skip: tuple[str, ...] = ()) -> Any:
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = TinyLM(VOCAB, DIM, 2)
    model.head.weight = model.embed.weight  # tied
    opt = torch.optim.AdamW(decay_groups(model), lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule)
    micro, global_step = 0, 0
    if resume is not None:
        state = torch.load(resume, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        if "optimizer" not in skip:
            opt.load_state_dict(state["optimizer"])
        if "lr_scheduler" not in skip:
            sched.load_state_dict(state["lr_scheduler"])
        torch.set_rng_state(state["rng_state"])
        micro, global_step = state["micro_step"], state["global_step"]
    while micro < TOTAL:
        loss = model(token_batch(micro, 7, VOCAB, 4, 8)) / GRAD_ACCUM
        loss.backward()
        micro += 1
        if micro % GRAD_ACCUM == 0:
            opt.step()
            opt.zero_grad()
            sched.step()
            global_step += 1
        if micro % SAVE_EVERY == 0:
            state = {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "lr_scheduler": sched.state_dict(),
                "epoch": micro // PER_EPOCH,
                "batch_idx": micro % PER_EPOCH,
                "global_step": global_step,
                "micro_step": micro,
                "grad_accum_steps": GRAD_ACCUM,
                "rng_state": torch.get_rng_state(),
            }
            torch.save(state, folder / f"ckpt_{micro}.pt")
    return model, opt


def _case(out: Path, path: Path, truth: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    osd = state["optimizer"]
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{path}: optimizer ids {sorted(ids)} != {sorted(truth)}")
    if state["model"]["head.weight"].data_ptr() != state["model"]["embed.weight"].data_ptr():
        raise AssertionError(f"{path}: head and embedding are not one storage")
    return {
        "path": path.relative_to(out).as_posix(),
        "family": "torch-zip",
        "kind": "training_state",
        "setup": SETUP,
        "expect": extra.pop("expect", "clean"),
        "id_names": {"optimizer": dict(truth)},
        "tied": ["embed.weight", "head.weight"],
        "optimizer_step": sorted({float(s["step"]) for s in osd["state"].values()}),
        "values": {k: state[k] for k in ("epoch", "batch_idx", "global_step", "micro_step")},
        "scheduler_last_epoch": state["lr_scheduler"]["last_epoch"],
        **extra,
    }


def tiedlm_cases(out: Path) -> dict[str, Any]:
    run = out / "run"
    model, opt = train(run)
    truth = id_names(model.named_parameters(), opt.param_groups)
    cases = {f"tiedlm_micro{m}": _case(out, run / f"ckpt_{m}.pt", truth) for m in (12, 24)}
    start = run / "ckpt_12.pt"
    for name, skip, expect in (
        ("resume_clean", (), "clean"),
        ("scheduler_not_restored", ("lr_scheduler",), "scheduler_not_restored"),
        ("optimizer_not_restored", ("optimizer",), "optimizer_moments_reset"),
    ):
        train(out / name, start, skip)
        cases[f"tiedlm_{name}"] = _case(
            out, out / name / "ckpt_24.pt", truth, expect=expect, resume_of="tiedlm_micro12"
        )
    return cases


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"tiedlm": tiedlm_cases}


def main(argv: list[str]) -> int:
    return run_maker(main_out_dir(argv), "realworld_tiedlm", f"torch {torch.__version__}", CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
