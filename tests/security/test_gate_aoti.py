"""An AOTInductor package is native code that ``torch.export.load`` loads.

``torch.export.load`` -> ``load_pt2`` hands every folder under ``data/aotinductor/`` to
``AOTIModelPackageLoader``, which ``dlopen``s the shared library there: its constructors run
before any symbol is looked up. The package below is written by torch's own ``package_pt2``
around a library compiled here; the plain program ``torch.export.save`` writes is its twin.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from security_oracle import run_as_user

from ckpt_explorer.security import scan_paths

_CONSTRUCTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void on_load(void) {
    const char *path = getenv("CKPT_MARK");
    if (path) { FILE *f = fopen(path, "w"); if (f) fclose(f); }
}
"""
_METADATA = {"AOTI_DEVICE_KEY": "cpu", "AOTI_PLATFORM": "linux", "AOTI_MACHINE": "x86_64"}


def _aoti_package(folder: Path) -> Path:
    from torch.export.pt2_archive._package import package_pt2

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the shared library")
    (folder / "lib.c").write_text(_CONSTRUCTOR)
    lib = folder / "m.wrapper.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(lib), str(folder / "lib.c")], check=True
    )
    meta = folder / "m.wrapper_metadata.json"
    meta.write_text(json.dumps(_METADATA))
    out = folder / "release" / "model.pt2"
    out.parent.mkdir()
    package_pt2(str(out), exported_programs=None, aoti_files=[str(lib), str(meta)])
    return out


def test_an_aoti_package_is_unsafe_and_a_plain_program_is_safe(tmp_path: Path) -> None:
    package = _aoti_package(tmp_path)
    marker = tmp_path / "MARK"
    load = f"import torch\ntry:\n    torch.export.load({str(package)!r})\nexcept RuntimeError:\n    pass\n"
    done = run_as_user(tmp_path, load, CKPT_MARK=str(marker))
    assert marker.exists(), done.stderr  # the library's constructor ran on a plain load

    program = torch.export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),))
    torch.export.save(program, str(package.parent / "plain.pt2"))
    report = scan_paths([package.parent])
    found = {Path(v.path).name: v for v in report.verdicts}
    v = found["model.pt2"]
    assert v.verdict == "unsafe" and report.exit_code == 1
    said = " ".join(v.reasons)
    assert "AOTInductor package (data/aotinductor/model)" in said and "m.wrapper.so" in said
    assert found["plain.pt2"].verdict == "safe"
