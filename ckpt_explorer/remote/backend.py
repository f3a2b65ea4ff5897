"""fsspec behind one small surface: open a URL's filesystem, list it, read byte ranges.

Credentials and endpoints come from each backend's standard environment and config
(``AWS_*`` including ``AWS_ENDPOINT_URL(_S3)``, ``HF_TOKEN``, gcloud and Azure defaults) plus
``storage_options``; they are never printed: every error message passes through
:func:`redact`.
"""

from __future__ import annotations

import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import CkptExplorerError, MissingDependencyError
from .registry import StoreSpec, spec_for_scheme
from .urls import public, scheme

_SECRET_ENV: tuple[str, ...] = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN")
_SECRET_ENV += ("AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN")
_SECRET_WORDS = ("secret", "token", "key", "password", "credential", "sas", "signature")
ATTEMPTS = 5
CHUNK = 16 * 2**20  # one range request of a large read
WORKERS = 8  # range requests in flight (memory: WORKERS x CHUNK)
_LOG = logging.getLogger("ckpt_explorer.remote")
EXTRA_HINT = "pip install 'ckpt-explorer[remote]'"


class RemoteError(CkptExplorerError):
    """A remote object could not be listed or read (not found, refused, dropped, truncated,
    changed since it was listed)."""

    kind = "other"  # missing, denied, transient, changed or other


@dataclass(frozen=True)
class RemoteFile:
    """One listed object: its path for the filesystem, size and ETag (as the server sent it,
    or None)."""

    path: str
    size: int
    etag: str | None


