"""Write the corpus of hostile and broken checkpoints: ``python make_corpus.py OUT_DIR``.

Every case starts from a real output (torch.save, safetensors save_file, an HF-style index) and
breaks it in one way. ``OUT_DIR/corpus.json`` maps each case to its path and the error class a
reader must raise. A payload that would run code writes ``OUT_DIR/PWNED`` if it ever runs.
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import struct
import sys
import zipfile
from pathlib import Path

import torch
from safetensors.torch import save_file


class _SystemPayload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def _st_parts(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _st_write(path: Path, header: dict | bytes, data: bytes, length: int | None = None) -> None:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def _zip_edit(src: Path, dst: Path, replace: dict[str, bytes | None]) -> None:
    """Copy a torch zip, replacing (bytes) or dropping (None) records by name suffix."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            hit = next((k for k in replace if info.filename.endswith(k)), None)
            if hit is None:
                zout.writestr(info, zin.read(info))
            elif replace[hit] is not None:
                zout.writestr(info, replace[hit])


def _patch_after_persid(pkl: bytes, replacements: list[bytes]) -> bytes:
    """Replace the ops right after the first BINPERSID (a tensor's storage) of a torch pickle:
    the storage offset, then the size tuple's first element."""
    ops = list(pickletools.genops(pkl))
    i = next(k for k, (op, _a, _p) in enumerate(ops) if op.name == "BINPERSID")
    out, end = bytearray(), 0
    for k, new in enumerate(replacements):
        pos = ops[i + 1 + k][2]
        nxt = ops[i + 2 + k][2]
        assert pos is not None and nxt is not None
        out += pkl[end:pos] + new
        end = nxt
    return bytes(out + pkl[end:])


def _pickle_bombs() -> dict[str, bytes]:
    """Small pickles that cost gigabytes or hours in a careless unpickler or reader.

    Each one is a few hundred bytes to a few hundred KB of protocol 2, hand-assembled from
    opcodes (the stdlib pickler cannot write them without doing the costly work itself).
    """

    def put(i: int) -> bytes:
        return b"r" + struct.pack("<I", i)

    def get(i: int) -> bytes:
        return b"j" + struct.pack("<I", i)

    def glob(module: bytes, name: bytes) -> bytes:
        return b"c" + module + b"\n" + name + b"\n"

    head = b"\x80\x02"
    shared = []  # [x, x] nested 40 deep: 400 bytes of pickle, 2**40 elements of walk
    for _ in range(40):
        shared = [shared, shared]
    shared_ops = pickle.dumps(shared, protocol=2)[2:-1]
    tuple_chain = b")" + put(0) + b"0"  # t[i+1] = (t[i], t[i]), 60 deep
    for i in range(60):
        tuple_chain += get(i) + get(i) + b"\x86" + put(i + 1) + b"0"
    copies = glob(b"__builtin__", b"list") + put(0) + b"0" + b"](" + b"N" * 50_000 + b"e"
    copies += put(1) + b"0" + b"](" + (get(0) + get(1) + b"\x85R") * 20_000 + b"e"
    huge = (2**40).to_bytes(6, "little")
    return {
        "memo index 2**28 (4 GB memo table in the C unpickler)": head + b"N" + put(2**28) + b".",
        "shared-list bomb (2**40 elements)": head + b"}X\x01\x00\x00\x00a" + shared_ops + b"s.",
        "shared-tuple dictionary key (2**60 hash)": head
        + tuple_chain
        + b"}"
        + get(60)
        + b"K\x01s.",
        "20k list() copies of a 50k list (8 GB)": head + copies + b".",
        "bytearray(2**33) (8 GB of zeros)": head
        + glob(b"__builtin__", b"bytearray")
        + b"\x8a\x05"
        + (2**33).to_bytes(5, "little")
        + b"\x85R.",
        "str() of the shared-list bomb": head
        + glob(b"__builtin__", b"str")
        + shared_ops
        + b"\x85R.",
        "torch.Size(range(2**40))": head
        + glob(b"torch", b"Size")
        + glob(b"__builtin__", b"range")
        + b"\x8a\x06"
        + huge
        + b"\x85R\x85R.",
        "BUILD setting __defaults__ of a reader function": head
        + glob(b"torch._utils", b"_rebuild_tensor_v3")
        + b"N}X\x0c\x00\x00\x00__defaults__K\x07\x85s\x86b.",
        "tensor rebuild hashing a shared tuple": head
        + glob(b"torch._tensor", b"_rebuild_from_type_v2")
        + tuple_chain
        + b"("
        + get(60)
        + b"N)NtR.",
        "storage id whose key is the shared-list bomb": head
        + b"(X\x07\x00\x00\x00storage"
        + glob(b"torch", b"FloatStorage")
        + shared_ops
        + b"X\x03\x00\x00\x00cpuK\x01tQ.",
        "REDUCE calling numpy.ndarray((2**40,))": head
        + glob(b"numpy", b"ndarray")
        + b"\x8a\x06"
        + huge
        + b"\x85\x85R.",
    }


