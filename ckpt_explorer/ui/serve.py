"""``ckpt-explorer serve``: the dashboard on a local port (127.0.0.1 unless asked otherwise)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..io.ports import free_port
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
    """Start the server in a thread; returns ``(server thread, url)``.

    Every browser session gets its own state; nothing outside ``root`` is listed or read.
    """
    import panel as pn

    from .layout import create_app

    checked = check_paths(paths, root)
    root_dir = str(RootGuard(root).root) if root is not None else None
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
        title="ckpt_explorer",
    )
    host = "127.0.0.1" if address in ("0.0.0.0", "") else address
    return server, f"http://{host}:{port}/"
