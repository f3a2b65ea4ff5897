"""The CLI side of remote URLs: ``--cache`` / ``--storage-option`` and, for one command,
URL arguments replaced by local mirrors (paths in the output shown as the URLs again)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Iterator
from typing import Any

from ..errors import CkptExplorerError
from .urls import is_url, public

COMMANDS = ("inspect", "detect", "validate", "scan", "diff", "doctor", "convert", "fit")
_FIELDS = ("path", "a", "b", "source", "model")


def add_remote_options(sub: Any) -> None:
    """Add ``--cache`` and ``--storage-option`` to the commands that take checkpoints."""
    for name in COMMANDS:
        p = sub.choices.get(name)
        if p is None or "--cache" in p._option_string_actions:
            continue
        p.add_argument(
            "--cache",
            dest="remote_cache",
            metavar="DIR",
            help="keep remote mirrors here (keyed by URL, ETag, size): a second open is free",
        )
        p.add_argument(
            "--storage-option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="fsspec storage option for s3:// gs:// az:// http(s):// hf:// URLs",
        )


def _need(args: argparse.Namespace) -> str:
    command = getattr(args, "command", "")
    if command == "diff":  # one process reads through mapped reads: stream behind it
        return "stream" if args.nproc == 1 else "all"
    if command == "validate":
        return "structure" if args.no_numeric else "all"
    if command == "doctor":
        return "structure" if args.no_weights else "all"
    if command == "convert":
        return "structure" if args.dry_run else "all"
    return "structure"


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """``key=value`` pairs as fsspec options: ``a.b=v`` nests, JSON literals are decoded
    (``anon=true``, ``max_concurrency=16``), anything else stays a string."""
    out: dict[str, Any] = {}
    for item in getattr(args, "storage_option", None) or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise CkptExplorerError(
                None, "--storage-option KEY=VALUE", repr(key), "Write it as key=value."
            )
        value: Any = text
        with contextlib.suppress(ValueError):
            value = json.loads(text)
        *outer, last = key.strip().split(".")
        node = out
        for part in outer:
            node = node.setdefault(part, {})
        node[last] = value
    return out


@contextlib.contextmanager
def remote_arguments(args: argparse.Namespace) -> Iterator[None]:
    """For the command's duration: URL arguments point at local mirrors."""
    if is_url(getattr(args, "destination", None)):
        raise CkptExplorerError(
            args.destination,
            "a local destination folder or file",
            "a URL",
            "Convert to a local path, then upload it with your storage's own tool.",
        )
    urls = [f for f in _FIELDS if is_url(getattr(args, f, None))]
    paths = getattr(args, "paths", None) or []
    if not urls and not any(is_url(p) for p in [*paths, getattr(args, "run_dir", None)]):
        yield
        return
    command = getattr(args, "command", "")
    if command not in COMMANDS:
        raise CkptExplorerError(
            None,
            f"local paths for `{command}`",
            "a URL",
            f"`{command}` does not read remote URLs yet; {', '.join(COMMANDS)} do.",
        )
    from .session import close_mirror, mirror_for

    need: Any = _need(args)
    options = _options(args)
    cache = getattr(args, "remote_cache", None)
    shown: dict[str, str] = {}
    mirrors: list[Any] = []

    def local(url: str) -> str:
        m = mirror_for(url, need, cache, options)
        mirrors.append(m)
        shown[str(m.local)] = public(url).rstrip("/")
        if m.is_dir:  # an index URL's shards, files of a folder
            shown.setdefault(str(m.files_root), m.backend.shown.rstrip("/"))
        return str(m.local)

    try:
        for f in urls:
            setattr(args, f, local(getattr(args, f)))
        if paths:
            args.paths = [local(p) if is_url(p) else p for p in paths]
        with _shown_as_urls(shown):
            yield
    finally:
        for m in mirrors:
            close_mirror(m)


@contextlib.contextmanager
def _shown_as_urls(shown: dict[str, str]) -> Iterator[None]:
    """stdout, stderr and error messages show mirror paths as their URLs."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Rewrite(out, shown), _Rewrite(err, shown)  # type: ignore[assignment]
    try:
        yield
    except CkptExplorerError as e:
        for attr in ("path", "expected", "found", "hint"):
            value = getattr(e, attr)
            if isinstance(value, str):
                setattr(e, attr, _replace(value, shown))
        raise
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = out, err


def _replace(text: str, shown: dict[str, str]) -> str:
    for local, url in shown.items():
        text = text.replace(local, url)
    return text


class _Rewrite(io.TextIOBase):
    """A text stream that shows mirror paths as their URLs."""

    def __init__(self, inner: Any, shown: dict[str, str]) -> None:
        self._inner = inner
        self._shown = shown

    def write(self, s: str) -> int:
        self._inner.write(_replace(s, self._shown))
        return len(s)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return bool(self._inner.isatty())

    def fileno(self) -> int:
        return int(self._inner.fileno())
