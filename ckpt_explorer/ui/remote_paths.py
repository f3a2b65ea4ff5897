"""Remote checkpoints in the dashboard: which URLs it may read (``serve --allow-remote``) and
their remote stores, shared by every view of every page of one server.

A URL is allowed when it lies under one of the prefixes, compared on normalised parts: scheme
(``s3a`` is ``s3``, ``gcs`` is ``gs``), host or bucket, and path segments, so that
``s3://bucket/run`` allows ``s3://bucket/run/step-6`` but neither ``s3://bucket/run2`` nor
``s3://bucket-evil``. ``.``/``..`` segments are refused outright. Without prefixes every URL
is refused with a message saying how to allow it. A URL's store (what it listed and the
structure it read) is reused while its listing (sizes, ETags) is unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

from ..errors import CkptExplorerError
from ..remote.registry import spec_for_scheme
from ..remote.urls import is_url, public, scheme

if TYPE_CHECKING:
    from ..io.location import Location
    from ..remote.registry import RemoteStore
    from ..view import CheckpointView

Need = Literal["structure", "all"]


class RemoteRefusedError(CkptExplorerError):
    """A URL the dashboard may not read (remote reads off, or outside every allowed prefix)."""


UrlKey = tuple[str, str, tuple[str, ...]]


def url_key(url: str) -> UrlKey:
    """``(scheme, host, path segments)`` of ``url``, for prefix comparison.

    Raises:
        RemoteRefusedError: not a URL this package reads, or a path with ``.``/``..``.
    """
    text = url.strip()
    sch = scheme(text)
    if sch is None:
        raise RemoteRefusedError(text, "a URL (s3://, gs://, az://, http(s)://, hf://)", "none")
    spec = spec_for_scheme(sch)
    assert spec is not None  # scheme() answers only registered schemes
    parts = urlsplit(text)  # abfs://container@account...: the user info is the address
    netloc = parts.netloc if spec.userinfo_is_address else parts.netloc.rsplit("@", 1)[-1]
    host, _, port = netloc.lower().partition(":")
    if port and port != str(dict(spec.ports).get(sch, "")):
        host = f"{host}:{port}"
    raw = parts.path.split("/")[1:] if parts.path else []
    if raw and raw[-1] == "":
        raw.pop()  # a trailing slash names the same folder
    segments = tuple(unquote(s) for s in raw)
    if any(s in (".", "..") or "/" in s or "\\" in s for s in segments):
        raise RemoteRefusedError(
            public(text), "a URL without '.', '..' or encoded slashes", "one with them"
        )
    return spec.canonical(sch), host, segments


def _under(key: UrlKey, prefix: UrlKey) -> bool:
    (sch, host, segs), (psch, phost, psegs) = key, prefix
    if sch != psch or host != phost or len(segs) < len(psegs):
        return False
    spec = spec_for_scheme(sch)
    revisions = spec is not None and spec.revision_at
    for s, p in zip(segs, psegs, strict=False):
        revisionless = revisions and "@" not in p and s.split("@", 1)[0] == p
        if s != p and not revisionless:  # hf://org/repo allows hf://org/repo@rev/...
            return False
    return True


class RemoteAccess:
    """The URL prefixes a dashboard may read, and the stores of the URLs it opened.

    Example:
        >>> access = RemoteAccess(["s3://bucket/run"])
        >>> access.allowed("s3://bucket/run/step-6"), access.allowed("s3://bucket/run2")
        (True, False)
    """

    def __init__(
        self,
        prefixes: Sequence[str] = (),
        cache: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.prefixes = [p.strip() for p in prefixes]
        self._keys: list[UrlKey] = []
        for p in self.prefixes:
            key = url_key(p)
            if not key[1]:
                raise RemoteRefusedError(
                    public(p),
                    "an --allow-remote prefix naming a host or bucket",
                    "none",
                    "Write it as e.g. s3://bucket/run or https://host/path.",
                )
            self._keys.append(key)
        self.cache = cache
        self.storage_options = dict(storage_options or {})
        self._located: dict[str, tuple[Location, RemoteStore]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def allowed(self, url: str) -> bool:
        try:
            key = url_key(url)
        except CkptExplorerError:
            return False
        return any(_under(key, p) for p in self._keys)

    def check(self, url: str) -> str:
        """``url`` (stripped) when it may be read.

        Raises:
            RemoteRefusedError: remote reads are off, or ``url`` is under no allowed prefix.
        """
        text = url.strip()
        if not self._keys:
            raise RemoteRefusedError(
                public(text),
                "a local path under the root",
                "a URL, and remote reads are off",
                "Start the dashboard with `ckpt-explorer serve --allow-remote PREFIX` "
                "(e.g. s3://bucket/run) to read URLs under PREFIX.",
            )
        url_key(text)  # '.' / '..' get their own message
        if not self.allowed(text):
            raise RemoteRefusedError(
                public(text),
                f"a URL under {', '.join(public(p) for p in self.prefixes)}",
                "a URL outside them",
                "Add its prefix with --allow-remote when starting `ckpt-explorer serve`.",
            )
        return text

    def locate(self, url: str) -> Location:
        """The location of an allowed ``url`` in its store (one per URL, listed again at each
        call: a changed object gets a new store; views opened before keep the old one)."""
        from ..remote.locate import open_location
        from ..remote.registry import RemoteStore

        text = self.check(url)
        key = public(text).rstrip("/")
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            found = self._located.get(key)
            if found is None or found[1].changed():
                location = open_location(text, self.storage_options, self.cache)
                if not isinstance(location.store, RemoteStore):
                    raise TypeError(f"{public(text)}: its store is not a remote store")
                found = self._located[key] = (location, location.store)
        return found[0]

    def open(self, url: str) -> CheckpointView:
        """``url`` opened from its structure; a tensor load reads its byte ranges."""
        from ..api import open_checkpoint

        return open_checkpoint(self.locate(url))


def mask(text: str, url: str) -> str:
    """``text`` with ``url``'s secrets (user info, query string) replaced by its public form."""
    text = text.replace(url, public(url))
    query = urlsplit(url).query
    return text.replace(query, "***") if len(query) >= 4 else text


__all__ = ["RemoteAccess", "RemoteRefusedError", "is_url", "mask", "url_key"]
