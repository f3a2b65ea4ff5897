"""Remote checkpoints in the dashboard: which URLs it may read (``serve --allow-remote``) and
their local mirrors, shared by every view of every page of one server.

A URL is allowed when it lies under one of the prefixes, compared on normalised parts: scheme
(``s3a`` is ``s3``, ``gcs`` is ``gs``), host or bucket, and path segments, so that
``s3://bucket/run`` allows ``s3://bucket/run/step-6`` but neither ``s3://bucket/run2`` nor
``s3://bucket-evil``. ``.``/``..`` segments are refused outright. Without prefixes every URL
is refused with a message saying how to allow it. A URL's mirror is reused while its listing
(sizes, ETags) is unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

from ..errors import CkptExplorerError
from ..remote.urls import is_url, public, scheme

if TYPE_CHECKING:
    from ..remote.mirror import Mirror
    from ..view import CheckpointView

Need = Literal["structure", "all"]
_ALIASES = {"s3a": "s3", "gcs": "gs"}
_DEFAULT_PORTS = {"http": 80, "https": 443}
_KEEP_USERINFO = ("az", "abfs", "abfss")  # abfs://container@account...: part of the address


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
    parts = urlsplit(text)
    netloc = parts.netloc if sch in _KEEP_USERINFO else parts.netloc.rsplit("@", 1)[-1]
    host, _, port = netloc.lower().partition(":")
    if port and port != str(_DEFAULT_PORTS.get(sch, "")):
        host = f"{host}:{port}"
    raw = parts.path.split("/")[1:] if parts.path else []
    if raw and raw[-1] == "":
        raw.pop()  # a trailing slash names the same folder
    segments = tuple(unquote(s) for s in raw)
    if any(s in (".", "..") or "/" in s or "\\" in s for s in segments):
        raise RemoteRefusedError(
            public(text), "a URL without '.', '..' or encoded slashes", "one with them"
        )
    return _ALIASES.get(sch, sch), host, segments


def _under(key: UrlKey, prefix: UrlKey) -> bool:
    (sch, host, segs), (psch, phost, psegs) = key, prefix
    if sch != psch or host != phost or len(segs) < len(psegs):
        return False
    for s, p in zip(segs, psegs, strict=False):
        revisionless = sch == "hf" and "@" not in p and s.split("@", 1)[0] == p
        if s != p and not revisionless:  # hf://org/repo allows hf://org/repo@rev/...
            return False
    return True


class RemoteAccess:
    """The URL prefixes a dashboard may read, and the mirrors of the URLs it opened.

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
        self._mirrors: dict[str, Mirror] = {}
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

    def mirror(self, url: str, need: Need = "structure") -> Mirror:
        """The mirror of ``url`` (one per URL, reused), holding its structure or every byte."""
        from ..remote.session import mirror_for

        text = self.check(url)
        key = public(text).rstrip("/")
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            m = self._mirrors.get(key)
            if m is not None and not _unchanged(m, text, self.storage_options):
                m = None  # the object changed since: a new mirror (the old one serves old views)
            if m is None:
                m = mirror_for(text, need, self.cache, self.storage_options)
                self._mirrors[key] = m
            elif need == "all":
                m.ensure_whole()
        return m

    def local(self, url: str, need: Need) -> Path:
        """The local mirror path that the engines read for ``url``."""
        return Path(self.mirror(url, need).local)

    def open(self, url: str) -> CheckpointView:
        """``url`` opened from its structure; a tensor load fetches its byte ranges."""
        from ..api import open_checkpoint
        from ..remote.session import fetching_view

        m = self.mirror(url, "structure")
        try:
            return fetching_view(open_checkpoint(m.local), m)
        except CkptExplorerError as e:
            raise self.shown_error(e) from None

    def complete(self, path: object) -> None:
        """Fetch every byte of the mirror holding ``path`` (nothing for a local path)."""
        text = str(path)
        with self._lock:
            mirrors = list(self._mirrors.values())
        for m in mirrors:
            root = str(m.files_root)
            if text == root or text.startswith(root + "/"):
                m.ensure_whole()

    def shown(self, path: str | Path) -> str | None:
        """The URL of a mirror path (None when ``path`` is no mirror's)."""
        text = str(path)
        with self._lock:
            mirrors = list(self._mirrors.values())
        for m in mirrors:
            for local, url in ((m.local, public(m.url)), (m.files_root, m.backend.shown)):
                if text == str(local):
                    return url.rstrip("/")
                if text.startswith(str(local) + "/"):
                    return url.rstrip("/") + text[len(str(local)) :]
        return None

    def shown_error(self, e: CkptExplorerError) -> CkptExplorerError:
        """``e`` with mirror paths shown as their URLs."""
        with self._lock:
            mirrors = list(self._mirrors.values())
        pairs = [(str(m.local), public(m.url).rstrip("/")) for m in mirrors]
        pairs += [(str(m.files_root), m.backend.shown.rstrip("/")) for m in mirrors]
        for attr in ("path", "expected", "found", "hint"):
            value = getattr(e, attr, None)
            if isinstance(value, str):
                for local, url in pairs:
                    value = value.replace(local, url)
                setattr(e, attr, value)
        return e


def _unchanged(m: Mirror, url: str, storage_options: dict[str, Any]) -> bool:
    """Whether ``url`` still lists the files ``m`` mirrors, with the same sizes and ETags (a
    listing, a few requests; without ETags it cannot tell, so no)."""
    from ..remote.backend import Backend

    _, now, _ = Backend(url, storage_options).listing()
    if any(f.etag is None for f in now.values()):
        return False
    return {k: (f.size, f.etag) for k, f in now.items()} == {
        k: (f.size, f.etag) for k, f in m.remote.items()
    }


def mask(text: str, url: str) -> str:
    """``text`` with ``url``'s secrets (user info, query string) replaced by its public form."""
    text = text.replace(url, public(url))
    query = urlsplit(url).query
    return text.replace(query, "***") if len(query) >= 4 else text


__all__ = ["RemoteAccess", "RemoteRefusedError", "is_url", "mask", "url_key"]
