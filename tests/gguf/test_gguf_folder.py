"""A folder of several GGUF exports (a Hub download of several quantizations beside its model
card): each export named with its quantization and size, and how to open one -- in the CLI
(exit 2, one line) and in the dashboard. Files written by llama.cpp's converter and
llama-quantize (tests/fixture_makers/kquant_maker.py, gguf_maker.py); the quantization each
header names is read back with llama.cpp's own gguf-py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import gguf
import pytest

from ckpt_explorer.cli import main
from ckpt_explorer.readers.gguf.exports import FILE_TYPES
from ckpt_explorer.ui.state import AppState

QUANTS = ("q4_k_m", "q8_0", "f16")


@pytest.fixture(scope="module")
def download(real_checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """llama-quantize's Q4_K_M and Q8_0, the converter's F16 and a 3-file split set, beside a
    README, as a Hub download of several quantizations lays them out."""
    kq, kq_manifest = real_checkpoints("kquant")
    gg, gg_manifest = real_checkpoints("gguf")
    folder = tmp_path_factory.mktemp("hub") / "tiny-llama-GGUF"
    folder.mkdir()
    for case in QUANTS:
        shutil.copy(kq / kq_manifest["cases"][case]["path"], folder / f"tiny-llama-{case}.gguf")
    split = (gg / gg_manifest["cases"]["split"]["path"]).parent
    for f in split.glob("*.gguf"):
        shutil.copy(f, folder / f.name)
    (folder / "README.md").write_text("# tiny-llama GGUF\n")
    return folder


def _file_type(path: Path) -> str:
    """general.file_type as llama.cpp's gguf-py names it."""
    reader = gguf.GGUFReader(str(path))
    value = int(reader.fields["general.file_type"].contents())
    return gguf.LlamaFileType(value).name.removeprefix("MOSTLY_").removeprefix("ALL_")


def test_the_cli_names_each_export_and_how_to_open_one(
    download: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(download)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "a folder of 4 GGUF exports" in err
    for case in QUANTS:
        path = download / f"tiny-llama-{case}.gguf"
        said = f"{path.name} ({_file_type(path)}, {path.stat().st_size:,} bytes)"
        assert said in err, (said, err)
    assert _file_type(download / "tiny-llama-q4_k_m.gguf") == "Q4_K_M"  # the mixture's name
    splits = sorted(download.glob("split-*.gguf"))
    size = sum(f.stat().st_size for f in splits)
    assert f"{splits[0].name} (3 files, {_file_type(splits[0])}, {size:,} bytes)" in err
    hint = err.split("e.g. `ckpt-explorer inspect ")[1].split("`")[0]
    assert main(["inspect", hint]) == 0  # the command it suggests opens
    capsys.readouterr()


def test_the_dashboard_says_the_same(download: Path) -> None:
    app = AppState(download.parent)
    assert not app.browse.open(download.name)
    error = app.browse.error
    assert "\n" not in error and "a folder of 4 GGUF exports" in error
    assert all(f"tiny-llama-{case}.gguf" in error for case in QUANTS)
    assert app.browse.open(f"{download.name}/tiny-llama-q8_0.gguf"), app.browse.error


def test_one_export_beside_other_files_still_opens(download: Path, tmp_path: Path) -> None:
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(download / "tiny-llama-q8_0.gguf", one)
    shutil.copy(download / "README.md", one)
    assert main(["inspect", str(one)]) == 0


def test_file_type_names_are_llama_cpps() -> None:
    """The table agrees with gguf-py's LlamaFileType wherever both know a value."""
    for member in gguf.LlamaFileType:
        if member.value in FILE_TYPES:
            assert FILE_TYPES[member.value] == member.name.split("_", 1)[1], member
    known = {m.value for m in gguf.LlamaFileType}
    assert known - {1024} <= set(FILE_TYPES)  # every stored type (GUESSED is never written)
