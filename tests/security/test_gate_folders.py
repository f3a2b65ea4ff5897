"""What only a folder shows: links, shadowing modules, DCP items; and the exit codes.

Each folder is written by the real tools (torch.save, torch.distributed.checkpoint.save,
symlinks, a package on disk); each malicious one is also loaded the way a user would load it,
in a child process started in that folder, to prove its payload really runs (only a marker).
"""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch
from security_oracle import run_as_user

from ckpt_explorer.cli import main
from ckpt_explorer.security import scan_paths
from ckpt_explorer.validate import validate_checkpoint


class _Mark:
    """Pickled only here: unpickling it makes the marker folder."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (self.marker,))


def _scan(*argv: str) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["scan", "--json", *argv])
    return code, json.loads(out.getvalue())


def test_links_inside_are_followed_and_links_out_are_never_passed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    torch.save({"w": torch.ones(2)}, run / "checkpoint-2" / "model.pt")
    (run / "latest").symlink_to("checkpoint-2")  # inside: followed, judged once
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    torch.save({"w": torch.ones(2)}, outside / "model.pt")
    code, doc = _scan(str(run))
    assert code == 0, doc
    assert [Path(f["path"]).name for f in doc["files"]] == ["model.pt"]
    assert doc["links"] == [
        {"path": str(run / "latest"), "target": "checkpoint-2", "status": "inside"}
    ]
    (run / "base").symlink_to(outside)  # out of the root: not judged, never passed
    (run / "loop").symlink_to("loop")
    (run / "dangling").symlink_to("nothing-here")
    code, doc = _scan(str(run))
    assert code == 1
    by_name = {Path(f["path"]).name: f for f in doc["files"]}
    assert by_name["base"]["verdict"] == "unverified"
    assert "outside the scanned folder" in by_name["base"]["reasons"][0]
    status = {Path(x["path"]).name: x["status"] for x in doc["links"]}
    assert status == {"latest": "inside", "base": "outside", "loop": "loop", "dangling": "dangling"}
    code, doc = _scan(str(run), "--allow-unverified")
    assert code == 0 and doc["allow_unverified"] is True
    assert _scan(str(outside / "model.pt"))[0] == 0  # the target itself, scanned


def test_a_payload_behind_a_linked_checkpoint_folder_is_found(tmp_path: Path) -> None:
    run = tmp_path / "run"
    real = run / "checkpoint-7"
    real.mkdir(parents=True)
    torch.save({"rng": _Mark(tmp_path / "MARK")}, real / "rng_state.pth")
    (run / "best").symlink_to("checkpoint-7")
    code, doc = _scan(str(run / "best"))  # the link itself is what was given
    assert code == 1 and doc["files"][0]["verdict"] == "unsafe"


def test_a_package_shadowing_an_allow_listed_module_is_unsafe(tmp_path: Path) -> None:
    """An ``omegaconf/`` package beside a pickle naming omegaconf: ``torch.load`` from a
    Python started in that folder imports the folder's package, and its code runs."""
    ckpt = tmp_path / "ckpt"
    pkg = ckpt / "omegaconf"
    pkg.mkdir(parents=True)
    marker = tmp_path / "MARK"
    (pkg / "__init__.py").write_text(f"import os\nos.mkdir({str(marker)!r})\n")
    (pkg / "dictconfig.py").write_text("class DictConfig(dict):\n    pass\n")
    # what a Hydra config pickles as: omegaconf.dictconfig.DictConfig (allow-listed)
    data = b"\x80\x02comegaconf.dictconfig\nDictConfig\nq\x00)\x81q\x01}q\x02b."
    (ckpt / "hparams.pkl").write_bytes(data)
    done = run_as_user(ckpt, "import pickle; pickle.load(open('hparams.pkl', 'rb'))")
    assert marker.exists(), done.stderr  # the control: the shadowing code really runs
    marker.rmdir()
    code, doc = _scan(str(ckpt))
    assert code == 1
    by_name = {Path(f["path"]).relative_to(ckpt).as_posix(): f for f in doc["files"]}
    assert by_name["omegaconf/__init__.py"]["verdict"] == "unsafe"
    assert "instead of the real omegaconf" in by_name["omegaconf/__init__.py"]["reasons"][0]
    assert by_name["hparams.pkl"]["verdict"] == "unsafe"
    assert "shadows" in " ".join(by_name["hparams.pkl"]["reasons"])


