"""Megatron -> Hugging Face: ``convert --to hf`` of megatron-dist / megatron-legacy states and
``diff`` of a Megatron state against an HF model, on real megatron-core / Megatron-LM outputs
(tests/fixture_makers/realworld_megatron_maker.py).

The oracle is the real client: transformers' ``AutoModelForCausalLM.from_pretrained`` on the
converted folder gives megatron-core's own logits on the maker's probe batch (the GPT and the
Llama at tp 1, the Llama at tp 2 in the legacy layout, its logits gathered over the tensor
ranks). The converted Llama is bit for bit the maker's ``hf_equivalent`` (converted there
from megatron-core's live state_dict). Models the args do not decide fail closed, leaving
nothing behind.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from _convert_helpers import snapshot

from ckpt_explorer import diff_checkpoints, open_checkpoint, plan_conversion, run_conversion
from ckpt_explorer.cli import main
from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.readers.megatron.hf import hf_view, megatron_hf
from ckpt_explorer.readers.megatron.hf_config import hf_spec
from ckpt_explorer.types import Detection
from ckpt_explorer.view import CheckpointView

MAKER = "realworld_megatron"
# case -> the HF class its conversion must be
MODELS = {
    "mcore_llama_base": "LlamaForCausalLM",
    "mcore_gpt_base": "GPT2LMHeadModel",
    "legacy_tp2_base": "LlamaForCausalLM",
}


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest["cases"]


@pytest.fixture(scope="module")
def converted(
    corpus: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """``convert --to hf`` of each model case (and the tp-2 torch_dist / bf16 ones), verified,
    the source untouched."""
    root, cases = corpus
    out = tmp_path_factory.mktemp("megatron_hf")
    done: dict[str, Path] = {}
    for cid in [*MODELS, "dist_tp2_base", "mcore_gpt_distopt_base"]:
        src = root / cases[cid]["path"]
        before = snapshot(src)
        result = run_conversion(plan_conversion(src, out / cid, to="hf"))
        assert result.verified, (cid, result.mismatches)
        assert snapshot(src) == before, cid
        done[cid] = out / cid
    return done


def _load_hf(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    return model.eval()


@pytest.mark.parametrize("case_id", sorted(MODELS))
def test_from_pretrained_gives_megatron_cores_logits(
    corpus: tuple[Path, dict[str, Any]], converted: dict[str, Path], case_id: str
) -> None:
    root, cases = corpus
    model = _load_hf(converted[case_id])
    assert type(model).__name__ == MODELS[case_id]
    probe = torch.load(root / cases[case_id]["probe"], weights_only=True)
    with torch.no_grad():
        logits = model(input_ids=probe["tokens"]).logits
    assert logits.shape == probe["logits"].shape
    assert float((logits - probe["logits"]).abs().max()) < 1e-4


def test_the_config_comes_from_the_args(converted: dict[str, Path]) -> None:
    llama = json.loads((converted["mcore_llama_base"] / "config.json").read_text())
    assert llama["architectures"] == ["LlamaForCausalLM"]
    assert (llama["num_attention_heads"], llama["num_key_value_heads"], llama["head_dim"]) == (
        4,
        2,
        4,
    )
    assert (llama["rms_norm_eps"], llama["rope_theta"], llama["tie_word_embeddings"]) == (
        1e-5,
        10000.0,
        False,
    )
    gpt = json.loads((converted["mcore_gpt_base"] / "config.json").read_text())
    assert gpt["architectures"] == ["GPT2LMHeadModel"]
    # megatron-core ran F.gelu exactly (args.bias_gelu_fusion False): HF's "gelu", not gelu_new
    assert (gpt["activation_function"], gpt["n_inner"], gpt["n_positions"]) == ("gelu", 64, 8)
    assert gpt["tie_word_embeddings"] is False


def test_the_llama_is_the_makers_hf_equivalent_bit_for_bit(
    corpus: tuple[Path, dict[str, Any]], converted: dict[str, Path]
) -> None:
    from safetensors.torch import load_file

    root, cases = corpus
    eq = cases["mcore_llama_base"]["hf_equivalent"]
    want = load_file(root / eq["path"] / eq["weights"])
    for cid in ("mcore_llama_base", "legacy_tp2_base"):
        got = load_file(converted[cid] / "model.safetensors")
        assert set(got) == set(want), cid
        if cid == "legacy_tp2_base":  # another run (tp 2): the same names, shapes and dtypes
            assert {n: (t.dtype, t.shape) for n, t in got.items()} == {
                n: (t.dtype, t.shape) for n, t in want.items()
            }
            continue
        for name, w in want.items():
            assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
            assert torch.equal(got[name].view(torch.uint8), w.view(torch.uint8)), name


def test_weights_keep_their_stored_dtype(converted: dict[str, Path]) -> None:
    """bf16 weights stay bf16 (the DistributedOptimizer's fp32 masters are not used)."""
    for cid, dtype in (("mcore_gpt_distopt_base", "BF16"), ("dist_tp2_base", "F32")):
        header = json.loads(_header(converted[cid] / "model.safetensors"))
        assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {dtype}, cid
    config = json.loads((converted["mcore_gpt_distopt_base"] / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16"


def _header(path: Path) -> str:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return raw[8 : 8 + n].decode()


def test_the_plan_names_what_it_cuts_and_what_it_leaves_out(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, cases = corpus
    plan = plan_conversion(root / cases["legacy_tp2_base"]["path"], tmp_path / "hf", to="hf")
    sources = {t.name: t.source for t in plan.tensors}
    assert sources["model.layers.0.self_attn.k_proj.weight"] == (
        "decoder.layers.0.self_attention.linear_qkv.weight (the k rows of each query group)"
    )
    assert sources["model.layers.1.mlp.up_proj.weight"].endswith("(second half: up)")
    assert sources["lm_head.weight"] == "output_layer.weight"
    assert [n for n, _ in plan.written] == ["config.json"]
    assert "config.json" in plan.output_files()
    left_out = " ".join(plan.dropped)
    assert all(p in left_out for p in ("optimizer", "scheduler", "rng", "args"))
    assert "mp_rank_00" not in left_out  # the rank files are what the model is merged from


def test_cut_tensors_are_verified_against_their_own_slices(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """k_proj and v_proj (same shape, both cut from linear_qkv) trade data in the written
    file, and config.json loses a field: the job fails on each, and installs nothing."""
    import ckpt_explorer.convert.runner as jobs

    root, cases = corpus
    write_extras = jobs.write_extras
    k, v = "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"

    def write_then_tamper(plan: Any, out: Path) -> None:
        write_extras(plan, out)
        raw = bytearray((out / "model.safetensors").read_bytes())
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + n])
        header[k]["data_offsets"], header[v]["data_offsets"] = (
            header[v]["data_offsets"],
            header[k]["data_offsets"],
        )
        text = json.dumps(header, separators=(",", ":")).encode()
        raw[8 : 8 + n] = text + b" " * (n - len(text))
        (out / "model.safetensors").write_bytes(bytes(raw))
        config = json.loads((out / "config.json").read_text())
        del config["rms_norm_eps"]
        (out / "config.json").write_text(json.dumps(config))

    monkeypatch.setattr(jobs, "write_extras", write_then_tamper)
    dst = tmp_path / "hf"
    result = run_conversion(plan_conversion(root / cases["legacy_tp2_base"]["path"], dst, "hf"))
    assert not result.verified
    assert sorted(result.mismatches) == [
        "config.json: differs from the planned document",
        f"{k}: bytes differ from the source",
        f"{v}: bytes differ from the source",
    ]
    assert not list(tmp_path.iterdir()), "nothing installed, no temp folder left"


def _rewrite_args(src: Path, dst: Path, change: dict[str, Any]) -> None:
    """A copy of torch_dist folder ``src`` whose common.pt args carry ``change`` (None: the
    field removed), as a Megatron-LM run with those arguments saves them."""
    shutil.copytree(src, dst)
    common = torch.load(dst / "common.pt", weights_only=False)  # the maker's own file
    for key, value in change.items():
        if value is None:
            delattr(common["args"], key)
        else:
            setattr(common["args"], key, value)
    torch.save(common, dst / "common.pt")


@pytest.mark.parametrize(
    ("case_id", "change", "said"),
    [
        ("mcore_gpt_base", {"num_experts": 8}, "mixture of experts"),
        ("mcore_llama_base", {"qk_layernorm": True}, "QK layernorm"),
        ("mcore_gpt_base", {"swiglu": True}, "found swiglu True, normalization 'LayerNorm'"),
        ("mcore_gpt_base", {"bias_gelu_fusion": None}, "bias_gelu_fusion"),
        ("mcore_llama_base", {"norm_epsilon": None}, "norm_epsilon"),
        ("mcore_gpt_base", {"untie_embeddings_and_output_weights": False}, "disagree"),
        ("mcore_llama_base", {"ffn_hidden_size": 48}, "of shape [96, 16]"),
    ],
)
def test_an_unsupported_model_fails_closed(
    corpus: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case_id: str,
    change: dict[str, Any],
    said: str,
) -> None:
    root, cases = corpus
    src = tmp_path / "src" / "iter_0000004"
    _rewrite_args(root / cases[case_id]["path"], src, change)
    before = snapshot(src)
    out = tmp_path / "out"
    assert main(["convert", str(src), str(out), "--to", "hf"]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert snapshot(src) == before


def test_other_targets_keep_megatrons_names(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, cases = corpus
    src = root / cases["mcore_gpt_base"]["path"]
    plan = plan_conversion(src, tmp_path / "m.safetensors", to="safetensors", model_only=True)
    assert "decoder.layers.0.self_attention.linear_qkv.weight" in {t.name for t in plan.tensors}
    assert not plan.written


def _args_of(corpus: tuple[Path, dict[str, Any]], case_id: str) -> dict[str, Any]:
    root, cases = corpus
    return dict(open_checkpoint(root / cases[case_id]["path"]).parts["args"].values)


@pytest.mark.parametrize(
    ("case_id", "change", "said"),
    [
        ("mcore_gpt_base", {"use_te_activation_func": True}, "Transformer Engine"),
        ("mcore_gpt_base", {"group_query_attention": True, "num_query_groups": 2}, "4 heads / 2"),
        ("mcore_llama_base", {"rotary_percent": 0.5}, "partial RoPE"),
        ("mcore_llama_base", {"use_rope_scaling": True}, "Llama 3 RoPE scaling"),
        ("mcore_llama_base", {"add_bias_linear": True}, "add_bias_linear True"),
        ("mcore_llama_base", {"add_qkv_bias": True}, "add_qkv_bias True"),
        ("mcore_llama_base", {"multi_latent_attention": True}, "multi-latent attention"),
        ("mcore_llama_base", {"normalization": "LayerNorm"}, "normalization 'LayerNorm'"),
        ("mcore_llama_base", {"hidden_size": None}, "args.hidden_size"),
    ],
)
def test_args_that_no_hf_class_computes_are_refused(
    corpus: tuple[Path, dict[str, Any]], case_id: str, change: dict[str, Any], said: str
) -> None:
    args = _args_of(corpus, case_id)
    args.update(change)
    with pytest.raises(CkptExplorerError, match=re.escape(said)):
        hf_spec({k: v for k, v in args.items() if v is not None}, Path("x"))


def test_fused_bias_gelu_is_the_tanh_approximation(corpus: tuple[Path, dict[str, Any]]) -> None:
    args = _args_of(corpus, "mcore_gpt_base")
    assert hf_spec(args, Path("x")).activation == "gelu"
    assert hf_spec({**args, "bias_gelu_fusion": True}, Path("x")).activation == "gelu_new"


def test_tied_embeddings_leave_lm_head_to_the_tie(corpus: tuple[Path, dict[str, Any]]) -> None:
    """A tied GPT (pp 1): no output_layer.weight is saved; HF ties lm_head to wte."""
    root, cases = corpus
    state = open_checkpoint(root / cases["mcore_gpt_base"]["path"])
    model, args = state.parts["model"], state.parts["args"]
    tied = CheckpointView(
        state.path,
        state.detection,
        parts={
            "model": CheckpointView(
                model.path,
                model.detection,
                model.files,
                tuple(r for r in model.tensors if r.name != "output_layer.weight"),
            ),
            "args": CheckpointView(
                args.path,
                args.detection,
                values={**args.values, "untie_embeddings_and_output_weights": False},
            ),
        },
    )
    hf = megatron_hf(tied)
    assert "lm_head.weight" not in {r.name for r in hf.records}
    assert hf.config["tie_word_embeddings"] is True


def test_diff_pairs_a_megatron_state_with_its_hf_equivalent(
    corpus: tuple[Path, dict[str, Any]],
) -> None:
    root, cases = corpus
    eq = cases["mcore_llama_base"]["hf_equivalent"]
    result = diff_checkpoints(root / cases["mcore_llama_base"]["path"], root / eq["path"])
    assert result.equal
    assert {r.status for r in result.tensors} == {"identical"}
    assert {r.name for r in result.tensors} == set(eq["tensors"])


def test_diff_names_a_perturbed_tensor_by_its_hf_name(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file, save_file

    root, cases = corpus
    eq = cases["mcore_llama_base"]["hf_equivalent"]
    weights = load_file(root / eq["path"] / eq["weights"])
    name = "model.layers.1.self_attn.v_proj.weight"  # cut from the fused linear_qkv
    weights[name] = weights[name].clone()
    weights[name][3, 5] += 0.5
    (tmp_path / "hf").mkdir()
    save_file(weights, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    result = diff_checkpoints(root / cases["mcore_llama_base"]["path"], tmp_path / "hf")
    assert [(r.name, r.status) for r in result.tensors if r.status != "identical"] == [
        (name, "changed")
    ]
    assert not [r for r in result.tensors if r.status.startswith("only")]
    assert main(["diff", str(root / cases["legacy_tp2_base"]["path"]), str(tmp_path / "hf")]) == 1
    assert name in capsys.readouterr().out


def test_the_hf_view_is_what_the_conversion_writes(
    corpus: tuple[Path, dict[str, Any]], converted: dict[str, Path]
) -> None:
    root, cases = corpus
    view = hf_view(open_checkpoint(root / cases["mcore_gpt_base"]["path"]))
    assert view.kind == "model" and view.values["config.json"]["architectures"] == [
        "GPT2LMHeadModel"
    ]
    result = diff_checkpoints(root / cases["mcore_gpt_base"]["path"], converted["mcore_gpt_base"])
    assert result.equal and {r.status for r in result.tensors} == {"identical"}
    assert any(r.name == "transformer.h.0.attn.c_attn.weight" for r in result.tensors)
    assert isinstance(view.detection, Detection)
