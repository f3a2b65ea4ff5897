"""Real-world diffusers outputs: model folders, a pipeline and an accelerate training run.

Usage: ``python tests/fixture_makers/realworld_diffusers_maker.py OUT_DIR``

Everything is written by the real diffusers (and accelerate), the way training code uses it;
the corpus contract (``setup``, ``expect``, ``resume_of``, ``id_names``) is in
tests/realworld_check.py, the listing contract (``tensors``) in README.md.

Setups:

* ``models``: a tiny ``UNet2DModel`` trained 3 steps, ``save_pretrained`` as safetensors,
  as ``.bin`` (``safe_serialization=False``) and sharded (``max_shard_size``: shards plus
  ``diffusion_pytorch_model.safetensors.index.json``); its ``EMAModel.save_pretrained``.
* ``pipeline``: a pipeline of that UNet, a tiny ``AutoencoderKL`` and a ``DDPMScheduler``
  (``DiffusionPipeline.save_pretrained``: ``model_index.json`` + ``unet/ vae/ scheduler/``);
  the model subfolders are cases, the root is named in their ``pipeline_root``.
* ``accelerate``: diffusers' ``examples/unconditional_image_generation/train_unconditional.py``
  loop on CPU: ``accelerator.prepare(model, optimizer, dataloader, lr_scheduler)``, EMAModel,
  and its save/load state hooks (``unet/`` and ``unet_ema/`` by ``save_pretrained`` beside
  accelerate's optimizer.bin, scheduler.bin, random_states_0.pkl); ``checkpoint-2`` and
  ``checkpoint-4``, then a new process-like run resumes from the latest (``load_state``) and
  saves ``checkpoint-6`` in the same run folder. ``id_names``: the UNet's parameter names in
  ``optimizer.param_groups`` order, checked against ``unet/``'s file.

peft is hidden from diffusers here: the fixture environment pins an older peft than diffusers'
optional LoRA integration imports; the models and the loop do not use it.
"""

from __future__ import annotations

import os
import sys

sys.modules.setdefault("peft", None)  # type: ignore[arg-type]  # see the module docstring

import math  # noqa: E402
from collections.abc import Callable, Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from _manifest import fresh_dir, main_out_dir, run_maker, tensors_entries  # noqa: E402
from _models import id_names  # noqa: E402

SEED = 0
SETUP_MODELS = "diffusers save_pretrained"
SETUP_ACCEL = "diffusers train_unconditional (accelerate save_state hooks)"


def unet(in_channels: int = 3) -> Any:
    from diffusers import UNet2DModel

    torch.manual_seed(SEED)
    return UNet2DModel(
        sample_size=8,
        in_channels=in_channels,
        out_channels=in_channels,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
    )


def model_case(
    out: Path, path: Path, tensors: Mapping[str, torch.Tensor], family: str, **extra: Any
):
    return {
        "path": path.relative_to(out).as_posix(),
        "family": family,
        "kind": "model",
        "setup": SETUP_MODELS,
        "expect": "clean",
        "id_names": {},
        "tensors": tensors_entries(dict(tensors)),
        **extra,
    }


def ema_tensors(model: Any, ema: Any) -> dict[str, torch.Tensor]:
    """The EMA weights under the model's names (shadow params follow ``parameters()``)."""
    names = [n for n, _ in model.named_parameters()]
    return dict(zip(names, ema.shadow_params, strict=True))


# ----------------------------------------------------------------------------------------------
# models and pipeline
# ----------------------------------------------------------------------------------------------


