"""The CLI side of remote URLs: ``--cache`` / ``--storage-option``, and URL arguments opened as
locations in a remote store (what the commands then read, and show, as the URL itself)."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from ..errors import CkptExplorerError
from .urls import is_url

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
            help="keep fetched bytes of remote objects here (keyed by URL, ETag, size; "
            "locked, so several processes share it): a second open moves no data",
        )
        p.add_argument(
            "--storage-option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="fsspec storage option for s3:// gs:// az:// http(s):// hf:// URLs",
        )


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
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
    """For the command's duration: URL arguments are locations in remote stores (listed
    once here); a URL destination is refused."""
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
    from .locate import open_location

    options = storage_options(args)
    cache = getattr(args, "remote_cache", None)
    stores: list[Any] = []

    def located(url: str) -> Any:
        location = open_location(url, options, cache)
        stores.append(location.store)
        return location

    try:
        for f in urls:
            setattr(args, f, located(getattr(args, f)))
        if paths:
            args.paths = [located(p) if is_url(p) else p for p in paths]
        yield
    finally:
        for store in stores:
            store.close()
