"""The ``ckpt-explorer`` command: thin argument parsing over the public API."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .errors import CkptExplorerError

EXIT_OK, EXIT_DIFFERENT, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERNAL = 3  # the tool failed (memory, recursion), not the input
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process ended by SIGPIPE


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .io.gc_pause import freeze_at_exit, gc_paused

    freeze_at_exit()
    with gc_paused():  # the listing and its report hold no cycles (io/gc_pause.py)
        return _inspect(args)


def _inspect(args: argparse.Namespace) -> int:
    from .api import open_checkpoint
    from .inspect_report import format_inspect, inspect_report

    view = open_checkpoint(args.path, model=args.model)
    if args.json:
        from .json_stream import tensor_lines, write_json

        report = inspect_report(view, tensors=False)
        write_json(report, sys.stdout, {"tensors": tensor_lines(view.tensors)})
    else:
        print(format_inspect(view, limit=None if args.all else args.limit))
    return EXIT_OK


def _cmd_detect(args: argparse.Namespace) -> int:
    from .api import detect_format

    d = detect_format(args.path)
    if args.json:
        json.dump(
            {
                "path": d.path,
                "format": d.family,
                "kind": d.kind,
                "detail": d.detail,
                "evidence": list(d.evidence),
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
    else:
        print(d.explain())
    return EXIT_OK


def _cmd_formats(args: argparse.Namespace) -> int:
    from .formats import specs

    for spec in specs():
        print(f"{spec.target:4}  {spec.name:16}  {', '.join(spec.families)}")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .api import open_checkpoint
    from .demo import make_demo
    from .inspect_report import format_inspect

    root = make_demo(args.out)
    print(f"demo training state written to {root}\n", file=sys.stderr)
    print(format_inspect(open_checkpoint(root / "resumed_from"), limit=args.limit))
    return EXIT_OK


def _cmd_diff(args: argparse.Namespace) -> int:
    from .diff import diff_checkpoints
    from .diff.align import parse_rename

    result = diff_checkpoints(
        args.a,
        args.b,
        atol=args.atol,
        rtol=args.rtol,
        rename=parse_rename(args.rename) or None,
        device=args.device,
        nproc=args.nproc,
        chunk_bytes=args.chunk_mib * 2**20,
        nodes=_nodes(args),
    )
    if args.node_rank > 0:  # every node has the report; the first one prints it
        return EXIT_OK if result.equal else EXIT_DIFFERENT
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(result.format_text(limit=args.limit))
    ok = result.faithful if result.is_export else result.equal
    return EXIT_OK if ok else EXIT_DIFFERENT


def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import plan_conversion, run_conversion

    if args.engine == "colossalai":
        return _convert_with_colossalai(args)
    if args.plugin or args.tp > 1 or args.pp > 1 or args.engine_device != "auto":
        raise CkptExplorerError(
            None, "--engine colossalai with --plugin / --tp / --pp / --device", "--engine stream",
            "Add --engine colossalai, or drop them.",
        )  # fmt: skip
    plan = plan_conversion(
        args.source,
        args.destination,
        args.to,
        max_shard_size=args.max_shard_size,
        dtype=args.dtype,
        overwrite=args.overwrite,
        model_only=args.model_only,
    )
    if args.dry_run:
        if args.json:
            json.dump({"plan": plan.to_json()}, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(plan.describe(limit=args.limit))
        return EXIT_OK
    return _run_and_report(
        args,
        plan,
        lambda bar: run_conversion(plan, progress=bar, nproc=args.nproc, nodes=_nodes(args)),
        "wrote",
    )


def _run_and_report(
    args: argparse.Namespace, plan: Any, run: Callable[[Any], Any], how: str
) -> int:
    """Run a planned conversion (a progress bar on a terminal), then print its result: JSON,
    or a line with ``how`` it was written, its mismatches, notes and left-out tensors."""
    from .convert.progress import ProgressBar

    bar = ProgressBar(sys.stderr) if sys.stderr.isatty() and not args.json else None
    try:
        result = run(bar)
    finally:
        if bar is not None:
            bar.close()
    if getattr(args, "node_rank", 0) > 0:  # every node has the result; the first prints it
        return EXIT_OK if result.verified else EXIT_DIFFERENT
    if args.json:
        json.dump({"plan": plan.to_json(), "result": result.to_json()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from .readable import human_bytes

        state = "verified" if result.verified else "NOT verified (nothing installed)"
        print(
            f"{result.destination}: {len(result.files)} file(s), {human_bytes(result.bytes)} "
            f"of tensors, {state}; {how} in {result.seconds:.2f} s, verified in "
            f"{result.verify_seconds:.2f} s"
        )
        for m in result.mismatches[: args.limit]:
            print(f"  mismatch: {m}")
        for n in result.notes:
            print(f"  note: {n}")
        for d in result.left_out:
            print(f"  left out: {d}")
    return EXIT_OK if result.verified else EXIT_DIFFERENT


def _convert_with_colossalai(args: argparse.Namespace) -> int:
    """``convert --engine colossalai``: load and save through a real Booster, then verify."""
    from .convert import parse_size
    from .convert.colossal_engine import run_engine_job
    from .convert.colossal_plan import plan_engine_job

    if args.dtype or args.model_only:
        raise CkptExplorerError(
            None, "no --dtype / --model-only with --engine colossalai", "one of them",
            "The engine writes the model's tensors as they are; drop the option.",
        )  # fmt: skip
    size = parse_size(args.max_shard_size)
    plan = plan_engine_job(
        args.source, args.destination, args.plugin or "torch_ddp", args.tp, args.pp,
        nproc=args.nproc if args.nproc > 1 else None, target=args.to, shard=size is not None,
        size_per_shard_mb=max(1, (size or 2**30) // 2**20), overwrite=args.overwrite,
        device=args.engine_device,
    )  # fmt: skip
    if args.dry_run:
        print(json.dumps({"plan": plan.to_json()}, indent=2) if args.json else plan.describe())
        return EXIT_OK
    how = f"{plan.plugin} tp {plan.tp} x pp {plan.pp} on {plan.nproc} process(es)"
    return _run_and_report(args, plan, lambda bar: run_engine_job(plan, progress=bar), how)


def _cmd_serve(args: argparse.Namespace) -> int:
    from .remote.cli_args import storage_options
    from .ui.serve import serve

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


def _cmd_validate(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from .io.gc_pause import freeze_at_exit, gc_paused
    from .validate import validate_checkpoint

    # headers only: the rules' objects hold no cycles (io/gc_pause.py); a numeric scan or
    # from_pretrained runs long enough, and through torch, to keep the collector on
    listing_only = args.no_numeric and not args.hf_load
    if listing_only:
        freeze_at_exit()
    with gc_paused() if listing_only else nullcontext():
        report = validate_checkpoint(
            args.path, model=args.model, numeric=not args.no_numeric, hf_load=args.hf_load
        )
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(report.format_text())
    return EXIT_OK if report.ok else EXIT_DIFFERENT


def _cmd_scan(args: argparse.Namespace) -> int:
    from .security import scan_paths

    report = scan_paths(
        args.paths, allow_unverified=args.allow_unverified, allow_code=args.allow_code
    )
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        for v in report.verdicts:
            shown = f"  ({v.format})" if v.format else ""
            print(f"{v.verdict.upper():10}  {v.path}{shown}")
            for f in v.findings:
                if v.verdict in ("unsafe", "code", "unverified") and f.severity == "error":
                    print(f"            {f.rule}: {f.message}")
                elif f.rule == "security.weights_only_refused":  # worth knowing, not a verdict
                    print(f"            note: {f.message.split(': ', 1)[-1]}")
        for link in report.links:
            if link.status != "inside":
                print(f"LINK {link.status:6}  {link.path} -> {link.target}")
        for path, why in report.unreadable:
            print(f"UNREADABLE  {path}  ({why})")
        counts = ", ".join(
            f"{report.count(k)} {k}" for k in ("unsafe", "code", "unverified", "safe", "data")
        )
        allowed = [
            f"{what} files allowed by --allow-{what}"
            for what, on in (("code", args.allow_code), ("unverified", args.allow_unverified))
            if on
        ]
        note = f" ({'; '.join(allowed)})" if allowed else ""
        print(f"{report.files_seen} file(s): {counts} ({report.seconds:.2f} s){note}")
    return report.exit_code


def _cmd_timeline(args: argparse.Namespace) -> int:
    from .timeline.command import run

    return run(args)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .resume import resume_doctor

    report = resume_doctor(args.a, args.b, compare_weights=not args.no_weights)
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(report.format_text())
    return EXIT_OK


def _cmd_repair(args: argparse.Namespace) -> int:
    from .repair import plan_repair, run_repair

    plan = plan_repair(args.path)
    if plan.refused:
        raise CkptExplorerError(plan.folder, "a folder whose lost file can be rebuilt exactly",
                                f"{plan.what}: {plan.refused}")  # fmt: skip
    if args.dry_run:
        print(json.dumps({"plan": plan.to_json()}, indent=2) if args.json else plan.describe())
        return EXIT_OK
    result = run_repair(plan)
    if args.json:
        out = {"plan": plan.to_json(), "written": str(result.path), "verified": result.verified,
               "checks": list(result.checks)}  # fmt: skip
        print(json.dumps(out, indent=2))
    else:
        print(plan.describe())
        print(f"wrote {result.path}; " + ("verified" if result.verified else "NOT verified"))
        for c in result.checks:
            print(f"  {c}")
    return EXIT_OK if result.verified else EXIT_DIFFERENT


def _nodes(args: argparse.Namespace) -> Any:
    """The ``--nnodes`` part of a torchrun job (None on one node)."""
    from .io.torchrun import nodes_from_args

    try:
        return nodes_from_args(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id)
    except ValueError as e:
        raise CkptExplorerError(None, "a consistent multi-node launch", str(e)) from e


def _add_node_options(p: argparse.ArgumentParser) -> None:
    """``--nnodes`` and its rendezvous: the ``--nproc`` job over several nodes."""
    g = p.add_argument_group("several nodes (a shared filesystem; run on every node)")
    g.add_argument("--nnodes", type=int, default=1, help="nodes of the torchrun job")
    g.add_argument("--node-rank", type=int, default=0, help="this node (0 prints the result)")
    g.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="the first node's address")
    g.add_argument("--rdzv-id", help="job id shared by the nodes (default ckpt-explorer)")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}")
    return int(text)


def _cmd_fit(args: argparse.Namespace) -> int:
    from .fit import Layout, fit_checkpoint, parse_size

    try:
        mem = parse_size(args.gpu_mem) if args.gpu_mem else None
    except ValueError as e:
        raise CkptExplorerError(None, "--gpu-mem like 80GB or 80GiB", args.gpu_mem, str(e)) from e
    layout = Layout(args.tp, args.pp, args.ep, args.zero, args.plugin, args.gpus, mem, args.dtype)
    report = fit_checkpoint(args.path, layout)
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(report.format_text())
    return EXIT_OK if report.fits else EXIT_DIFFERENT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckpt-explorer",
        description="Open, inspect, compare, validate and convert training checkpoints.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="list a checkpoint's format, files and tensors")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.add_argument("--model", help="model checkpoint that names an optimizer's param ids")
    p.add_argument("--limit", type=int, default=40, help="tensor rows to print (default 40)")
    p.add_argument("--all", action="store_true", help="print every tensor")
    p.set_defaults(func=_cmd_inspect)
    p = sub.add_parser("detect", help="say which format a path is, and why")
    p.add_argument("path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_detect)
    p = sub.add_parser("formats", help="list the known formats")
    p.set_defaults(func=_cmd_formats)
    p = sub.add_parser("demo", help="write a small demo training state and inspect it")
    p.add_argument(
        "--out", default="ckpt-explorer-demo", help="folder to write (default ./ckpt-explorer-demo)"
    )
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser(
        "diff",
        help="compare two checkpoints tensor by tensor (exit 0 equal, 1 different, 2 unreadable)",
    )
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    p.add_argument("--nproc", type=int, default=1, help="processes (torchrun job when > 1)")
    _add_node_options(p)
    p.add_argument(
        "--rename",
        nargs="+",
        action="extend",
        default=[],
        metavar="OLD=NEW",
        help="replace OLD with NEW in A's names when pairing",
    )
    p.add_argument("--chunk-mib", type=int, default=32, help="chunk size in MiB (default 32)")
    p.add_argument("--limit", type=int, default=40, help="differing tensors to print")
    p.set_defaults(func=_cmd_diff)
    p = sub.add_parser(
        "validate",
        help="check a model, optimizer or training state (exit 1 on errors, 2 unreadable)",
    )
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print findings and summary as JSON")
    p.add_argument("--model", help="model checkpoint for an optimizer saved on its own")
    p.add_argument("--no-numeric", action="store_true", help="headers only: skip the value scan")
    p.add_argument("--hf-load", action="store_true", help="also load with from_pretrained")
    p.set_defaults(func=_cmd_validate)
    p = sub.add_parser(
        "scan",
        help="security verdict of every file under the paths: unsafe, code, unverified, safe or "
        "data, headers only (exit 1 unsafe, code or unverified; 2 unreadable)",
    )
    p.add_argument("paths", nargs="+", help="files or folders (folders are walked recursively)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument(
        "--allow-unverified",
        action="store_true",
        help="exit 0 when files could not be verified (only unsafe files fail); says so",
    )
    p.add_argument(
        "--allow-code",
        action="store_true",
        help="exit 0 when files are code a consumer imports or runs on request (Python modules, "
        "trust_remote_code files, TorchScript); says so",
    )
    p.set_defaults(func=_cmd_scan)
    p = sub.add_parser(
        "timeline",
        help="a run folder's checkpoints over time and its anomalies "
        "(exit 1 error found, 2 unreadable)",
        conflict_handler="resolve",  # remote's --cache (same dest) may be added after ours
    )
    from .timeline.command import add_arguments

    add_arguments(p)
    p.set_defaults(func=_cmd_timeline)
    p = sub.add_parser("doctor", help="rank likely causes of a loss jump between two states")
    p.add_argument("a", help="the state that was resumed from")
    p.add_argument("b", help="a state after resuming, or from a reference run")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-weights", action="store_true", help="skip the tensor-by-tensor diff")
    p.set_defaults(func=_cmd_doctor)
    p = sub.add_parser(
        "convert",
        help="convert a checkpoint: planned, atomic, verified (exit 0 verified, 1 not, 2 bad input)",
    )
    p.add_argument("source")
    p.add_argument("destination")
    from .convert.targets import target_names

    p.add_argument("--to", required=True, choices=target_names())
    p.add_argument("--max-shard-size", help="e.g. 5GB, 500MB: shard into a folder with an index")
    p.add_argument("--dtype", help="cast floating-point tensors (bf16, fp16, fp32); off by default")
    p.add_argument("--nproc", type=int, default=1, help="processes (torchrun job when > 1)")
    _add_node_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    p.add_argument("--overwrite", action="store_true", help="replace an existing destination")
    p.add_argument(
        "--model-only",
        action="store_true",
        help="of a training state, write the model alone (what is left out is listed)",
    )
    p.add_argument("--json", action="store_true", help="print the plan and result as JSON")
    p.add_argument("--limit", type=int, default=20, help="plan files / mismatches to print")
    p.add_argument(
        "--engine",
        choices=["stream", "colossalai"],
        default="stream",
        help="colossalai: load through a real ColossalAI Booster and save, then verify",
    )
    p.add_argument(
        "--plugin",
        choices=["torch_ddp", "hybrid", "gemini", "lowlevelzero"],
        help="Booster plugin for --engine colossalai (default torch_ddp; gemini and "
        "lowlevelzero need CUDA)",
    )
    p.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size (hybrid)")
    p.add_argument("--pp", type=_positive, default=1, help="pipeline-parallel size (hybrid)")
    p.add_argument(
        "--device",
        dest="engine_device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="--engine colossalai: cuda/nccl or cpu/gloo (auto: cuda where there is a GPU)",
    )
    p.set_defaults(func=_cmd_convert)
    p = sub.add_parser(
        "fit",
        help="will it load at this tp/pp/ep/ZeRO layout, and fit per GPU "
        "(exit 0 fits, 1 does not or unknown, 2 unreadable)",
    )
    p.add_argument("path")
    p.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=_positive, default=1, help="pipeline-parallel size")
    p.add_argument("--ep", type=_positive, default=1, help="expert-parallel size (MoE)")
    p.add_argument(
        "--zero",
        type=int,
        choices=[0, 1, 2, 3],
        help="ZeRO stage (default: the plugin's: hybrid/ddp 0, lowlevelzero 1, gemini/fsdp 3)",
    )
    p.add_argument(
        "--plugin", default="hybrid", choices=["hybrid", "gemini", "lowlevelzero", "ddp", "fsdp"]
    )
    p.add_argument("--gpus", type=_positive, help="total GPUs (default tp x pp x ep)")
    p.add_argument("--gpu-mem", help="memory per GPU, e.g. 80GB or 80GiB")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--json", action="store_true", help="print fits, checks, memory, grid as JSON")
    p.set_defaults(func=_cmd_fit)
    p = sub.add_parser(
        "repair",
        help="rebuild a lost index / latest from the shards: planned, atomic, verified "
        "(exit 0 verified, 1 not, 2 refused)",
    )
    p.add_argument("path")
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_repair)
    p = sub.add_parser("serve", help="open the dashboard in the browser (127.0.0.1 by default)")
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
    p.set_defaults(func=_cmd_serve)
    from .remote.cli_args import add_remote_options

    add_remote_options(sub)  # --cache, --storage-option for URL arguments
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from .remote.cli_args import remote_arguments

        with remote_arguments(args):  # URL arguments opened as remote locations
            code = int(args.func(args))
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except CkptExplorerError as e:
        print(f"ckpt-explorer: error: {e.one_line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        return _internal_error(args, "ran out of memory")
    except RecursionError:
        return _internal_error(args, "hit Python's recursion limit")
    except OSError as e:
        where = getattr(e, "filename", None) or getattr(args, "path", "")
        print(
            f"ckpt-explorer: error: {where}: could not read ({e.__class__.__name__}: "
            f"{getattr(e, 'strerror', None) or e})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def _internal_error(args: argparse.Namespace, what: str) -> int:
    """The tool's own failure, said as the tool's: never as a damaged input."""
    where = getattr(args, "path", None) or " ".join(map(str, getattr(args, "paths", []) or []))
    print(
        f"ckpt-explorer: internal error: the tool {what} while working on {where or 'its input'}."
        " This is a failure of ckpt-explorer, not a sign that the file is damaged: free memory"
        " or retry on a larger machine, and report it (the command and the file's size) if it"
        " happens again.",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as Python's docs recommend.

    stdout is pointed at devnull so the interpreter's final flush cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
