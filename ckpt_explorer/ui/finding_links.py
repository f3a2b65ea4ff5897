"""Where a validation finding leads: the rows of the weight map it is about, the values it
names, or why there is nothing to open (never an empty weight map without a word)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .subject import code


@dataclass(frozen=True)
class FindingLink:
    """``opens``: ``tensor`` (open it), ``file`` (filter the weight map to it), ``param``
    (filter to an optimizer state id), ``values`` (the Overview's Values table) or ``none``;
    ``target``: the tensor, file, filter or key; ``why``: what the page says (Markdown)."""

    opens: str
    target: str = ""
    why: str = ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def finding_link(
    row: dict[str, Any], tensors: set[str], tensor_files: set[str], value_keys: list[str]
) -> FindingLink:
    """Where ``row`` (a finding: ``tensor``, ``file``, ``param_id``) leads in a checkpoint with
    ``tensors`` (names), ``tensor_files`` (files holding a tensor) and ``value_keys`` (the
    Overview's Values rows)."""
    tensor, file = _text(row.get("tensor")), _text(row.get("file")).rstrip("/")
    if tensor and tensor in tensors:
        return FindingLink("tensor", tensor)
    if file:
        hits = sorted(f for f in tensor_files if f == file or f.endswith("/" + file))
        under = sorted(f for f in tensor_files if f.startswith(file + "/"))
        if hits:
            return FindingLink("file", hits[0])
        if under:  # a part's folder: its files' tensors
            return FindingLink("file", file + "/")
        keys = [k for k in value_keys if k == file or k.startswith((file + "/", file + "."))]
        if keys:
            return FindingLink(
                "values",
                file,
                f"{code(file)} holds values, not tensors: its fields are in the Overview's "
                f"Values table ({len(keys)} rows).",
            )
        if file.endswith(".index.json"):
            return FindingLink(
                "none",
                why=f"{code(file)} is an index: it names the shard of each tensor and holds no "
                "tensor itself, so the weight map has no row for it; the finding is about the "
                "index's own content.",
            )
        return FindingLink(
            "none", why=f"{code(file)} holds no tensor: the weight map has no row for it."
        )
    pid = row.get("param_id")
    if isinstance(pid, int | float) and not (isinstance(pid, float) and math.isnan(pid)):
        return FindingLink("param", f"state.{int(pid)}.")
    if tensor:
        return FindingLink("none", why=f"{code(tensor)} is not a tensor of this checkpoint.")
    return FindingLink(
        "none",
        why="This finding is about the checkpoint as a whole: it names no tensor or file to "
        "open; its hint says what to do.",
    )
