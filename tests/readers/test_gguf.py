"""GGUF: listing, values, split sets, pairing with the HF source and the quantization verdict,
on exports written by llama.cpp's own converter (tests/fixture_makers/gguf_maker.py); the
oracles are gguf.GGUFReader + gguf.quants.dequantize and transformers' from_pretrained(gguf_file=).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.diff import diff_checkpoints
from ckpt_explorer.diff.export_side import export_sides

gguf = pytest.importorskip("gguf")

EXPORTS = ("f32", "f16", "bf16", "q8_0")
FAULTS = ("fault_norm", "fault_qk", "fault_scale")


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    out, manifest = real_checkpoints("gguf")
    return out, manifest["cases"]


def _reader_values(path: Path) -> dict[str, tuple[Any, np.ndarray]]:
    reader = gguf.GGUFReader(str(path))
    return {
        t.name: (t, gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32))
        for t in reader.tensors
    }


@pytest.mark.parametrize("case", [*EXPORTS, *FAULTS])
def test_listing_and_values_match_ggufreader(made: Any, case: str) -> None:
    out, cases = made
    path = out / cases[case]["path"]
    view = open_checkpoint(path)
    assert view.family == "gguf" and view.kind == "model"
    oracle = _reader_values(path)
    assert view.names() == sorted(oracle, key=lambda n: int(oracle[n][0].data_offset))
    for record in view.tensors:
        info, values = oracle[record.name]
        assert record.offset == int(info.data_offset)
        assert record.nbytes == int(info.n_bytes)
        assert list(record.shape) == [int(d) for d in reversed(info.shape)]  # HF order
        loaded = view.load(record.name).float().numpy()
        assert loaded.shape == values.shape
        assert np.array_equal(loaded, values), record.name
    arch = view.values["__metadata__.general.architecture"]
    assert arch == "llama"
    tokens = view.values["__metadata__.tokenizer.ggml.tokens"]
    assert isinstance(tokens, str) and "(64 items)" in tokens  # summarised, not expanded


def test_split_set_opens_as_one_model(made: Any) -> None:
    out, cases = made
    case = cases["split"]
    first = out / case["path"]
    assert len(case["splits"]) == 3
    whole = open_checkpoint(out / cases["f16"]["path"])
    for name in case["splits"]:
        view = open_checkpoint(first.parent / name)
        assert [f.path for f in view.files] == case["splits"]
        assert sorted(view.names()) == sorted(whole.names())
    view = open_checkpoint(first.parent / case["splits"][1])
    for part in case["splits"]:
        for name, (_, values) in _reader_values(first.parent / part).items():
            assert np.array_equal(view.load(name).float().numpy(), values), name
    assert view.values["__metadata__.general.architecture"] == "llama"


@pytest.mark.parametrize("case", EXPORTS)
def test_hf_view_equals_transformers_reading(made: Any, case: str) -> None:
    """transformers dequantizes and undoes the Q/K permutation itself: the export seen under
    HF names holds the same values as its model loaded with from_pretrained(gguf_file=)."""
    from safetensors.torch import load_file

    out, cases = made
    if cases[case]["transformers"] is None:
        pytest.skip(f"transformers could not read it: {cases[case]['transformers_error']}")
    oracle = load_file(str(out / cases[case]["transformers"]))
    source, view = export_sides(open_checkpoint(out / "hf"), open_checkpoint(out / f"{case}.gguf"))
    assert sorted(view.names()) == sorted(source.names())
    for name in source.names():
        assert torch.equal(view.load(name).float(), oracle[name].float()), name


@pytest.mark.parametrize("case", EXPORTS)
def test_clean_exports_are_faithful(made: Any, case: str) -> None:
    out, _ = made
    result = diff_checkpoints(out / "hf", out / f"{case}.gguf")
    assert result.faithful
    verdicts = {r.name: r.verdict for r in result.tensors}
    assert None not in verdicts.values()
    if case == "q8_0":  # quantized matrices within budget, F32 norms exact
        assert {v for n, v in verdicts.items() if "norm" in n} == {"exact"}
        assert {v for n, v in verdicts.items() if "proj" in n} == {"within_budget"}
        worst = max(r.budget_ratio or 0 for r in result.tensors)
        assert 0.5 < worst <= 1.0  # the budget is tight: real rounding uses most of it
    else:  # float types: bit for bit the rounding of the source
        assert set(verdicts.values()) == {"exact"}
    q = next(r for r in result.tensors if r.name == "model.layers.0.self_attn.q_proj.weight")
    assert q.export_tensor is not None and "permuted" in q.export_tensor


@pytest.mark.parametrize("case", FAULTS)
def test_planted_fault_is_found_and_ranked_first(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    assert not result.faithful
    ranked = result.export_rows()
    assert ranked[0].name == cases[case]["fault_hf"]
    assert ranked[0].verdict == "beyond_budget"
    assert ranked[0].export_tensor.startswith(cases[case]["fault_gguf"])
    assert [r.verdict for r in ranked[1:]].count("beyond_budget") == 0


def test_cli_text_and_json(made: Any) -> None:
    out, cases = made
    cli = [sys.executable, "-m", "ckpt_explorer"]
    hf, bad = str(out / "hf"), str(out / cases["fault_scale"]["path"])
    text = subprocess.run([*cli, "diff", hf, bad], capture_output=True, text=True)
    assert text.returncode == 1, text.stderr
    lines = text.stdout.splitlines()
    first = lines.index(next(x for x in lines if x.lstrip().startswith("verdict ")))
    assert (
        "beyond_budget" in lines[first + 1] and cases["fault_scale"]["fault_hf"] in lines[first + 1]
    )
    assert "NOT FAITHFUL" in text.stdout
    js = subprocess.run([*cli, "diff", "--json", hf, bad], capture_output=True, text=True)
    data = json.loads(js.stdout)
    assert data["summary"]["export"]["beyond_budget"] == 1
    row = next(r for r in data["tensors"] if r["verdict"] == "beyond_budget")
    assert row["name"] == cases["fault_scale"]["fault_hf"] and row["quant"] == "Q8_0"
    ok = subprocess.run([*cli, "diff", hf, str(out / "q8_0.gguf")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:]


@pytest.mark.parametrize(("case", "transform"), [("mixtral", "expert 3"), ("gemma", "1 + w")])
def test_stacked_experts_and_norm_offsets_are_undone(made: Any, case: str, transform: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / cases[f"{case}_hf"]["path"], out / cases[case]["path"])
    assert result.faithful, result.format_text()
    assert {r.verdict for r in result.tensors} == {"exact"}
    assert any(transform in (r.export_tensor or "") for r in result.tensors)


def test_swapped_experts_are_found_and_ranked_first(made: Any) -> None:
    out, cases = made
    case = cases["fault_experts"]
    result = diff_checkpoints(out / cases["mixtral_hf"]["path"], out / case["path"])
    ranked = result.export_rows()
    assert {r.name for r in ranked[:2]} == set(case["fault_hf"])
    assert [r.verdict for r in ranked].count("beyond_budget") == 2
    assert not result.faithful


def test_metadata_is_checked_against_config(made: Any, tmp_path: Path) -> None:
    """gguf's own gguf_set_metadata writes a wrong context length into a copy: the export is
    no longer faithful, and the row says which key against which config field."""
    out, cases = made
    bad = tmp_path / "ctx.gguf"
    bad.write_bytes((out / cases["f32"]["path"]).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "gguf.scripts.gguf_set_metadata", str(bad),
         "llama.context_length", "999", "--force"],
        check=True, capture_output=True,
    )  # fmt: skip
    good = diff_checkpoints(out / "hf", out / cases["f32"]["path"])
    checks = {v.key: v for v in good.values if v.key.startswith("export.")}
    assert len(checks) >= 8 and all(v.status == "equal" for v in checks.values())
    result = diff_checkpoints(out / "hf", bad)
    assert not result.faithful
    changed = [v for v in result.values if v.key.startswith("export.") and v.status != "equal"]
    assert [(v.key, v.a, v.b) for v in changed] == [
        ("export.llama.context_length vs config.json max_position_embeddings", 256, 999)
    ]


def test_remote_gguf_lists_by_range_reads(made: Any, tmp_path: Path) -> None:
    """Over HTTP (a local Range server) an export lists as on disk and a Q8_0 tensor loads the
    same values; listing a 16 MiB file moves its header's blocks, not its tensors."""
    pytest.importorskip("aiohttp")
    sys.path.insert(0, str(Path(__file__).parent.parent))
    from remote_servers import RangeServer

    out, cases = made
    big = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(str(big), "llama")
    w.add_block_count(1)
    w.add_tensor("big", np.zeros(4 * 2**20, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (tmp_path / "q8_0.gguf").write_bytes((out / cases["q8_0"]["path"]).read_bytes())
    server = RangeServer(tmp_path)
    try:
        assert open_checkpoint(f"{server.url}/big.gguf").names() == ["big"]
        assert server.bytes_sent < 2**18 < big.stat().st_size  # first and last blocks only
        local = tmp_path / "q8_0.gguf"
        view, here = open_checkpoint(f"{server.url}/q8_0.gguf"), open_checkpoint(local)
        assert [(r.name, r.dtype, r.shape, r.offset) for r in view.tensors] == [
            (r.name, r.dtype, r.shape, r.offset) for r in here.tensors
        ]
        name = "blk.0.ffn_up.weight"
        assert torch.equal(view.load(name), here.load(name))
    finally:
        server.close()


def test_export_given_first_gets_the_same_verdicts(made: Any) -> None:
    out, cases = made
    case = cases["fault_norm"]
    forward = diff_checkpoints(out / "hf", out / case["path"])
    backward = diff_checkpoints(out / case["path"], out / "hf")
    assert backward.options["export"] == "a" and forward.options["export"] == "b"
    assert [(r.name, r.verdict) for r in backward.export_rows()] == [
        (r.name, r.verdict) for r in forward.export_rows()
    ]
    assert backward.export_rows()[0].name == case["fault_hf"] and not backward.faithful


def test_a_folder_of_one_gguf_export_opens_as_that_export(
    made: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from ckpt_explorer.cli import main

    out, cases = made
    one = tmp_path / "one"  # a Hub download of one quantization: the file beside its README
    one.mkdir()
    shutil.copy(out / cases["q8_0"]["path"], one)
    (one / "README.md").write_text("# a model card\n")
    view, alone = open_checkpoint(one), open_checkpoint(out / cases["q8_0"]["path"])
    assert view.detection.family == "gguf" and view.names() == alone.names()
    name = alone.names()[0]
    assert torch.equal(view.load(name), alone.load(name))
    split = open_checkpoint((out / cases["split"]["path"]).parent)  # one split set
    assert [f.path for f in split.files] == cases["split"]["splits"]

    shutil.copy(out / cases["f16"]["path"], one)  # two exports: the user must pick one
    assert main(["inspect", str(one)]) == 2
    err = capsys.readouterr().err
    assert "f16.gguf" in err and "q8_0.gguf" in err and "Traceback" not in err
