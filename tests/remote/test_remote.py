"""Remote checkpoints over a real HTTP server with Range support on 127.0.0.1 (never the
internet): listing moves only structure, a tensor load moves exactly its bytes, a changed
object is refused, faults give one clear line, the cache makes a second open free."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.cli import main
from ckpt_explorer.errors import CkptExplorerError, MissingDependencyError
from ckpt_explorer.remote.backend import RemoteError
from ckpt_explorer.remote.spans import join, merge, split
from ckpt_explorer.remote.store import FsspecStore, open_url

sys.path.insert(0, str(Path(__file__).parent.parent))
from remote_servers import RangeServer

pytest.importorskip("aiohttp")


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture checkpoints are tiny: read them the way large ones are read (no whole
    first or last 64 KiB, no merged neighbours, small buffers)."""
    from ckpt_explorer.io import store_file
    from ckpt_explorer.remote import store

    monkeypatch.setattr(store, "HEAD", 16)
    monkeypatch.setattr(store, "TAIL", 16)
    monkeypatch.setattr(store, "MERGE_GAP", 0)
    monkeypatch.setattr(store_file, "BUFFER", 512)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[RangeServer, Path]]:
    root = tmp_path / "served"
    root.mkdir()
    server = RangeServer(root)
    yield server, root
    server.close()


