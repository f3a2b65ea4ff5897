"""Real-world training states written by LitGPT's ``pretrain`` (Lightning Fabric).

Usage: ``python tests/fixture_makers/realworld_litgpt_maker.py OUT_DIR``

``litgpt.pretrain.setup`` on a one-layer Llama-style ``Config`` (vocab 64, 16 dims, RMSNorm,
LLaMAMLP), ``precision="32-true"`` on CPU, ``global_batch_size=4`` with ``micro_batch_size=2``
(2 micro-batches per optimizer step) and ``save_interval=2``. LitGPT saves every
``save_interval`` optimizer steps into ``out_dir/step-0000000N/``: ``lit_model.pth`` written by
``fabric.save`` holding ``model``, ``optimizer`` (AdamW), ``train_dataloader`` (the loader's
``state_dict``), ``iter_num`` (micro-batches) and ``step_count`` (optimizer steps), beside
``model_config.yaml`` and ``hyperparameters.yaml``; ``final/`` holds the same after the last
step. Pretraining saves no LR scheduler (``get_lr`` recomputes the rate from ``iter_num``) and
no RNG state. The data module stands in for litdata's ``StreamingDataLoader``: a DataLoader
with ``state_dict``/``load_state_dict`` (Fabric saves a stateful loader's ``state_dict``).
``TORCHDYNAMO_DISABLE=1`` turns pretrain's ``torch.compile`` into a no-op on this CPU (Fabric
saves the unwrapped module's keys either way); ``sys.argv`` is set to the equivalent
``litgpt pretrain`` command line, which ``save_hyperparameters`` records.

Cases (the corpus contract is in tests/realworld_check.py):

* ``litgpt_step2`` / ``litgpt_step4``: one run's step folders, clean.
* ``litgpt_resume_clean``: ``--resume auto`` in a folder holding a copy of ``step-00000002``;
  its ``step-00000004``.
* ``litgpt_optimizer_not_restored``: a user's Fabric script built from ``pretrain.main`` whose
  resume loads ``model``, ``train_dataloader``, ``iter_num`` and ``step_count`` but not the
  optimizer (``fabric.load(path, subset, strict=False)``): fresh AdamW moments.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
from _manifest import main_out_dir, run_maker
from _models import id_names
from torch.utils.data import DataLoader

SETUP = "LitGPT pretrain (Fabric, step-N/lit_model.pth)"
VOCAB, SEQ = 64, 8
TRAIN = {
    "save_interval": 2,
    "log_interval": 1,
    "global_batch_size": 4,
    "micro_batch_size": 2,
    "max_tokens": 4 * 4 * SEQ,  # 4 optimizer steps of 4 sequences
    "lr_warmup_steps": 1,
    "max_norm": 1.0,
    "min_lr": 1e-4,
    "max_seq_length": SEQ,
}


class ResumableLoader(DataLoader):  # type: ignore[type-arg]
    """A DataLoader that saves its position (litdata's StreamingDataLoader does)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches_yielded = 0

    def __iter__(self) -> Any:
        for batch in super().__iter__():
            self.batches_yielded += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return {"batches_yielded": self.batches_yielded, "num_samples": len(self.dataset)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches_yielded = int(state["batches_yielded"])


def _data_module() -> Any:
    from litgpt.data import DataModule

    class Tokens(DataModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.batch_size, self.seq = 1, SEQ + 1

        def connect(
            self, tokenizer: Any = None, batch_size: int = 1, max_seq_length: Any = None, **_: Any
        ) -> None:
            self.batch_size, self.seq = batch_size, int(max_seq_length) + 1  # + the next token

        def _loader(self, seed: int) -> ResumableLoader:
            g = torch.Generator().manual_seed(seed)
            rows = torch.randint(0, VOCAB, (64, self.seq), generator=g)
            return ResumableLoader(rows, batch_size=self.batch_size, shuffle=False)

        def train_dataloader(self) -> ResumableLoader:
            return self._loader(0)

        def val_dataloader(self) -> ResumableLoader:
            return self._loader(1)

    return Tokens()


def _config() -> Any:
    from litgpt import Config

    return Config(
        name="tiny-llama-fixture",
        block_size=SEQ,
        vocab_size=VOCAB,
        padded_vocab_size=VOCAB,
        n_layer=1,
        n_head=2,
        n_embd=16,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=32,
    )


def _argv(out_dir: Path, resume: str | None) -> list[str]:
    argv = ["litgpt", "pretrain", "tiny-llama-fixture", f"--out_dir={out_dir}"]
    argv += [f"--train.{k}={v}" for k, v in TRAIN.items()]
    argv += ["--precision=32-true", "--devices=1", "--logger_name=csv", "--seed=1"]
    return argv + ([f"--resume={resume}"] if resume else [])


def _pretrain(out_dir: Path, resume: Any = False) -> None:
    from litgpt import pretrain
    from litgpt.args import EvalArgs, TrainArgs

    sys.argv = _argv(out_dir, str(resume) if resume else None)
    pretrain.setup(
        "tiny-llama-fixture",
        model_config=_config(),
        out_dir=out_dir,
        precision="32-true",
        resume=resume,
        data=_data_module(),
        train=TrainArgs(**TRAIN),
        eval=EvalArgs(interval=1000, max_iters=1),
        devices=1,
        logger_name="csv",
        seed=1,
    )


def _resume_without_optimizer(out_dir: Path, resume: Path) -> None:
    """``pretrain.main``'s steps with a resume that restores everything but the optimizer."""
    import lightning as L
    from litgpt import pretrain
    from litgpt.args import EvalArgs, TrainArgs
    from litgpt.model import GPT
    from litgpt.utils import instantiate_torch_optimizer

    sys.argv = _argv(out_dir, str(resume))
    train = TrainArgs(**TRAIN)
    fabric = L.Fabric(devices=1, accelerator="cpu", precision="32-true")
    fabric.seed_everything(1)
    model = GPT(_config())
    pretrain.initialize_weights(fabric, model, n_layer=1, n_embd=16)
    model.max_seq_length = SEQ
    model = fabric.setup(model)
    optimizer = fabric.setup_optimizers(instantiate_torch_optimizer("AdamW", model.parameters()))
    train_dl, val_dl = pretrain.get_dataloaders(fabric, _data_module(), None, train, SEQ)
    train_dl, val_dl = fabric.setup_dataloaders(train_dl, val_dl)
    state = {"model": model, "optimizer": optimizer, "train_dataloader": train_dl}
    restored = {"model": model, "train_dataloader": train_dl, "iter_num": 0, "step_count": 0}
    fabric.load(resume, restored, strict=False)
    state.update(iter_num=restored["iter_num"], step_count=restored["step_count"])
    pretrain.fit(
        fabric=fabric,
        devices=1,
        state=state,
        train_dataloader=train_dl,
        val_dataloader=val_dl,
        out_dir=out_dir,
        tokenizer_dir=None,
        train=train,
        eval=EvalArgs(interval=1000, max_iters=1),
    )


def _truth(folder: Path) -> dict[str, str]:
    """``{state id: parameter name}`` from a GPT built like pretrain's, numbered as AdamW over
    ``model.parameters()`` numbers them."""
    from litgpt.model import GPT

    model = GPT(_config())
    opt = torch.optim.AdamW(model.parameters())
    return id_names(model.named_parameters(), opt.param_groups)


def _case(out: Path, folder: Path, truth: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    state = torch.load(folder / "lit_model.pth", map_location="cpu", weights_only=False)
    osd = state["optimizer"]
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{folder}: optimizer ids {sorted(ids)} != {sorted(truth)}")
    if not isinstance(state["train_dataloader"], dict):
        raise AssertionError(f"{folder}: the loader was pickled as an object")
    return {
        "path": folder.relative_to(out).as_posix(),
        "family": "training-state",
        "kind": "training_state",
        "setup": SETUP,
        "expect": extra.pop("expect", "clean"),
        "id_names": {"lit_model.pth": dict(truth)},
        "iter_num": state["iter_num"],
        "step_count": state["step_count"],
        "optimizer_step": sorted({float(s["step"]) for s in osd["state"].values()}),
        "keys": sorted(state),
        "files": sorted(p.name for p in folder.iterdir()),
        **extra,
    }


def litgpt_cases(out: Path) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    run = out / "run"
    _pretrain(run)
    truth = _truth(run)
    cases = {
        "litgpt_step2": _case(out, run / "step-00000002", truth),
        "litgpt_step4": _case(out, run / "step-00000004", truth),
    }
    resumed = out / "resume_clean"
    resumed.mkdir()
    shutil.copytree(run / "step-00000002", resumed / "step-00000002")
    _pretrain(resumed, resume="auto")
    cases["litgpt_resume_clean"] = _case(
        out, resumed / "step-00000004", truth, resume_of="litgpt_step2"
    )
    no_opt = out / "resume_no_optimizer"
    no_opt.mkdir()
    _resume_without_optimizer(no_opt, run / "step-00000002" / "lit_model.pth")
    cases["litgpt_optimizer_not_restored"] = _case(
        out,
        no_opt / "step-00000004",
        truth,
        expect="optimizer_moments_reset",
        resume_of="litgpt_step2",
    )
    return cases


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"litgpt": litgpt_cases}


def main(argv: list[str]) -> int:
    from importlib.metadata import version

    out_dir = main_out_dir(argv)
    versions = (
        f"torch {torch.__version__}, litgpt {version('litgpt')}, lightning {version('lightning')}"
    )
    return run_maker(out_dir, "realworld_litgpt", versions, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
