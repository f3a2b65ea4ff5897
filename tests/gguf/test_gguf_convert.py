"""convert --to gguf (HF -> GGUF) and GGUF -> HF, checked with the real clients: llama.cpp's own
converter's output for the same tiny Llama (tests/fixture_makers/gguf_maker.py), gguf.GGUFReader,
and transformers' from_pretrained (with gguf_file= on our GGUF, and on the HF folder we write).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.convert import ConversionCancelled, plan_conversion, run_conversion
from ckpt_explorer.diff.quant_budget import BEYOND, EXACT, budget
from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.readers.gguf.hf import permute_qk

gguf = pytest.importorskip("gguf")

OUTTYPES = ("f32", "f16", "bf16", "q8_0")
SAME_EXCEPT = {"general.name", "general.size_label"}  # the converter's naming of the model


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    out, manifest = real_checkpoints("gguf")
    return out, manifest["cases"]


@pytest.fixture(scope="module")
def ours(made: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Our GGUF of the fixture's HF folder at each outtype (each run verified)."""
    out, _ = made
    folder = tmp_path_factory.mktemp("ours")
    paths = {}
    for outtype in OUTTYPES:
        plan = plan_conversion(out / "hf", folder / f"{outtype}.gguf", "gguf", dtype=outtype)
        result = run_conversion(plan)
        assert result.verified, result.mismatches
        paths[outtype] = folder / f"{outtype}.gguf"
    return paths


def _fields(reader: Any) -> dict[str, Any]:
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


@pytest.mark.parametrize("outtype", OUTTYPES)
def test_same_file_as_llama_cpp_converter(made: Any, ours: dict[str, Path], outtype: str) -> None:
    """Same tensor names, types, shapes and bytes as convert_hf_to_gguf.py; the same keys."""
    out, cases = made
    theirs = gguf.GGUFReader(str(out / cases[outtype]["path"]))
    mine = gguf.GGUFReader(str(ours[outtype]))
    a = {t.name: t for t in theirs.tensors}
    b = {t.name: t for t in mine.tensors}
    assert set(a) == set(b)
    for name, t in a.items():
        u = b[name]
        assert (u.tensor_type, list(u.shape)) == (t.tensor_type, list(t.shape)), name
        assert bytes(u.data) == bytes(t.data), name
    fa, fb = _fields(theirs), _fields(mine)
    assert set(fa) - SAME_EXCEPT == set(fb) - SAME_EXCEPT
    for key in set(fa) - SAME_EXCEPT:
        assert fa[key] == fb[key], key


@pytest.mark.parametrize(("case", "outtype"), [("mixtral", "f16"), ("gemma", "f32")])
def test_stacked_experts_and_norm_offsets_as_llama_cpp(
    made: Any, tmp_path: Path, case: str, outtype: str
) -> None:
    """A MoE model (experts stacked per layer) and Gemma (norms stored as 1 + w): the same
    tensors, byte for byte, as llama.cpp's converter writes; Mixtral's keys too."""
    out, cases = made
    dst = tmp_path / f"{case}.gguf"
    result = run_conversion(plan_conversion(out / f"{case}_hf", dst, "gguf", dtype=outtype))
    assert result.verified, result.mismatches
    theirs, mine = gguf.GGUFReader(str(out / cases[case]["path"])), gguf.GGUFReader(str(dst))
    a = {t.name: (t.tensor_type, list(t.shape), bytes(t.data)) for t in theirs.tensors}
    b = {t.name: (t.tensor_type, list(t.shape), bytes(t.data)) for t in mine.tensors}
    assert a == b
    if case == "mixtral":
        fa, fb = _fields(theirs), _fields(mine)
        assert {k: v for k, v in fa.items() if k not in SAME_EXCEPT} == {
            k: v for k, v in fb.items() if k not in SAME_EXCEPT
        }


@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_ggufreader_values_equal_ours(ours: dict[str, Path], outtype: str) -> None:
    view = open_checkpoint(ours[outtype])
    reader = gguf.GGUFReader(str(ours[outtype]))
    for t in reader.tensors:
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        got = view.load(t.name).float().numpy()
        assert np.array_equal(got.reshape(want.shape), want), t.name


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_transformers_reads_our_gguf_as_the_source(
    made: Any, ours: dict[str, Path], outtype: str
) -> None:
    """from_pretrained(gguf_file=our GGUF) gives the source weights within the type's precision
    (F32 equal, F16 the source's F16 rounding, Q8_0 within its block bound)."""
    from transformers import AutoModelForCausalLM

    out, _ = made
    src = load_file(out / "hf" / "model.safetensors")
    path = ours[outtype]
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    got = model.state_dict()
    heads = {"q_proj": 4, "k_proj": 2}
    for name, x in src.items():
        y = got[name].float()
        if outtype == "f32":
            assert torch.equal(y, x), name
        elif outtype == "f16" and x.dim() > 1:
            assert torch.equal(y, x.half().float()), name
        elif x.dim() > 1:
            proj = name.split(".")[-2]
            fwd = (lambda w, n=heads[proj]: permute_qk(w, n)) if proj in heads else (lambda w: w)
            b = budget("Q8_0", fwd(x), fwd(y))
            assert b.verdict != BEYOND, (name, b)
        else:
            assert torch.equal(y, x), name


