"""The dashboard's only door to the diff, validation, resume and conversion engines.

Each engine is imported when a view uses it; a missing one makes :func:`available` False and
the view says "not available in this version". Results are passed on as the engines return
them; the helpers here only turn them into rows a table can show.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# engine -> (module, entry points it must have)
ENGINES: dict[str, tuple[str, tuple[str, ...]]] = {
    "diff": ("ckpt_explorer.diff", ("diff_checkpoints",)),
    "validate": ("ckpt_explorer.validate", ("validate_checkpoint",)),
    "resume": ("ckpt_explorer.resume", ("resume_doctor",)),
    "convert": ("ckpt_explorer.convert", ("plan_conversion", "run_conversion")),
    "security": ("ckpt_explorer.security", ("view_security_findings", "unsafe_paths")),
    "loadable": ("ckpt_explorer.loadable", ("loader_table", "has_table")),
}


def engine(name: str) -> Any | None:
    """The engine's module when it is present with its entry points, else None."""
    module, needs = ENGINES[name]
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return mod if all(hasattr(mod, n) for n in needs) else None


def available(name: str) -> bool:
    return engine(name) is not None


def accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (engines grow options over time)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def as_dict(obj: Any) -> dict[str, Any]:
    """A row for a table from a dataclass, a mapping or an object with ``to_dict``."""
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "to_dict"):
        return dict(obj.to_dict())
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return {"value": repr(obj)}


def frame_of(report: Any, attr: str) -> pd.DataFrame:
    """``report.to_frame()``/``to_dataframe()`` when it has one, else ``report.<attr>`` rows."""
    import pandas as pd

    for method in ("to_frame", "to_dataframe"):
        if hasattr(report, method):
            df = getattr(report, method)()
            if isinstance(df, pd.DataFrame):
                return df
    items = getattr(report, attr, report)
    if callable(items):
        items = items()
    return pd.DataFrame([as_dict(x) for x in items or []])


def pick(row: dict[str, Any], *keys: str, default: Any = None) -> Any:
    """The first of ``keys`` present and non-empty in ``row``."""
    for k in keys:
        v = row.get(k)
        if v not in (None, "", [], ()):
            return v
    return default
