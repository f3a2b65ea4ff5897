"""Write ckpt_explorer/readers/gguf/runtime_facts.py: since when llama.cpp reads each ggml
type, GGUF version and architecture, from llama.cpp's (or ggml's) own git history.

    python scripts/gguf_runtime_facts.py --git DIR --name OWNER/REPO [--sdist TAR ...] > .../runtime_facts.py

``--git`` is a bare or checked-out git dir of ggml-org/llama.cpp (tags ``bNNNN``) or
ggml-org/ggml (tags ``vX.Y.Z``). For each ``GGML_TYPE_<NAME> = <id>`` of the newest enum, the
first commit whose header adds that line (author date: a ggml sync keeps the llama.cpp
commit's date and its ``(llama/NNNN)`` pull request) and the first tag that contains it. The
GGUF versions come from ``#define GGUF_VERSION N`` the same way. Architecture names are read
from ``src/llama-arch.cpp`` (older: ``llama.cpp``) when the git dir is llama.cpp's; otherwise
from each ``--sdist`` (llama-cpp-python sdists, oldest first; each vendors llama.cpp at the
commit its CHANGELOG names), which only bound the first build from above.
Not run by the tests; rerun it to refresh the table.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

HEADERS = ("ggml/include/ggml.h", "include/ggml.h", "include/ggml/ggml.h", "ggml.h")
ARCH_FILES = ("src/llama-arch.cpp", "llama.cpp")
MARK = "\x1ecommit "
TYPE_LINE = re.compile(r"^\+\s*GGML_TYPE_(\w+)\s*=\s*(\d+)\s*,")
VERSION_LINE = re.compile(r"^\+\s*#define\s+GGUF_VERSION\s+(\d+)")
ARCH_ENTRY = re.compile(r'\{\s*LLM_ARCH_\w+\s*,\s*"([\w.-]+)"\s*\}')
PR = re.compile(r"\((llama/|#)(\d+)\)\s*$")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def first_tag(repo: Path, commit: str) -> str | None:
    """The earliest release tag that contains ``commit`` (bNNNN by number, else vX.Y.Z)."""
    tags = git(repo, "tag", "--contains", commit).split()

    def key(tag: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", tag)) or (1 << 30,)

    return min(tags, key=key) if tags else None


def first_additions(repo: Path, paths: tuple[str, ...], line: re.Pattern[str]) -> dict[Any, str]:
    """Each match of ``line`` (its groups) -> the first commit (oldest first) that adds it."""
    out = git(repo, "log", "--reverse", f"--format={MARK}%H", "-p", "--no-renames", "--", *paths)
    first: dict[Any, str] = {}
    commit = ""
    for row in out.split("\n"):
        if row.startswith(MARK):
            commit = row[len(MARK) :]
        elif m := line.match(row):
            first.setdefault(m.groups(), commit)
    return first


def describe(repo: Path, commit: str, repo_name: str) -> dict[str, Any]:
    date, subject = git(repo, "show", "-s", "--format=%aI%x00%s", commit).strip().split("\0", 1)
    pr = PR.search(subject)
    pr = pr if pr and pr.group(2) != "0" else None  # "sync : llama.cpp (#0)" names no pull
    return {
        "commit": commit[:10],
        "date": date[:10],
        "tag": first_tag(repo, commit),
        "pull": (
            f"llama.cpp#{pr.group(2)}"
            if pr.group(1) == "llama/"
            else f"{repo_name.rsplit('/', 1)[-1]}#{pr.group(2)}"
        )
        if pr
        else None,
    }


def newest_types(repo: Path) -> dict[str, int]:
    for path in HEADERS:
        try:
            text = git(repo, "show", f"HEAD:{path}")
        except subprocess.CalledProcessError:
            continue
        return {
            m.group(1): int(m.group(2))
            for m in re.finditer(r"^\s*GGML_TYPE_(\w+)\s*=\s*(\d+)", text, re.M)
            if m.group(1) != "COUNT"
        }
    raise SystemExit("no ggml.h at HEAD")


def sdist_arches(tar: Path) -> tuple[str, set[str]]:
    """(the llama.cpp commit the sdist vendors, its architecture names)."""
    commit, names = "?", set()
    with tarfile.open(tar) as tf:
        for member in tf.getmembers():
            f = tf.extractfile(member) if member.isfile() else None
            if f is None:
                continue
            if member.name.count("/") == 1 and member.name.endswith("/CHANGELOG.md"):
                m = re.search(r"llama\.cpp@([0-9a-f]{7,40})", f.read().decode())
                commit = m.group(1)[:10] if m else "?"
            elif member.name.endswith("/vendor/llama.cpp/src/llama-arch.cpp"):
                names = set(ARCH_ENTRY.findall(f.read().decode()))
    return commit, names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--git", type=Path, required=True)
    ap.add_argument("--sdist", type=Path, action="append", default=[])
    ap.add_argument("--name", default="ggml-org/ggml", help="the repository's owner/name")
    args = ap.parse_args()
    repo = git_dir(args.git)
    origin = args.name
    head = git(repo, "log", "-1", "--format=%h %aI").split()
    types = {}
    added = first_additions(repo, HEADERS, TYPE_LINE)
    for name, tid in sorted(newest_types(repo).items(), key=lambda kv: kv[1]):
        commit = added.get((name, str(tid)))
        types[tid] = {"name": name, **(describe(repo, commit, origin) if commit else {})}
    versions = {
        int(v): describe(repo, c, origin)
        for (v,), c in first_additions(repo, (*HEADERS, "src/gguf.cpp", "ggml.c", "src/ggml.c"),
                                       VERSION_LINE).items()
    }  # fmt: skip
    arches: dict[str, dict[str, Any]] = {}
    if any(git(repo, "ls-tree", "HEAD", p).strip() for p in ARCH_FILES):
        for (name,), c in first_additions(
            repo, ARCH_FILES, re.compile(r"^\+.*" + ARCH_ENTRY.pattern)
        ).items():
            arches[name] = describe(repo, c, origin)
    else:
        for tar in args.sdist:
            commit, names = sdist_arches(tar)
            for name in sorted(names - arches.keys()):
                arches[name] = {"by_commit": commit, "sdist": tar.name}
    print(f'"""Generated by scripts/gguf_runtime_facts.py from {origin} (HEAD {head[0]}, '
          f'{head[1][:10]}); do not edit."""\n\nfrom __future__ import annotations\n')  # fmt: skip
    print("from typing import Any\n")
    print(f"SOURCE = {origin!r}")
    print(f"TYPES: dict[int, dict[str, Any]] = {types!r}")
    print(f"GGUF_VERSIONS: dict[int, dict[str, Any]] = {versions!r}")
    print(f"ARCHES: dict[str, dict[str, Any]] = {arches!r}")


if __name__ == "__main__":
    main()
