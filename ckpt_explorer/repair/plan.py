"""A repair plan: the one small file to write into a damaged folder, or why not."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RepairPlan:
    """What ``run_repair`` writes (``name`` in ``folder``), from which sources, or a refusal.

    Attributes:
        folder: the damaged folder.
        what: the layout being repaired, e.g. "ColossalAI sharded optimizer index".
        name: the file to write ("" when refused).
        content: its bytes, exactly as the original writer writes them.
        sources: the files it was rebuilt from (never written to).
        refused: why nothing can be written ("" when the answer is unique).
        notes: conventions chosen and what is left out.
        expect: tensor (or id) name -> file, to verify the result against.
    """

    folder: Path
    what: str
    name: str = ""
    content: bytes = b""
    sources: tuple[str, ...] = ()
    refused: str = ""
    notes: tuple[str, ...] = ()
    expect: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.refused

    def describe(self) -> str:
        if self.refused:
            return f"{self.folder}: cannot repair ({self.what}): {self.refused}"
        lines = [
            f"{self.folder}: {self.what}",
            f"  write {self.name} ({len(self.content)} bytes) from {len(self.sources)} file(s): "
            + ", ".join(self.sources[:4])
            + (" ..." if len(self.sources) > 4 else ""),
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_frame(self) -> pd.DataFrame:
        """The file to write, then the files it is rebuilt from and the notes (kind, item);
        one ``refused`` row when nothing can be written."""
        import pandas as pd

        if self.refused:
            rows = [{"kind": "refused", "item": self.refused}]
        else:
            rows = [{"kind": "write", "item": self.name}]
            rows += [{"kind": "source", "item": s} for s in self.sources]
            rows += [{"kind": "note", "item": n} for n in self.notes]
        return pd.DataFrame(rows, columns=["kind", "item"])

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "what": self.what,
            "name": self.name,
            "bytes": len(self.content),
            "sources": list(self.sources),
            "refused": self.refused,
            "notes": list(self.notes),
        }


def index_bytes(metadata: dict[str, Any], weight_map: dict[str, str]) -> bytes:
    """An index as HF and ColossalAI write it: ``json.dumps(indent=2)`` plus a newline."""
    doc = {"metadata": metadata, "weight_map": weight_map}
    return (json.dumps(doc, indent=2) + "\n").encode("utf-8")
