"""The dashboard's code uses no Panel API deprecated for Panel 2.0: a widget is labelled with
``label=`` (``name=`` warns "Widget.name is deprecated") and a button coloured with ``color=``
(``button_type=``). The served-page log test sees only the views it opens; this reads every
widget built anywhere in the package, the export Compare and the Convert form included."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import panel as pn

PACKAGE = Path(__file__).resolve().parents[2] / "ckpt_explorer"


def _widget_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls of ``pn.widgets.X(...)`` (not ``X.from_param``, whose ``name`` sets the parameter)."""
    out = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            continue
        owner = n.func.value
        if isinstance(owner, ast.Attribute) and owner.attr == "widgets":
            out.append(n)
    return out


def test_no_widget_is_built_with_a_deprecated_keyword() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in _widget_calls(ast.parse(path.read_text(encoding="utf-8"))):
            for kw in call.keywords:
                if kw.arg in ("name", "button_type"):
                    bad.append(f"{path.relative_to(PACKAGE)}:{call.lineno}: {kw.arg}=")
    assert not bad, "use label= / color=:\n" + "\n".join(bad)


def test_the_scan_would_see_a_deprecated_keyword() -> None:
    """The scan is not blind: the keyword it looks for really warns in the installed Panel, and
    a call written that way is found."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        pn.widgets.Checkbox(name="x")
    assert any("deprecated" in str(w.message) for w in seen)
    tree = ast.parse('pn.widgets.Checkbox(name="x")')
    assert [kw.arg for c in _widget_calls(tree) for kw in c.keywords] == ["name"]