def trained_unet(in_channels: int) -> tuple[Any, Any]:
    from diffusers import DDPMScheduler, UNet2DModel
    from diffusers.training_utils import EMAModel

    model = unet(in_channels)
    ema = EMAModel(model.parameters(), model_cls=UNet2DModel, model_config=model.config)
    noise = DDPMScheduler(num_train_timesteps=100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(SEED)
    for _ in range(3):
        x = torch.randn(2, in_channels, 8, 8, generator=g)
        n = torch.randn(x.shape, generator=g)
        t = torch.randint(0, 100, (2,), generator=g)
        loss = torch.nn.functional.mse_loss(model(noise.add_noise(x, n, t), t).sample, n)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema.step(model.parameters())
    return model, ema


def model_cases(out: Path) -> dict[str, Any]:
    root = fresh_dir(out / "models")
    model, ema = trained_unet(3)
    sd = model.state_dict()
    model.save_pretrained(str(root / "unet_st"))
    model.save_pretrained(str(root / "unet_bin"), safe_serialization=False)
    model.save_pretrained(str(root / "unet_sharded"), max_shard_size="200KB")
    ema.save_pretrained(str(root / "unet_ema"))
    shards = list((root / "unet_sharded").glob("diffusion_pytorch_model-*-of-*.safetensors"))
    if len(shards) < 2:
        raise AssertionError(f"max_shard_size gave {len(shards)} shard(s)")
    return {
        "diffusers_unet_safetensors": model_case(out, root / "unet_st", sd, "hf-single"),
        "diffusers_unet_bin": model_case(out, root / "unet_bin", sd, "hf-single"),
        "diffusers_unet_sharded": model_case(out, root / "unet_sharded", sd, "hf-sharded"),
        "diffusers_unet_ema": model_case(
            out, root / "unet_ema", ema_tensors(model, ema), "hf-single", ema=True
        ),
    }


def pipeline_cases(out: Path) -> dict[str, Any]:
    from diffusers import AutoencoderKL, DDPMScheduler, DiffusionPipeline

    class TinyLatentPipeline(DiffusionPipeline):  # type: ignore[misc]
        def __init__(self, unet: Any, vae: Any, scheduler: Any) -> None:
            super().__init__()
            self.register_modules(unet=unet, vae=vae, scheduler=scheduler)

    model, _ = trained_unet(4)
    torch.manual_seed(SEED)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        block_out_channels=(16, 32),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=8,
        layers_per_block=1,
    )
    pipe = TinyLatentPipeline(unet=model, vae=vae, scheduler=DDPMScheduler(num_train_timesteps=100))
    cases: dict[str, Any] = {}
    for variant, safe in (("pipe_st", True), ("pipe_bin", False)):
        root = out / "pipeline" / variant
        pipe.save_pretrained(str(root), safe_serialization=safe)
        for part, module in (("unet", model), ("vae", vae)):
            cases[f"diffusers_{variant}_{part}"] = model_case(
                out,
                root / part,
                module.state_dict(),
                "hf-single",
                pipeline_root=root.relative_to(out).as_posix(),
                pipeline_models=["unet", "vae"],
                pipeline_other=["scheduler"],
            )
    return cases


# ----------------------------------------------------------------------------------------------
# accelerate: train_unconditional.py
# ----------------------------------------------------------------------------------------------


