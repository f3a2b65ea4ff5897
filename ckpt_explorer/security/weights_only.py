"""Would ``torch.load(weights_only=True)`` refuse this pickle? Decided by torch's own tables.

The judgement uses the tables of the installed torch's ``_weights_only_unpickler``: the
protocol-2 renames of ``_read_global_instruction``, ``_blocklisted_modules``,
``_get_allowed_globals()``, the user's ``add_safe_globals`` table, and which opcodes its
``Unpickler`` supports (asked on a one-byte probe). Nothing of the file is unpickled.

Importing torch costs seconds, and ``scan`` must answer at once, so a copy of those tables is
kept in :mod:`.torch_tables`, stamped with the torch version it was taken from. The copy is used
only while it is exact: when the installed torch is that version (read from its package
metadata, without importing it) and torch is not imported yet (so no ``add_safe_globals`` call
can have changed the user table). Otherwise the live tables are read from torch. A test
compares the copy with the live tables; after a torch upgrade, refresh it with
``python -c "from ckpt_explorer.security.weights_only import write_tables; write_tables()"``.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import pickletools
import sys
from pathlib import Path
from typing import Any

from ..io.dist_version import installed_version
from . import torch_tables
from .pickle_machine import GlobalRef, PickleWalk


@dataclasses.dataclass(frozen=True)
class Refusal:
    """What torch's weights_only unpickler stops at first, and why."""

    offset: int
    what: str  # the global's full name, or the opcode
    why: str


@dataclasses.dataclass(frozen=True)
class Tables:
    """What torch's weights_only unpickler decides by (and inert.py's torch names)."""

    version: str
    import_mapping: dict[str, str]
    name_mapping: dict[tuple[str, str], tuple[str, str]]
    blocklisted_modules: frozenset[str]
    allowed_globals: frozenset[str]
    supported_opcodes: frozenset[str]
    torch_names: frozenset[str]  # dtypes, layouts, memory formats, qschemes, storages
    return_types: frozenset[str] = frozenset()  # torch.return_types structseq names


def static_tables() -> Tables:
    t = torch_tables
    return Tables(
        t.TORCH_VERSION,
        dict(t.IMPORT_MAPPING),
        dict(t.NAME_MAPPING),
        t.BLOCKLISTED_MODULES,
        t.ALLOWED_GLOBALS,
        t.SUPPORTED_OPCODES,
        t.TORCH_NAMES,
        t.RETURN_TYPES,
    )


def installed_torch_version() -> str | None:
    """The installed torch's version from its package metadata (torch is not imported)."""
    return installed_version("torch")


def live_tables() -> Tables:
    """The installed torch's tables, read from torch itself (imports torch)."""
    import pickle

    import torch
    from torch import _weights_only_unpickler as wo
    from torch._utils import IMPORT_MAPPING, NAME_MAPPING

    supported = set()
    for op in pickletools.opcodes:
        try:
            wo.Unpickler(io.BytesIO(op.code.encode("latin-1"))).load()
        except pickle.UnpicklingError as e:
            if str(e).startswith("Unsupported operand"):
                continue
        except Exception:
            pass
        supported.add(op.name)
    allowed = set(wo._get_allowed_globals())  # the user's table is added per call
    kinds = (torch.dtype, torch.layout, torch.memory_format, torch.qscheme)
    names = {n for n, v in vars(torch).items() if isinstance(v, kinds)}
    names |= {n for n, v in vars(torch).items() if isinstance(v, type) and n.endswith("Storage")}
    import torch.return_types as rt

    structseq = {
        n
        for n, v in vars(rt).items()
        if isinstance(v, type) and issubclass(v, tuple) and hasattr(v, "n_fields")
    }
    return Tables(
        installed_torch_version() or torch.__version__,
        dict(IMPORT_MAPPING),
        dict(NAME_MAPPING),
        frozenset(wo._blocklisted_modules),
        frozenset(allowed),
        frozenset(supported),
        frozenset(names | {"Size", "device", "Tensor"}),
        frozenset(structseq),
    )


@functools.cache
def _static_if_exact() -> Tables | None:
    static = static_tables()
    return static if installed_torch_version() == static.version else None


def tables() -> Tables:
    """The static copy where it is exact for this process, else the live tables."""
    if "torch" not in sys.modules:
        static = _static_if_exact()
        if static is not None:
            return static
    base = _live_cached()
    from torch import _weights_only_unpickler as wo

    user = frozenset(wo._get_user_allowed_globals())  # add_safe_globals may change it anytime
    if not user:
        return base
    return dataclasses.replace(base, allowed_globals=base.allowed_globals | user)


