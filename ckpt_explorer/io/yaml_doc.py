"""Small YAML files that writers leave beside their weights (configs, hyperparameters)."""

from __future__ import annotations

from typing import Any

from .location import Location

MAX_YAML_BYTES = 1 << 20


def yaml_mapping(path: Location) -> dict[str, Any] | None:
    """A small YAML mapping parsed with ``yaml.safe_load`` (None when absent, larger than
    :data:`MAX_YAML_BYTES`, unreadable or not a mapping)."""
    if not path.is_file() or path.stat().st_size > MAX_YAML_BYTES:
        return None
    try:
        import yaml

        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception:
        return None
    return doc if isinstance(doc, dict) else None
