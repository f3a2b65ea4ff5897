"""``ckpt-explorer serve``: the dashboard in the browser."""

from __future__ import annotations

import argparse

from .exits import EXIT_OK

NAME = "serve"
HELP = "open the dashboard in the browser (127.0.0.1 by default)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "serve_paths",
        nargs="*",
        metavar="paths",
        help="checkpoints to open, or URLs under an --allow-remote prefix (the first two "
        "prefill Compare)",
    )
    p.add_argument("--root", help="folder the page may read (default: the paths' common parent)")
    p.add_argument(
        "--allow-remote",
        action="append",
        default=[],
        metavar="PREFIX",
        help="let the page read URLs under PREFIX (e.g. s3://bucket/run; repeatable); "
        "none by default",
    )
    p.add_argument(
        "--cache",
        dest="remote_cache",
        metavar="DIR",
        help="keep fetched bytes of remote objects here",
    )
    p.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec storage option for the remote URLs",
    )
    p.add_argument("--port", type=int, default=5006, help="port (default 5006; 0 picks a free one)")
    p.add_argument("--address", default="127.0.0.1", help="address to bind (default 127.0.0.1)")


def run(args: argparse.Namespace) -> int:
    from ..remote.cli_args import storage_options
    from ..ui.serve import serve

    server, url = serve(
        args.serve_paths,
        root=args.root,
        port=args.port,
        address=args.address,
        allow_remote=args.allow_remote,
        cache=args.remote_cache,
        storage_options=storage_options(args),
    )
    print(f"ckpt_explorer dashboard: {url}  (Ctrl+C to stop)", flush=True)
    try:
        server.join()
    except KeyboardInterrupt:
        server.stop()
    return EXIT_OK