@functools.cache
def _live_cached() -> Tables:
    return live_tables()


def torch_name(data: Any, ref: GlobalRef, table: Tables | None = None) -> str:
    """The full name torch's unpickler looks up for a GLOBAL opcode (its own renames)."""
    t = table or tables()
    first = data.find(b"\n", ref.offset + 1)
    end = data.find(b"\n", first + 1) + 1
    stream = io.BytesIO(bytes(data[ref.offset + 1 : end]))
    # as torch's _read_global_instruction
    module = stream.readline()[:-1].decode("utf-8")
    name = stream.readline()[:-1].decode("utf-8")
    if (module, name) in t.name_mapping:
        module, name = t.name_mapping[(module, name)]
    elif module in t.import_mapping:
        module = t.import_mapping[module]
    return f"{module}.{name}"


def global_refusal(full: str, table: Tables | None = None) -> str | None:
    """Why torch refuses the global ``full`` (None: allowed)."""
    t = table or tables()
    module = full.rsplit(".", 1)[0] if "." in full else full
    if module in t.blocklisted_modules:
        return f"its module {module} is blocked by torch"
    if full in t.allowed_globals:
        return None
    return "not an allowed global"


def refusals(data: Any, record: PickleWalk) -> list[Refusal]:
    """What torch's weights_only unpickler would refuse in ``record``, first (where it stops)
    first."""
    table = tables()
    found: list[Refusal] = []
    known = {op.name for op in pickletools.opcodes}
    for name, offset in record.opcodes.items():
        if name in known and name not in table.supported_opcodes:
            found.append(Refusal(offset, name, f"opcode {name} is not supported"))
    allowed: dict[GlobalRef, bool] = {}
    for ref in record.globals:
        if ref.opcode != "GLOBAL":
            continue  # STACK_GLOBAL / INST / EXT: refused above as unsupported opcodes
        full = torch_name(data, ref, table)
        why = global_refusal(full, table)
        allowed[ref] = why is None
        if why is not None:
            found.append(Refusal(ref.offset, full, why))
    for call in record.calls:
        if call.target is not None and not allowed.get(call.target, False):
            continue  # already refused at the global, or an opcode torch does not have
        if call.opcode == "BUILD" and call.on_global_itself:
            found.append(Refusal(call.offset, call.opcode, "BUILD on a class or function"))
        elif call.opcode in ("APPEND", "APPENDS") and call.target is not None:
            found.append(Refusal(call.offset, call.opcode, "APPEND to an object not a list"))
    return sorted(found, key=lambda r: r.offset)


def _literal(value: Any) -> str:
    """``repr`` with double quotes (what ruff format writes) for str and tuples of str."""
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(v) for v in value) + ")"
    return json.dumps(value)


def render_tables(t: Tables) -> str:
    """Python source of :mod:`.torch_tables` holding ``t``."""

    def items(values: Any) -> str:
        return "".join(f"        {_literal(v)},\n" for v in sorted(values))

    def pairs(mapping: dict[Any, Any]) -> str:
        return "".join(f"    {_literal(k)}: {_literal(v)},\n" for k, v in sorted(mapping.items()))

    def frozen(values: Any) -> str:
        return f"frozenset(\n    {{\n{items(values)}    }}\n)"

    return (
        '"""Copy of torch\'s weights_only tables, generated by ``write_tables()`` of\n'
        'weights_only.py (see its docstring)."""\n\n'
        f"TORCH_VERSION = {_literal(t.version)}\n\n"
        f"IMPORT_MAPPING = {{\n{pairs(t.import_mapping)}}}\n\n"
        f"NAME_MAPPING = {{\n{pairs(t.name_mapping)}}}\n\n"
        f"BLOCKLISTED_MODULES = {frozen(t.blocklisted_modules)}\n\n"
        f"ALLOWED_GLOBALS = {frozen(t.allowed_globals)}\n\n"
        f"SUPPORTED_OPCODES = {frozen(t.supported_opcodes)}\n\n"
        f"TORCH_NAMES = {frozen(t.torch_names)}\n\n"
        f"RETURN_TYPES = {frozen(t.return_types)}\n"
    )


def write_tables() -> Path:
    """Rewrite :mod:`.torch_tables` from the installed torch (after a torch upgrade)."""
    path = Path(__file__).with_name("torch_tables.py")
    path.write_text(render_tables(live_tables()), encoding="utf-8")
    return path