def test_custom_model_code_that_shadows_nothing_is_code(tmp_path: Path) -> None:
    """Not unsafe (no plain load runs it), but code: it fails the gate unless allowed."""
    folder = tmp_path / "model"
    folder.mkdir()
    torch.save({"w": torch.ones(2)}, folder / "pytorch_model.bin")
    (folder / "modeling_tiny.py").write_text("class TinyModel:\n    pass\n")
    (folder / "config.json").write_text('{"auto_map": {"AutoModel": "modeling_tiny.TinyModel"}}')
    code, doc = _scan(str(folder))
    assert code == 1, doc
    by_name = {Path(f["path"]).name: f["verdict"] for f in doc["files"]}
    assert by_name == {
        "pytorch_model.bin": "safe",
        "modeling_tiny.py": "code",
        "config.json": "code",
    }
    assert _scan(str(folder), "--allow-code")[0] == 0


def test_dcp_bytes_items_are_judged_wherever_they_lie(tmp_path: Path) -> None:
    """A DCP save whose payload sits in a bytes item that is not the last item of its
    ``.distcp``: the DCP loader ``torch.load``s it with weights_only=False."""
    import torch.distributed.checkpoint as dcp

    marker = tmp_path / "MARK"
    state = {"a_obj": _Mark(marker), "b_weight": torch.ones(4), "c_step": 3, "d_w2": torch.ones(2)}
    dcp.save(state, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    clean = {"b_weight": torch.ones(4), "c_step": 3, "d_w2": torch.ones(2)}
    dcp.save(clean, checkpoint_id=str(tmp_path / "clean"), no_dist=True)
    done = run_as_user(
        tmp_path,
        "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save as f; "
        "f('dcp', 'out.pt')",
    )
    assert marker.exists(), done.stderr  # DCP's own loader runs it
    code, doc = _scan(str(tmp_path / "dcp"))
    assert code == 1
    distcp = [f for f in doc["files"] if f["path"].endswith(".distcp")]
    assert distcp and distcp[0]["verdict"] == "unsafe", distcp
    assert "the bytes item 'a_obj'" in " ".join(distcp[0]["reasons"])
    code, doc = _scan(str(tmp_path / "clean"))
    assert code == 0, doc
    assert {f["verdict"] for f in doc["files"]} == {"safe"}


def test_validate_reports_unverified_files(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    torch.save({"w": torch.ones(2)}, folder / "model.pt")
    good = (folder / "model.pt").read_bytes()
    (folder / "extra.pt").write_bytes(b"JUNK" + good)  # bytes before an archive
    report = validate_checkpoint(folder, numeric=False)
    unverified = [f for f in report.findings if f.rule == "security.unverified"]
    assert unverified and unverified[0].severity == "error" and unverified[0].file == "extra.pt"
    assert scan_paths([folder]).exit_code == 1


def test_a_missing_path_exits_2(tmp_path: Path) -> None:
    code, doc = _scan(str(tmp_path / "nothing"))
    assert code == 2 and doc["unreadable"][0]["path"].endswith("nothing")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_unverified(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, path)
    path.chmod(0)
    code, doc = _scan(str(tmp_path))
    assert code == 1 and doc["files"][0]["verdict"] == "unverified"


def test_the_dashboard_banner_shows_unverified_files(tmp_path: Path) -> None:
    from ckpt_explorer.ui.components.overview import Overview
    from ckpt_explorer.ui.state import AppState

    state = tmp_path / "checkpoint-3"
    state.mkdir()
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    torch.save(model.state_dict(), state / "model.pt")
    torch.save(opt.state_dict(), state / "optimizer.pt")
    good = (state / "optimizer.pt").read_bytes()
    (state / "extra.pt").write_bytes(b"JUNK" + good)  # torch fails, zipfile reads it
    app = AppState(tmp_path)
    overview = Overview(app)
    assert app.browse.open("checkpoint-3/model.pt"), app.browse.error
    assert "security-banner" not in [getattr(b, "name", "") for b in overview._body]
    assert app.browse.open("checkpoint-3"), app.browse.error
    banner = overview._body[0]
    assert banner.alert_type == "danger" and "Unverified" in banner.object
    assert "extra.pt" in banner.object and "read differently" in banner.object
    assert "unsafe, code or unverified" in app.unsafe_note("checkpoint-3")
