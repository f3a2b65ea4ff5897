"""Broken and hostile inputs: a clear one-line error, exit code 2, and code never runs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import (
    CkptExplorerError,
    CorruptCheckpointError,
    TruncatedFileError,
    UnsafeCheckpointError,
    detect_format,
    open_checkpoint,
)
from ckpt_explorer.cli import main


class Payload:
    """Pickles to a call of os.system that would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


class EvalPayload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (eval, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize("payload_class", [Payload, EvalPayload])
def test_code_in_a_torch_pickle_is_listed_never_run(tmp_path: Path, payload_class: type) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"weight": torch.ones(2, 2), "extra": payload_class(marker)}, path)

    view = open_checkpoint(path)
    assert [r.name for r in view.tensors] == ["weight"]
    assert torch.equal(view.load("weight"), torch.ones(2, 2))
    assert "never called" in " ".join(view.warnings)
    assert "never executed" in " ".join(detect_format(path).evidence)
    assert not marker.exists()


def _with_data_pkl(tmp_path: Path, name: str, data_pkl: bytes) -> Path:
    """A real torch.save zip whose data.pkl is replaced by ``data_pkl``."""
    real = tmp_path / f"real-{name}"
    torch.save({"w": torch.ones(1)}, real)
    out = tmp_path / name
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            body = data_pkl if info.filename.endswith("/data.pkl") else src.read(info)
            dst.writestr(info, body)
    return out


def test_refused_construct_is_an_unsafe_error(tmp_path: Path) -> None:
    # _codecs.encode is allowed only for text codecs; anything else is refused outright.
    payload = b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00aX\x0a\x00\x00\x00zlib_codec\x86R."
    path = _with_data_pkl(tmp_path, "codec.pt", payload)
    with pytest.raises(UnsafeCheckpointError, match="not allowed"):
        open_checkpoint(path)


@pytest.mark.parametrize("device", [b"X\x03\x00\x00\x00foo", b"J\xff\xff\xff\xff"])
def test_torch_errors_inside_a_pickle_are_corrupt_files(tmp_path: Path, device: bytes) -> None:
    """torch.device("foo") / torch.device(-1) raise RuntimeError inside torch."""
    path = _with_data_pkl(tmp_path, "device.pt", b"\x80\x02ctorch\ndevice\n" + device + b"\x85R.")
    with pytest.raises(CorruptCheckpointError, match="RuntimeError"):
        open_checkpoint(path)


def test_deeply_nested_pickle_gives_a_clean_result(tmp_path: Path) -> None:
    depth = 200_000
    payload = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    path = _with_data_pkl(tmp_path, "deep.pt", payload)
    try:
        view = open_checkpoint(path)
    except CkptExplorerError:
        return
    assert view.kind == "object" and not view.tensors


def _safetensors(tmp_path: Path) -> Path:
    path = tmp_path / "ok.safetensors"
    save_file(
        {"a": torch.arange(6, dtype=torch.float32), "b": torch.ones(3, dtype=torch.bfloat16)}, path
    )
    return path


