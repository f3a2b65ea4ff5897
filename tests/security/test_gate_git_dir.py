"""A ``.git`` folder shipped with a model: the commands git runs from it are ``code``.

Each case is a repository made by git itself (``git init``, ``git commit``, ``git config``,
``git clone``); the git command that runs the planted command is run for real (it only
creates a marker) before the gate must call the file ``code``. git-lfs's own hooks and filter
commands, and plain clones, stay ``data``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ckpt_explorer.security import scan_paths

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **_ENV},
    )


def _repo(path: Path) -> Path:
    path.mkdir()
    assert _git(path, "init", "-q", "-b", "main").returncode == 0
    (path / "config.json").write_text('{"model_type": "gpt2"}\n')
    _git(path, "add", ".")
    assert _git(path, "commit", "-qm", "weights").returncode == 0
    return path


def _verdicts(folder: Path) -> tuple[int, dict[str, str], dict[str, str]]:
    report = scan_paths([folder])
    rel = {Path(v.path).relative_to(folder).as_posix(): v for v in report.verdicts}
    return (
        report.exit_code,
        {k: v.verdict for k, v in rel.items()},
        {k: " ".join(v.reasons) for k, v in rel.items()},
    )


# (what is added to .git/config, the git command that then runs it)
_CONFIGS = {
    "fsmonitor": ('[core]\n\tfsmonitor = "touch {m}; false"\n', ["status"]),
    "fsmonitor_on_header_line": ("[CORE] FSMonitor = touch {m}; false\n", ["status"]),
    "fsmonitor_continued": ("[core]\n\tfsmonitor = touch \\\n{m}; false\n", ["status"]),
    "bang_alias": ("[alias]\n\tst = !touch {m}\n", ["st"]),
    "include": ("[include]\n\tpath = extra.cfg\n", ["status"]),
    "bom": ('\ufeff[core]\n\tfsmonitor = "touch {m}; false"\n', ["status"]),
    "clean_filter": ('[filter "x"]\n\tclean = "touch {m}; cat"\n', ["add", "-A"]),
    "textconv": ('[diff "x"]\n\ttextconv = "touch {m}; cat"\n', ["diff", "HEAD"]),
}


@pytest.mark.parametrize("case", sorted(_CONFIGS))
def test_a_git_config_command_is_code(tmp_path: Path, case: str) -> None:
    repo = _repo(tmp_path / "model")
    marker = tmp_path / "MARK"
    text, command = _CONFIGS[case]
    config = repo / ".git" / "config"
    if case == "bom":  # the whole file begins with the mark
        config.write_text(text.format(m=marker) + config.read_text())
    else:
        with open(config, "a") as f:
            f.write(text.format(m=marker))
    if case in ("clean_filter", "textconv"):  # the attribute that applies the driver
        (repo / ".gitattributes").write_text(
            f"*.json {'filter' if case == 'clean_filter' else 'diff'}=x\n"
        )
        (repo / "config.json").write_text('{"model_type": "llama"}\n')
    if case == "include":  # the included file sets the command
        (repo / ".git" / "extra.cfg").write_text(f"[core]\n\tfsmonitor = touch {marker}; false\n")
    _git(repo, *command)
    assert marker.exists(), case  # git ran the command
    marker.unlink()

    rc, verdicts, reasons = _verdicts(repo)
    assert verdicts[".git/config"] == "code" and rc == 1, reasons[".git/config"]
    assert "the git config sets" in reasons[".git/config"]
    assert verdicts["config.json"] == "data"


def test_a_git_hook_is_code(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "model")
    marker = tmp_path / "MARK"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    _git(repo, "checkout", "-q", "-b", "other")
    assert marker.exists()  # git ran the hook

    rc, verdicts, reasons = _verdicts(repo)
    assert verdicts[".git/hooks/post-checkout"] == "code" and rc == 1
    assert "a git hook" in reasons[".git/hooks/post-checkout"]


# git-lfs's hook as its source (lfs/hook.go and later releases) writes it
_LFS_HOOKS = (
    '#!/bin/sh\ncommand -v git-lfs >/dev/null 2>&1 || { echo >&2 "\\nThis repository is '
    "configured for Git LFS but 'git-lfs' was not found on your path. If you no longer wish "
    'to use Git LFS, remove this hook by deleting .git/hooks/{h}.\\n"; exit 2; }}\n'
    'git lfs {h} "$@"',
    '#!/bin/sh\ncommand -v git-lfs >/dev/null 2>&1 || {{ printf >&2 "\\n%s\\n\\n" "This '
    "repository is configured for Git LFS but 'git-lfs' was not found on your path. If you no "
    "longer wish to use Git LFS, remove this hook by deleting the '{h}' file in the hooks "
    "directory (set by 'core.hookspath'; usually '.git/hooks').\"; exit 2; }}\n"
    'git lfs {h} "$@"\n',
)


def test_a_clone_with_git_lfs_hooks_and_filters_is_data(tmp_path: Path) -> None:
    source = _repo(tmp_path / "source")
    assert _git(tmp_path, "clone", "-q", str(source), "clone").returncode == 0
    clone = tmp_path / "clone"
    for key, value in (
        ("filter.lfs.clean", "git-lfs clean -- %f"),
        ("filter.lfs.smudge", "git-lfs smudge -- %f"),
        ("filter.lfs.process", "git-lfs filter-process"),
        ("filter.lfs.required", "true"),
        ("core.fsmonitor", "false"),
    ):
        assert _git(clone, "config", key, value).returncode == 0
    for i, hook in enumerate(("pre-push", "post-checkout", "post-commit", "post-merge")):
        path = clone / ".git" / "hooks" / hook
        path.write_text(
            _LFS_HOOKS[i % 2].replace("{h}", hook).replace("{{", "{").replace("}}", "}")
        )
        path.chmod(0o755)
    rc, verdicts, reasons = _verdicts(clone)
    assert rc == 0, {k: r for k, r in reasons.items() if r}
    assert set(verdicts.values()) == {"data"}


def test_a_planted_command_beside_git_lfs_filters_is_code(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "model")
    _git(repo, "config", "filter.lfs.smudge", "git-lfs smudge -- %f; touch x")
    rc, verdicts, _ = _verdicts(repo)
    assert verdicts[".git/config"] == "code" and rc == 1


def test_a_git_folder_of_another_name_is_read_too(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "model")
    (repo / ".git").rename(repo / "meta")
    (repo / ".git").write_text("gitdir: meta\n")  # git follows the line to meta/
    marker = tmp_path / "MARK"
    assert _git(repo, "config", "core.fsmonitor", f"touch {marker}; false").returncode == 0
    assert "fsmonitor" in (repo / "meta" / "config").read_text()
    _git(repo, "status")
    assert marker.exists()
    rc, verdicts, _ = _verdicts(repo)
    assert verdicts["meta/config"] == "code" and rc == 1


def test_a_git_file_pointing_out_of_the_folder_is_unverified(tmp_path: Path) -> None:
    outside = _repo(tmp_path / "outside")
    marker = tmp_path / "MARK"
    _git(outside, "config", "core.fsmonitor", f"touch {marker}; false")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "gpt2"}\n')
    (model / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    _git(model, "status")
    assert marker.exists()  # git followed the line and ran the other repository's command
    rc, verdicts, reasons = _verdicts(model)
    assert verdicts[".git"] == "unverified" and rc == 1
    assert "gitdir:" in reasons[".git"] and "outside the scanned folder" in reasons[".git"]
    # inside the folder: judged there, the pointer itself is data
    (model / ".git").unlink()
    (outside / ".git").rename(model / "meta")
    (model / ".git").write_text("gitdir: meta\n")
    rc, verdicts, _ = _verdicts(model)
    assert verdicts[".git"] == "data" and verdicts["meta/config"] == "code"