class Backend:
    """A URL's fsspec filesystem with retrying, version-pinned range reads and secret-free
    errors. ``path`` is the filesystem path of the store's root, ``shown`` its public URL."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.shown = public(url)
        self.options = dict(storage_options or {})
        self.workers = WORKERS  # range requests in flight
        self.protocol = proto = scheme(url) or ""
        spec = spec_for_scheme(proto)
        if spec is None:
            raise RemoteError(self.shown, "a URL of a registered store", f"{proto or 'no'}://")
        self.spec: StoreSpec = spec
        self._unpinned: set[str] = set()  # objects already said to be read unpinned
        try:
            import fsspec
        except ImportError as e:
            raise MissingDependencyError(
                self.shown, "fsspec to read remote URLs", "it is not installed", EXTRA_HINT
            ) from e
        kwargs: dict[str, Any] = dict(self.options)
        if spec.options is not None:
            kwargs = spec.options(kwargs)
        try:
            fs, path = fsspec.core.url_to_fs(url, **kwargs)
        except ImportError as e:
            raise MissingDependencyError(
                self.shown,
                f"{spec.package} to read {proto}:// URLs",
                "it is not installed",
                spec.install,
            ) from e
        except (ValueError, TypeError) as e:
            raise RemoteError(self.shown, "a valid remote URL and options", self.redact(e)) from e
        self.fs = fs
        self.path = str(path).rstrip("/")

    # -- listing ---------------------------------------------------------------------------
    def info(self, path: str, what: str) -> dict[str, Any]:
        """fsspec's ``info`` of ``path`` (an HTTP server that refuses HEAD is asked for one
        byte, so that the error says why)."""
        try:
            out: dict[str, Any] = self._call(self.fs.info, path, what=what)
            return out
        except RemoteError as e:
            if e.kind == "missing" and self._http():  # fsspec reports any HEAD failure as 404
                self._call(self.fs.cat_file, path, start=0, end=1, what="a readable object")
            raise

    def is_folder(self, info: dict[str, Any]) -> bool:
        html = str(info.get("mimetype", "")).startswith("text/html")  # an HTTP folder page
        return info.get("type") == "directory" or (html and self._http())

    def root_at_parent(self) -> None:
        """Make the folder of a single-object URL the root (the object is then its entry)."""
        self.path = self.path.rsplit("/", 1)[0]
        self.shown = self.shown.split("?", 1)[0].rstrip("/").rsplit("/", 1)[0]

    def find_files(self) -> dict[str, RemoteFile]:
        """Every object under the root, by relative name (sizes asked for where the listing
        has none: HTTP folder pages, in parallel)."""
        found = self._call(self.fs.find, self.path + "/", detail=True, what="a listable folder")
        metas: dict[str, dict[str, Any]] = {}
        for full, meta in sorted(found.items()):
            full = str(full)
            rel = full[len(self.path) :].lstrip("/") if full.startswith(self.path) else ""
            if rel and meta.get("type") != "directory":
                metas[rel] = meta
        unsized = [rel for rel, meta in metas.items() if meta.get("size") is None]
        if unsized:
            with ThreadPoolExecutor(WORKERS, "ckpt-list") as pool:
                infos = pool.map(lambda r: self.info(metas[r]["name"], "a file size"), unsized)
                metas.update(zip(unsized, infos, strict=True))
        return {rel: self.remote_file(meta, str(meta["name"])) for rel, meta in metas.items()}

    def infos(self, rels: list[str]) -> dict[str, RemoteFile]:
        """The objects ``rels`` under the root that exist (asked in parallel)."""

        def one(rel: str) -> RemoteFile | None:
            path = f"{self.path}/{rel}"
            try:
                return self.remote_file(self.info(path, "a shard"), path)
            except RemoteError as e:
                if e.kind == "missing":
                    return None  # the reader reports the missing file
                raise

        with ThreadPoolExecutor(WORKERS, "ckpt-list") as pool:
            found = list(pool.map(one, rels))
        return {rel: f for rel, f in zip(rels, found, strict=True) if f is not None}

    def _http(self) -> bool:
        return self.spec.html_folders

    def remote_file(self, info: dict[str, Any], path: str) -> RemoteFile:
        size = info.get("size")
        if size is None:
            raise RemoteError(
                self.shown,
                "a size for every object (Content-Length)",
                f"none for {path.rsplit('/', 1)[-1]}",
                "The server does not report sizes; download the checkpoint instead.",
            )
        etag = info.get("ETag") or info.get("etag") or info.get("md5") or info.get("blob_id")
        return RemoteFile(path, int(size), str(etag) if etag else None)

    # -- reading ---------------------------------------------------------------------------
    def fetch(self, f: RemoteFile, ranges: list[tuple[int, int]], where: str) -> list[bytes]:
        """Bytes of each ``[start, end)`` of ``f``, of the version listed (``If-Match`` where
        the protocol has it): large ranges split in :data:`CHUNK` pieces, :data:`WORKERS`
        requests at once, failing pieces retried with backoff.

        Raises:
            RemoteError: the object is gone, refused, changed or shorter than listed, or the
                connection keeps failing.
        """
        pieces = [(p, min(e, p + CHUNK)) for s, e in ranges for p in range(s, e, CHUNK)]
        got: dict[int, bytes] = {}
        todo = list(range(len(pieces)))
        delay = 0.2
        for attempt in range(ATTEMPTS):
            results = self._ranges(f, [pieces[i] for i in todo])
            failed: list[int] = []
            for i, r in zip(todo, results, strict=True):
                start, end = pieces[i]
                if isinstance(r, BaseException):
                    kind = classify(r)
                    if kind != "transient" or attempt == ATTEMPTS - 1:
                        raise self._error(r, kind, "readable bytes", attempt + 1, where, f)
                    failed.append(i)
                elif len(r) != end - start:
                    raise RemoteError(
                        where,
                        f"{end - start} bytes at offset {start} of an object of {f.size} bytes",
                        f"{len(r)} bytes",
                        "The object is truncated, changed since it was listed, or the server "
                        "ignores Range requests; check the upload and try again.",
                    )
                else:
                    got[i] = bytes(r)
            if not failed:
                break
            todo = failed
            time.sleep(delay * (1 + random.random() / 2))
            delay = min(delay * 2, 4.0)
        out: list[bytes] = []
        k = 0
        for s, e in ranges:
            n = len(range(s, e, CHUNK))
            out.append(b"".join(got[i] for i in range(k, k + n)))
            k += n
        return out

    def _ranges(self, f: RemoteFile, pieces: list[tuple[int, int]]) -> list[Any]:
        """One concurrent batch of range reads (exceptions returned in place)."""
        if not pieces:
            return []
        starts, ends = [s for s, _ in pieces], [e for _, e in pieces]
        paths = [f.path] * len(pieces)
        pinned = f.etag is not None and not f.etag.startswith("W/")  # weak tags never match
        if pinned and self.spec.pinned_read is not None:
            out = self.spec.pinned_read(self, f, pieces)
            if out is not None:
                return out
        self._say_unpinned(f)
        try:
            return list(self.fs.cat_ranges(paths, starts, ends, on_error="return"))
        except Exception as e:  # a filesystem without per-range errors: the batch failed
            return [e] * len(pieces)

    def _say_unpinned(self, f: RemoteFile) -> None:
        """Say, once per object, that its reads get the current version, not the listed one."""
        if f.path in self._unpinned:
            return
        self._unpinned.add(f.path)
        why = (
            f"{self.spec.name} reads are not pinned to a version"
            if not self.spec.pins_version
            else "no strong ETag to pin it to"
            if f.etag is None or f.etag.startswith("W/")
            else "the filesystem cannot pin this read"
        )
        _LOG.info("%s: reading the current version (%s)", public(f.path), why)

    def _call(self, fn: Any, *args: Any, what: str, where: str = "", **kwargs: Any) -> Any:
        delay = 0.2
        for attempt in range(ATTEMPTS):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                kind = classify(e)
                if kind != "transient" or attempt == ATTEMPTS - 1:
                    raise self._error(e, kind, what, attempt + 1, where) from None
                time.sleep(delay * (1 + random.random() / 2))
                delay = min(delay * 2, 4.0)
        raise AssertionError("unreachable")

    def _error(
        self,
        e: BaseException,
        kind: str,
        what: str,
        attempts: int,
        where: str = "",
        f: RemoteFile | None = None,
    ) -> RemoteError:
        hints = {
            "missing": ("nothing at that URL (404)", "Check the URL and the revision."),
            "denied": (
                "access refused (401/403)",
                "Check the credentials (AWS_*, HF_TOKEN, --storage-option) and their rights.",
            ),
            "transient": (
                f"a failing connection after {attempts} tries",
                "The server or network dropped the transfer; try again later.",
            ),
            "changed": (
                "it changed since it was listed (the ETag no longer matches)",
                "Open it again to read the new version.",
            ),
            "other": ("an error", "Check the URL, the endpoint and the credentials."),
        }
        found, hint = hints[kind]
        if kind == "changed" and f is not None:
            what = f"the version listed when it was opened ({f.size} bytes, ETag {f.etag})"
        error = RemoteError(where or self.shown, what, f"{found}: {self.redact(e)}", hint)
        error.kind = kind
        return error

    def redact(self, e: BaseException | str) -> str:
        """The message of ``e`` on one line, without secrets (options, env, URL userinfo)."""
        text = f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else str(e)
        text = " ".join(text.split())[:300]
        secrets = [os.environ.get(k, "") for k in _SECRET_ENV]
        secrets += _secret_values(self.options)
        parts = urlsplit(self.url)
        secrets += [parts.password or "", parts.query]
        for s in secrets:
            if len(s) >= 4:
                text = text.replace(s, "***")
        return text


def _secret_values(options: dict[str, Any], secret: bool = False) -> list[str]:
    """Values of options whose key (or an enclosing key) names a secret."""
    out: list[str] = []
    for k, v in options.items():
        hidden = secret or any(w in str(k).lower() for w in _SECRET_WORDS)
        if isinstance(v, dict):
            out += _secret_values(v, hidden)
        elif hidden:
            out.append(str(v))
    return out


def classify(e: BaseException) -> str:
    """``missing``, ``denied``, ``transient`` (worth a retry), ``changed`` or ``other``."""
    if isinstance(e, FileNotFoundError):
        return "missing"
    if isinstance(e, PermissionError):
        return "denied"
    status = getattr(e, "status", None) or getattr(e, "code", None)
    if isinstance(status, int):
        if status == 412:
            return "changed"
        if status in (401, 403):
            return "denied"
        if status == 404:
            return "missing"
        if status in (408, 429) or status >= 500:
            return "transient"
        return "other"
    if _precondition_failed(e):
        return "changed"
    name = type(e).__name__
    if name in ("ClientPayloadError", "ServerDisconnectedError", "ContentLengthError") or (
        isinstance(e, (ConnectionError, TimeoutError))
    ):
        return "transient"
    if "aiohttp" in type(e).__module__ or isinstance(e, OSError):
        return "transient"
    text = str(e)
    if "AccessDenied" in text or "Forbidden" in text or "403" in text:
        return "denied"
    if "NoSuchKey" in text or "NoSuchBucket" in text or "404" in text:
        return "missing"
    return "other"


def _precondition_failed(e: BaseException) -> bool:
    """An ``If-Match`` refused (HTTP 412; S3's PreconditionFailed, which s3fs raises as an
    OSError with the original error as its cause)."""
    for err in (e, e.__cause__, e.__context__):
        if err is None:
            continue
        response = getattr(err, "response", None)
        error = response.get("Error") if isinstance(response, dict) else None
        if isinstance(error, dict) and error.get("Code") == "PreconditionFailed":
            return True
        text = str(err)
        if any(w in text for w in _PRECONDITION_WORDS):
            return True
    return False


_PRECONDITION_WORDS = (
    "PreconditionFailed",
    "Precondition Failed",
    "pre-conditions you specified did not hold",
)
