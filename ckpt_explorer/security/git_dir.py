"""Commands that git runs from a repository's own ``.git`` folder.

A model folder shipped with its ``.git`` (an archive of a clone) brings that repository's
``config`` and ``hooks/``. git reads them for every command run inside the folder:
``core.fsmonitor`` is a command that ``git status`` runs (shell prompts and editors run
``git status`` by themselves on entering a folder); ``core.pager``, ``core.editor``,
``core.sshCommand``, filter drivers, diff text converters, credential helpers, ``!`` aliases,
``ext::`` remote URLs and others run on the commands that use them; a hook runs on its event
(``post-checkout``, ``pre-commit``, ...); ``include.path`` pulls in another config file. Such a
file is ``code``. git-lfs's own hooks and filter commands, byte for byte as git-lfs writes
them, are not. The config is read line by line as git's parser reads it (sections with
subsections, a key on the header's line, case-insensitive names, quoted values and ``\\``
continuations); a line that parser would not accept makes git refuse to run at all, and is
reported as a doubt. The git folder may be any folder git accepts as one (``HEAD``,
``objects/``, ``refs/``): a ``.git`` file's ``gitdir:`` line can name a folder of any name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..io.location import Location

_MAX = 4 * 2**20  # a repository config is small; a larger one is a doubt

# (section, key): run as a command when set; "*" stands for any subsection
_COMMANDS: dict[tuple[str, str], str] = {
    ("core", "fsmonitor"): "git status (shell prompts and editors run it on their own)",
    ("core", "hookspath"): "each hook event, from the folder it names",
    ("core", "sshcommand"): "git fetch / push over ssh",
    ("core", "gitproxy"): "git fetch over git://",
    ("core", "editor"): "git commit and any command that opens an editor",
    ("core", "pager"): "any command that pages its output (git log, git diff)",
    ("core", "askpass"): "any command that asks for a password",
    ("core", "alternaterefscommand"): "git fetch / push with alternates",
    ("sequence", "editor"): "git rebase -i",
    ("diff", "external"): "git diff",
    ("diff", "*.textconv"): "git diff / git log -p",
    ("diff", "*.command"): "git diff",
    ("merge", "*.driver"): "git merge",
    ("filter", "*.clean"): "git add / git status",
    ("filter", "*.smudge"): "git checkout",
    ("filter", "*.process"): "git checkout / git add / git status",
    ("credential", "helper"): "any command that needs credentials",
    ("credential", "*.helper"): "any command that needs credentials",
    ("gpg", "program"): "signing and verifying",
    ("gpg", "*.program"): "signing and verifying",
    ("remote", "*.uploadpack"): "git fetch from a local path",
    ("remote", "*.receivepack"): "git push to a local path",
    ("difftool", "*.cmd"): "git difftool",
    ("mergetool", "*.cmd"): "git mergetool",
    ("web", "browser"): "git help --web / instaweb",
    ("browser", "*.cmd"): "git help --web",
    ("man", "*.cmd"): "git help",
    ("interactive", "difffilter"): "git add -p",
    ("uploadpack", "packobjectshook"): "git upload-pack",
    ("sendemail", "sendmailcmd"): "git send-email",
    ("sendemail", "tocmd"): "git send-email",
    ("sendemail", "cccmd"): "git send-email",
    ("include", "path"): "every command (it reads another config file, which may set these)",
    ("includeif", "*.path"): "every command (it reads another config file, which may set these)",
}
_BOOLEANS = {"", "true", "false", "yes", "no", "on", "off", "1", "0"}
# keys whose value is a command only in some forms
_BANG = {("alias", "*"): "the alias's name", ("submodule", "*.update"): "git submodule update"}
_EXT_URL = {("remote", "*.url"), ("remote", "*.pushurl")}
# git-lfs's own filter commands (``git lfs install --local``)
_LFS_FILTER = {
    ("lfs", "clean"): "git-lfs clean -- %f",
    ("lfs", "smudge"): "git-lfs smudge -- %f",
    ("lfs", "process"): "git-lfs filter-process",
}
_LFS_HOOK = re.compile(
    r'#!/bin/sh\ncommand -v git-lfs >/dev/null 2>&1 \|\| \{ (?:echo >&2 "(?:[^"`$\\]|\\n)*"'
    r'|printf >&2 "\\n%s\\n\\n" "[^"`$\\]*"); exit 2; \}\ngit lfs ([a-z-]+) "\$@"\n?'
)
_HEADER = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\\n]|\\.)*)")?\s*\](.*)')
_KEY = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=(.*))?$")


@dataclass
class GitFindings:
    """What git would run from one file (``code``) and what could not be read (``doubts``)."""

    code: list[str] = field(default_factory=list)
    doubts: list[str] = field(default_factory=list)


def in_git_dir(path: Location) -> bool:
    """Whether git could read the file as a repository's config or hook: it lies inside a
    ``.git`` folder, or in a folder git accepts as a repository (``HEAD``, ``objects/``,
    ``refs/``: a bare repository, or the target of a ``.git`` file's ``gitdir:`` line)."""
    if any(p.name == ".git" for p in path.parents):
        return True
    if path.name in ("config", "config.worktree"):
        return _is_git_dir(path.parent)
    return path.parent.name == "hooks" and _is_git_dir(path.parent.parent)


def _is_git_dir(d: Location) -> bool:
    try:
        return (d / "HEAD").is_file() and (d / "objects").is_dir() and (d / "refs").is_dir()
    except (OSError, ValueError):
        return False


def judge_git_file(path: Location, label: str) -> GitFindings:
    """The commands git runs from ``path``, a file of a repository's git folder."""
    out = GitFindings()
    if path.parent.name == "hooks" and not path.name.endswith(".sample"):
        _hook(path, label, out)
    elif path.name in ("config", "config.worktree"):
        _config(path, label, out)
    return out


def _hook(path: Location, label: str, out: GitFindings) -> None:
    try:
        text = path.read_bytes()[:_MAX].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    lfs = _LFS_HOOK.fullmatch(text)
    if lfs and lfs.group(1) == path.name:
        return
    out.code.append(
        f"{label}: a git hook: git runs it on its event ({path.name}) for any git command "
        "run in this repository"
    )


def _config(path: Location, label: str, out: GitFindings) -> None:
    try:
        if path.stat().st_size > _MAX:
            out.doubts.append(f"{label}: a git config of over {_MAX} bytes, not read here")
            return
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError as e:
        out.doubts.append(f"{label}: a git config that cannot be read ({e})")
        return
    section, sub = "", ""
    lines = text.removeprefix("\ufeff").splitlines()  # git skips a UTF-8 BOM
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):  # a value continued on the next line
            i += 1
            line = line[:-1] + lines[i]
        i += 1
        body = _uncomment(line).strip()
        if not body:
            continue
        head = _HEADER.match(body)
        if head:
            section, sub = _section(head.group(1), head.group(2))
            body = _uncomment(head.group(3)).strip()
            if not body:
                continue
        key = _KEY.match(body)
        if not key or not section:
            out.doubts.append(
                f"{label}: line {i}: {line.strip()[:80]!r}, which git's parser may not accept"
            )
            continue
        name = key.group(1).lower()
        value = _value(key.group(2) or "")
        why = _runs(section, sub, name, value)
        if why:
            full = f"{section}.{sub + '.' if sub else ''}{name}"
            out.code.append(
                f"{label}: the git config sets {full} = {value[:120]!r}: git runs it on {why}, "
                "for a git command run in this repository"
            )


