"""Listing commands never import torch, and list exactly what the API does.

Each command runs in a child process over real checkpoints of every family (the cached fixture
makers, plus a ``torch.save`` file and a safetensors file made here); the child reports which
of torch / pandas / numpy it imported, and its output is compared with the in-process API's.
The static copies of torch's tables that make this possible are compared with the live ones.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import detect_format, open_checkpoint, validate_checkpoint
from ckpt_explorer.formats import specs
from ckpt_explorer.inspect_report import inspect_report
from ckpt_explorer.io.raw_values import record_scalar, records_equal
from ckpt_explorer.io.torch_names import DEVICE_TYPES, live_dtypes, static_dtypes
from ckpt_explorer.security import scan_paths
from ckpt_explorer.security import weights_only as wo

HEAVY = ("torch", "pandas")

# The child: run each argument list through the CLI's main in one process, capture stdout,
# and say after which command each heavy module first appeared.
CHILD = r"""
import contextlib, io, json, sys
from ckpt_explorer.cli import main
from ckpt_explorer.security import weights_only
out, first = {}, {}
for args in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(args)
    out[" ".join(args)] = [code, buf.getvalue()]
    for m in ("torch", "pandas", "numpy"):
        if m in sys.modules and m not in first:
            first[m] = " ".join(args)
static = weights_only._static_if_exact() is not None
print(json.dumps({"out": out, "first": first, "static_tables": static}))
"""


def _run_cli(commands: list[list[str]]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parent.parent.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A torch.save'd .bin and a safetensors file, written the way training code writes them."""
    root = tmp_path_factory.mktemp("no_torch")
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4)).to(torch.bfloat16)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    torch.save(sd, root / "pytorch_model.bin")
    save_file(sd, str(root / "model.safetensors"), metadata={"format": "pt"})
    opt = torch.optim.AdamW(model.parameters())
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    torch.save(opt.state_dict(), root / "optimizer.pt")
    return {p.name: p for p in root.iterdir()}


@pytest.fixture(scope="module")
def paths(real_checkpoints: Any, made: dict[str, Path]) -> list[Path]:
    """One or more checkpoints of every family listing must handle without torch."""
    hf, _ = real_checkpoints("hf")
    tc, _ = real_checkpoints("torch")
    col, _ = real_checkpoints("colossalai")
    ds, _ = real_checkpoints("deepspeed")
    dcp, _ = real_checkpoints("dcp")
    found = [
        *made.values(),
        hf / "gpt2_sharded",
        hf / "gpt2_bin_sharded",
        hf / "llama_single",
        hf / "llama_lora",
        tc / "model.pt",
        tc / "model_legacy.pt",
        tc / "optimizer.pt",
        tc / "scheduler.pt",
        tc / "meta.pt",
        tc / "dtypes.pt",
        tc / "parameters.pt",
        col / "general" / "sharded_bin",
        col / "general" / "optimizer_sharded",
        col / "general" / "lr_scheduler",
        col / "async" / "optimizer.safetensors",
        col / "ddp" / "epoch-1_step-3",
        col / "hybrid" / "optimizer",
        ds / "ds_zero1",
        ds / "ds_zero3",
        dcp / "dcp_model",
    ]
    for p in found:
        assert p.exists(), p
    return found


def _no_heavy(result: dict[str, Any], also: tuple[str, ...] = ()) -> None:
    loaded = {m: after for m, after in result["first"].items() if m in (*HEAVY, *also)}
    assert not loaded, f"imported (module: first command after which it was loaded): {loaded}"


def test_inspect_and_detect_import_no_torch_and_match_the_api(paths: list[Path]) -> None:
    commands = [[c, str(p), "--json"] for p in paths for c in ("inspect", "detect")]
    result = _run_cli(commands)
    _no_heavy(result, also=("numpy",))  # no fixture here pickles numpy objects
    for p in paths:
        code, text = result["out"][f"inspect {p} --json"]
        assert code == 0, text
        assert json.loads(text) == json.loads(json.dumps(inspect_report(open_checkpoint(p))))
        code, text = result["out"][f"detect {p} --json"]
        d = detect_format(p)
        assert code == 0 and json.loads(text) == {
            "path": d.path,
            "format": d.family,
            "kind": d.kind,
            "detail": d.detail,
            "evidence": list(d.evidence),
        }


