"""fsspec behind one small surface: open a URL's filesystem, list it, read a byte range.

Credentials and endpoints come from each backend's standard environment and config
(``AWS_*`` including ``AWS_ENDPOINT_URL(_S3)``, ``HF_TOKEN``, gcloud and Azure defaults) plus
``storage_options``; they are never printed: every error message passes through
:func:`redact`.
"""

from __future__ import annotations

import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import CkptExplorerError, MissingDependencyError
from .urls import public, scheme

EXTRA_HINT = "pip install 'ckpt-explorer[remote]'"
_BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}
_BACKENDS.update({"abfs": "adlfs", "abfss": "adlfs", "http": "aiohttp", "https": "aiohttp"})
_BACKENDS["hf"] = "huggingface_hub"
_SECRET_ENV: tuple[str, ...] = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN")
_SECRET_ENV += ("AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN")
_SECRET_WORDS = ("secret", "token", "key", "password", "credential", "sas", "signature")
ATTEMPTS = 5


class RemoteError(CkptExplorerError):
    """A remote object could not be listed or read (not found, refused, dropped, truncated)."""

    kind = "other"  # missing, denied, transient or other


@dataclass(frozen=True)
class RemoteFile:
    """One listed object: its path for the filesystem, size and ETag (or None)."""

    path: str
    size: int
    etag: str | None


