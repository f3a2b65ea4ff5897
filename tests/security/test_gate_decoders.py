"""Compressed streams and archives as their most lenient consumer reads them.

joblib.load and pandas.read_pickle stream the pickle out of the decoder: a gzip member with no
trailer, a bad CRC or junk after it, an xz or bz2 stream cut short, lzma-alone with any header
LZMAFile takes still hand out their bytes, and the payload at their start runs. pandas also
opens tar archives (a member of any name) and picks its decoder by the file's suffix. Each
attack file here is written by the real tool (joblib.dump, pandas.to_pickle, gzip / bz2 / lzma,
tarfile), then mangled; the oracle proves the real consumer runs its payload, and the gate
must fail it. Benign outputs of the same tools must pass.
"""

from __future__ import annotations

import bz2
import gzip
import importlib.util
import io
import lzma
import os
import random
import struct
import sys
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ckpt_explorer.security import judge_file, views_compressed
from ckpt_explorer.security.judged import Scope

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "hostile"))

from attack_corpus import Reduce, cmd
from security_oracle import Oracle

joblib = pytest.importorskip("joblib")
pd = pytest.importorskip("pandas")

PAD = 100_000  # incompressible bytes after the payload: the damage lies well after it
BIG_PAD = 1_200_000  # past the 1 MiB joblib's buffered reader asks of its decoder at a time


def _payload(case: str, pad: int = PAD) -> list[Any]:
    """A call to os.system that creates the case's marker, then bytes that keep the stream
    going (the damage is there, after the call ran)."""
    return [Reduce(os.system, cmd(case)), os.urandom(pad)]


def _pickled(case: str) -> bytes:
    import pickle

    return pickle.dumps(_payload(case), protocol=4)


def _joblib(path: Path, case: str, compress: tuple[str, int], pad: int = PAD) -> bytes:
    joblib.dump(_payload(case, pad), path, compress=compress)
    return path.read_bytes()


def _pandas(path: Path, case: str, compression: str) -> bytes:
    pd.to_pickle(_payload(case), path, compression=compression)
    return path.read_bytes()


def _gzip_with_header(data: bytes) -> bytes:
    """A gzip member with FEXTRA, FNAME, FCOMMENT and a header CRC that is wrong (Python's
    reader does not check it)."""
    head = b"\x1f\x8b\x08" + bytes([4 | 8 | 16 | 2]) + struct.pack("<I", 0) + b"\x00\xff"
    head += struct.pack("<H", 6) + b"AB\x02\x00xy" + b"name.pkl\x00" + b"a comment\x00"
    head += b"\xde\xad"
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    return head + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def _alone(data: bytes, **filters: Any) -> bytes:
    return lzma.compress(
        data, format=lzma.FORMAT_ALONE, filters=[{"id": lzma.FILTER_LZMA1, **filters}]
    )


def _with_dict(alone: bytes, size: int) -> bytes:
    """An lzma-alone stream whose header names another dictionary size."""
    return alone[:1] + struct.pack("<I", size) + alone[5:]


def _tar(members: dict[str, bytes], mode: str = "w") -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode=mode) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def _split_gzip(data: bytes, at: int) -> bytes:
    return gzip.compress(data[:at]) + b"\x00\x00" + gzip.compress(data[at:])


def _split_bz2(data: bytes, at: int) -> bytes:
    return bz2.compress(data[:at]) + bz2.compress(data[at:]) + b"junk after the streams"


