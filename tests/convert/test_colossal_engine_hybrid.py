"""``convert --engine colossalai`` beyond TorchDDP: a real HybridParallelPlugin on CPU / gloo.

The source is a tiny Llama (16 heads / 8 KV heads, vocab 4000: padded to 4096 at tp 2) saved
by transformers ``save_pretrained`` in bf16. The slow tests run ColossalAI 0.5.0 under torchrun
(transformers 4.51.3 first on the ranks' PYTHONPATH, as colossalai pins it) and check the output
against the source with safetensors / torch directly, not with the package's own comparison.
Refusals (fit, CUDA-only plugins, the transformers pin) must come before any process starts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _convert_helpers import snapshot

from ckpt_explorer.cli import main
from ckpt_explorer.contracts import Progress
from ckpt_explorer.convert.colossal_engine import run_engine_job
from ckpt_explorer.convert.colossal_plan import PATH_VARIABLE, plan_engine_job

pytest.importorskip("colossalai")
VOCAB = 4000  # padded to 4096 at tp 2


def _transformers4_dir() -> str | None:
    for c in (
        os.environ.get("CAI_TRANSFORMERS4_DIR", ""),
        os.path.join(sys.prefix, "side", "transformers4"),
        str(Path(__file__).resolve().parents[2] / ".venv" / "side" / "transformers4"),
    ):
        if c and os.path.isdir(os.path.join(c, "transformers")):
            return c
    return None


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bf16 Llama with 8 KV heads, saved by transformers as one model.safetensors."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, num_attention_heads=16, num_key_value_heads=8,
        intermediate_size=256, num_hidden_layers=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    out = tmp_path_factory.mktemp("engine") / "llama_8kv"
    model.save_pretrained(out)
    return out


@pytest.fixture
def colossalai_path(monkeypatch: pytest.MonkeyPatch) -> None:
    side = _transformers4_dir()
    if side is None:
        pytest.skip("transformers 4.51.3 side folder not found (set CAI_TRANSFORMERS4_DIR)")
    monkeypatch.setenv(PATH_VARIABLE, side)


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any torchrun job is started."""

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("a torchrun job was started")

    monkeypatch.setattr("ckpt_explorer.io.torchrun.run_torchrun", refuse)


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update(load_file(f))
    for f in sorted(path.glob("*.bin")):
        out.update(torch.load(f, weights_only=True))
    return out


def _assert_equal_to_source(src: Path, dst: Path) -> None:
    a, b = _tensors(src), _tensors(dst)
    assert set(a) == set(b)
    for k, x in a.items():
        assert b[k].dtype == x.dtype and b[k].shape == x.shape, k
        assert torch.equal(b[k].view(torch.int16), x.view(torch.int16)), k  # bit for bit


@pytest.mark.slow
def test_tp2_hybrid_output_equals_source(
    source: Path, colossalai_path: None, tmp_path: Path
) -> None:
    """HybridParallelPlugin(tp=2): two ranks load, gather and save; the output is the source."""
    from transformers import AutoModelForCausalLM

    before = snapshot(source)
    dst = tmp_path / "out"
    plan = plan_engine_job(
        source, dst, "hybrid", tp=2, target="hf", size_per_shard_mb=1, device="cpu"
    )
    assert (plan.nproc, plan.backend, plan.dtype) == (2, "gloo", "bfloat16")
    assert all(c["ok"] for c in plan.checks) and plan.vocab_multiple is None
    events: list[Progress] = []
    result = run_engine_job(plan, progress=events.append)
    assert result.verified and not result.mismatches, result.mismatches
    assert result.nproc == 2 and events[0].message == "starting 2 process(es)"
    assert events[-1].done == events[-1].total == plan.total_bytes
    assert snapshot(source) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp folder left
    shards = sorted(p.name for p in dst.glob("model-*.safetensors"))
    assert len(shards) > 1 and (dst / "model.safetensors.index.json").is_file()
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert (dst / "config.json").read_bytes() == (source / "config.json").read_bytes()
    _assert_equal_to_source(source, dst)
    assert _tensors(dst)["model.embed_tokens.weight"].shape[0] == VOCAB  # padding stripped
    model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.bfloat16)
    src = _tensors(source)
    for k, v in model.state_dict().items():
        assert torch.equal(v, src[k]), k


