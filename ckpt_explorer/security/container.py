"""``security.container``: zip tricks torch tolerates, TorchScript archives, unloadable pickles."""

from __future__ import annotations

import zipfile
from collections import Counter
from pathlib import Path

from ..validate.findings import Finding
from .zip_layout import crc_ok, is_pt2, members, read_member

RULE = "security.container"
_HINT = "Re-save the checkpoint with torch.save (or as safetensors) from a trusted copy."
_SMALL = 1 << 20
PT2_MESSAGE = (
    "torch.export ExportedProgram archive (.pt2): torch.export.load unpickles its nested "
    "sample inputs / pickled constants with a weights_only=False fallback"
)
PT2_HINT = (
    "Load it with torch.export.load only if you trust its source; each nested pickle is "
    "judged above."
)  # records outside data/ up to this size are CRC-checked (header-only)


def zip_findings(path: Path, label: str) -> list[Finding]:
    """Duplicate members, local/central name mismatches, CRC errors, odd names, TorchScript."""
    out: list[Finding] = []

    def add(message: str, severity: str = "error", hint: str = _HINT) -> None:
        out.append(Finding(RULE, severity, f"{label}: {message}", hint, file=label))

    try:
        with zipfile.ZipFile(path) as zf, open(path, "rb") as raw:
            entries = members(zf, raw)
            names = [m.info.filename for m in entries]
            for name, n in sorted(Counter(names).items()):
                if n > 1:
                    add(
                        f"zip member {name} appears {n} times; a reader that takes the last "
                        "copy and one that takes the first read different data"
                    )
            tops = {n.split("/", 1)[0] for n in names}
            for m in entries:
                name = m.info.filename
                if m.local_name is None:
                    add(f"zip member {name} has no local header at byte {m.info.header_offset}")
                    continue
                if m.local_name != name:
                    add(
                        f"zip member {name} is named {m.local_name!r} in its local header: "
                        "tools that read the local header see another file"
                    )
                if name.startswith("/") or ".." in name.split("/") or "\\" in name:
                    add(f"zip member {name} points outside the archive")
                rest = name.partition("/")[2]
                if rest.startswith("data/") or m.info.file_size > _SMALL:
                    continue
                try:
                    data = read_member(raw, m)
                except ValueError as e:
                    add(f"zip member {name} cannot be read: {e}")
                    continue
                if not crc_ok(m, data):
                    add(f"zip member {name} does not match its CRC: it was altered after saving")
            if len(tops) > 1 and any(n.endswith("/data.pkl") for n in names):
                add(f"torch archive with {len(tops)} top folders ({', '.join(sorted(tops))})")
            if any(n.partition("/")[2].startswith("code/") for n in names):
                add(
                    "a TorchScript archive: it carries model code (code/) that torch.jit.load "
                    "runs, and torch.load(weights_only=True) refuses it",
                    "warning",
                    "Load it with torch.jit.load only if you trust its source; weights alone "
                    "travel safer as safetensors.",
                )
            if is_pt2(zf, raw):
                add(PT2_MESSAGE, "info", PT2_HINT)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        pass  # the caller reports the file as unreadable
    return out