# name -> (file name, how its bytes are made from (folder, case))
# case -> (the consumer that runs it, file name, how its bytes are made from (folder, case))
ATTACKS: dict[str, tuple[str, str, Callable[[Path, str], bytes]]] = {
    "gzip_no_trailer": (
        "joblib",
        "model.pkl",
        lambda d, c: _joblib(d / "w.pkl", c, ("gzip", 3))[:-8],
    ),
    "gzip_bad_crc": (
        "pandas",
        "frame.pkl.gz",
        lambda d, c: _pandas(d / "w.pkl.gz", c, "gzip")[:-8] + bytes(8),
    ),
    "gzip_trailing_junk": (
        "pandas",
        "frame.pkl.gz",
        lambda d, c: _pandas(d / "w.pkl.gz", c, "gzip") + b"trailing junk",
    ),
    "gzip_multi_member": ("pandas", "frame.pkl.gz", lambda d, c: _split_gzip(_pickled(c), 12)),
    "gzip_header_fields": ("pandas", "frame.pkl.gz", lambda d, c: _gzip_with_header(_pickled(c))),
    "bz2_cut": (
        "joblib",
        "model.pkl",
        lambda d, c: _joblib(d / "w.pkl", c, ("bz2", 1), BIG_PAD)[:-5000],
    ),
    "bz2_streams_and_junk": ("joblib", "model.pkl", lambda d, c: _split_bz2(_pickled(c), 12)),
    "xz_cut": (
        "joblib",
        "model.pkl",
        lambda d, c: _joblib(d / "w.pkl", c, ("xz", 1), BIG_PAD)[:-5000],
    ),
    "xz_cut_by_suffix": ("pandas", "frame.xz", lambda d, c: _pandas(d / "w.xz", c, "xz")[:-5000]),
    "lzma_alone_small_dict": (
        "joblib",
        "model.pkl",
        lambda d, c: _alone(_pickled(c), dict_size=4096),
    ),
    "lzma_alone_big_dict": (
        "joblib",
        "model.pkl",
        lambda d, c: _with_dict(_alone(_pickled(c), dict_size=1 << 20), 1 << 30),
    ),
    "lzma_alone_other_props": (
        "pandas",
        "frame.pkl.xz",
        lambda d, c: _alone(_pickled(c), lc=0, lp=0, pb=0, dict_size=1 << 16),
    ),
    "lzma_joblib_cut": (
        "joblib",
        "model.pkl",
        lambda d, c: _joblib(d / "w.pkl", c, ("lzma", 1), BIG_PAD)[:-5000],
    ),
    "zlib_cut": ("joblib", "model.pkl", lambda d, c: _joblib(d / "w.pkl", c, ("zlib", 3))[:-5000]),
    "tar_any_name": ("pandas", "frame.tar", lambda d, c: _tar({"weights.bin": _pickled(c)})),
    "tar_by_pandas_gz": ("pandas", "frame.tar.gz", lambda d, c: _pandas(d / "w.tar.gz", c, "tar")),
    "tar_gz_no_trailer": (
        "pandas",
        "frame.tar.gz",
        lambda d, c: gzip.compress(_tar({"x": _pickled(c)}))[:-8],
    ),
    "tar_bz2": ("pandas", "frame.tar.bz2", lambda d, c: bz2.compress(_tar({"state": _pickled(c)}))),
    "tar_xz_lzma_alone": (
        "pandas",
        "frame.tar.xz",
        lambda d, c: _alone(_tar({"state": _pickled(c)}), lc=0, lp=0, pb=0),
    ),
    "zip_one_member_by_pandas": (
        "pandas",
        "frame.zip",
        lambda d, c: _pandas(d / "w.zip", c, "zip"),
    ),
}


@pytest.fixture(scope="module")
def attacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decoder-attacks")
    work = tmp_path_factory.mktemp("decoder-work")
    out = {}
    for case, (_consumer, name, make) in ATTACKS.items():
        folder = root / case
        folder.mkdir()
        data = make(work, case)
        (folder / name).write_bytes(data)
        out[case] = folder / name
    return out


@pytest.fixture(scope="module")
def oracle_results(attacks: dict[str, Path]) -> dict[Path, Any]:
    """Each file loaded by its consumer (joblib.load of a gzip with junk after it never ends)."""
    out: dict[Path, Any] = {}
    with Oracle(workers=2, timeout=60) as oracle:
        for consumer in ("joblib", "pandas"):
            paths = [attacks[c] for c, (who, *_rest) in ATTACKS.items() if who == consumer]
            out.update(oracle.run(paths, (consumer,)))
    return out


@pytest.mark.parametrize("case", list(ATTACKS))
def test_attack_runs_under_its_consumer_and_fails_the_gate(
    case: str, attacks: dict[str, Path], oracle_results: dict[Path, Any]
) -> None:
    path = attacks[case]
    consumer = ATTACKS[case][0]
    ran = oracle_results[path].ran_marker
    assert consumer in ran, f"{case}: {consumer} did not run it: {oracle_results[path].loaders}"
    verdict = judge_file(path)
    assert verdict.verdict == "unsafe", (case, verdict.verdict, verdict.reasons)
    assert any("system" in m for m in verdict.reasons), verdict.reasons