@pytest.mark.slow
def test_pp2_hybrid_output_equals_source(
    source: Path, colossalai_path: None, tmp_path: Path
) -> None:
    """pp 2 through the CLI: two pipeline stages each save their own ``-stage-`` shards."""
    dst = tmp_path / "out"
    argv = ["convert", str(source), str(dst), "--to", "bin", "--engine", "colossalai"]
    argv += ["--plugin", "hybrid", "--pp", "2", "--max-shard-size", "1MB", "--device", "cpu"]
    assert main(argv) == 0
    names = sorted(p.name for p in dst.iterdir())
    assert {n.split("-shard")[0] for n in names if "-stage-" in n} == {
        "pytorch_model-stage-00001",
        "pytorch_model-stage-00002",
    }
    _assert_equal_to_source(source, dst)


def test_tp3_refused_with_fit_reason(
    source: Path, no_launch: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 KV heads cannot be split 3 ways: refused before torchrun, with the sizes that work."""
    dst = tmp_path / "out"
    argv = ["convert", str(source), str(dst), "--to", "hf", "--engine", "colossalai"]
    assert main([*argv, "--plugin", "hybrid", "--tp", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "kv_heads_tp" in err and "tp ∈ {1, 2, 4, 8}" in err and "nothing was started" in err
    assert not dst.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("plugin", ["gemini", "lowlevelzero"])
def test_cuda_only_plugins_on_cpu(
    plugin: str, source: Path, no_launch: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    dst = tmp_path / "out"
    argv = ["convert", str(source), str(dst), "--to", "hf", "--engine", "colossalai"]
    assert main([*argv, "--plugin", plugin]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"CUDA GPUs for --plugin {plugin}" in err
    assert "torch.cuda.is_available() is False" in err
    assert list(tmp_path.iterdir()) == []


def test_hybrid_needs_the_pinned_transformers(
    source: Path, no_launch: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """colossalai 0.5.0 pins transformers==4.51.3; without it visible, hybrid is refused."""
    import transformers

    if transformers.__version__ == "4.51.3":
        pytest.skip("the pinned transformers is the installed one")
    monkeypatch.delenv(PATH_VARIABLE, raising=False)
    with pytest.raises(Exception, match=r"transformers==4\.51\.3 .*found transformers"):
        plan_engine_job(source, tmp_path / "out", "hybrid", tp=2, device="cpu")


def test_dry_run_plan(
    source: Path,
    colossalai_path: None,
    no_launch: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["convert", str(source), str(tmp_path / "out"), "--to", "hf", "--engine", "colossalai"]
    argv += ["--device", "cpu"]
    assert main([*argv, "--plugin", "hybrid", "--pp", "2", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["plugin"], plan["tp"], plan["pp"], plan["nproc"]) == ("hybrid", 1, 2, 2)
    assert plan["vocab_multiple"] == 1 and plan["dtype"] == "bfloat16" and plan["backend"] == "gloo"
    assert {c["rule"] for c in plan["checks"]} >= {"layers_pp", "world_size"}
    assert list(tmp_path.iterdir()) == []
    assert main(["convert", str(source), str(tmp_path / "o"), "--to", "hf", "--tp", "2"]) == 2
    assert "--engine colossalai" in capsys.readouterr().err
    assert main([*argv, "--plugin", "torch_ddp", "--tp", "2"]) == 2
    assert "--tp / --pp only with --plugin hybrid" in capsys.readouterr().err


@pytest.mark.slow
def test_torch_ddp_tied_gpt2(tmp_path: Path) -> None:
    """A tied GPT-2 (no lm_head.weight in its file): TorchDDP's save writes the tie as a copy.

    The model is built without weight initialisation, so the tie must be restored for the
    loaded embedding to reach lm_head; verification accepts the copy and names it.
    """
    from transformers import AutoModelForCausalLM, GPT2Config

    cfg = GPT2Config(vocab_size=100, n_embd=32, n_head=2, n_layer=1, n_positions=32)
    src = tmp_path / "gpt2"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(src)
    assert "lm_head.weight" not in _tensors(src)
    dst = tmp_path / "out"
    result = run_engine_job(
        plan_engine_job(src, dst, "torch_ddp", size_per_shard_mb=1, device="cpu")
    )
    assert result.verified, result.mismatches
    assert result.notes == [
        "lm_head.weight: not in the source; written as a copy of transformer.wte.weight (tied)"
    ]
    out = _tensors(dst)
    assert torch.equal(out["lm_head.weight"], _tensors(src)["transformer.wte.weight"])
