"""The remote stores this package reads, registered once (``remote/registry.py``).

Pinned reads: HTTP sends ``If-Match`` with the listed ETag; S3 sends ``IfMatch`` on each GET
(s3fs's own range read cannot pass it). Google Cloud Storage, Azure and the Hugging Face Hub
read the current version (their reads are not pinned; they say so).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .registry import StoreSpec, register

if TYPE_CHECKING:
    from .backend import Backend, RemoteFile


def _http_if_match(backend: Backend, f: RemoteFile, pieces: list[tuple[int, int]]) -> list[Any]:
    starts, ends = [s for s, _ in pieces], [e for _, e in pieces]
    return list(
        backend.fs.cat_ranges(
            [f.path] * len(pieces), starts, ends, on_error="return", batch_size=backend.workers,
            headers={"If-Match": f.etag},
        )
    )  # fmt: skip


def _s3_if_match(
    backend: Backend, f: RemoteFile, pieces: list[tuple[int, int]]
) -> list[Any] | None:
    """S3 GETs with ``IfMatch`` (None when the filesystem is not s3fs's)."""
    if not hasattr(backend.fs, "_call_s3"):
        return None
    import asyncio

    from fsspec.asyn import sync

    fs = backend.fs
    bucket, key, _ = fs.split_path(f.path)

    async def one(start: int, end: int) -> Any:
        try:
            resp = await fs._call_s3(
                "get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}",
                IfMatch=f.etag,
            )  # fmt: skip
            try:
                return await resp["Body"].read()
            finally:
                resp["Body"].close()
        except Exception as e:
            return e

    async def run() -> list[Any]:
        gate = asyncio.Semaphore(backend.workers)

        async def gated(start: int, end: int) -> Any:
            async with gate:
                return await one(start, end)

        return list(await asyncio.gather(*(gated(s, e) for s, e in pieces)))

    return list(sync(fs.loop, run))


def _s3_endpoint(options: dict[str, Any]) -> dict[str, Any]:
    """MinIO, Ceph: the endpoint from the standard AWS variables unless the options give one."""
    client = options.get("client_kwargs")
    given = "endpoint_url" in options or (isinstance(client, dict) and "endpoint_url" in client)
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return options if given or not endpoint else {**options, "endpoint_url": endpoint}


register(
    StoreSpec(
        "s3", ("s3", "s3a"), "s3fs", pins_version=True, pinned_read=_s3_if_match,
        options=_s3_endpoint, aliases=(("s3a", "s3"),),
    )
)  # fmt: skip
register(
    StoreSpec("gcs", ("gs", "gcs"), "gcsfs", install="pip install gcsfs", aliases=(("gcs", "gs"),))
)
register(
    StoreSpec(
        "azure", ("az", "abfs", "abfss"), "adlfs", install="pip install adlfs",
        userinfo_is_address=True,
    )
)  # fmt: skip
register(
    StoreSpec(
        "http", ("http", "https"), "aiohttp", pins_version=True, pinned_read=_http_if_match,
        html_folders=True, ports=(("http", 80), ("https", 443)),
    )
)  # fmt: skip
register(
    StoreSpec("hf", ("hf",), "huggingface_hub", revision_at=True)
)  # hf://<repo>[@revision]/<path>
