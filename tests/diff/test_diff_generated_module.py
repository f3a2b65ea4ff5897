"""Where the generated pair kernels live (diff/generated_module.py): the user's cache folder,
else a private temp folder; a read-only install diffs with its kernels compiled once."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer.diff import generated_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp folder of this test's own, and a cache home that cannot be made (a file's
    child: even root cannot write there)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CKPT_EXPLORER_CACHE", str(tmp_path / "file" / "cache"))
    return folder


def _own_temp(temp_dir: Path) -> Path:
    return temp_dir / f"ckpt_explorer-{os.getuid()}"


def test_the_cache_home_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_EXPLORER_CACHE", str(tmp_path / "c"))
    path = generated_module.place("pkg.gen_mod", "X = 1\n")
    assert path.parent.parent == tmp_path / "c" / "kernels" and path.name == "gen_mod.py"
    assert path.read_text() == "X = 1\n"
    assert generated_module.place("pkg.gen_mod", "X = 1\n") == path  # written once
    assert generated_module.place("pkg.gen_mod", "X = 2\n") != path  # another text, folder
    monkeypatch.delenv("CKPT_EXPLORER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    xdg = generated_module.place("pkg.gen_mod", "X = 1\n")
    assert xdg.parent.parent == tmp_path / "xdg" / "ckpt_explorer" / "kernels"


def test_an_unwritable_cache_home_falls_back_to_a_private_temp_folder(temp_dir: Path) -> None:
    path = generated_module.place("pkg.gen_mod", "X = 1\n")
    own = _own_temp(temp_dir)
    assert path.is_relative_to(own / "kernels") and path.read_text() == "X = 1\n"
    assert stat.S_IMODE(own.stat().st_mode) == 0o700


def test_a_temp_folder_others_may_write_is_not_used(temp_dir: Path) -> None:
    own = _own_temp(temp_dir)
    own.mkdir()
    own.chmod(0o777)  # another user could plant numba cache files (pickles) there
    path = generated_module.place("pkg.gen_mod", "X = 1\n")
    assert not path.is_relative_to(own) and path.is_relative_to(temp_dir)
    assert stat.S_IMODE(path.parent.parent.parent.stat().st_mode) == 0o700


def test_a_linked_temp_folder_is_not_used(temp_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    _own_temp(temp_dir).symlink_to(elsewhere, target_is_directory=True)
    path = generated_module.place("pkg.gen_mod", "X = 1\n")
    assert not path.resolve().is_relative_to(elsewhere) and not any(elsewhere.iterdir())


def test_the_module_runs_the_generated_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file holds the text; the module is the text even when the file says otherwise."""
    monkeypatch.setenv("CKPT_EXPLORER_CACHE", str(tmp_path / "c"))
    name = "ckpt_explorer.diff._test_generated"
    try:
        module = generated_module.load(name, "X = 1\n")
        assert module.X == 1 and module.__file__ and Path(module.__file__).read_text() == "X = 1\n"
        assert generated_module.load(name, "X = 1\n") is module  # once per process and text
    finally:
        sys.modules.pop(name, None)


def _read_only_run(
    dirs: list[Path], cmd: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with ``dirs`` read-only: as root (who writes past file modes) in a mount
    namespace with the folders bind-mounted read-only; else with their write bits off."""
    if os.geteuid() != 0:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=dirs[0])
    mounts = " && ".join(
        f"mount --bind -o ro {shlex.quote(str(d))} {shlex.quote(str(d))}" for d in dirs
    )
    script = f"{mounts} || exit 99; exec {shlex.join(cmd)}"
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, cwd="/"
    )


def test_a_read_only_install_diffs_with_kernels_compiled_once(tmp_path: Path) -> None:
    """The package in a read-only folder: the kernels go to the user's cache, the second
    process loads them compiled, and the diff's figures are those of this checkout."""
    pytest.importorskip("numba")
    if os.geteuid() == 0 and shutil.which("unshare") is None:
        pytest.skip("root without unshare: no way to make a folder read-only")
    site = tmp_path / "site"
    shutil.copytree(
        ROOT / "ckpt_explorer", site / "ckpt_explorer", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = sorted(p.relative_to(site) for p in site.rglob("*"))
    g = torch.Generator().manual_seed(3)
    a = torch.randn(64, 64, generator=g).to(torch.bfloat16)
    save_file({"w": a}, str(tmp_path / "a.safetensors"))
    save_file({"w": a * -1.5 + 0.01}, str(tmp_path / "b.safetensors"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "CKPT_EXPLORER_"))}
    env |= {
        "PYTHONPATH": str(site),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    probe = (
        "from ckpt_explorer.diff import kernel; assert kernel.have_numba(); "
        "f = kernel._pk.pair_fast; "
        "print(sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values()), kernel._pk.__file__)"
    )
    if os.geteuid() != 0:
        for p in [site, *site.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
    try:
        runs = [_read_only_run([site], [sys.executable, "-c", probe], env) for _ in range(2)]
        if runs[0].returncode == 99:
            pytest.skip("no read-only bind mount here")
        assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
        first, second = (r.stdout.split() for r in runs)
        assert first[:2] == ["0", "1"] and second[:2] == ["1", "0"]
        assert first[2] == second[2] and first[2].startswith(
            str(tmp_path / "xdg" / "ckpt_explorer" / "kernels")
        )
        cmd = [
            sys.executable,
            "-m",
            "ckpt_explorer",
            "diff",
            str(tmp_path / "a.safetensors"),
            str(tmp_path / "b.safetensors"),
            "--json",
        ]
        out = _read_only_run([site], cmd, env)
        assert out.returncode == 1, out.stderr
    finally:
        if os.geteuid() != 0:
            for p in [site, *site.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)
    assert sorted(p.relative_to(site) for p in site.rglob("*")) == before  # nothing written
    here = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", "diff", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors"), "--json"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    rows = [json.loads(t)["tensors"] for t in (out.stdout, here.stdout)]
    assert rows[0] == rows[1] and rows[0][0]["status"] == "changed"
