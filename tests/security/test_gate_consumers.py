"""The consumer table and the walk stay together: every module and view the table names
exists, and every view of ``views*.py`` serves a consumer of the table."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import ckpt_explorer.security as security
from ckpt_explorer.security.consumers import CONSUMERS, HELPERS, table_markdown

_PKG = "ckpt_explorer.security"


def _view_modules() -> list[str]:
    return [m.name for m in pkgutil.iter_modules(security.__path__) if m.name.startswith("views")]


def test_every_module_and_view_named_exists() -> None:
    for c in CONSUMERS:
        for name in c.modules:
            importlib.import_module(f"{_PKG}.{name}")
        for view in c.views:
            module, func = view.rsplit(".", 1)
            assert callable(getattr(importlib.import_module(f"{_PKG}.{module}"), func)), view


def test_every_view_serves_a_listed_consumer() -> None:
    listed = {v for c in CONSUMERS for v in c.views} | set(HELPERS)
    found = set()
    for module in _view_modules():
        mod = importlib.import_module(f"{_PKG}.{module}")
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__ and name[0] != "_":
                found.add(f"{module}.{name}")
    assert found, "no views found"
    assert found - listed == set(), "views no consumer in consumers.py names"
    assert {v for v in listed if v.split(".")[0].startswith("views")} <= found


def test_the_issue_consumers_are_in_the_table() -> None:
    names = " ".join(c.name for c in CONSUMERS)
    for wanted in (
        "torch.load (zip)",
        "torch.load (legacy)",
        "torch.load (tar)",
        "pickle.load",
        "joblib.load",
        "pandas.read_pickle",
        "numpy.load",
        "torch.distributed.checkpoint",
        "DeepSpeed",
        "accelerate",
        "from_pretrained",
        "site .pth",
        "import of the working folder",
        "torch.jit.load",
    ):
        assert wanted in names, wanted
    assert table_markdown().count("\n") == len(CONSUMERS) + 1


def test_reliability_md_prints_the_table() -> None:
    """RELIABILITY.md's consumer table is the one in the code, word for word."""
    text = (Path(__file__).parent.parent.parent / "RELIABILITY.md").read_text()
    start = text.index("<!-- consumers table:")
    body = text[text.index("\n", start) + 1 : text.index("<!-- end of consumers table -->")]
    assert body.strip() == table_markdown().strip()
