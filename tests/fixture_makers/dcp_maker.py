"""torch.distributed.checkpoint fixtures: `python tests/fixture_makers/dcp_maker.py OUT_DIR`.

dcp.save with no process group (DCP runs in its no-dist mode). Layout of each case folder:
`.metadata` (pickled Metadata) + `__0_0.distcp` (one torch.save blob per tensor, raw pickled
bytes for non-tensor items).
Cases (family "torch-dcp"):
- dcp_model           dcp.save(model.state_dict()) (kind "model"); FQNs are the state_dict keys.
- dcp_training_state  dcp.save({"model": model.state_dict(), "optim": AdamW.state_dict()}) after 2
                      steps, 2 param groups (kind "training_state"). DCP flattens nested dicts with
                      "." : "model.<key>", "optim.state.<id>.<name>" (the int id becomes a str path
                      element) and, since param_groups is a list of dicts,
                      "optim.param_groups.<i>.<key>"; every group field (lr, betas, params, ...) is its
                      own BytesStorageMetadata item. Tensors (incl. AdamW's 0-dim float32 `step`) are
                      TensorStorageMetadata.
- dcp_fqn_state       torchtitan style: msd, osd = get_state_dict(model, AdamW) after 3 steps with
                      a weight-decay / no-decay split by ndim (interleaving the model order), then
                      dcp.save({"model": msd, "optim": osd, "lr_scheduler": LambdaLR.state_dict(),
                      "step": 3}). The optimizer is keyed by parameter FQN:
                      "optim.state.<fqn>.<name>" and "optim.param_groups.<i>.params" = FQN lists.
                      Extra "optimizer_names": the FQNs in torch's id order (group by group);
                      "optimizer_states": optimizer.state_dict()'s states by torch's own ids;
                      "optimizer_groups": per group its weight_decay and parameter count.
Manifest: "tensors" = the .metadata FQNs whose metadata is a tensor, with dtype/shape/sum taken from
what dcp.load puts back into a zeroed copy of the original state_dict (and checked equal to the
originals); "values" = the byte-item FQNs with the value dcp.load gave back.
Runs in about 15 s; outputs about 220 KB.
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from _manifest import fresh_dir, jsonable, main_out_dir, run_maker, tensor_entry
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

_UNLOADED = "<not loaded>"


def _model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    groups: list[dict[str, Any]] = [
        {"params": list(m[0].parameters())},
        {"params": list(m[1].parameters()) + list(m[3].parameters()), "lr": 1e-2},
    ]
    opt = torch.optim.AdamW(
        groups,
        lr=1e-3,
    )
    for _ in range(2):
        m(torch.randn(6, 4)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return m, opt


def _leaves(state: dict[str, Any]) -> dict[str, tuple[tuple[Any, ...], Any]]:
    """DCP's own traversal: FQN -> (path, leaf value)."""
    from torch.distributed.checkpoint._traverse import traverse_state_dict

    found: dict[str, tuple[tuple[Any, ...], Any]] = {}

    def visit(path: tuple[Any, ...], value: Any) -> None:
        found[".".join(str(p) for p in path)] = (path, value)

    traverse_state_dict(state, visit)
    return found


def _container_key(container: Any, elem: Any) -> Any:
    """The real key of a path element (DCP stringifies mapping keys, e.g. optimizer int ids)."""
    if isinstance(container, dict):
        for k in container:
            if str(k) == str(elem):
                return k
        raise KeyError(elem)
    return int(elem)


def _set_at(root: Any, path: tuple[Any, ...], value: Any) -> None:
    node = root
    for elem in path[:-1]:
        node = node[_container_key(node, elem)]
    node[_container_key(node, path[-1])] = value