# --------------------------------------------------------------------- the decoders, exactly


def _stdlib_bytes(opener: Callable[[io.BytesIO], Any], raw: bytes, size: int) -> bytes:
    """What a reader hands out, ``size`` bytes a call, before its first error."""
    got = bytearray()
    try:
        with opener(io.BytesIO(raw)) as f:
            while chunk := f.read(size):
                got += chunk
    except (OSError, EOFError, zlib.error, lzma.LZMAError):
        pass
    return bytes(got)


def _mangled() -> list[tuple[str, str, bytes, Callable[[io.BytesIO], Any]]]:
    rand = random.Random(30).randbytes  # fixed: where the damage falls is the same each run
    data = rand(120_000) + b"A" * 100_000 + rand(60_000)
    from joblib.compressor import BinaryGzipFile, BinaryZlibFile

    gz, bz, xz = gzip.compress(data), bz2.compress(data, 1), lzma.compress(data)
    alone = _alone(data, dict_size=4096)
    z = zlib.compress(data)
    return [
        ("gzip", "gzip", gz[:-8], lambda f: gzip.GzipFile(fileobj=f)),
        ("gzip bad crc", "gzip", gz[:-8] + bytes(8), lambda f: gzip.GzipFile(fileobj=f)),
        ("gzip junk", "gzip", gz + b"junk", lambda f: gzip.GzipFile(fileobj=f)),
        ("gzip cut", "gzip", gz[: len(gz) // 2], lambda f: gzip.GzipFile(fileobj=f)),
        (
            "gzip corrupt",
            "gzip",
            gz[:5000] + bytes(100) + gz[5100:],
            lambda f: gzip.GzipFile(fileobj=f),
        ),
        ("joblib gzip cut", "gzip", gz[: len(gz) // 2], lambda f: BinaryGzipFile(f, "rb")),
        ("bz2 cut", "bz2", bz[:-100], bz2.BZ2File),
        ("bz2 corrupt", "bz2", bz[:-30_000] + bytes(50) + bz[-29_950:], bz2.BZ2File),
        ("bz2 streams", "bz2", bz + bz + b"junk", bz2.BZ2File),
        ("xz cut", "xz", xz[:-300], lzma.LZMAFile),
        ("xz corrupt", "xz", xz[:50_000] + bytes(50) + xz[50_050:], lzma.LZMAFile),
        ("alone cut", "lzma", alone[:-300], lzma.LZMAFile),
        ("alone streams", "lzma", alone + alone + b"junk", lzma.LZMAFile),
        ("zlib cut", "zlib", z[:-300], lambda f: BinaryZlibFile(f, "rb")),
        (
            "zlib corrupt",
            "zlib",
            z[:50_000] + bytes(50) + z[50_050:],
            lambda f: BinaryZlibFile(f, "rb"),
        ),
    ]


@pytest.mark.parametrize("name,kind,raw,opener", _mangled(), ids=lambda x: str(x)[:20])
def test_decoder_yields_all_the_consumer_reader_yields(
    name: str, kind: str, raw: bytes, opener: Callable[[io.BytesIO], Any]
) -> None:
    got = views_compressed.decode(raw, 0, len(raw), kind, Scope())
    for size in (1, 8192, 1 << 20):
        want = _stdlib_bytes(opener, raw, size)
        assert got.data.startswith(want), (name, size, len(got.data), len(want))
    assert len(got.data) > 0


def test_lzma_alone_dictionary_is_capped_without_changing_the_output() -> None:
    data = os.urandom(50_000) * 3
    alone = _with_dict(_alone(data, dict_size=1 << 20), 0xFFFF_FFFF)
    got = views_compressed.decode(alone, 0, len(alone), "lzma", Scope())
    assert got.data == data and not got.doubt and not got.stop


def test_budget_reached_is_unverified_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views_compressed, "MAX_INFLATED", 200_000)
    path = tmp_path / "big.pkl"
    joblib.dump({"w": np.zeros(100_000)}, path, compress=("gzip", 3))
    verdict = judge_file(path)
    assert verdict.verdict == "unverified", verdict.reasons
    assert any("inflation budget" in m for m in verdict.reasons), verdict.reasons
    joblib.dump(_payload("budget"), path, compress=("gzip", 3))
    assert judge_file(path).verdict == "unsafe"  # what fits the budget is still judged


@pytest.mark.skipif(
    importlib.util.find_spec("zstandard") is not None, reason="zstandard is installed"
)
def test_zstd_without_its_package_is_unverified(tmp_path: Path) -> None:
    path = tmp_path / "frame.pkl.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + os.urandom(100))
    verdict = judge_file(path)
    assert verdict.verdict == "unverified"
    assert any("zstandard is not installed" in m for m in verdict.reasons), verdict.reasons


@pytest.mark.skipif(importlib.util.find_spec("lz4") is not None, reason="lz4 is installed")
def test_lz4_without_its_package_is_unverified(tmp_path: Path) -> None:
    path = tmp_path / "model.pkl"
    path.write_bytes(b"\x04\x22\x4d\x18" + os.urandom(100))
    assert judge_file(path).verdict == "unverified"


def test_pandas_suffixes_are_pandas_own() -> None:
    from pandas.io.common import extension_to_compression

    assert tuple(extension_to_compression.items()) == views_compressed.PANDAS_SUFFIXES
    assert views_compressed.pandas_compression("A.TAR.XZ") == "tar"
    assert views_compressed.pandas_compression("a.pkl") == ""


def test_tar_of_several_members_judges_each(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "bundle.tar"
    path.write_bytes(
        _tar({"config.json": b"{}", "state.pkl": pickle.dumps([Reduce(os.system, "true")])})
    )
    verdict = judge_file(path)
    assert verdict.verdict == "unsafe"
    assert any("tar member state.pkl" in m for m in verdict.reasons), verdict.reasons


# --------------------------------------------------------------------- benign real outputs

BENIGN = {"weights": np.arange(1000, dtype=np.float32), "steps": [1, 2, 3], "name": "run"}
# pandas pickles with protocol 5, where a numpy array names numpy._core.numeric._frombuffer,
# not in the allow-list yet (see test_pandas_numpy_and_dataframe_are_safe)
PLAIN = {"steps": [1, 2, 3], "name": "run", "scale": 0.5, "blob": bytes(range(256)) * 64}


@pytest.mark.parametrize("compress", ["zlib", "gzip", "bz2", "lzma", "xz"])
def test_joblib_each_compressor_is_safe(tmp_path: Path, compress: str) -> None:
    path = tmp_path / f"model.{compress}"
    joblib.dump(BENIGN, path, compress=(compress, 3))
    assert joblib.load(path)["name"] == "run"
    verdict = judge_file(path)
    assert verdict.verdict == "safe", verdict.reasons


@pytest.mark.parametrize(
    "suffix", [".pkl", ".pkl.gz", ".pkl.bz2", ".pkl.xz", ".pkl.zip", ".pkl.tar", ".tar.gz"]
)
def test_pandas_each_compression_is_safe(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"frame{suffix}"
    pd.to_pickle(PLAIN, path)
    assert pd.read_pickle(path)["name"] == "run"
    verdict = judge_file(path)
    assert verdict.verdict == "safe", verdict.reasons


@pytest.mark.parametrize("value", ["array", "frame"])
def test_pandas_numpy_and_dataframe_are_safe(tmp_path: Path, value: str) -> None:
    path = tmp_path / "frame.pkl.gz"
    frame = pd.DataFrame({"a": np.arange(5), "b": list("abcde")})
    pd.to_pickle(BENIGN if value == "array" else frame, path)
    assert judge_file(path).verdict == "safe"


@pytest.mark.parametrize("mode,name", [("w:gz", "ckpt.tar.gz"), ("w", "ckpt.tar")])
def test_tar_of_a_torch_file_is_safe(tmp_path: Path, mode: str, name: str) -> None:
    model = tmp_path / "model.pt"  # a member name whose first bytes LZMAFile takes for a header
    torch.save({"w": torch.zeros(3, 3)}, model)
    path = tmp_path / name
    with tarfile.open(path, mode) as t:
        t.add(model, arcname="model.pt")
    verdict = judge_file(path)
    assert verdict.verdict == "safe", verdict.reasons