class Backend:
    """A URL's fsspec filesystem with retrying range reads and secret-free errors."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.shown = public(url)
        self.options = dict(storage_options or {})
        proto = scheme(url) or ""
        try:
            import fsspec
        except ImportError as e:
            raise MissingDependencyError(
                self.shown, "fsspec to read remote URLs", "it is not installed", EXTRA_HINT
            ) from e
        kwargs: dict[str, Any] = dict(self.options)
        client = kwargs.get("client_kwargs")
        given = "endpoint_url" in kwargs or (isinstance(client, dict) and "endpoint_url" in client)
        if proto in ("s3", "s3a") and not given:  # MinIO, Ceph: the standard AWS variables
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                kwargs["endpoint_url"] = endpoint
        try:
            fs, path = fsspec.core.url_to_fs(url, **kwargs)
        except ImportError as e:
            raise MissingDependencyError(
                self.shown,
                f"{_BACKENDS.get(proto, 'an fsspec backend')} to read {proto}:// URLs",
                "it is not installed",
                EXTRA_HINT
                if proto not in ("gs", "gcs", "az", "abfs", "abfss")
                else f"pip install {_BACKENDS[proto]}",
            ) from e
        except (ValueError, TypeError) as e:
            raise RemoteError(self.shown, "a valid remote URL and options", self.redact(e)) from e
        self.fs = fs
        self.path = str(path).rstrip("/")

    # -- listing -------------------------------------------------------------------------
    def listing(self) -> tuple[bool, dict[str, RemoteFile], str | None]:
        """``(is_folder, {relative name: file}, entry)`` of the URL: a folder is listed
        recursively; a sharded index file comes with the shards it names, as a folder whose
        ``entry`` is the index; a single file is ``(False, {name: file}, name)``."""
        try:
            info = self._call(self.fs.info, self.path, what="an existing object or folder")
        except RemoteError as e:
            if e.kind == "missing" and self._http():  # fsspec reports any HEAD failure as 404
                self._call(self.fs.cat_file, self.path, start=0, end=1, what="a readable object")
            raise
        html = str(info.get("mimetype", "")).startswith("text/html")  # an HTTP folder page
        if info.get("type") != "directory" and not (html and self._http()):
            name = self.path.rsplit("/", 1)[-1]
            if name.endswith(".index.json") and "/" in self.path:
                return True, self._index_and_shards(name, info), name
            return False, {name: self._file(info, self.path)}, name
        found = self._call(self.fs.find, self.path + "/", detail=True, what="a listable folder")
        metas: dict[str, dict[str, Any]] = {}
        for full, meta in sorted(found.items()):
            full = str(full)
            rel = full[len(self.path) :].lstrip("/") if full.startswith(self.path) else ""
            if rel and meta.get("type") != "directory":
                metas[rel] = meta
        unsized = [rel for rel, meta in metas.items() if meta.get("size") is None]
        if unsized:  # HTTP folder pages carry no sizes: ask each file (in parallel)
            with ThreadPoolExecutor(8, "ckpt-list") as pool:
                infos = pool.map(
                    lambda r: self._call(self.fs.info, metas[r]["name"], what="a file size"),
                    unsized,
                )
                metas.update(zip(unsized, infos, strict=True))
        out = {rel: self._file(meta, str(meta["name"])) for rel, meta in metas.items()}
        if not out:
            raise RemoteError(
                self.shown, "a folder with files", "an empty folder", "Check the URL."
            )
        return True, out, None

    def _index_and_shards(self, name: str, info: dict[str, Any]) -> dict[str, RemoteFile]:
        """A sharded index URL: the index and the shards its ``weight_map`` names (the
        folder becomes the root; names that would leave it are left to the reader to refuse)."""
        index = self._file(info, self.path)
        data = self._call(self.fs.cat_file, self.path, what="a readable index")
        self.path = self.path.rsplit("/", 1)[0]
        self.shown = self.shown.rsplit("/", 1)[0]
        try:
            shards = set(json.loads(data).get("weight_map", {}).values())
        except (ValueError, AttributeError, TypeError):
            shards = set()  # the local reader reports the malformed index
        safe = sorted(
            s
            for s in shards
            if isinstance(s, str) and s and not s.startswith(("/", "\\")) and ".." not in s
        )
        with ThreadPoolExecutor(8, "ckpt-list") as pool:
            infos = list(pool.map(self._shard_info, safe))
        out = {rel: f for rel, f in zip(safe, infos, strict=True) if f is not None}
        out[name] = index
        return out

    def _shard_info(self, rel: str) -> RemoteFile | None:
        path = f"{self.path}/{rel}"
        try:
            return self._file(self._call(self.fs.info, path, what="a shard"), path)
        except RemoteError as e:
            if e.kind == "missing":
                return None  # the local reader reports the missing shard
            raise

    def _http(self) -> bool:
        return (scheme(self.url) or "").startswith("http")

    def _file(self, info: dict[str, Any], path: str) -> RemoteFile:
        size = info.get("size")
        if size is None:
            raise RemoteError(
                self.shown,
                "a size for every object (Content-Length)",
                f"none for {path.rsplit('/', 1)[-1]}",
                "The server does not report sizes; download the checkpoint instead.",
            )
        etag = info.get("ETag") or info.get("etag") or info.get("md5") or info.get("blob_id")
        return RemoteFile(path, int(size), str(etag).strip('"') if etag else None)

    # -- reading -------------------------------------------------------------------------
    def read(self, f: RemoteFile, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``f``, retried with backoff on transient failures."""
        where = self.where(f)
        data = self._call(
            self.fs.cat_file, f.path, start=start, end=end, what="readable bytes", where=where
        )
        if len(data) != end - start:
            raise RemoteError(
                where,
                f"{end - start} bytes at offset {start} of an object of {f.size} bytes",
                f"{len(data)} bytes",
                "The object is truncated, changed since it was listed, or the server ignores "
                "Range requests; check the upload and try again.",
            )
        return bytes(data)

    def where(self, f: RemoteFile) -> str:
        """The URL of ``f`` as shown in messages."""
        rel = f.path[len(self.path) :].lstrip("/") if f.path.startswith(self.path) else ""
        return f"{self.shown.rstrip('/')}/{rel}" if rel else self.shown

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
        self, e: BaseException, kind: str, what: str, attempts: int, where: str = ""
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
            "other": ("an error", "Check the URL, the endpoint and the credentials."),
        }
        found, hint = hints[kind]
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
    """``missing``, ``denied``, ``transient`` (worth a retry) or ``other``."""
    if isinstance(e, FileNotFoundError):
        return "missing"
    if isinstance(e, PermissionError):
        return "denied"
    status = getattr(e, "status", None) or getattr(e, "code", None)
    if isinstance(status, int):
        if status in (401, 403):
            return "denied"
        if status == 404:
            return "missing"
        if status in (408, 429) or status >= 500:
            return "transient"
        return "other"
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
