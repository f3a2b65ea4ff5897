"""``ckpt-explorer serve``: the dashboard on a local port (127.0.0.1 unless asked otherwise)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CkptExplorerError
from ..io.ports import free_port, port_is_free, wait_until_listening
from ..remote.urls import is_url
from .paths import RootGuard
from .remote_paths import RemoteAccess
from .warm_up import Step


def check_paths(
    paths: Sequence[str | Path], root: str | Path | None, remote: RemoteAccess | None = None
) -> list[str]:
    """The paths as absolute paths, each checked to lie inside ``root`` (when given); URLs
    checked to lie under ``remote``'s prefixes (refused without them).

    Raises:
        CkptExplorerError: the root is not a folder, a path is missing or outside it, or a
            URL is not allowed.
    """
    access = remote if remote is not None else RemoteAccess()
    urls = {str(p): access.check(str(p)) for p in paths if is_url(str(p))}
    if root is None:
        return [urls.get(str(p)) or str(Path(p).resolve()) for p in paths]
    guard = RootGuard(root, access)
    return [
        urls.get(str(p)) or str(guard.resolve(Path(p).resolve() if Path(p).exists() else p))
        for p in paths
    ]


def _first(view: Any) -> None:
    from .state import warm, warm_weight_map

    warm(view)
    warm_weight_map(view)


def _warm(view: Any) -> list[Step]:
    """What a first Compare, tensor detail or tab loads, then the view's security verdicts
    (the Overview asks for them at every page)."""
    from .components.overview import security_findings
    from .layout import warm_steps

    return [*warm_steps(), ("security verdicts", lambda: security_findings(view))]


def serve(
    paths: Sequence[str | Path] = (),
    root: str | Path | None = None,
    port: int = 0,
    address: str = "127.0.0.1",
    show: bool = False,
    allow_remote: Sequence[str] = (),
    cache: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> tuple[Any, str]:
    """Start the server in a thread and wait until it listens; returns ``(server thread, url)``.

    Every browser session gets its own state; nothing outside ``root`` is listed or read, and
    no URL outside the ``allow_remote`` prefixes (their stores, and the bytes kept in ``cache``
    when given, are shared by the sessions).

    Raises:
        CkptExplorerError: a path is refused, or the server could not listen (port in use).
    """
    from .view_cache import listening, page_asked, prefetch

    remote = RemoteAccess(allow_remote, cache, storage_options)
    checked = check_paths(paths, root, remote)
    # the checkpoint listed and the Overview's and Weight map's tables built while panel
    # imports; then what a Compare, a tensor detail or a tab loads, a step at a time while
    # no page loads and nothing else runs
    prefetch(checked, _first, _warm)

    import panel as pn

    from .layout import create_app

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
        page_asked()
        return create_app(paths=checked, root=root_dir, remote=remote)

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
    listening()
    return server, f"http://{host}:{port}/"