def check_truth(truth: Mapping[str, str], ckpt: Path) -> None:
    """The saved optimizer has exactly these ids, each state shaped like its named parameter
    in ``unet/``'s file."""
    from safetensors import safe_open

    with safe_open(str(ckpt / "unet" / "diffusion_pytorch_model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    osd = torch.load(ckpt / "optimizer.bin", map_location="cpu", weights_only=True)
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{ckpt}: ids {sorted(ids)} != truth {sorted(truth)}")
    for sid, name in truth.items():
        for key, v in osd["state"].get(int(sid), {}).items():
            if isinstance(v, torch.Tensor) and v.ndim and tuple(v.shape) != shapes[name]:
                raise AssertionError(f"{ckpt}: state {sid}.{key} shape != {name}")


def train_unconditional(run_dir: Path, max_steps: int, resume: bool) -> dict[str, dict[str, str]]:
    """train_unconditional.py's loop (CPU, tiny data): checkpoints every 2 steps; ``resume``
    loads the latest ``checkpoint-N`` first (``--resume_from_checkpoint latest``)."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from diffusers import DDPMScheduler, UNet2DModel
    from diffusers.optimization import get_scheduler
    from diffusers.training_utils import EMAModel

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1)
    set_seed(SEED)
    model = unet(3)
    ema_model = EMAModel(
        model.parameters(),
        decay=0.9999,
        use_ema_warmup=True,
        inv_gamma=1.0,
        power=3 / 4,
        model_cls=UNet2DModel,
        model_config=model.config,
    )

    def save_model_hook(models: list[Any], weights: list[Any], output_dir: str) -> None:
        if accelerator.is_main_process:
            ema_model.save_pretrained(os.path.join(output_dir, "unet_ema"))
            for m in models:
                m.save_pretrained(os.path.join(output_dir, "unet"))
                weights.pop()  # make sure to pop weight so that corresponding model is not saved

    def load_model_hook(models: list[Any], input_dir: str) -> None:
        load_model = EMAModel.from_pretrained(os.path.join(input_dir, "unet_ema"), UNet2DModel)
        ema_model.load_state_dict(load_model.state_dict())
        for _ in range(len(models)):
            m = models.pop()
            load_model = UNet2DModel.from_pretrained(input_dir, subfolder="unet")
            m.register_to_config(**load_model.config)
            m.load_state_dict(load_model.state_dict())

    accelerator.register_save_state_pre_hook(save_model_hook)
    accelerator.register_load_state_pre_hook(load_model_hook)
    noise_scheduler = DDPMScheduler(num_train_timesteps=100)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-3, betas=(0.95, 0.999), weight_decay=1e-6, eps=1e-8
    )
    g = torch.Generator().manual_seed(SEED)
    images = torch.randn(16, 3, 8, 8, generator=g)
    loader = torch.utils.data.DataLoader([{"input": x} for x in images], batch_size=2, shuffle=True)
    lr_scheduler = get_scheduler(
        "cosine", optimizer=optimizer, num_warmup_steps=2, num_training_steps=8
    )
    model, optimizer, loader, lr_scheduler = accelerator.prepare(
        model, optimizer, loader, lr_scheduler
    )
    global_step = 0
    if resume:
        dirs = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        accelerator.load_state(str(dirs[-1]))
        global_step = int(dirs[-1].name.split("-")[1])
    num_update_steps_per_epoch = math.ceil(len(loader) / accelerator.gradient_accumulation_steps)
    first_epoch = global_step // num_update_steps_per_epoch
    resume_step = global_step % num_update_steps_per_epoch
    for epoch in range(first_epoch, 2):
        model.train()
        for step, batch in enumerate(loader):
            if epoch == first_epoch and step < resume_step:
                continue
            clean = batch["input"]
            noise = torch.randn(clean.shape)
            timesteps = torch.randint(0, 100, (clean.shape[0],)).long()
            noisy = noise_scheduler.add_noise(clean, noise, timesteps)
            with accelerator.accumulate(model):
                pred = model(noisy, timesteps).sample
                loss = torch.nn.functional.mse_loss(pred.float(), noise.float())
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                ema_model.step(model.parameters())
                global_step += 1
                if global_step % 2 == 0:
                    accelerator.save_state(str(run_dir / f"checkpoint-{global_step}"))
            if global_step >= max_steps:
                named = accelerator.unwrap_model(model).named_parameters()
                truth = id_names(named, optimizer.param_groups)
                return {"optimizer.bin": truth}
    raise AssertionError("the loop ended before max_steps")


def accelerate_cases(out: Path) -> dict[str, Any]:
    run_dir = fresh_dir(out / "accelerate" / "run")

    def state(step: int, truth: dict[str, dict[str, str]], **extra: Any) -> dict[str, Any]:
        ckpt = run_dir / f"checkpoint-{step}"
        check_truth(truth["optimizer.bin"], ckpt)
        return {
            "path": ckpt.relative_to(out).as_posix(),
            "family": "training-state",
            "kind": "training_state",
            "setup": SETUP_ACCEL,
            "expect": "clean",
            "id_names": truth,
            "model_part": "unet",
            "ema_part": "unet_ema",
            **extra,
        }

    truth = train_unconditional(run_dir, 4, resume=False)
    cases = {"diffusers_step2": state(2, truth), "diffusers_step4": state(4, truth)}
    truth = train_unconditional(run_dir, 6, resume=True)
    cases["diffusers_resume_step6"] = state(6, truth, resume_of="diffusers_step4")
    return cases


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {
    "models": model_cases,
    "pipeline": pipeline_cases,
    "accelerate": accelerate_cases,
}


def main(argv: list[str]) -> int:
    import accelerate
    import diffusers

    out = main_out_dir(argv)
    torch.set_num_threads(1)
    version = (
        f"diffusers {diffusers.__version__}, accelerate {accelerate.__version__}, "
        f"torch {torch.__version__}"
    )
    return run_maker(out, "realworld_diffusers", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
