"""An installed distribution's version read without importlib.metadata equals what it says."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from ckpt_explorer.io.dist_version import installed_version


@pytest.mark.parametrize(
    "name", ["torch", "safetensors", "numpy", "ckpt-explorer", "typing_extensions", "no-such-dist"]
)
def test_installed_version_is_importlib_metadata_version(name: str) -> None:
    try:
        expected: str | None = metadata.version(name)
    except metadata.PackageNotFoundError:
        expected = None
    assert installed_version(name) == expected


def _dist(folder: Path, dirname: str, version: str) -> None:
    info = folder / dirname
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: Fake-Pkg\nVersion: {version}\n\nText"
    )


def test_first_path_entry_wins_and_ambiguity_asks_importlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "fake_pkg-1.2.3+local.dist-info", "1.2.3+local")
    _dist(second, "fake_pkg-9.0.dist-info", "9.0")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(first), str(second)])
    assert installed_version("fake-pkg") == installed_version("Fake.Pkg") == "1.2.3+local"
    assert installed_version("fake-pkg") == metadata.version("fake-pkg")
    _dist(first, "fake_pkg-2.0.dist-info", "2.0")  # two in one folder: importlib decides
    assert installed_version("fake-pkg") == metadata.version("fake-pkg")


def test_no_importlib_metadata_on_the_plain_path(tmp_path: Path) -> None:
    code = (
        "import sys; from ckpt_explorer.io.dist_version import installed_version; "
        "v = installed_version('torch'); "
        "assert v and 'importlib.metadata' not in sys.modules, sorted(sys.modules); print(v)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == metadata.version("torch")
