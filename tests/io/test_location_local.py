"""Local locations: listing and sorting as pathlib does, and index names kept inside the
checkpoint folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt_explorer.errors import UnsafeCheckpointError
from ckpt_explorer.io.location import as_location
from ckpt_explorer.io.paths import resolve_inside


def test_local_listing_is_pathlibs(tmp_path: Path) -> None:
    for name in ("b.safetensors", "a.json", "c"):
        (tmp_path / name).write_text("x")
    (tmp_path / "sub").mkdir()
    found = list(as_location(tmp_path).iterdir())
    assert found == list(tmp_path.iterdir())
    assert [str(p) for p in sorted(found)] == [str(p) for p in sorted(tmp_path.iterdir())]
    assert sorted(found, reverse=True)[0].name == "sub"
    assert all(p.local_path() == tmp_path / p.name for p in found)


def test_index_names_stay_inside(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside.safetensors").write_text("x")
    os.symlink(tmp_path / "outside.safetensors", root / "out.safetensors")
    os.symlink(root / "sub", root / "in")
    loc, index = as_location(root), as_location(root / "model.safetensors.index.json")
    assert resolve_inside(loc, "sub/x.safetensors", index) == root / "sub" / "x.safetensors"
    assert resolve_inside(loc, "in/x.safetensors", index) == root / "in" / "x.safetensors"
    for bad in ("out.safetensors", "../outside.safetensors", "/etc/passwd", ""):
        with pytest.raises(UnsafeCheckpointError):
            resolve_inside(loc, bad, index)
