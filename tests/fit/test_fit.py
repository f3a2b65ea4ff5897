"""``ckpt-explorer fit``: layout checks, memory per GPU and the grid, against real tools.

Checkpoints are tiny transformers models saved with ``save_pretrained`` (real head ratios). The
verdicts at tp 2 are checked against ColossalAI 0.5.0 ``HybridParallelPlugin`` + ``booster.boost``
run for real (tests/fixture_makers/fit_maker.py), and memory figures against the bytes torch
counts for parameters, gradients and AdamW states after a real step.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import transformers

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.cli import main
from ckpt_explorer.fit import Layout, fit_checkpoint
from ckpt_explorer.fit.checks import padded_vocab, stage_split
from ckpt_explorer.fit.memory import stage_params

DECODER = dict(vocab_size=1000, num_hidden_layers=4, max_position_embeddings=64)
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": (  # Llama-3 ratio 32 / 8
        "LlamaConfig",
        dict(hidden_size=256, num_attention_heads=32, num_key_value_heads=8, intermediate_size=512),
    ),
    "qwen2": (  # Qwen2-7B ratio 28 / 4
        "Qwen2Config",
        dict(hidden_size=224, num_attention_heads=28, num_key_value_heads=4, intermediate_size=448),
    ),
    "mixtral": (
        "MixtralConfig",
        dict(
            hidden_size=256,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=128,
            num_local_experts=4,
            num_experts_per_tok=2,
        ),
    ),
    "qwen3": (  # q_norm gives the head dim: heads decidable without config.json
        "Qwen3Config",
        dict(
            hidden_size=128,
            head_dim=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=256,
        ),
    ),
}


def _build(cls: str, kw: dict[str, Any], out: Path) -> torch.nn.Module:
    torch.manual_seed(0)
    extra = {} if cls == "GPT2Config" else DECODER
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**extra, **kw))
    model.save_pretrained(out)
    return model


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fit")
    out = {}
    for name, (cls, kw) in MODELS.items():
        _build(cls, kw, root / name)
        out[name] = root / name
    _build("GPT2Config", dict(vocab_size=1000, n_embd=64, n_head=4, n_layer=2), root / "gpt2")
    out["gpt2"] = root / "gpt2"
    for name in ("qwen3", "gpt2"):  # the same checkpoints without config.json
        bare = root / f"{name}_bare"
        shutil.copytree(root / name, bare)
        (bare / "config.json").unlink()
        out[f"{name}_bare"] = bare
    return out


def _check(report: Any, rule: str) -> Any:
    return next(c for c in report.checks if c.rule == rule)


def test_gqa_kv_heads_name_the_sizes_that_work(ckpts: dict[str, Path]) -> None:
    r = fit_checkpoint(ckpts["llama"], Layout(tp=3))
    assert r.fits is False
    kv = _check(r, "kv_heads_tp")
    assert kv.ok is False and "KV heads 8: tp ∈ {1, 2, 4, 8}" in kv.message
    assert "attention heads 32 % tp 3 = 2" in _check(r, "attention_heads_tp").message
    for tp in (1, 2, 4, 8):
        assert fit_checkpoint(ckpts["llama"], Layout(tp=tp)).fits is True
    assert _check(fit_checkpoint(ckpts["llama"], Layout(tp=16)), "kv_heads_tp").ok is False
    assert r.arch.sources["kv_heads"] == "config.json num_key_value_heads"


def test_qwen2_ratio_and_unpadded_head(ckpts: dict[str, Path]) -> None:
    assert fit_checkpoint(ckpts["qwen2"], Layout(tp=4)).fits is True
    r = fit_checkpoint(ckpts["qwen2"], Layout(tp=8))
    assert (
        _check(r, "kv_heads_tp").ok is False
        and "tp ∈ {1, 2, 4}" in _check(r, "kv_heads_tp").message
    )
    assert "tp ∈ {1, 2, 4, 7, 14, 28}" in _check(r, "attention_heads_tp").message
    cells = {(c["tp"], c["pp"]): c for c in r.grid}
    assert cells[(4, 2)]["fits"] is True and cells[(8, 1)]["fits"] is False
    assert _check(fit_checkpoint(ckpts["qwen2"], Layout(tp=2)), "lm_head_tp").ok is True


def test_vocab_padding_reported(ckpts: dict[str, Path]) -> None:
    msg = _check(fit_checkpoint(ckpts["llama"], Layout(tp=2)), "vocab_tp").message
    assert "vocab 1000 padded to 1024" in msg and "512 rows per rank, 24 padding rows" in msg
    assert padded_vocab(1000, 8) == 1024 and padded_vocab(1024, 8) == 1024


def test_stage_split_is_colossalais() -> None:
    from colossalai.pipeline.stage_manager import PipelineStageManager

    for layers, pp in ((4, 3), (32, 3), (30, 4), (7, 2), (8, 8)):
        fake = SimpleNamespace(num_layers_per_stage=None, num_stages=pp, num_model_chunks=1)
        assert stage_split(layers, pp) == PipelineStageManager.distribute_layers(fake, layers)


def test_layers_vs_pp(ckpts: dict[str, Path]) -> None:
    r = fit_checkpoint(ckpts["llama"], Layout(pp=3))
    assert "[1, 2, 1], uneven" in _check(r, "layers_pp").message and r.fits is True
    thin = _check(fit_checkpoint(ckpts["llama"], Layout(pp=8)), "layers_pp")
    assert (
        thin.ok is True and "[0, 0, 1, 1, 1, 1, 0, 0]" in thin.message and "pp <= 4" in thin.message
    )


def test_moe_experts_vs_ep(ckpts: dict[str, Path]) -> None:
    r = fit_checkpoint(ckpts["mixtral"], Layout(ep=3))
    assert (
        _check(r, "experts_ep").ok is False and "ep ∈ {1, 2, 4}" in _check(r, "experts_ep").message
    )
    assert fit_checkpoint(ckpts["mixtral"], Layout(ep=2, gpus=4)).fits is True
    assert _check(fit_checkpoint(ckpts["llama"], Layout(ep=2)), "experts_ep").ok is False


def test_heads_inferred_from_tensors_and_said(ckpts: dict[str, Path]) -> None:
    r = fit_checkpoint(ckpts["qwen3_bare"], Layout(tp=16))
    a = r.arch
    assert (a.heads, a.kv_heads, a.head_dim, a.layers, a.vocab) == (32, 8, 16, 4, 1000)
    assert a.config_path is None and a.sources["heads"].startswith("tensors: ")
    assert _check(r, "kv_heads_tp").ok is False


def test_unknown_is_not_a_failure(ckpts: dict[str, Path], capsys: Any) -> None:
    """GPT-2 without config.json: heads cannot be decided -> unknown, never a false finding."""
    r = fit_checkpoint(ckpts["gpt2_bare"], Layout(tp=2))
    assert r.arch.fused_qkv == "GPT-2 c_attn" and r.arch.heads is None
    assert r.fits is None and _check(r, "attention_heads_tp").ok is None
    assert not [c for c in r.checks if c.ok is False]
    assert main(["fit", str(ckpts["gpt2_bare"]), "--tp", "2"]) == 1
    assert "UNKNOWN" in capsys.readouterr().out
    with_cfg = fit_checkpoint(ckpts["gpt2"], Layout(tp=2))
    assert with_cfg.fits is True and _check(with_cfg, "fused_qkv_tp").ok is True


def test_plugin_rules(ckpts: dict[str, Path]) -> None:
    assert (
        _check(fit_checkpoint(ckpts["llama"], Layout(tp=2, plugin="ddp")), "plugin_layout").ok
        is False
    )
    assert _check(fit_checkpoint(ckpts["llama"], Layout(zero=3)), "plugin_zero").ok is False
    assert fit_checkpoint(ckpts["llama"], Layout(zero=3, plugin="gemini", gpus=2)).fits is True
    fsdp = fit_checkpoint(ckpts["llama"], Layout(plugin="fsdp", gpus=2))  # default stage: 3
    assert fsdp.fits is True and fsdp.to_json()["layout"]["zero"] == 3
    assert _check(fit_checkpoint(ckpts["llama"], Layout(tp=2, gpus=3)), "world_size").ok is False


def _trained(cls: str, kw: dict[str, Any], out: Path, dtype: torch.dtype) -> dict[str, int]:
    """Save the model, then count what torch holds after one real AdamW step."""
    model = _build(cls, kw, out).to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1000, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    params = {id(p): p for p in model.parameters()}.values()  # tied weights counted once
    moments = sum(
        t.nbytes for s in opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")
    )
    return {
        "numel": sum(p.numel() for p in params),
        "weights": sum(p.nbytes for p in params),
        "grads": sum(p.grad.nbytes for p in params if p.grad is not None),
        "moments": moments,
    }


def test_memory_matches_counted_bytes(tmp_path: Path) -> None:
    cls, kw = MODELS["llama"]
    fp32 = _trained(cls, kw, tmp_path / "a", torch.float32)
    m = fit_checkpoint(tmp_path / "a", Layout(plugin="ddp", dtype="fp32")).memory
    assert m is not None and m.params == fp32["numel"]
    assert (m.weights, m.gradients, m.optimizer_moments) == (
        fp32["weights"],
        fp32["grads"],
        fp32["moments"],
    )
    assert m.master_weights == 0
    bf16 = _trained(cls, kw, tmp_path / "b", torch.bfloat16)
    m = fit_checkpoint(tmp_path / "b", Layout(plugin="ddp", dtype="bf16")).memory
    assert m is not None and (m.weights, m.gradients) == (bf16["weights"], bf16["grads"])
    assert m.master_weights == 4 * bf16["numel"] and m.optimizer_moments == fp32["moments"]
    z1 = fit_checkpoint(tmp_path / "b", Layout(zero=1, plugin="lowlevelzero", gpus=4)).memory
    assert z1 is not None and z1.weights == bf16["weights"] and z1.gradients == bf16["grads"]
    assert z1.optimizer_moments == -(-fp32["numel"] // 4) * 8
    z3 = fit_checkpoint(tmp_path / "b", Layout(zero=3, plugin="fsdp", gpus=4)).memory
    assert z3 is not None and z3.weights == -(-bf16["numel"] // 4) * 2


def test_tied_embedding_counted_on_both_pipeline_ends(tmp_path: Path) -> None:
    gpt2 = _trained(
        "GPT2Config", dict(vocab_size=1000, n_embd=64, n_head=4, n_layer=2), tmp_path, torch.float32
    )
    one = fit_checkpoint(tmp_path, Layout(plugin="hybrid", dtype="fp32"))
    padding = (1024 - 1000) * 64  # tied: ShardFormer's PaddingEmbedding pads even at tp 1
    assert one.memory is not None and one.memory.params == gpt2["numel"] + padding
    ddp = fit_checkpoint(tmp_path, Layout(plugin="ddp", dtype="fp32")).memory
    assert ddp is not None and ddp.params == gpt2["numel"]
    two = fit_checkpoint(tmp_path, Layout(pp=2, dtype="fp32"))
    assert _check(two, "tied_embeddings_pp").ok is True
    assert two.memory is not None and two.memory.params > gpt2["numel"] // 2 + 1000 * 64 // 2


def test_gpu_mem_and_cli_json(ckpts: dict[str, Path], capsys: Any) -> None:
    path = str(ckpts["llama"])
    assert main(["fit", path, "--tp", "2", "--gpu-mem", "80GB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is True and {"checks", "memory", "grid"} <= set(out)
    assert all(set(c) == {"rule", "ok", "message"} for c in out["checks"])
    assert out["memory"]["activations"] is None and out["memory"]["gpu_mem"] == 80 * 10**9
    assert main(["fit", path, "--tp", "2", "--gpu-mem", "1MB", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["memory"]["fits"] is False
    assert main(["fit", path, "--tp", "3"]) == 1
    assert "KV heads 8: tp ∈ {1, 2, 4, 8}" in capsys.readouterr().out


def test_unreadable_input_exit_2(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"not a checkpoint")
    for argv in (["fit", str(bad)], ["fit", str(tmp_path / "missing")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
    cfg_dir = tmp_path / "m"
    _build("GPT2Config", dict(vocab_size=100, n_embd=32, n_head=2, n_layer=1), cfg_dir)
    assert main(["fit", str(cfg_dir), "--gpu-mem", "lots"]) == 2
    (cfg_dir / "config.json").write_text("{broken")
    assert main(["fit", str(cfg_dir)]) == 2
    assert "config.json" in capsys.readouterr().err


@pytest.mark.slow
def test_verdicts_match_colossalai_boost(real_checkpoints: Any) -> None:
    """For every model: fit at tp 2 says fits <=> HybridParallelPlugin(tp=2) boost succeeds."""
    root, manifest = real_checkpoints("fit")
    assert manifest["version"] == "0.5.0" and manifest["transformers"] == "4.51.3"
    cases = manifest["cases"]
    assert {c["boosted"] for c in cases.values()} == {True, False}
    for name, case in cases.items():
        lay = Layout(tp=case["tp"], pp=case["pp"])
        r = fit_checkpoint(root / case["path"], lay)
        assert r.fits is case["boosted"], (name, case.get("error"), [c.to_json() for c in r.checks])
        if case["boosted"]:  # per rank: the tp ranks at pp 1, the pipeline stages at tp 1
            tensors = open_checkpoint(root / case["path"]).tensors
            per_stage = stage_params(tensors, r.arch, lay)
            counted = case["params_per_rank"]
            assert (per_stage if lay.pp > 1 else per_stage * 2) == counted, name
            assert r.memory is not None and r.memory.params == max(counted), name
            if lay.pp == 1:
                assert padded_vocab(r.arch.vocab, 2) // 2 == case["embed_rows_per_rank"], name
        else:
            failed = [c for c in r.checks if c.ok is False]
            assert failed and all("∈" in c.message for c in failed), name
    saved = cases["llama_32h_8kv"]["saved_at_tp2"]
    assert saved["embed_rows"] == 1000  # save_model at tp 2 strips the 24 padding rows
    assert (
        "strips them"
        in _check(fit_checkpoint(root / saved["path"], Layout(tp=2)), "vocab_tp").message
    )
    assert cases["llama_1layer_pp2"]["boosted"]  # a stage with no decoder layer is accepted
    assert "key_value heads" in cases["llama_4h_1kv"]["error"]
    assert "out_features:129" in cases["llama_odd_intermediate"]["error"]


def _clues(path: Path) -> dict[str, Any]:
    from ckpt_explorer.fit.written_by import view_clues

    return {c.fact: c for c in view_clues(open_checkpoint(path))}


def test_written_layout_from_real_files(real_checkpoints: Any, capsys: Any) -> None:
    cai, _ = real_checkpoints("colossalai")
    pp = _clues(cai / "pipeline" / "modeling")
    assert pp["pp"].value == ">= 2" and "00001, 00002" in pp["pp"].evidence
    assert "pp" not in _clues(cai / "hybrid" / "modeling")  # tp 1 x pp 1: no stage tags
    ds, _ = real_checkpoints("deepspeed")
    two = _clues(ds / "ds_zero2_world2")
    assert (two["dp"].value, two["mp"].value) == ("2", "1")
    assert _clues(ds / "ds_zero2")["dp"].value == "1"
    dcp, _ = real_checkpoints("dcp")
    whole = _clues(dcp / "dcp_model")
    assert whole["ranks"].value == "1" and whole["sharding"].value == "none"
    assert main(["inspect", str(ds / "ds_zero2_world2"), "--json"]) == 0
    facts = {c["fact"] for c in json.loads(capsys.readouterr().out)["written_layout"]}
    assert {"dp", "mp"} <= facts
    assert main(["inspect", str(cai / "pipeline" / "modeling"), "--limit", "0"]) == 0
    assert "layout   pp >= 2 (ColossalAI pipeline shards" in capsys.readouterr().out


def test_padded_vocab_rows_name_the_tp(tmp_path: Path) -> None:
    """Rows beyond config.json's vocab_size are padding; the tp sizes that pad so are named."""
    from ckpt_explorer.fit.written_by import layout_clues

    cls, kw = MODELS["llama"]
    model = _build(cls, kw, tmp_path / "m")
    model.resize_token_embeddings(1000, pad_to_multiple_of=128)  # rows 1024, as tp 2 pads
    model.save_pretrained(tmp_path / "m")
    view = open_checkpoint(tmp_path / "m")
    clue = {c.fact: c for c in layout_clues(view.path, view.tensors, 1000)}["vocab_padding"]
    assert clue.value == "tp ∈ {1, 2, 4, 8, 16}" and "24 padding rows" in clue.evidence
    assert not layout_clues(view.path, view.tensors, None)  # no config vocab: nothing said
    assert "vocab_padding" not in _clues(tmp_path / "m")  # config.json now says 1024: no padding
