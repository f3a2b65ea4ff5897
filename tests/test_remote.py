"""Remote checkpoints over a real HTTP server with Range support on 127.0.0.1 (never the
internet): listing moves only structure, tensor reads fetch their ranges, holes are never read,
faults give one clear line, the cache makes a second open free."""

from __future__ import annotations

import json
import re
import shutil
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
from ckpt_explorer.io.mapped import MappedFile
from ckpt_explorer.remote import structure
from ckpt_explorer.remote.backend import Backend, RemoteError
from ckpt_explorer.remote.guard import HoleReadError
from ckpt_explorer.remote.ranges import RangeMap
from ckpt_explorer.remote.session import mirror_for

sys.path.insert(0, str(Path(__file__).parent))
from remote_servers import RangeServer

pytest.importorskip("aiohttp")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[RangeServer, Path]]:
    root = tmp_path / "served"
    root.mkdir()
    server = RangeServer(root)
    yield server, root
    server.close()


@pytest.fixture
def tiny_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture checkpoints are tiny: read them the way large ones are (no whole files)."""
    monkeypatch.setattr(structure, "HEAD", 16)
    monkeypatch.setattr(structure, "WHOLE", 0)


def _inspect_json(
    target: str, capsys: pytest.CaptureFixture[str], local: Path | None = None
) -> dict[str, Any]:
    """``inspect --json`` of ``target``; a URL's output reads as ``local``'s would, but for the
    loader table, which needs the whole local folder: null for a URL, present for a path."""
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


def test_range_map_merges_and_reports_gaps() -> None:
    r = RangeMap()
    r.add(10, 20)
    r.add(30, 40)
    assert r.missing(0, 50) == [(0, 10), (20, 30), (40, 50)]
    r.add(20, 30)
    assert r.spans == [(10, 40)] and r.covers(12, 40) and not r.covers(9, 11)


def test_listing_a_large_safetensors_moves_only_its_header(
    served: tuple[RangeServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, root = served
    _big_safetensors(root / "model.safetensors", 32)
    server.reset()
    remote = _inspect_json(f"{server.url}/model.safetensors", capsys, root / "model.safetensors")
    assert server.bytes_sent < 128 * 2**10, server.bytes_sent  # a 32 MiB file
    assert server.requests <= 3
    assert remote == _inspect_json(str(root / "model.safetensors"), capsys)


@pytest.mark.parametrize("case", ["gpt2_sharded", "gpt2_bin_sharded", "llama_lora"])
def test_inspect_over_http_equals_local(
    case: str,
    served: tuple[RangeServer, Path],
    real_checkpoints: Any,
    tiny_structure: None,
    capsys: pytest.CaptureFixture[str],
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
    view = open_checkpoint(f"{server.url}/pytorch_model.bin")
    assert torch.equal(view.load("block.3.w"), sd["block.3.w"])


def test_holes_are_never_read_as_zeros(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    sd = _big_safetensors(root / "model.safetensors", 4)
    m = mirror_for(f"{server.url}/model.safetensors")
    view = open_checkpoint(m.local)
    path, offset, nbytes = view.disk_range(view.record("layers.5.weight")) or (None, 0, 0)
    assert path is not None
    m.on_demand = False
    with pytest.raises(HoleReadError, match="never downloaded"):
        MappedFile(path).bytes_tensor(offset, nbytes)  # the safety net under every reader
    with pytest.raises(HoleReadError):
        MappedFile(path).byte_view(offset + nbytes, 8)
    m.on_demand = True  # the default: the guard fetches the range before it is mapped
    raw = MappedFile(path).bytes_tensor(offset, nbytes)
    assert torch.equal(raw.view(torch.float32).flatten(), sd["layers.5.weight"].flatten())
    remote = open_checkpoint(f"{server.url}/model.safetensors")
    server.reset()
    assert torch.equal(remote.load("layers.5.weight"), sd["layers.5.weight"])
    assert server.bytes_sent == nbytes  # exactly that tensor's bytes


def test_cache_makes_a_second_open_free_until_the_object_changes(
    served: tuple[RangeServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, root = served
    sd = _big_safetensors(root / "model.safetensors", 4)
    url, cache = f"{server.url}/model.safetensors", str(tmp_path / "cache")
    assert main(["diff", url, str(root / "model.safetensors"), "--cache", cache]) == 0
    server.reset()
    assert main(["diff", url, str(root / "model.safetensors"), "--cache", cache]) == 0
    assert server.bytes_sent == 0 and server.requests == 1  # one HEAD: ETag and size match
    sd["layers.0.weight"] += 1
    save_file(sd, str(root / "model.safetensors"))
    server.reset()
    assert main(["diff", url, str(root / "model.safetensors"), "--cache", cache]) == 0
    assert server.bytes_sent >= 4 * 2**20  # changed ETag: fetched again
    capsys.readouterr()


def test_dropped_connections_are_retried(served: tuple[RangeServer, Path]) -> None:
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
        Backend(url, {"client_kwargs_token": secret}).listing()
    assert secret not in str(e.value) and "user" not in str(e.value)
    assert "missing.safetensors" in str(e.value)


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(MissingDependencyError, match=r"ckpt-explorer\[remote\]"):
        open_checkpoint("s3://bucket/model.safetensors")


def test_unknown_scheme_stays_a_local_path() -> None:
    with pytest.raises(CkptExplorerError, match="nothing at that path"):
        open_checkpoint("ftp://host/model.safetensors")


def test_dcp_mirror_holds_metadata_and_bytes_items_only(
    served: tuple[RangeServer, Path], real_checkpoints: Any, tiny_structure: None
) -> None:
    from ckpt_explorer.readers.dcp import read_metadata

    out, _ = real_checkpoints("dcp")
    server, root = served
    shutil.copytree(out / "dcp_training_state", root / "dcp")
    meta = read_metadata(root / "dcp")
    m = mirror_for(f"{server.url}/dcp")
    assert m.ranges[".metadata"].covers(0, m.size(".metadata"))
    items = [(i, meta.state_dict_metadata[i.fqn]) for i in meta.storage_data]
    assert any(not hasattr(kind, "chunks") for _, kind in items)
    for index, kind in items:
        info = meta.storage_data[index]
        present = m.ranges[info.relative_path].covers(info.offset, info.offset + info.length)
        assert present == (not hasattr(kind, "chunks")), index.fqn  # bytes items only


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
    tiny_structure: None,
    capsys: pytest.CaptureFixture[str],
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

    assert run(url) == run(str(root / "ckpt"))


def test_dcp_tensors_load_over_http(
    served: tuple[RangeServer, Path], real_checkpoints: Any, tiny_structure: None
) -> None:
    out, _ = real_checkpoints("dcp")
    server, root = served
    shutil.copytree(out / "dcp_training_state", root / "dcp")
    local = open_checkpoint(root / "dcp")
    remote = open_checkpoint(f"{server.url}/dcp")
    assert remote.names() == local.names() and remote.values.keys() == local.values.keys()
    for name in local.names():
        assert torch.equal(remote.load(name), local.load(name)), name


def test_cached_folder_forgets_files_deleted_remotely(
    served: tuple[RangeServer, Path], real_checkpoints: Any, tmp_path: Path
) -> None:
    out, _ = real_checkpoints("hf")
    server, root = served
    shutil.copytree(out / "gpt2_sharded", root / "ckpt")
    cache = str(tmp_path / "cache")
    first = mirror_for(f"{server.url}/ckpt", cache=cache)
    assert (first.local / "generation_config.json").is_file()
    (root / "ckpt" / "generation_config.json").unlink()
    second = mirror_for(f"{server.url}/ckpt", cache=cache)
    assert second.local == first.local
    assert not (second.local / "generation_config.json").exists()


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
    from ckpt_explorer.remote.cli_args import _options

    opts = ["--storage-option", "anon=true", "--storage-option", "client_kwargs.region_name=eu-1"]
    args = build_parser().parse_args(["inspect", "s3://b/x", *opts])
    assert _options(args) == {"anon": True, "client_kwargs": {"region_name": "eu-1"}}


def test_streamed_diff_waits_for_its_bytes(
    served: tuple[RangeServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, root = served
    sd = _big_safetensors(root / "a.safetensors", 8)
    sd["layers.40.weight"][3] += 1
    save_file(sd, str(root / "b.safetensors"))
    m = mirror_for(f"{server.url}/a.safetensors", "stream")
    assert m._prefetcher is not None  # mapped reads wait for the prefetch or fetch
    m.stop()
    url = f"{server.url}/a.safetensors"
    assert main(["diff", url, str(root / "b.safetensors"), "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["changed"] == 1 and summary["identical"] == 63, summary
    assert main(["diff", url, str(root / "a.safetensors")]) == 0


def test_an_index_url_brings_its_shards(
    served: tuple[RangeServer, Path],
    real_checkpoints: Any,
    tiny_structure: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, _ = real_checkpoints("hf")
    server, root = served
    shutil.copytree(out / "gpt2_sharded", root / "run" / "ckpt")
    (root / "run" / "other.safetensors").write_bytes(b"not listed")
    index = "ckpt/model.safetensors.index.json"
    remote = _inspect_json(f"{server.url}/run/{index}", capsys, root / "run" / index)
    assert remote == _inspect_json(str(root / "run" / index), capsys)
    m = mirror_for(f"{server.url}/run/{index}")
    assert "generation_config.json" not in m.remote and len(m.remote) == 5  # index + 4 shards