def _zip_central_edit(src: Path, dst: Path, suffix: str, field: str, value: int) -> None:
    """Copy a zip, setting one central-directory field of the record ending in ``suffix``."""
    raw = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(suffix))
    name = info.filename.encode()
    at = raw.rfind(b"PK\x01\x02", 0, raw.rfind(name))
    offsets = {"local_header_offset": 42, "file_size": 24, "compress_size": 20}
    struct.pack_into("<I", raw, at + offsets[field], value)
    dst.write_bytes(bytes(raw))


def make(out: Path) -> dict[str, dict[str, str]]:
    out.mkdir(parents=True, exist_ok=True)
    marker = out / "PWNED"
    cases: dict[str, dict[str, str]] = {}

    def case(name: str, path: Path, error: str) -> None:
        cases[name] = {"path": str(path.relative_to(out)), "error": error}

    good_st = out / "_good.safetensors"
    save_file(
        {"a": torch.arange(6, dtype=torch.float32), "b": torch.ones(4, dtype=torch.bfloat16)},
        good_st,
    )
    header, data = _st_parts(good_st)
    raw = good_st.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    for cut in (0, 3, 8, 9, 8 + n // 2, 8 + n, 8 + n + 5, len(raw) - 1):
        p = out / f"st_cut_{cut}.safetensors"
        p.write_bytes(raw[:cut])
        case(f"safetensors truncated at byte {cut}", p, "CkptExplorerError")
    p = out / "st_len_zero.safetensors"
    p.write_bytes(struct.pack("<Q", 0) + b"{}")
    case("safetensors header length 0", p, "CkptExplorerError")
    p = out / "st_len_huge.safetensors"
    p.write_bytes(struct.pack("<Q", 2**39) + b"{" + b" " * 15)
    case("safetensors header length enormous", p, "CorruptCheckpointError")
    p = out / "st_len_past_eof.safetensors"
    p.write_bytes(struct.pack("<Q", 4096) + b'{"a": 1}')
    case("safetensors header length past EOF", p, "TruncatedFileError")
    p = out / "st_not_json.safetensors"
    _st_write(p, b"{not json at all", data)
    case("safetensors header not JSON", p, "CorruptCheckpointError")
    p = out / "st_not_utf8.safetensors"
    _st_write(p, b'{"\xff\xfe": 1}', data)
    case("safetensors header not UTF-8", p, "CorruptCheckpointError")
    p = out / "st_json_list.safetensors"
    _st_write(p, b'{"a": [1, 2, 3]}', data)
    case("safetensors entry not an object", p, "CorruptCheckpointError")
    mutations = {
        "overlap": lambda h: {**h, "b": {**h["b"], "data_offsets": [16, 24]}},
        "gap": lambda h: {**h, "b": {**h["b"], "data_offsets": [28, 36]}},
        "size_mismatch": lambda h: {**h, "a": {**h["a"], "shape": [5]}},
        "bad_dtype": lambda h: {**h, "a": {**h["a"], "dtype": "Q7"}},
        "negative_shape": lambda h: {**h, "a": {**h["a"], "shape": [-6]}},
        "reversed_offsets": lambda h: {**h, "a": {**h["a"], "data_offsets": [24, 0]}},
        "metadata_not_str": lambda h: {**h, "__metadata__": {"format": ["pt"]}},
        "offsets_past_eof": lambda h: {
            **h,
            "a": {"dtype": "F32", "shape": [6000], "data_offsets": [0, 24000]},
            "b": {**h["b"], "data_offsets": [24000, 24008]},
        },
    }
    for name, mutate in mutations.items():
        p = out / f"st_{name}.safetensors"
        _st_write(p, mutate(header), data)
        case(f"safetensors {name.replace('_', ' ')}", p, "CkptExplorerError")
    p = out / "st_duplicate_keys.safetensors"
    entry = json.dumps(header["a"])
    _st_write(p, ("{" + f'"a": {entry}, "a": {entry}' + "}").encode(), data)
    case("safetensors duplicate keys", p, "CorruptCheckpointError")

    good_pt = out / "_good.pt"
    torch.save({"w": torch.randn(32, 32), "b": torch.zeros(32)}, good_pt)
    raw = good_pt.read_bytes()
    for cut in (4, 64, len(raw) // 2, len(raw) - 22):
        p = out / f"pt_cut_{cut}.pt"
        p.write_bytes(raw[:cut])
        case(f"torch zip truncated at byte {cut}", p, "CkptExplorerError")
    p = out / "pt_no_data_pkl.pt"
    _zip_edit(good_pt, p, {"/data.pkl": None})
    case("torch zip missing data.pkl", p, "CorruptCheckpointError")
    p = out / "pt_missing_record.pt"
    _zip_edit(good_pt, p, {"/data/0": None})
    case("torch zip missing a storage record", p, "CorruptCheckpointError")
    p = out / "pt_short_record.pt"
    _zip_edit(good_pt, p, {"/data/0": b"\0" * 16})
    case("torch zip storage record too short", p, "CorruptCheckpointError")
    p = out / "pt_garbage_pickle.pt"
    _zip_edit(good_pt, p, {"/data.pkl": b"\x80\x02garbage"})
    case("torch zip data.pkl not a pickle", p, "CorruptCheckpointError")
    p = out / "pt_bad_codec.pt"
    payload = b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00aX\x0a\x00\x00\x00zlib_codec\x86R."
    _zip_edit(good_pt, p, {"/data.pkl": payload})
    case("torch zip pickle with a refused codec", p, "UnsafeCheckpointError")
    depth = 100_000
    p = out / "pt_deep.pt"
    _zip_edit(good_pt, p, {"/data.pkl": b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."})
    case("torch zip with 100k-deep nesting", p, "ok")
    p = out / "pt_deep_dict.pt"
    nest = b"}" + b"X\x01\x00\x00\x00k}" * depth + b"s" * depth
    _zip_edit(good_pt, p, {"/data.pkl": b"\x80\x02" + nest + b"."})
    case("torch zip with 100k-deep dict nesting", p, "ok")
    good_view = out / "_good_view.pt"
    torch.save({"w": torch.arange(8.0)[2:]}, good_view)
    with zipfile.ZipFile(good_view) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    for name, ops in {
        "negative_offset": [b"J" + struct.pack("<i", -5)],
        "overflowing_offset": [b"\x8a\x09" + (2**70).to_bytes(9, "little")],
        "overflowing_size": [b"K\x02", b"\x8a\x08" + (2**62).to_bytes(8, "little")],
    }.items():
        p = out / f"pt_{name}.pt"
        _zip_edit(good_view, p, {"/data.pkl": _patch_after_persid(pkl, ops)})
        case(f"torch tensor record with {name.replace('_', ' ')}", p, "CkptExplorerError")
    p = out / "pt_zip_offset_past_eof.pt"
    _zip_central_edit(good_pt, p, "/data/0", "local_header_offset", 0xFFFFFF00)
    case("torch zip record whose offset is past EOF", p, "CkptExplorerError")
    p = out / "pt_zip_size_overflow.pt"
    _zip_central_edit(good_pt, p, "/data/0", "file_size", 0xFFFFFFF0)
    case("torch zip record claiming 4 GiB", p, "CkptExplorerError")
    p = out / "pt_code_payload.pt"
    torch.save({"w": torch.ones(2), "x": _SystemPayload(marker)}, p)
    case("torch pickle whose payload would run os.system", p, "ok")
    for k, (name, payload) in enumerate(_pickle_bombs().items()):
        p = out / f"pt_bomb_{k}.pt"
        _zip_edit(good_pt, p, {"/data.pkl": payload})
        case(
            f"torch pickle bomb: {name}",
            p,
            "ok" if name.startswith("memo") else "UnsafeCheckpointError",
        )
    p = out / "pt_legacy_cut.pt"
    torch.save({"w": torch.randn(64)}, out / "_legacy.pt", _use_new_zipfile_serialization=False)
    legacy = (out / "_legacy.pt").read_bytes()
    p.write_bytes(legacy[: len(legacy) - 100])
    case("legacy torch file truncated", p, "TruncatedFileError")
    p = out / "pt_fake_zip.bin"
    p.write_bytes(b"PK\x03\x04" + os.urandom(200))
    case("zip magic then random bytes", p, "CkptExplorerError")

    def index_case(
        name: str, weight_map: object, extra: dict | None = None, error: str = "CkptExplorerError"
    ) -> Path:
        folder = out / f"idx_{name}"
        folder.mkdir()
        doc = {"metadata": {"total_size": 24}, "weight_map": weight_map, **(extra or {})}
        (folder / "model.safetensors.index.json").write_text(json.dumps(doc))
        case(f"index {name.replace('_', ' ')}", folder, error)
        return folder

    index_case(
        "missing_shard", {"a": "model-00001-of-00002.safetensors"}, error="CorruptCheckpointError"
    )
    index_case("dotdot", {"a": "../_good.safetensors"}, error="UnsafeCheckpointError")
    index_case("absolute", {"a": str(good_st.resolve())}, error="UnsafeCheckpointError")
    folder = index_case("symlink_out", {"a": "link.safetensors"}, error="UnsafeCheckpointError")
    os.symlink(good_st.resolve(), folder / "link.safetensors")
    folder = index_case("symlink_loop", {"a": "loop.safetensors"}, error="CkptExplorerError")
    os.symlink("loop.safetensors", folder / "loop.safetensors")
    index_case("weight_map_list", [1, 2])
    index_case("weight_map_values_not_str", {"a": 7})
    folder = out / "idx_not_json"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text("{ nope")
    case("index not JSON", folder, "CorruptCheckpointError")
    folder = out / "idx_deep_json"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text("[" * 200_000 + "]" * 200_000)
    case("index circular-deep JSON", folder, "CorruptCheckpointError")
    folder = out / "idx_huge_json"
    folder.mkdir()
    with open(folder / "model.safetensors.index.json", "wb") as f:
        f.truncate(300 * 2**20)  # sparse: 300 MiB of zeros
    case("index larger than the cap", folder, "CorruptCheckpointError")
    folder = out / "idx_bad_shard"
    folder.mkdir()
    (folder / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    doc = {"metadata": {"total_size": 24}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(doc))
    case("index naming a shard that is not a checkpoint", folder, "CorruptCheckpointError")

    p = out / "empty_file.bin"
    p.write_bytes(b"")
    case("empty file", p, "FormatDetectionError")
    p = out / "empty_dir"
    p.mkdir()
    case("empty directory", p, "FormatDetectionError")
    p = out / "dcp_bad_metadata"
    p.mkdir()
    (p / ".metadata").write_bytes(b"\x80\x04garbage")
    case("DCP folder with a corrupt .metadata", p, "CorruptCheckpointError")
    p = out / "ds_latest_escape"
    p.mkdir()
    (p / "latest").write_text("../../etc")
    case("DeepSpeed latest pointing outside", p, "UnsafeCheckpointError")
    (out / "corpus.json").write_text(json.dumps(cases, indent=2))
    return cases


if __name__ == "__main__":
    print(f"{len(make(Path(sys.argv[1])))} cases")
