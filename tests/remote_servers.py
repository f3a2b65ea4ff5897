"""Real servers on 127.0.0.1 for the remote tests and benchmark (never the internet).

- :class:`RangeServer`: a stdlib HTTP server over a folder with single-range ``Range`` support,
  ETags and ``If-Match``, HTML folder listings, counters (requests, body bytes sent), a log of
  the ranges asked for, and injected faults.
- :func:`moto_s3`: moto's ThreadedMotoServer, for s3fs through ``AWS_ENDPOINT_URL_S3``.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeServer:
    """Serves ``root`` at ``self.url``; ``faults[relpath]`` is one of ``"403"``, ``"404"``,
    ``"truncate"`` (listed 1000 bytes longer than it is) or ``"drop:N"`` (the next N body
    responses are cut mid-way)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.faults: dict[str, str] = {}
        self.requests = 0
        self.bytes_sent = 0
        self.log: list[tuple[str, str, int, int]] = []  # (method, path, start, end) of files
        self.lock = threading.Lock()
        server = self

        class Handler(SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=str(server.root), **kw)

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, body: bool) -> None:
                with server.lock:
                    server.requests += 1
                rel = self.path.split("?", 1)[0].lstrip("/")
                path = Path(self.translate_path(self.path))
                fault = server.faults.get(rel, "")
                if fault in ("403", "404"):
                    self.send_response(int(fault))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path.is_dir():
                    f = self.list_directory(str(path)) if self.path.endswith("/") else None
                    if f is None:
                        self.send_response(301)
                        self.send_header("Location", self.path + "/")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    data = f.read()
                    self._count(len(data) if body else 0)
                    if body:
                        self.wfile.write(data)
                    return
                if not path.is_file():
                    self.send_error(404)
                    return
                size = path.stat().st_size
                etag = f'"{size:x}-{int(path.stat().st_mtime_ns):x}"'
                wanted = self.headers.get("If-Match")
                if wanted is not None and wanted.strip() not in ("*", etag):
                    self.send_response(412)  # the object changed since the client listed it
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                listed = size + 1000 if fault == "truncate" else size
                start, end = 0, listed
                m = _RANGE.match(self.headers.get("Range", ""))
                status = 200
                if m:
                    status = 206
                    if m.group(1):
                        start = int(m.group(1))
                        end = int(m.group(2)) + 1 if m.group(2) else listed
                    else:
                        start, end = max(0, listed - int(m.group(2))), listed
                    end = min(end, listed)
                real_end = min(end, size)
                n = max(0, real_end - start)
                with server.lock:
                    server.log.append(("GET" if body else "HEAD", rel, start, end))
                self.send_response(status)
                self.send_header("Content-Length", str(n if body else end - start))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("ETag", etag)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{listed}")
                self.end_headers()
                if not body:
                    return
                cut = n
                if fault.startswith("drop:") and int(fault[5:]) > 0 and n > 1:
                    server.faults[rel] = f"drop:{int(fault[5:]) - 1}"
                    cut = n // 2
                with open(path, "rb") as src:
                    src.seek(start)
                    left = cut
                    while left:
                        chunk = src.read(min(left, 1 << 20))
                        if not chunk:
                            break
                        self._count(len(chunk))  # before the client can see it
                        self.wfile.write(chunk)
                        left -= len(chunk)
                if cut < n:
                    self.wfile.flush()
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            def _count(self, n: int) -> None:
                with server.lock:
                    server.bytes_sent += n

            def list_directory(self, path: str) -> Any:  # type: ignore[override]
                import io

                names = sorted(os.listdir(path))
                links = "".join(
                    f'<a href="{n}{"/" if os.path.isdir(os.path.join(path, n)) else ""}">{n}</a>\n'
                    for n in names
                )
                data = f"<html><body>\n{links}</body></html>\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                return io.BytesIO(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        with self.lock:
            self.requests = 0
            self.bytes_sent = 0
            self.log.clear()

    def ranges(self, rel: str) -> list[tuple[int, int]]:
        """The byte ranges GET asked for of file ``rel`` since the last reset."""
        with self.lock:
            return [(s, e) for method, r, s, e in self.log if method == "GET" and r == rel]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