def test_gguf_to_hf_loads_and_is_the_source(made: Any, tmp_path: Path) -> None:
    """llama.cpp's F16 GGUF -> HF: from_pretrained loads it, each weight the source's F16
    rounding (Q/K unpermuted); its Q8_0 GGUF -> HF: within the Q8_0 bound of the source."""
    from transformers import AutoModelForCausalLM

    out, cases = made
    src = load_file(out / "hf" / "model.safetensors")
    for case in ("f16", "q8_0"):
        dst = tmp_path / case
        plan = plan_conversion(out / cases[case]["path"], dst, "hf")
        result = run_conversion(plan)
        assert result.verified, result.mismatches
        model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32)
        got = model.state_dict()
        for name, x in src.items():
            y = got[name].float()
            if x.dim() == 1:
                assert torch.equal(y, x), name
            elif case == "f16":
                assert torch.equal(y, x.half().float()), name
            else:
                b = budget("Q8_0", x, y)  # blocks are along rows: the permutation keeps them
                assert b.verdict != BEYOND, (name, b)
        config = json.loads((dst / "config.json").read_text())
        want = json.loads((out / "hf" / "config.json").read_text())
        for key in ("hidden_size", "num_hidden_layers", "num_key_value_heads", "vocab_size"):
            assert config[key] == want[key]


def test_a_wrong_value_is_caught_and_nothing_installed(
    made: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that scales one tensor's values (a #22565-style fault) fails verification:
    the output is not installed, the source is untouched."""
    out, _ = made
    before = _digest(out / "hf")
    real = gguf.quants.quantize
    calls = {"n": 0}

    def faulty(data: np.ndarray, qtype: Any) -> np.ndarray:
        calls["n"] += 1
        return real(data * 1.5 if calls["n"] == 3 else data, qtype)

    monkeypatch.setattr(gguf.quants, "quantize", faulty)
    plan = plan_conversion(out / "hf", tmp_path / "o.gguf", "gguf", dtype="q8_0")
    result = run_conversion(plan)
    assert not result.verified
    assert len(result.mismatches) == 1 and plan.files[0].tensors[2].name in result.mismatches[0]
    assert not list(tmp_path.iterdir())
    assert _digest(out / "hf") == before


def test_cancel_leaves_nothing(made: Any, tmp_path: Path) -> None:
    out, _ = made
    cancel = threading.Event()
    plan = plan_conversion(out / "hf", tmp_path / "o.gguf", "gguf")
    cancel.set()
    with pytest.raises(ConversionCancelled):
        run_conversion(plan, cancel=cancel)
    assert not list(tmp_path.iterdir())


def test_refusals(made: Any, tmp_path: Path) -> None:
    out, cases = made
    with pytest.raises(CkptExplorerError, match="q8_0"):
        plan_conversion(out / "hf", tmp_path / "o.gguf", "gguf", dtype="q4_k")
    with pytest.raises(CkptExplorerError, match="max-shard-size"):
        plan_conversion(out / "hf", tmp_path / "o", "gguf", max_shard_size="1MB")
    plan = plan_conversion(out / "hf", tmp_path / "o.gguf", "gguf")
    with pytest.raises(CkptExplorerError, match="one process"):
        run_conversion(plan, nproc=2)
    with pytest.raises(CkptExplorerError, match="llama"):
        plan_conversion(out / cases["gemma"]["path"], tmp_path / "g", "hf")
    assert not list(tmp_path.iterdir())


def test_cli_json(made: Any, tmp_path: Path) -> None:
    out, _ = made
    dst = tmp_path / "m.gguf"
    args = ["convert", str(out / "hf"), str(dst), "--to", "gguf", "--dtype", "q8_0", "--json"]
    r = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", *args], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["result"]["verified"] and doc["plan"]["target"] == "gguf"
    assert doc["plan"]["files"][0]["writer"] == "gguf" and dst.is_file()
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(dst)).tensors}
    assert types == {"Q8_0", "F32"}


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_exact_verdicts_for_lossless_types(ours: dict[str, Path], made: Any) -> None:
    """Our F16 GGUF diffed against its source: every tensor exact (the F16 rounding)."""
    out, _ = made
    view = open_checkpoint(ours["f16"])
    src = load_file(out / "hf" / "model.safetensors")
    x = src["model.layers.0.self_attn.o_proj.weight"]
    assert budget("F16", x, view.load("blk.0.attn_output.weight")).verdict == EXACT
