"""Would ``torch.load(weights_only=True)`` refuse this pickle? Decided by the installed torch.

Names go through torch's own functions (``_read_global_instruction`` for the protocol-2
renames, ``_blocklisted_modules``, ``_get_allowed_globals()`` and the user's
``add_safe_globals`` table); whether an opcode is supported is asked of torch's own
``_weights_only_unpickler.Unpickler`` on a one-byte probe. Nothing of the file is unpickled.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from typing import Any

from .opcodes import Buffer, GlobalRef, PickleRecord


@dataclass(frozen=True)
class Refusal:
    """What torch's weights_only unpickler stops at first, and why."""

    offset: int
    what: str  # the global's full name, or the opcode
    why: str


def _wo() -> Any:
    from torch import _weights_only_unpickler as wo

    return wo


def torch_name(data: Buffer, ref: GlobalRef) -> str:
    """The full name torch's unpickler looks up for a GLOBAL opcode (its own renames)."""
    first = data.find(b"\n", ref.offset + 1)
    end = data.find(b"\n", first + 1) + 1
    stream = io.BytesIO(bytes(data[ref.offset + 1 : end]))
    module, name = _wo()._read_global_instruction(stream.readline)
    return f"{module}.{name}"


def global_refusal(full: str) -> str | None:
    """Why torch refuses the global ``full`` ("" when it is allowed; None: allowed)."""
    wo = _wo()
    module = full.rsplit(".", 1)[0] if "." in full else full
    if module in wo._blocklisted_modules:
        return f"its module {module} is blocked by torch"
    if full in wo._get_allowed_globals() or full in wo._get_user_allowed_globals():
        return None
    return "not an allowed global"


@functools.cache
def opcode_supported(code: int) -> bool:
    """Ask torch's weights_only Unpickler about one opcode byte, with nothing after it."""
    import pickle

    try:
        _wo().Unpickler(io.BytesIO(bytes([code]))).load()
    except pickle.UnpicklingError as e:
        return not str(e).startswith("Unsupported operand")
    except Exception:
        return True
    return True


def refusals(data: Buffer, record: PickleRecord) -> list[Refusal]:
    """What torch's weights_only unpickler would refuse in ``record``, first (where it stops)
    first."""
    import pickletools

    codes = {op.name: op.code.encode("latin-1")[0] for op in pickletools.opcodes}
    found: list[Refusal] = []
    for name, offset in record.opcodes.items():
        if name in codes and not opcode_supported(codes[name]):
            found.append(Refusal(offset, name, f"opcode {name} is not supported"))
    allowed: dict[GlobalRef, bool] = {}
    for ref in record.globals:
        if ref.opcode != "GLOBAL":
            continue  # STACK_GLOBAL / INST / EXT: refused above as unsupported opcodes
        full = torch_name(data, ref)
        why = global_refusal(full)
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