def test_text_listing_and_formats_import_no_torch(paths: list[Path]) -> None:
    commands = [["formats"]] + [["inspect", str(p), "--all"] for p in paths[:4]]
    result = _run_cli(commands)
    _no_heavy(result, also=("numpy",))
    code, text = result["out"]["formats"]
    assert code == 0
    assert [line.split()[1] for line in text.splitlines()] == [s.name for s in specs()]
    for p in paths[:4]:
        code, text = result["out"][f"inspect {p} --all"]
        assert code == 0 and p.name in text


def test_validate_without_numeric_scan_imports_no_torch(paths: list[Path]) -> None:
    commands = [["validate", str(p), "--no-numeric", "--json"] for p in paths]
    result = _run_cli(commands)
    _no_heavy(result)  # numpy compares a tied embedding with its head: allowed
    for p in paths:
        code, text = result["out"][f"validate {p} --no-numeric --json"]
        report = validate_checkpoint(p, numeric=False)
        assert json.loads(text) == json.loads(json.dumps(report.to_json(), default=str)), p
        assert code == (0 if report.ok else 1)


def test_scan_imports_no_torch_and_judges_as_torch_does(paths: list[Path]) -> None:
    result = _run_cli([["scan", "--json", *map(str, paths)]])
    _no_heavy(result, also=("numpy",))
    assert result["static_tables"], "the installed torch is not the one torch_tables.py copies"
    code, text = result["out"]["scan --json " + " ".join(map(str, paths))]
    got = json.loads(text)
    want = scan_paths(list(paths))  # in this process torch is imported: the live tables
    assert code == want.exit_code
    got.pop("seconds")
    expected = json.loads(json.dumps(want.to_json(), default=str))
    expected.pop("seconds")
    assert got == expected
    assert got["files_seen"] >= len(paths)


def test_static_torch_tables_are_the_installed_torchs() -> None:
    """A torch upgrade that changes them fails here: refresh with weights_only.write_tables()."""
    assert wo.static_tables() == wo.live_tables()
    assert static_dtypes() == live_dtypes()
    with pytest.raises(RuntimeError) as e:
        torch.device("no_such_device")
    listed = str(e.value).split("Expected one of ")[1].split(" device type")[0]
    assert tuple(listed.split(", ")) == DEVICE_TYPES


def test_static_tables_judge_the_security_corpus_as_the_live_ones(
    corpus: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hostile pickles judged with the static copy and with torch's live tables agree."""
    root, _cases = corpus
    live = scan_paths([root]).to_json()
    monkeypatch.setattr(wo, "tables", wo.static_tables)
    static = scan_paths([root]).to_json()
    live.pop("seconds")
    static.pop("seconds")
    assert static == live


def test_values_read_from_bytes_equal_torchs(tmp_path: Path, made: dict[str, Path]) -> None:
    """record_scalar / records_equal (no torch) answer as the loaded tensors do."""
    nan = math.nan
    tensors = {
        "zero": torch.tensor([0.0, 1.0, 2.5]),
        "negzero": torch.tensor([-0.0, 1.0, 2.5]),  # other bytes, equal values
        "nan_a": torch.tensor([nan, 1.0], dtype=torch.bfloat16),
        "nan_b": torch.tensor([nan, 1.0], dtype=torch.bfloat16),  # same bytes, not equal
        "bf": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "bf2": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        "step": torch.tensor(7.0),
        "half": torch.tensor([3.25], dtype=torch.float16),
        "long": torch.tensor(123456789012, dtype=torch.int64),
    }
    save_file(tensors, str(tmp_path / "v.safetensors"))
    view = open_checkpoint(tmp_path / "v.safetensors")
    r = {rec.name: rec for rec in view.tensors}
    for a, b in [("zero", "negzero"), ("nan_a", "nan_b"), ("bf", "bf2"), ("bf", "bf")]:
        want = torch.equal(view.load(a), view.load(b))
        assert records_equal(r[a], r[b]) is want, (a, b)
    for name in ("step", "half", "long"):
        assert record_scalar(r[name]) == float(view.load(name).reshape(-1)[0])
    opt = open_checkpoint(made["optimizer.pt"])
    steps = [rec for rec in opt.tensors if rec.name.endswith(".step")]
    assert steps and all(record_scalar(s) == 1.0 for s in steps)
