"""A small, realistic demo training state that every command can be tried on.

A tiny transformer is trained for a few steps with AdamW and a warm-up scheduler, then saved
as a ColossalAI-style training-state folder (sharded model + index in MiB, sharded optimizer
with a param-group file, scheduler file, ``running_states.json``). A second folder is a
"resumed" run with a planted mistake: the scheduler was not restored. A short run folder
(``run/step-2, step-4, step-6``) is what the Timeline reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, 4, dim * 4, dropout=0.0, batch_first=True)
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def _train(steps: int, seed: int = 0) -> tuple[TinyLM, torch.optim.Optimizer, Any]:
    torch.manual_seed(seed)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    for _ in range(steps):
        ids = torch.randint(0, 256, (4, 16))
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return model, opt, sched


def _save_sharded(obj: dict[Any, Any], folder: Path, base: str, per_shard: int) -> list[str]:
    items = list(obj.items())
    files = []
    for i in range(0, len(items), per_shard):
        name = f"{base}-{i // per_shard + 1:05d}.bin"
        torch.save(dict(items[i : i + per_shard]), folder / name)
        files += [name] * len(items[i : i + per_shard])
    return files


def save_training_state(folder: Path, model: nn.Module, opt: Any, sched: Any, step: int) -> None:
    """Write ``folder/{modeling, optimizer, lr_scheduler, running_states.json}``."""
    modeling, optimizer = folder / "modeling", folder / "optimizer"
    modeling.mkdir(parents=True)
    optimizer.mkdir()
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    files = _save_sharded(sd, modeling, "pytorch_model", per_shard=12)
    mib = sum(t.numel() * t.element_size() for t in sd.values()) / 2**20
    index = {"metadata": {"total_size": mib}, "weight_map": dict(zip(sd, files, strict=True))}
    (modeling / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2) + "\n")
    state = opt.state_dict()
    torch.save(state["param_groups"], optimizer / "pytorch_optim_group.bin")
    files = _save_sharded(state["state"], optimizer, "pytorch_optim", per_shard=16)
    mib = (
        sum(
            t.numel() * t.element_size()
            for s in state["state"].values()
            for t in s.values()
            if isinstance(t, torch.Tensor)
        )
        / 2**20
    )
    index = {
        "metadata": {"total_size": mib, "param_groups": "pytorch_optim_group.bin"},
        "weight_map": {str(k): f for k, f in zip(state["state"], files, strict=True)},
    }
    (optimizer / "pytorch_optim.bin.index.json").write_text(json.dumps(index, indent=2) + "\n")
    torch.save(sched.state_dict(), folder / "lr_scheduler")
    running = {"epoch": 0, "step": step, "sample_start_index": step * 4}
    (folder / "running_states.json").write_text(json.dumps(running) + "\n")


def save_run(folder: Path, steps: int = 6, every: int = 2, seed: int = 1) -> None:
    """A short run folder for the Timeline: ``folder/step-N`` training states saved every
    ``every`` steps of one training run."""
    torch.manual_seed(seed)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    for step in range(1, steps + 1):
        ids = torch.randint(0, 256, (4, 16))
        nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        if step % every == 0:
            save_training_state(folder / f"step-{step}", model, opt, sched, step)


def make_demo(out: str | Path, steps: int = 6) -> Path:
    """Write the demo under ``out`` (kept if already there) and return its path: the two
    states of a resume (``resumed_from``, ``after_resume``) and a short run (``run/step-N``)."""
    root = Path(out)
    if not (root / "run" / f"step-{steps}" / "running_states.json").is_file():
        save_run(root / "run", steps)
    if (root / "resumed_from" / "running_states.json").is_file():
        return root
    model, opt, sched = _train(steps)
    save_training_state(root / "resumed_from", model, opt, sched, steps)
    # The resumed run: two more steps, but the scheduler was rebuilt instead of restored.
    model2, opt2, _ = _train(steps)
    fresh = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: min(1.0, (s + 1) / 10))
    for _ in range(2):
        ids = torch.randint(0, 256, (4, 16))
        nn.functional.cross_entropy(model2(ids).flatten(0, 1), ids.flatten()).backward()
        opt2.step()
        fresh.step()
        opt2.zero_grad()
    save_training_state(root / "after_resume", model2, opt2, fresh, steps + 2)
    return root