def _save_and_describe(state: dict[str, Any], folder: Path) -> dict[str, Any]:
    dcp.save(state, checkpoint_id=str(folder))
    md = FileSystemReader(str(folder)).read_metadata()
    original = _leaves(state)
    if set(original) != set(md.state_dict_metadata):
        raise AssertionError(f"FQNs differ: {sorted(set(original) ^ set(md.state_dict_metadata))}")
    # A state_dict built from the originals: zeroed tensors, non-tensor leaves replaced.
    target = copy.deepcopy(state)
    for path, value in original.values():
        _set_at(
            target, path, torch.zeros_like(value) if isinstance(value, torch.Tensor) else _UNLOADED
        )
    dcp.load(target, checkpoint_id=str(folder))
    loaded = _leaves(target)
    tensors: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for fqn, item_md in md.state_dict_metadata.items():
        got = loaded[fqn][1]
        want = original[fqn][1]
        if isinstance(item_md, TensorStorageMetadata):
            if not (isinstance(got, torch.Tensor) and got.dtype == want.dtype):
                raise AssertionError(f"{fqn}: loaded {type(got).__name__}")
            if list(item_md.size) != list(got.shape) or not torch.equal(got, want):
                raise AssertionError(f"{fqn}: loaded tensor differs from the original")
            tensors[fqn] = tensor_entry(got)
        elif isinstance(item_md, BytesStorageMetadata):
            if got == _UNLOADED or got != want:
                raise AssertionError(f"{fqn}: loaded {got!r}, saved {want!r}")
            values[fqn] = jsonable(got)
        else:
            raise AssertionError(f"{fqn}: unexpected metadata {type(item_md).__name__}")
    files = sorted(p.name for p in folder.iterdir())
    if files != [".metadata", "__0_0.distcp"]:
        raise AssertionError(f"unexpected files {files}")
    return {"tensors": tensors, "values": values}


def case_model(out: Path) -> dict[str, Any]:
    model, _ = _model_and_optimizer()
    folder = fresh_dir(out / "dcp_model")
    case = {"path": "dcp_model", "family": "torch-dcp", "kind": "model"}
    return {"dcp_model": case | _save_and_describe(model.state_dict(), folder)}


def case_training_state(out: Path) -> dict[str, Any]:
    model, opt = _model_and_optimizer()
    folder = fresh_dir(out / "dcp_training_state")
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    case = {"path": "dcp_training_state", "family": "torch-dcp", "kind": "training_state"}
    info = _save_and_describe(state, folder)
    if "optim.state.0.exp_avg" not in info["tensors"] or not info["values"]:
        raise AssertionError("unexpected DCP naming of the optimizer state")
    return {"dcp_training_state": case | info}


def case_fqn_state(out: Path) -> dict[str, Any]:
    """torchtitan style: get_state_dict(model, optimizer) keys the optimizer by FQN."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 2))
    named = list(m.named_parameters())
    groups: list[dict[str, Any]] = [  # weight-decay / no-decay split by ndim
        {"params": [p for _, p in named if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    for _ in range(3):
        m(torch.randn(6, 4)).square().mean().backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no process group: get_state_dict warns, works
        msd, osd = get_state_dict(m, opt)
    by_param = {p: n for n, p in named}
    names = [by_param[p] for g in opt.param_groups for p in g["params"]]
    if [p for g in osd["param_groups"] for p in g["params"]] != names:
        raise AssertionError("get_state_dict's FQN lists differ from the groups' order")
    own = opt.state_dict()  # torch's own ids: the reference for the id numbering
    folder = fresh_dir(out / "dcp_fqn_state")
    state = {"model": msd, "optim": osd, "lr_scheduler": sched.state_dict(), "step": 3}
    case = {"path": "dcp_fqn_state", "family": "torch-dcp", "kind": "training_state"}
    info = _save_and_describe(state, folder)
    if "optim.state.0.weight.exp_avg" not in info["tensors"]:
        raise AssertionError("unexpected DCP naming of the FQN-keyed optimizer state")
    case["optimizer_names"] = names
    case["optimizer_states"] = {
        str(pid): {k: tensor_entry(v) for k, v in st.items()} for pid, st in own["state"].items()
    }
    case["optimizer_groups"] = [
        {"weight_decay": g["weight_decay"], "params": len(g["params"])} for g in own["param_groups"]
    ]
    return {"dcp_fqn_state": case | info}


CASES = {
    "dcp_model": case_model,
    "dcp_training_state": case_training_state,
    "dcp_fqn_state": case_fqn_state,
}


if __name__ == "__main__":
    out_dir = main_out_dir(sys.argv)
    sys.exit(run_maker(out_dir, "torch-dcp", torch.__version__, CASES))
