"""The gate on ONNX models, written by onnx itself (``onnx.helper``, ``onnx.save_model``; onnx
1.20.1 in the side folder scripts/setup_env.sh installs, ``.venv/side/onnx``).

An ONNX model holds no Python: a plain one is data. A tensor whose external data lies outside
the model's folder (``onnx.load`` / onnxruntime read that file into the weights) and operators
of a custom domain (run only with a library the user registers) are doubts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_explorer.security import scan_paths
from ckpt_explorer.security.onnx_model import OnnxError, parse_model

_BUILD = r"""
import os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

def model(name, domain="", subgraph=False):
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    opsets = [helper.make_opsetid("", 17)]
    out = "z"
    if domain:
        nodes.append(helper.make_node("Evil", ["z"], ["q"], domain=domain))
        opsets.append(helper.make_opsetid(domain, 1))
        out = "q"
    if subgraph:  # the custom operator hidden in an If branch
        branch = helper.make_graph(
            [helper.make_node("Evil", ["z"], ["b"], domain="com.hidden")], "then", [],
            [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
        cond = numpy_helper.from_array(np.array(True), "c")
        nodes.append(helper.make_node("If", ["c"], ["q"], then_branch=branch, else_branch=branch))
        opsets.append(helper.make_opsetid("com.hidden", 1))
        out = "q"
    inits = [w] + ([cond] if subgraph else [])
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=opsets)

out = sys.argv[1]
j = os.path.join
onnx.save_model(model("clean"), j(out, "clean.onnx"))
os.makedirs(j(out, "external"))
onnx.save_model(model("ext"), j(out, "external", "model.onnx"), save_as_external_data=True,
                all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)
m = model("escape")
onnx.external_data_helper.convert_model_to_external_data(
    m, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
for t in m.graph.initializer:
    for e in t.external_data:
        if e.key == "location":
            e.value = "../../secret.bin"
onnx.save_model(m, j(out, "escape.onnx"))
onnx.save_model(model("custom", "com.evil"), j(out, "custom.onnx"))
onnx.save_model(model("nested", subgraph=True), j(out, "nested_custom.onnx"))
"""

_LOAD = "import sys, onnx\nm = onnx.load(sys.argv[1])\nprint(len(m.graph.node))\n"


def _side() -> str:
    for c in (
        os.environ.get("CKPT_ONNX_SIDE", ""),
        os.path.join(sys.prefix, "side", "onnx"),
        str(Path(__file__).resolve().parents[2] / ".venv" / "side" / "onnx"),
    ):
        if c and os.path.isdir(os.path.join(c, "onnx")):
            return c
    raise RuntimeError("no onnx side folder: run scripts/setup_env.sh")


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": _side()}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("onnx")
    done = _run(_BUILD, str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_onnx_verdicts(models: Path) -> None:
    report = scan_paths([models])
    found = {Path(v.path).relative_to(models).as_posix(): v for v in report.verdicts}
    got = {k: v.verdict for k, v in found.items()}
    assert got == {
        "clean.onnx": "data",
        "external/model.onnx": "data",
        # raw tensor bytes the model beside it names
        "external/model.onnx.data": "data",
        "escape.onnx": "unverified",
        "custom.onnx": "unverified",
        "nested_custom.onnx": "unverified",
    }
    assert found["clean.onnx"].format == "ONNX model"
    assert "'../../secret.bin'" in " ".join(found["escape.onnx"].reasons)
    assert "'com.evil'" in " ".join(found["custom.onnx"].reasons)
    assert "'com.hidden'" in " ".join(found["nested_custom.onnx"].reasons)
    assert scan_paths([models / "clean.onnx"]).exit_code == 0
    assert found["external/model.onnx.data"].format.startswith("ONNX external data")
    # on its own (its model not scanned) the data file is bytes the gate cannot place
    (alone,) = scan_paths([models / "external" / "model.onnx.data"]).verdicts
    assert alone.verdict == "unverified"


def test_onnx_load_reads_what_the_gate_parsed(models: Path) -> None:
    # the real consumer reads the clean models; onnx 1.20.1 refuses the escaping location
    for name in ("clean.onnx", "external/model.onnx", "custom.onnx"):
        done = _run(_LOAD, str(models / name))
        assert done.returncode == 0 and int(done.stdout) >= 2, done.stderr[-500:]
    done = _run(_LOAD, str(models / "escape.onnx"))
    assert done.returncode != 0 and "secret.bin" in done.stderr


def test_bytes_that_are_not_a_model_are_not_onnx(models: Path) -> None:
    raw = (models / "clean.onnx").read_bytes()
    parse_model(raw, len(raw))
    for bad in (raw[:-3], b"\x08\x07", b"\x08\x07\x3a\x7f"):
        with pytest.raises(OnnxError):
            parse_model(bad, len(bad))