def _section(name: str, quoted: str | None) -> tuple[str, str]:
    if quoted is not None:
        return name.lower(), re.sub(r"\\(.)", r"\1", quoted)
    first, _, rest = name.partition(".")  # the old [section.subsection] form
    return first.lower(), rest.lower()


def _uncomment(line: str) -> str:
    """The line before a ``#`` / ``;`` comment outside double quotes."""
    quoted = False
    escaped = False
    for at, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch in "#;" and not quoted:
            return line[:at]
    return line


def _value(raw: str) -> str:
    out = []
    escaped = False
    for ch in raw.strip():
        if escaped:
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(ch, ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch != '"':
            out.append(ch)
    return "".join(out).strip()


def _runs(section: str, sub: str, name: str, value: str) -> str:
    """When git runs the value as a command ("" when it does not)."""
    if value.lower() in _BOOLEANS:
        return ""  # unset, off, or (core.fsmonitor) the built-in daemon
    pattern = "*" if section == "alias" else (f"*.{name}" if sub else name)
    if (section, pattern) in _COMMANDS:
        if section == "filter" and _LFS_FILTER.get((sub, name)) == value:
            return ""
        return _COMMANDS[(section, pattern)]
    if section == "pager":
        return f"git {name} (its pager)"
    if (section, pattern) in _BANG and value.startswith("!"):
        return _BANG[(section, pattern)]
    if (section, pattern) in _EXT_URL and value.startswith("ext::"):
        return "git fetch / push (an ext:: transport is a command)"
    return ""


__all__ = ["GitFindings", "in_git_dir", "judge_git_file"]