def _inspect_json(
    target: str, capsys: pytest.CaptureFixture[str], local: Path | None = None
) -> dict[str, Any]:
    """``inspect --json`` of ``target``; a URL's output reads as ``local``'s would, but for the
    loader table (the loaders read local files): null for a URL, present for a path."""
    assert main(["inspect", target, "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out.replace(target, str(local)) if local else out)
    doc.pop("path")
    loaders = doc.pop("loaders")
    assert (loaders is None) == (local is not None), loaders
    return doc


def _big_safetensors(path: Path, mib: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n = mib * 2**20 // 4 // 64
    sd = {f"layers.{i}.weight": torch.randn(n, 1, generator=g) for i in range(64)}
    save_file(sd, str(path))
    return sd


def test_spans_split_join_and_merge() -> None:
    held = [(10, b"abcdefghij"), (30, b"0123456789")]
    have, gaps = split(0, 50, held)
    assert gaps == [(0, 10), (20, 30), (40, 50)]
    assert [(a, len(d)) for a, d in have] == [(10, 10), (30, 10)]
    assert join(12, 35, [*have, (20, b"x" * 10)]) == b"cdefghij" + b"x" * 10 + b"01234"
    assert merge([(0, 10), (15, 20), (100, 110)], 5) == [(0, 20), (100, 110)]


def test_listing_a_large_safetensors_moves_only_its_header(
    served: tuple[RangeServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, root = served
    _big_safetensors(root / "model.safetensors", 32)
    server.reset()
    remote = _inspect_json(f"{server.url}/model.safetensors", capsys, root / "model.safetensors")
    assert server.bytes_sent <= 64 * 2**10, server.bytes_sent  # a 32 MiB file
    assert server.requests <= 2  # HEAD, then the first 64 KiB (which hold the header)
    assert remote == _inspect_json(str(root / "model.safetensors"), capsys)


@pytest.mark.parametrize("case", ["gpt2_sharded", "gpt2_bin_sharded", "llama_lora"])
def test_inspect_over_http_equals_local(
    case: str,
    served: tuple[RangeServer, Path],
    real_checkpoints: Any,
    capsys: pytest.CaptureFixture[str],
    tiny_blocks: None,
) -> None:
    out, _ = real_checkpoints("hf")
    server, root = served
    shutil.copytree(out / case, root / case)
    size = sum(p.stat().st_size for p in (root / case).rglob("*") if p.is_file())
    server.reset()
    remote = _inspect_json(f"{server.url}/{case}", capsys, root / case)
    assert remote == _inspect_json(str(root / case), capsys)
    if case == "gpt2_sharded":
        assert server.bytes_sent < size / 4  # headers and index only


def test_torch_zip_listing_skips_tensor_bytes(
    served: tuple[RangeServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, root = served
    g = torch.Generator().manual_seed(1)
    sd = {f"block.{i}.w": torch.randn(256, 1024, generator=g) for i in range(8)}  # 8 MiB
    torch.save(sd, root / "pytorch_model.bin")
    server.reset()
    remote = _inspect_json(f"{server.url}/pytorch_model.bin", capsys, root / "pytorch_model.bin")
    assert remote == _inspect_json(str(root / "pytorch_model.bin"), capsys)
    assert server.bytes_sent < 256 * 2**10, server.bytes_sent
    assert server.requests <= 1 + 2 + 8  # HEAD, the first and last 64 KiB, 8 local headers
    view = open_checkpoint(f"{server.url}/pytorch_model.bin")
    server.reset()
    assert torch.equal(view.load("block.3.w"), sd["block.3.w"])
    assert server.bytes_sent == sd["block.3.w"].nbytes and server.requests == 1


_NO_TORCH = """
import contextlib, io, sys
from ckpt_explorer.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["inspect", sys.argv[1], "--json"])
sys.exit(code if "torch" not in sys.modules else 99)
"""


def test_listing_a_url_imports_no_torch(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    _big_safetensors(root / "model.safetensors", 1)
    torch.save({"w": torch.ones(3)}, root / "model.pt")
    for name in ("model.safetensors", "model.pt"):
        done = subprocess.run(
            [sys.executable, "-c", _NO_TORCH, f"{server.url}/{name}"], capture_output=True
        )
        assert done.returncode == 0, (name, done.returncode, done.stderr[-500:])


def test_a_tensor_load_moves_exactly_its_bytes(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    sd = _big_safetensors(root / "model.safetensors", 4)
    view = open_checkpoint(f"{server.url}/model.safetensors")
    assert str(view.path) == f"{server.url}/model.safetensors"
    assert view.path.local_path() is None and isinstance(view.path.store, FsspecStore)
    record = view.record("layers.5.weight")
    server.reset()
    assert torch.equal(view.load("layers.5.weight"), sd["layers.5.weight"])
    assert server.bytes_sent == record.nbytes  # exactly that tensor's bytes
    assert server.ranges("model.safetensors") == [(record.offset, record.offset + record.nbytes)]


def test_a_changed_object_is_refused_not_mixed(
    served: tuple[RangeServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ckpt_explorer.remote.backend.time.sleep", lambda s: None)
    server, root = served
    sd = _big_safetensors(root / "model.safetensors", 2)
    view = open_checkpoint(f"{server.url}/model.safetensors")
    assert torch.equal(view.load("layers.1.weight"), sd["layers.1.weight"])
    sd["layers.2.weight"] += 1  # same names, shapes and size: only the bytes differ
    save_file(sd, str(root / "model.safetensors"))
    with pytest.raises(RemoteError, match="changed since it was listed") as e:
        view.load("layers.2.weight")
    assert f"{server.url}/model.safetensors" in str(e.value) and "\n" not in str(e.value)
    again = open_checkpoint(f"{server.url}/model.safetensors")  # a new open reads the new bytes
    assert torch.equal(again.load("layers.2.weight"), sd["layers.2.weight"])


def test_cache_makes_a_second_open_free_until_the_object_changes(
    served: tuple[RangeServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, root = served
    sd = _big_safetensors(root / "model.safetensors", 4)
    url, cache = f"{server.url}/model.safetensors", str(tmp_path / "cache")
    assert main(["diff", url, str(root / "model.safetensors"), "--cache", cache]) == 0
    first = server.bytes_sent
    assert first >= 4 * 2**20
    server.reset()
    assert main(["diff", url, str(root / "model.safetensors"), "--cache", cache]) == 0
    assert server.bytes_sent == 0 and server.requests == 1  # one HEAD: ETag and size match
    sd["layers.0.weight"] += 1
    save_file(sd, str(root / "model.safetensors"))
    server.reset()
    assert main(["diff", url, str(root / "model.safetensors"), "--cache", cache]) == 0
    assert server.bytes_sent >= 4 * 2**20  # changed ETag: fetched again
    kept = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len([n for n in kept if n.endswith(".dat")]) == 1, kept  # the old version is gone
    capsys.readouterr()


_DIFF = """
import sys
from ckpt_explorer.cli import main
sys.exit(main(["diff", sys.argv[1], sys.argv[2], "--cache", sys.argv[3], "--json"]))
"""


def test_two_processes_share_one_cache_folder(
    served: tuple[RangeServer, Path], tmp_path: Path
) -> None:
    """Two diffs fill one --cache folder at the same time (its files are locked); both see
    the right bytes, and a third run moves none."""
    server, root = served
    sd = _big_safetensors(root / "model.safetensors", 8)
    sd["layers.9.weight"][0] += 1
    save_file(sd, str(root / "other.safetensors"))
    url, cache = f"{server.url}/model.safetensors", str(tmp_path / "shared")
    cmd = [sys.executable, "-c", _DIFF, url, str(root / "other.safetensors"), cache]
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for run in runs:
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 1, out  # one tensor differs
        summary = json.loads(out)["summary"]
        assert summary["changed"] == 1 and summary["identical"] == 63, summary
    server.reset()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and json.loads(done.stdout)["summary"]["changed"] == 1
    assert server.bytes_sent == 0 and server.requests == 1


def test_dropped_connections_are_retried(
    served: tuple[RangeServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ckpt_explorer.remote.backend.time.sleep", lambda s: None)
    server, root = served
    sd = _big_safetensors(root / "model.safetensors", 2)
    server.faults["model.safetensors"] = "drop:2"
    view = open_checkpoint(f"{server.url}/model.safetensors")
    assert torch.equal(view.load("layers.7.weight"), sd["layers.7.weight"])
    assert server.faults["model.safetensors"] == "drop:0"


@pytest.mark.parametrize(
    ("fault", "found"),
    [
        ("404", "nothing at that URL (404)"),
        ("403", "access refused (401/403)"),
        ("drop:99", "a failing connection after 5 tries"),
        ("truncate", "bytes at offset"),
    ],
)
def test_faults_give_one_line_and_write_nothing(
    fault: str,
    found: str,
    served: tuple[RangeServer, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("ckpt_explorer.remote.backend.time.sleep", lambda s: None)
    server, root = served
    _big_safetensors(root / "model.safetensors", 2)
    if fault == "truncate":  # the server lists 1000 bytes more than it has: cut them off
        size = (root / "model.safetensors").stat().st_size
        with open(root / "model.safetensors", "r+b") as f:
            f.truncate(size - 1000)
    server.faults["model.safetensors"] = fault
    dest = tmp_path / "out"
    url = f"{server.url}/model.safetensors"
    assert main(["convert", url, str(dest), "--to", "safetensors"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and found in err and url in err, err
    assert not dest.exists()


def test_secrets_never_appear_in_errors(served: tuple[RangeServer, Path]) -> None:
    server, _ = served
    secret = "s3cr3t-P4ssw0rd"
    url = server.url.replace("://", f"://user:{secret}@") + "/missing.safetensors"
    with pytest.raises(RemoteError) as e:
        open_url(url, {"client_kwargs_token": secret})
    assert secret not in str(e.value) and "user" not in str(e.value)
    assert "missing.safetensors" in str(e.value)


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(MissingDependencyError, match=r"ckpt-explorer\[remote\]"):
        open_checkpoint("s3://bucket/model.safetensors")


def test_unknown_scheme_stays_a_local_path() -> None:
    with pytest.raises(CkptExplorerError, match="nothing at that path"):
        open_checkpoint("ftp://host/model.safetensors")


def test_dcp_listing_moves_metadata_and_bytes_items_only(
    served: tuple[RangeServer, Path], real_checkpoints: Any, tiny_blocks: None
) -> None:
    from ckpt_explorer.readers.dcp.folder import read_metadata

    out, _ = real_checkpoints("dcp")
    server, root = served
    shutil.copytree(out / "dcp_training_state", root / "dcp")
    meta = read_metadata(root / "dcp")
    items = [(i, meta.state_dict_metadata[i.fqn]) for i in meta.storage_data]
    byte_items = [meta.storage_data[i] for i, kind in items if not hasattr(kind, "chunks")]
    assert byte_items and len(byte_items) < len(items)
    server.reset()
    view = open_checkpoint(f"{server.url}/dcp")
    assert server.ranges("dcp/.metadata") == [(0, (root / "dcp" / ".metadata").stat().st_size)]
    for p in (root / "dcp").glob("*.distcp"):  # touching items come in one request
        items = [(b.offset, b.offset + b.length) for b in byte_items if b.relative_path == p.name]
        assert merge(server.ranges(f"dcp/{p.name}"), 0) == merge(items, 0), p.name
    assert len(view.values) >= len(byte_items)


@pytest.mark.parametrize(
    "argv",
    [
        ["detect"],
        ["validate", "--no-numeric"],
        ["validate"],
        ["scan"],
        ["fit", "--tp", "2"],
        ["doctor", "<other>"],
    ],
)
def test_cli_commands_over_http_match_local(
    argv: list[str],
    served: tuple[RangeServer, Path],
    real_checkpoints: Any,
    capsys: pytest.CaptureFixture[str],
    tiny_blocks: None,
) -> None:
    out, _ = real_checkpoints("hf")
    server, root = served
    shutil.copytree(out / "gpt2_bin_sharded", root / "ckpt")
    shutil.copytree(out / "gpt2_bin_sharded", root / "other")
    url = f"{server.url}/ckpt"
    rest = [str(root / "other") if a == "<other>" else a for a in argv[1:]]

    def run(target: str) -> tuple[int, str]:
        code = main([argv[0], target, *rest])
        got = capsys.readouterr()
        text = (got.out + got.err).replace(target, "<ckpt>")
        return code, re.sub(r"\(\d+\.\d+ s\)|\d+\.\d+ s", "<t>", text)

    remote, local = run(url), run(str(root / "ckpt"))
    if argv[0] == "validate":  # the loader table's findings need the local folder
        local = (local[0], "\n".join(ln for ln in local[1].splitlines() if "loadable." not in ln))
        remote = (remote[0], "\n".join(remote[1].splitlines()))
    assert remote == local


def test_dcp_tensors_load_over_http_in_exact_ranges(
    served: tuple[RangeServer, Path],
    real_checkpoints: Any,
    tiny_blocks: None,
) -> None:
    out, _ = real_checkpoints("dcp")
    server, root = served
    shutil.copytree(out / "dcp_training_state", root / "dcp")
    local = open_checkpoint(root / "dcp")
    remote = open_checkpoint(f"{server.url}/dcp")
    assert remote.names() == local.names() and remote.values.keys() == local.values.keys()
    data_files = {p.name: p.stat().st_size for p in (root / "dcp").glob("*.distcp")}
    for name in local.names():
        server.reset()
        assert torch.equal(remote.load(name), local.load(name)), name
        moved = sum(e - s for rel in data_files for s, e in server.ranges(f"dcp/{rel}"))
        assert 0 < moved < sum(data_files.values()), name  # its items, never whole files


def test_a_folder_listing_is_fresh_at_each_open(
    served: tuple[RangeServer, Path], real_checkpoints: Any, tmp_path: Path
) -> None:
    out, _ = real_checkpoints("hf")
    server, root = served
    shutil.copytree(out / "gpt2_sharded", root / "ckpt")
    cache = str(tmp_path / "cache")
    first = open_url(f"{server.url}/ckpt", cache=cache)
    assert (first / "generation_config.json").is_file()
    (root / "ckpt" / "generation_config.json").unlink()
    second = open_url(f"{server.url}/ckpt", cache=cache)
    assert str(second) == str(first)
    assert not (second / "generation_config.json").exists()
    view = open_checkpoint(second)
    assert "generation_config.json" not in [f.path for f in view.files]


def test_a_remote_destination_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_file({"w": torch.ones(2)}, str(tmp_path / "m.safetensors"))
    argv = ["convert", str(tmp_path / "m.safetensors"), "s3://bucket/out", "--to", "safetensors"]
    assert main(argv) == 2
    assert "a local destination" in capsys.readouterr().err
    assert not Path("s3:").exists()


def test_storage_options_nest_and_decode() -> None:
    from ckpt_explorer.cli import build_parser
    from ckpt_explorer.remote.cli_args import storage_options

    opts = ["--storage-option", "anon=true", "--storage-option", "client_kwargs.region_name=eu-1"]
    args = build_parser().parse_args(["inspect", "s3://b/x", *opts])
    assert storage_options(args) == {"anon": True, "client_kwargs": {"region_name": "eu-1"}}


def test_streamed_diff_reads_each_byte_once(
    served: tuple[RangeServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The diff reads ahead of itself through the store: every tensor byte crosses the network
    once (read-ahead and the read that takes it over never both fetch it)."""
    server, root = served
    sd = _big_safetensors(root / "a.safetensors", 8)
    sd["layers.40.weight"][3] += 1
    save_file(sd, str(root / "b.safetensors"))
    url = f"{server.url}/a.safetensors"
    server.reset()
    assert main(["diff", url, str(root / "b.safetensors"), "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["changed"] == 1 and summary["identical"] == 63, summary
    size = (root / "a.safetensors").stat().st_size
    assert size - 2**16 < server.bytes_sent <= size + 2**16, (server.bytes_sent, size)
    assert main(["diff", url, str(root / "a.safetensors")]) == 0


def test_diff_nproc_2_reads_a_url_in_every_rank(
    served: tuple[RangeServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A torchrun job's ranks reopen the URL (handed over in a private file, not on the
    command line) and share the --cache folder."""
    server, root = served
    sd = _big_safetensors(root / "a.safetensors", 2)
    sd["layers.3.weight"][0] += 1
    save_file(sd, str(root / "b.safetensors"))
    url, cache = f"{server.url}/a.safetensors", str(tmp_path / "cache")
    argv = ["diff", url, str(root / "b.safetensors"), "--nproc", "2", "--json", "--cache", cache]
    assert main(argv) == 1
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["changed"] == 1 and summary["identical"] == 63, summary


def test_an_index_url_brings_its_shards(
    served: tuple[RangeServer, Path],
    real_checkpoints: Any,
    capsys: pytest.CaptureFixture[str],
    tiny_blocks: None,
) -> None:
    out, _ = real_checkpoints("hf")
    server, root = served
    shutil.copytree(out / "gpt2_sharded", root / "run" / "ckpt")
    (root / "run" / "other.safetensors").write_bytes(b"not listed")
    index = "ckpt/model.safetensors.index.json"
    remote = _inspect_json(f"{server.url}/run/{index}", capsys, root / "run" / index)
    assert remote == _inspect_json(str(root / "run" / index), capsys)
    location = open_url(f"{server.url}/run/{index}")
    store = location.store
    assert isinstance(store, FsspecStore)
    assert "generation_config.json" not in store.files and len(store.files) == 5  # + 4 shards
