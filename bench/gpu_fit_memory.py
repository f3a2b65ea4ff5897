"""``fit``'s memory figures against what CUDA really allocates.

    python bench/gpu_fit_memory.py [--layers 8] [--hidden 1024] [--cases torch_fp32,lowlevelzero1_bf16]
        [--json-out FILE] [--cpu-dry-run]

Builds a Llama-shaped model from a transformers config (default 8 layers, hidden 1024, 16 heads /
4 KV heads, vocab 32000), saves it as safetensors, asks ``fit_checkpoint`` for the memory per
GPU of the matching layout, then, each case in a fresh process: builds the model on CUDA, makes
the optimizer, runs one forward/backward/step, and measures

- ``weights``: ``memory_allocated`` growth when the model moves to the GPU (or is boosted);
- ``gradients`` / ``optimizer_moments`` / ``master_weights``: the bytes of those tensors
  (ZeRO's gradients live in its buckets: the allocation growth over backward instead);
- ``steady``: ``memory_allocated`` after the step (what ``fit``'s total claims to count);
- ``peak``: ``max_memory_allocated`` (adds activations and temporaries, which fit does not count).

Cases: ``torch_fp32`` (plain torch AdamW, fit layout ddp/fp32, no ColossalAI needed),
``lowlevelzero1_bf16`` and ``lowlevelzero2_fp16`` (ColossalAI LowLevelZeroPlugin, one process,
nccl; skipped when colossalai does not import). Without CUDA every case prints
"skipped: no CUDA"; ``--cpu-dry-run`` runs the torch case on CPU with counted bytes only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
KINDS = ("weights", "gradients", "master_weights", "optimizer_moments")
# case -> (fit layout arguments, needs colossalai)
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "torch_fp32": ({"plugin": "ddp", "zero": 0, "dtype": "fp32", "gpus": 1}, False),
    "lowlevelzero1_bf16": ({"plugin": "lowlevelzero", "zero": 1, "dtype": "bf16", "gpus": 1}, True),
    "lowlevelzero2_fp16": ({"plugin": "lowlevelzero", "zero": 2, "dtype": "fp16", "gpus": 1}, True),
}


def config(layers: int, hidden: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )


def build(layers: int, hidden: int) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(config(layers, hidden)).float()


def predict(folder: Path, layout: dict[str, Any]) -> dict[str, Any]:
    from ckpt_explorer.fit import Layout, fit_checkpoint

    rep = fit_checkpoint(folder, Layout(**layout))
    assert rep.memory is not None, "fit gave no memory figures"
    return rep.memory.to_json()


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _state_bytes(optimizer: Any) -> tuple[int, int]:
    """(Adam moments, fp32 master copies) held by ``optimizer`` (scalar step counters left out)."""
    import torch

    inner = getattr(optimizer, "optim", optimizer)  # a ColossalAI OptimizerWrapper's torch optim
    moments = master = 0
    for state in inner.state.values():
        for key, t in state.items():
            if key in ("exp_avg", "exp_avg_sq") and isinstance(t, torch.Tensor):
                moments += t.numel() * t.element_size()
    if inner is not optimizer:  # ZeRO: the inner optimizer steps the fp32 master shards
        for group in inner.param_groups:
            master += _nbytes(p for p in group["params"] if p.dtype == torch.float32)
    return moments, master


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_case(case: str, layers: int, hidden: int, device: str) -> dict[str, Any]:
    """One case in this process; returns measured bytes by kind (None where not measurable)."""
    import torch

    cuda = device == "cuda"
    mem = torch.cuda.memory_allocated if cuda else (lambda: 0)
    model = build(layers, hidden)
    n_params = sum(p.numel() for p in model.parameters())
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = mem()
    ids = torch.randint(0, 32000, (2, 128), generator=torch.Generator().manual_seed(1))
    if case == "torch_fp32":
        model = model.to(device)
        weights = mem() - base if cuda else _nbytes(model.parameters())
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        grads = _nbytes(p.grad for p in model.parameters())
        moments, master = _state_bytes(optimizer)
    else:
        from colossalai.booster import Booster
        from colossalai.booster.plugin import LowLevelZeroPlugin
        from colossalai.initialize import launch_from_torch

        os.environ.update(
            RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
        )  # fmt: skip
        launch_from_torch()
        stage = 1 if case.startswith("lowlevelzero1") else 2
        precision = "bf16" if case.endswith("bf16") else "fp16"
        # fp16: a small first loss scale, or the first step overflows and is skipped
        plugin = LowLevelZeroPlugin(stage=stage, precision=precision, initial_scale=2**8)
        booster = Booster(plugin=plugin)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer, *_ = booster.boost(model, optimizer)
        torch.cuda.synchronize()
        after_boost = mem() - base
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        booster.backward(loss, optimizer)
        torch.cuda.synchronize()
        # ZeRO keeps gradients in its own buckets (not per tensor): what backward left allocated
        grads = mem() - base - after_boost
        optimizer.step()
        torch.cuda.synchronize()
        half = _nbytes(model.parameters())
        moments, master = _state_bytes(optimizer)
        weights = half
    if cuda:
        torch.cuda.synchronize()
    steady = mem() - base if cuda else None
    peak = torch.cuda.max_memory_allocated() - base if cuda else None
    return {
        "params": n_params,
        "weights": weights,
        "gradients": grads,
        "master_weights": master,
        "optimizer_moments": moments,
        "steady": steady,
        "peak": peak,
        "loss": float(loss),
    }


def report(case: str, pred: dict[str, Any], meas: dict[str, Any]) -> dict[str, Any]:
    rows = {}
    print(f"\n{case}: {meas['params']:,} parameters (fit counts {pred['params_per_gpu']:,})")
    print(f"  {'kind':18} {'predicted':>14} {'measured':>14} {'ratio':>7}")
    for k in (*KINDS, "total"):
        p = pred[k]
        m = meas["steady"] if k == "total" else meas[k]
        ratio = m / p if isinstance(m, int) and p else None
        rows[k] = {"predicted": p, "measured": m, "measured_over_predicted": ratio}
        shown = f"{m:14,}" if isinstance(m, int) else f"{'n/a':>14}"
        print(f"  {k:18} {p:14,} {shown} {ratio if ratio is None else round(ratio, 4)!s:>7}")
    if meas["peak"] is not None:
        r = meas["peak"] / pred["total"]
        rows["peak"] = {"measured": meas["peak"], "peak_over_predicted_total": r}
        print(f"  {'peak (activations)':18} {'':>14} {meas['peak']:14,} {r:7.4f}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--timeout", type=int, default=150, help="seconds per case")
    ap.add_argument("--cpu-dry-run", action="store_true", help="torch case on CPU, no CUDA")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "DEVICE"))
    args = ap.parse_args()
    if args.child:
        out = run_case(args.child[0], args.layers, args.hidden, args.child[1])
        print("RESULT " + json.dumps(out))
        return 0
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    results: dict[str, Any] = {"device": device, "torch": torch.__version__, "cases": {}}
    if device == "cpu" and not args.cpu_dry_run:
        print("skipped: no CUDA")
        results["skipped"] = "no CUDA"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "llama"
            build(args.layers, args.hidden).save_pretrained(folder)
            for case in args.cases.split(","):
                results["cases"][case] = one(case, folder, device, args)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))
    failed = [c for c, r in results["cases"].items() if "error" in r]
    return 1 if failed else 0


def one(case: str, folder: Path, device: str, args: argparse.Namespace) -> dict[str, Any]:
    layout, needs_colossal = CASES[case]
    if device == "cpu" and case != "torch_fp32":
        print(f"\n{case}: skipped: no CUDA")
        return {"skipped": "no CUDA"}
    if needs_colossal:
        probe = subprocess.run([sys.executable, "-c", "import colossalai"], capture_output=True)
        if probe.returncode != 0:
            print(f"\n{case}: skipped: colossalai does not import here")
            return {"skipped": "colossalai absent"}
    pred = predict(folder, layout)
    cmd = [sys.executable, __file__, "--child", case, device]
    cmd += ["--layers", str(args.layers), "--hidden", str(args.hidden)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"\n{case}: FAILED: timed out after {args.timeout} s")
        return {"error": "timeout", "predicted": pred}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout + proc.stderr)[-3000:]
        print(f"\n{case}: FAILED (exit {proc.returncode})\n{tail}")
        return {"error": tail, "predicted": pred}
    meas = json.loads(lines[-1].removeprefix("RESULT "))
    return {"layout": layout, "predicted": pred, "measured": meas, "rows": report(case, pred, meas)}


if __name__ == "__main__":
    sys.exit(main())