def _header(path: Path) -> tuple[int, bytes, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, raw[8 : 8 + n], raw[8 + n :]


def _write_header(path: Path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_safetensors_truncated_at_every_boundary(tmp_path: Path) -> None:
    good = _safetensors(tmp_path)
    raw = good.read_bytes()
    n, _, _ = _header(good)
    cuts = sorted({0, 4, 8, 9, 8 + n // 2, 8 + n, 8 + n + 1, len(raw) - 1})
    for cut in cuts:
        bad = tmp_path / f"cut{cut}.safetensors"
        bad.write_bytes(raw[:cut])
        with pytest.raises(CkptExplorerError) as info:
            open_checkpoint(bad)
        assert str(bad) in str(info.value)


def test_safetensors_data_cut_short_reads_as_truncated(tmp_path: Path) -> None:
    good = _safetensors(tmp_path)
    bad = tmp_path / "short.safetensors"
    bad.write_bytes(good.read_bytes()[:-2])
    with pytest.raises(TruncatedFileError, match="asynchronous save"):
        open_checkpoint(bad)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda h: {**h, "a": {**h["a"], "data_offsets": [0, 20]}}, "to take 24 bytes"),
        (lambda h: {**h, "a": {**h["a"], "dtype": "F99"}}, "known dtype"),
        (lambda h: {**h, "a": {**h["a"], "shape": [-6]}}, "list of sizes"),
        (lambda h: {**h, "b": {**h["b"], "data_offsets": [20, 26]}}, "overlap"),
        (lambda h: {**h, "b": {**h["b"], "data_offsets": [28, 34]}}, "gap"),
        (lambda h: {**h, "__metadata__": {"format": 1}}, "str->str"),
    ],
)
def test_safetensors_header_lies_are_caught(tmp_path: Path, mutate, message: str) -> None:
    good = _safetensors(tmp_path)
    _, header_raw, data = _header(good)
    header = json.loads(header_raw)
    bad = tmp_path / "bad.safetensors"
    _write_header(bad, mutate(header), data + b"\0" * 16)
    with pytest.raises(CorruptCheckpointError, match=message):
        open_checkpoint(bad)


def test_safetensors_header_length_and_encoding(tmp_path: Path) -> None:
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 10**12) + b"{" + b" " * 64)
    with pytest.raises(CkptExplorerError, match="header length"):
        open_checkpoint(huge)
    past = tmp_path / "past.safetensors"
    past.write_bytes(struct.pack("<Q", 4096) + b'{"a": 1}')
    with pytest.raises(TruncatedFileError):
        open_checkpoint(past)
    latin = tmp_path / "latin.safetensors"
    latin.write_bytes(struct.pack("<Q", 7) + b'{"\xff": }')
    with pytest.raises(CorruptCheckpointError, match="UTF-8"):
        open_checkpoint(latin)
    dup = tmp_path / "dup.safetensors"
    entry = '{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'
    text = ("{" + f'"a": {entry}, "a": {entry}' + "}").encode()
    dup.write_bytes(struct.pack("<Q", len(text)) + text + b"\0")
    with pytest.raises(CorruptCheckpointError, match="duplicate"):
        open_checkpoint(dup)


def test_torch_zip_truncated_or_missing_records(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    torch.save({"w": torch.randn(64, 64)}, good)
    raw = good.read_bytes()
    for cut in (10, len(raw) // 2, len(raw) - 30):
        bad = tmp_path / f"cut{cut}.pt"
        bad.write_bytes(raw[:cut])
        with pytest.raises(CkptExplorerError) as info:
            open_checkpoint(bad)
        assert str(bad) in str(info.value)


def test_index_names_outside_the_folder_are_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.bin").write_bytes(b"x")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for i, target in enumerate(["../secret.bin", "/etc/passwd", "link.bin"]):
        folder = ckpt / f"case{i}"
        folder.mkdir()
        if target == "link.bin":
            os.symlink(tmp_path / "secret.bin", folder / "link.bin")
        index = {"metadata": {"total_size": 4}, "weight_map": {"w": target}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(UnsafeCheckpointError):
            open_checkpoint(folder)


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    index = {"metadata": {"total_size": 4}, "weight_map": {"w": "model-00001-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptCheckpointError, match=r"model-00001-of-00002\.safetensors"):
        open_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "content",
    [b"", b"{not json", b'{"weight_map": [1, 2]}', b'{"weight_map": {"w": 3}}', b"[" * 100000],
)
def test_bad_index_json(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.safetensors.index.json"
    path.write_bytes(content)
    with pytest.raises(CkptExplorerError):
        open_checkpoint(path)


def test_empty_things_are_not_checkpoints(tmp_path: Path) -> None:
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    empty_file = tmp_path / "empty.bin"
    empty_file.write_bytes(b"")
    for path in (empty_dir, empty_file, tmp_path / "missing"):
        with pytest.raises(CkptExplorerError):
            detect_format(path)


def test_cli_reports_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**12))
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "expected" in err and "found" in err


def test_cli_subprocess_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"PK\x03\x04 this is not a zip")
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", "inspect", str(bad), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("ckpt-explorer: error:")
    assert proc.stdout == ""


@pytest.mark.parametrize("suffix", ["safetensors", "pt"])
def test_file_truncated_after_opening(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"m.{suffix}"
    sd = {"a": torch.randn(256, 256), "b": torch.randn(256, 256)}
    if suffix == "safetensors":
        save_file(sd, path)
    else:
        torch.save(sd, path)
    view = open_checkpoint(path)
    last = max(view.tensors, key=lambda r: r.offset or 0)
    with open(path, "r+b") as f:
        f.truncate(last.offset + 16)  # the last tensor is now cut short
    with pytest.raises(TruncatedFileError, match="changed after it was opened"):
        view.load(last.name)
