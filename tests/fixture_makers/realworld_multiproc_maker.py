"""Real-world training states written by 2 processes: accelerate ``save_state`` under torchrun.

Usage: ``python tests/fixture_makers/realworld_multiproc_maker.py OUT_DIR``

Two CPU processes (gloo, ``torch.distributed.run``) train a small MLP with accelerate
(``Accelerator(cpu=True)``, DDP), AdamW with decay / no-decay groups and a linear warm-up
schedule passed to ``prepare``, and ``save_state`` at steps 3 and 6 into ``run/step-N``. A
prepared scheduler is stepped once per process for each optimizer step (accelerate's
``AcceleratedScheduler`` without ``split_batches``), so a clean state records ``last_epoch``
2 × the optimizer step; each process writes its ``random_states_<rank>.pkl``. Then a clean
resume: the same objects built afresh, ``load_state(run/step-3)``, 3 steps, ``save_state``.

The corpus contract (``setup``, ``expect``, ``resume_of``, ``id_names``) is in
tests/realworld_check.py; ``id_names`` come from the live optimizer and the unwrapped model.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

SETUP = "accelerate save_state, 2 processes (DDP, gloo)"
WORKER_TIMEOUT_S = 600


def _model() -> torch.nn.Module:
    from torch import nn

    return nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))


def _train(save: Path, steps: tuple[int, ...], resume: Path | None) -> dict[str, Any]:
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader, TensorDataset
    from transformers import get_linear_schedule_with_warmup

    accelerator = Accelerator(cpu=True)
    set_seed(0)
    model = _model()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3,
    )
    scheduler = get_linear_schedule_with_warmup(optimizer, 2, 40)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(96, 8, generator=g), torch.randn(96, 4, generator=g))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    if resume is not None:
        accelerator.load_state(str(resume))
    done = 0 if resume is None else int(resume.name.split("-")[1])
    batches = iter(loader)
    saved = {}
    for target in steps:
        while done < target:
            x, y = next(batches)
            loss = ((model(x) - y) ** 2).mean()
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            done += 1
        folder = save / f"step-{done}"
        accelerator.save_state(str(folder))
        saved[folder.name] = {
            "optimizer_step": done,
            "scheduler_last_epoch": scheduler.scheduler.last_epoch,
        }
    names = {id(p): n for n, p in accelerator.unwrap_model(model).named_parameters()}
    ids = [id(p) for group in optimizer.optimizer.param_groups for p in group["params"]]
    truth = {str(i): names[pid] for i, pid in enumerate(ids)}
    return {"saved": saved, "id_names": truth, "world": accelerator.num_processes}


def worker(out: Path, result: Path) -> None:
    fit = _train(out / "run", (3, 6), None)
    resumed = _train(out / "resume", (6,), out / "run" / "step-3")
    if int(os.environ["RANK"]) == 0:
        import accelerate

        result.write_text(
            json.dumps({"fit": fit, "resume": resumed, "accelerate": accelerate.__version__})
        )


def _case(folder: str, facts: dict[str, Any], truth: dict[str, str], **extra: Any) -> Any:
    return {
        "path": folder,
        "family": "training-state",
        "kind": "training_state",
        "setup": SETUP,
        "expect": "clean",
        "id_names": {"optimizer.bin": truth},
        **facts,
        **extra,
    }


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "--worker":
        from _manifest import leave_worker

        worker(Path(argv[2]), Path(argv[3]))
        leave_worker()
        return 0
    from _manifest import free_port, main_out_dir, run_maker, run_session, torchrun_cmd

    out = main_out_dir(argv)

    def cases(out: Path) -> dict[str, Any]:
        result = out / "result.json"
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        env["OMP_NUM_THREADS"] = "1"
        script = (str(Path(__file__).resolve()), "--worker", str(out), str(result))
        cmd = torchrun_cmd(2, free_port(), *script)
        run_session(cmd, env, "torchrun", result, WORKER_TIMEOUT_S, tail=4000)
        res = json.loads(result.read_text())
        fit, resumed = res["fit"], res["resume"]
        if fit["world"] != 2:
            raise AssertionError(f"expected 2 processes, accelerate saw {fit['world']}")
        return {
            "accelerate2_step3": _case("run/step-3", fit["saved"]["step-3"], fit["id_names"]),
            "accelerate2_step6": _case("run/step-6", fit["saved"]["step-6"], fit["id_names"]),
            "accelerate2_resume_clean": _case(
                "resume/step-6",
                resumed["saved"]["step-6"],
                resumed["id_names"],
                resume_of="accelerate2_step3",
            ),
        }

    import accelerate

    version = f"torch {torch.__version__}, accelerate {accelerate.__version__}"
    return run_maker(out, "realworld_multiproc", version, {"accelerate2": cases})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
