"""``diff --nproc`` and ``convert --nproc`` as one job over two torchrun nodes on 127.0.0.1
(``--nnodes 2 --node-rank 0/1``, c10d rendezvous, gloo): the results equal one process's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ckpt_explorer import diff_checkpoints
from ckpt_explorer.convert import plan_conversion, run_conversion
from ckpt_explorer.io.ports import free_port
from ckpt_explorer.io.torchrun import Nodes, nodes_from_args

ROOT = Path(__file__).resolve().parents[2]


def _two_nodes(*args: str) -> list[subprocess.CompletedProcess[str]]:
    """Run ``ckpt-explorer ARGS`` as node 0 and node 1 of one job, at the same time."""
    endpoint = f"127.0.0.1:{free_port()}"
    common = ["--nproc", "1", "--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", "t"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "ckpt_explorer", *args, *common, "--node-rank", str(rank)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for rank in (0, 1)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def test_diff_over_two_nodes_equals_one_process(tmp_path: Path) -> None:
    from ckpt_explorer.demo import make_demo

    root = make_demo(tmp_path / "demo")
    a, b = root / "resumed_from", root / "after_resume"
    one = diff_checkpoints(a, b).to_json()
    node0, node1 = _two_nodes("diff", str(a), str(b), "--json")
    assert node0.returncode == node1.returncode == (0 if one["summary"]["equal"] else 1), (
        node0.stderr[-2000:] + node1.stderr[-2000:]
    )
    assert node1.stdout == ""  # every node has the report; only the first prints it
    two = json.loads(node0.stdout)
    assert two["options"]["nproc"] == 2  # one process on each of two nodes
    assert two["tensors"] == one["tensors"] and two["values"] == one["values"]
    assert two["summary"] == one["summary"]


def test_convert_over_two_nodes_equals_one_process(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(64, 256, generator=gen) for i in range(8)}
    save_file(sd, str(tmp_path / "model.safetensors"))
    src = tmp_path / "model.safetensors"
    one = run_conversion(plan_conversion(src, tmp_path / "one", "hf", max_shard_size="200KB"))
    node0, node1 = _two_nodes(
        "convert", str(src), str(tmp_path / "two"), "--to", "hf", "--max-shard-size", "200KB",
        "--json",
    )  # fmt: skip
    assert node0.returncode == node1.returncode == 0, node0.stderr[-2000:] + node1.stderr[-2000:]
    result = json.loads(node0.stdout)["result"]
    assert result["verified"] and result["nproc"] == 2 and node1.stdout == ""
    assert one.verified and len(one.files) > 2
    files = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "two").iterdir())
    for name in files:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_node_arguments_are_checked() -> None:
    assert nodes_from_args(1, 0, None, None) is None
    nodes = nodes_from_args(2, 1, "head:29500", None)
    assert nodes == Nodes(2, 1, "head:29500", "ckpt-explorer")
    assert "--rdzv-backend" in nodes.torchrun_args()
    with pytest.raises(ValueError, match="rdzv-endpoint"):
        nodes_from_args(2, 0, None, None)
    with pytest.raises(ValueError, match="node-rank"):
        nodes_from_args(2, 2, "head:29500", None)
