"""``ckpt-explorer serve``: the dashboard on a local port (127.0.0.1 unless asked otherwise)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CkptExplorerError
from ..io.ports import free_port, port_is_free, wait_until_listening
from .paths import RootGuard


def check_paths(paths: Sequence[str | Path], root: str | Path | None) -> list[str]:
    """The paths as absolute paths, each checked to lie inside ``root`` (when given).

    Raises:
        CkptExplorerError: the root is not a folder, or a path is missing or outside it.
    """
    if root is None:
        return [str(Path(p).resolve()) for p in paths]
    guard = RootGuard(root)
    return [str(guard.resolve(Path(p).resolve() if Path(p).exists() else p)) for p in paths]


def serve(
    paths: Sequence[str | Path] = (),
    root: str | Path | None = None,
    port: int = 0,
    address: str = "127.0.0.1",
    show: bool = False,
) -> tuple[Any, str]:
    """Start the server in a thread and wait until it listens; returns ``(server thread, url)``.

    Every browser session gets its own state; nothing outside ``root`` is listed or read.

    Raises:
        CkptExplorerError: a path is refused, or the server could not listen (port in use).
    """
    import panel as pn

    from .layout import create_app

    checked = check_paths(paths, root)
    root_dir = str(RootGuard(root).root) if root is not None else None
    if port and not port_is_free(address, port):
        raise CkptExplorerError(
            None,
            f"a free port {port} on {address} for the dashboard",
            "a port another program is using",
            "Choose another port with --port, or leave it out to pick a free one.",
        )
    port = port or free_port(address)

    def page() -> Any:
        return create_app(paths=checked, root=root_dir)

    origins = {f"{address}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"}
    server = pn.serve(
        {"/": page},
        port=port,
        address=address,
        websocket_origin=sorted(origins),
        threaded=True,
        show=show,
        verbose=False,  # the CLI prints the URL once the server answers
        title="ckpt_explorer",
    )
    host = "127.0.0.1" if address in ("0.0.0.0", "") else address
    if not (wait_until_listening(host, port, server.is_alive) and server.is_alive()):
        server.stop()
        raise CkptExplorerError(
            None,
            f"the dashboard listening on {address}:{port}",
            "a server that did not start",
            "Choose another port with --port, or leave it out to pick a free one.",
        )
    return server, f"http://{host}:{port}/"
