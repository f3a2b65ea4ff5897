"""Every custom model of the dashboard is defined before any page is drawn.

Panel tells a page about a ``JSComponent`` class only through the documents drawn after the
class was defined, or when the class is first defined inside that page's session. A class
first defined elsewhere after a page was drawn (serve's idle warm-up thread importing the
views) reaches that page unknown: "could not resolve type 'ModuleTree1'" when its tab opens.
``serve`` imports ``ui.layout`` before it listens, so importing that module must define them all.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import importlib, json, pkgutil, sys
import ckpt_explorer.ui.layout
defined_first = set(sys.modules)
from panel.custom import JSComponent
import ckpt_explorer.ui as ui
for m in pkgutil.walk_packages(ui.__path__, "ckpt_explorer.ui."):
    importlib.import_module(m.name)
def subclasses(c):
    for s in c.__subclasses__():
        yield s
        yield from subclasses(s)
ours = sorted({c.__module__ for c in subclasses(JSComponent) if c.__module__.startswith("ckpt_explorer.")})
print(json.dumps({"ours": ours, "late": [m for m in ours if m not in defined_first]}))
"""


def test_importing_the_layout_defines_every_custom_model() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert "ckpt_explorer.ui.components.module_tree" in found["ours"], found
    assert found["late"] == [], f"custom models defined only after ui.layout: {found['late']}"
