"""The GGUF header parser and reader on files written by gguf's own GGUFWriter: both byte
orders, long arrays, header-only reads, damaged headers, splits, and no gguf package."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.errors import CkptExplorerError, CorruptCheckpointError
from ckpt_explorer.io import gguf_header
from ckpt_explorer.io.gguf_header import FIRST_BLOCK, GGUFError, parse, parse_buffer

gguf = pytest.importorskip("gguf")


def _write(
    path: Path, endian: object = None, tokens: int = 200, big: int = 0
) -> dict[str, np.ndarray]:
    kw = {"endianess": endian} if endian is not None else {}
    w = gguf.GGUFWriter(str(path), "llama", **kw)
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_token_list([f"tok{i}" for i in range(tokens)])
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    arrays = {"a.weight": x, "c.weight": x.astype(np.float16)}
    w.add_tensor("a.weight", x)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("b.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("c.weight", arrays["c.weight"])
    if big:
        w.add_tensor("big", np.zeros(big, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return arrays


@pytest.mark.parametrize("order", ["little", "big"])
def test_both_byte_orders(tmp_path: Path, order: str) -> None:
    endian = gguf.GGUFEndian.BIG if order == "big" else gguf.GGUFEndian.LITTLE
    path = tmp_path / "m.gguf"
    arrays = _write(path, endian)
    raw = path.read_bytes()
    header = parse_buffer(raw, len(raw))
    assert header.byteorder == order and header.version == 3
    assert header.metadata["llama.context_length"] == 128
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert tokens.count == 200 and len(tokens.head) == 16 and tokens.head[0] == "tok0"
    reader = gguf.GGUFReader(str(path))
    for info, t in zip(header.tensors, reader.tensors, strict=True):
        assert info.name == t.name
        assert header.data_start + info.offset == int(t.data_offset)
        assert info.nbytes == int(t.n_bytes)
    view = open_checkpoint(path)
    assert view.family == "gguf" and "a chat template" in view.detection.evidence
    for name, values in arrays.items():
        assert np.array_equal(view.load(name).numpy(), values), name
    if order == "big":  # block scales of big-endian files depend on the writer: refused
        with pytest.raises(CkptExplorerError, match="big-endian"):
            view.load("b.weight")
    else:
        expected = gguf.quants.dequantize(reader.tensors[1].data, reader.tensors[1].tensor_type)
        assert np.array_equal(view.load("b.weight").numpy(), expected)


def test_listing_reads_the_header_only(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path, big=4 * 2**20)  # 16 MiB of tensor data after the header
    raw = path.read_bytes()
    read: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        read.append((start, end))
        return raw[start:end]

    header = parse(fetch, len(raw))
    assert len(raw) > 16 * 2**20
    assert sum(e - s for s, e in read) <= header.header_end + FIRST_BLOCK


def _tokens_file(path: Path, endian: object, tokens: list[str]) -> None:
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_token_list(tokens)
    w.add_token_scores([float(i) for i in range(len(tokens))])  # a key after the tokens
    w.add_tensor("t", np.arange(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("first_block", [64, 4096, FIRST_BLOCK])
def test_token_arrays_stepped_over_across_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str, first_block: int
) -> None:
    """Thousands of tokens of 0 to 298 bytes (more than one chunk of the walk), read in
    small blocks that split items anywhere: the same header as gguf's own reader."""
    endian = gguf.GGUFEndian.BIG if order == "big" else gguf.GGUFEndian.LITTLE
    tokens = ["é" * (i % 150) + str(i) * (i % 7 == 0) for i in range(9000)]
    path = tmp_path / "t.gguf"
    _tokens_file(path, endian, tokens)
    raw = path.read_bytes()
    monkeypatch.setattr(gguf_header, "FIRST_BLOCK", first_block)
    header = parse(lambda s, e: raw[s:e], len(raw))
    summary = header.metadata["tokenizer.ggml.tokens"]
    assert summary.count == len(tokens) and list(summary.head) == tokens[:16]
    assert header.metadata["tokenizer.ggml.scores"].count == len(tokens)
    reader = gguf.GGUFReader(str(path))
    assert header.data_start + header.tensors[0].offset == int(reader.tensors[0].data_offset)


def test_a_bad_token_length_is_refused(tmp_path: Path) -> None:
    """A length far past the file, or past its end, inside the items stepped over."""
    tokens = [f"tok{i}" for i in range(6000)]
    path = tmp_path / "t.gguf"
    _tokens_file(path, gguf.GGUFEndian.LITTLE, tokens)
    raw = path.read_bytes()
    for i, length, message in ((100, 1 << 40, "string length"), (5000, len(raw), "past the end")):
        at = raw.index(struct.pack("<Q", len(tokens[i])) + tokens[i].encode())
        bad = raw[:at] + struct.pack("<Q", length) + raw[at + 8 :]
        with pytest.raises(GGUFError, match=message):
            parse_buffer(bad, len(bad))


def test_damaged_headers_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path)
    raw = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(raw[:-100])  # the last tensor runs past the end
    with pytest.raises(CorruptCheckpointError, match="past the end"):
        open_checkpoint(cut)
    huge = bytearray(raw)
    huge[8:16] = (1 << 40).to_bytes(8, "little")  # a tensor count no file holds
    with pytest.raises(GGUFError, match="tensor count"):
        parse_buffer(bytes(huge), len(huge))
    with pytest.raises(GGUFError):
        parse_buffer(raw[:40], 40)


def test_split_set_needs_every_split(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(str(tmp_path / "s.gguf"), "llama", split_max_tensors=1)
    w.add_block_count(1)
    for i in range(3):
        w.add_tensor(f"t{i}", np.full((2, 32), i, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    files = sorted(p.name for p in tmp_path.glob("s-*-of-*.gguf"))
    assert files == [f"s-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    view = open_checkpoint(tmp_path / files[2])
    assert view.names() == ["t0", "t1", "t2"]
    assert float(view.load("t2").sum()) == 2 * 64
    (tmp_path / files[1]).unlink()
    with pytest.raises(CorruptCheckpointError, match="split 2 of 3"):
        open_checkpoint(tmp_path / files[0])


def test_without_the_gguf_package(tmp_path: Path) -> None:
    """Listing and plain types need nothing; a quantized tensor says what to install."""
    path = tmp_path / "m.gguf"
    _write(path)
    code = (
        "import sys; sys.modules['gguf'] = None\n"
        "from ckpt_explorer.api import open_checkpoint\n"
        "from ckpt_explorer.errors import MissingDependencyError\n"
        f"v = open_checkpoint({str(path)!r})\n"
        "assert v.names() == ['a.weight', 'b.weight', 'c.weight']\n"
        "assert v.load('a.weight').shape == (4, 64)\n"
        "try:\n    v.load('b.weight')\nexcept MissingDependencyError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "pip install 'ckpt-explorer[gguf]'" in out.stdout
