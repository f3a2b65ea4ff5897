"""Compare of a GGUF export beside its source in the dashboard: the faithful / not faithful
banner, the tensors ranked by verdict (the planted fault first) with the export columns, and
the metadata / config rows hidden until asked for. Exports from llama.cpp's own converter
(tests/fixture_makers/gguf_maker.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.ui.state import AppState

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def root(real_checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, manifest = real_checkpoints("gguf")
    cases = manifest["cases"]
    root = tmp_path_factory.mktemp("exports")
    shutil.copytree(out / "hf", root / "hf")
    for case in ("fault_norm", "q8_0"):
        shutil.copyfile(out / cases[case]["path"], root / f"{case}.gguf")
    return root


class Shown:
    """The export block of a rendered Compare page: banner, checkbox, the two tables."""

    def __init__(self, block: Any) -> None:
        self.banner, self.show_hidden, self.body = block.objects

    @property
    def tensors(self) -> Any:
        return self.body[0].objects[0]

    @property
    def values(self) -> Any:
        return self.body[1].objects[0]


def _compare(root: Path, b: str) -> Shown:
    from ckpt_explorer.ui.components.compare import CompareView

    app = AppState(root)
    app.compare.param.update(a="hf", b=b)
    view = CompareView(app=app)
    app.compare.run(wait=True)
    assert app.compare.result is not None, app.compare.error
    found = [x for x in view._results if "export-verdict" in str(getattr(x, "objects", ""))]
    assert len(found) == 1  # one export block, right under the figures
    assert view._results.objects.index(found[0]) == 1
    return Shown(found[0])


def _text(obj: Any) -> str:
    return str(obj.object)


def test_planted_fault_is_the_banner_and_the_first_row(root: Path) -> None:
    shown = _compare(root, "fault_norm.gguf")
    banner = shown.banner
    assert "NOT FAITHFUL" in _text(banner) and "1 beyond budget" in _text(banner)
    assert banner.alert_type == "danger"
    rows = shown.tensors.value
    assert list(rows.columns) == [
        "name", "verdict", "quant", "budget_ratio", "budget", "max_abs", "export_tensor", "note",
    ]  # fmt: skip
    first = rows.iloc[0]
    assert first["name"] == "model.layers.0.input_layernorm.weight"
    assert first["verdict"] == "beyond_budget" and first["export_tensor"].startswith("blk.0")
    assert set(rows["verdict"].iloc[1:]) == {"exact"}


def test_metadata_and_config_rows_hidden_until_asked(root: Path) -> None:
    shown = _compare(root, "q8_0.gguf")
    assert "FAITHFUL" in _text(shown.banner) and "NOT" not in _text(shown.banner)
    keys = list(shown.values.value["key"])
    assert keys and all(k.startswith("export.") for k in keys)  # the checks stay
    assert set(shown.tensors.value["verdict"]) == {"within_budget", "exact"}
    shown.show_hidden.value = True
    keys = list(shown.values.value["key"])
    assert any(k.startswith("__metadata__.") for k in keys)
    assert any(k.startswith("config.json.") for k in keys)


def test_convert_form_writes_a_gguf(root: Path) -> None:
    """The Convert form offers --to gguf with its own types and runs it verified."""
    from ckpt_explorer.ui.components.convert import DTYPES, ConvertView, dtype_options

    app = AppState(root)
    view = ConvertView(app=app)
    assert "gguf" in view._target.options
    assert view._dtype.options == DTYPES
    app.convert.param.update(source="hf", target="gguf")
    assert view._dtype.options == dtype_options("gguf")
    assert list(dtype_options("gguf")) == ["default", "f32", "f16", "bf16", "q8_0"]
    app.convert.param.update(dtype="q8_0")
    app.convert.destination = app.convert.suggest_destination()
    assert app.convert.destination == "hf-gguf.gguf"
    assert app.convert.make_plan(), app.convert.error
    app.convert.run(wait=True)
    assert app.convert.result is not None and app.convert.result.verified
    assert (root / "hf-gguf.gguf").is_file()


@pytest.mark.parametrize(
    "verdict, title, alert",
    [
        ("faithful", "FAITHFUL", "success"),
        ("not_faithful", "NOT FAITHFUL", "danger"),
        ("cannot_tell", "CANNOT TELL", "warning"),
    ],
)
def test_the_banner_says_each_export_verdict(verdict: str, title: str, alert: str) -> None:
    """A tensor over a budget that does not bound its writer (weights moved before rounding)
    makes the export "cannot tell", shown as such and never as a red NOT FAITHFUL."""
    from ckpt_explorer.ui.components.export_compare import export_banner

    counts = {"exact": 3, "within_budget": 2, "beyond_budget": 0, "unpaired": 0}
    counts["cannot_tell"] = 1 if verdict == "cannot_tell" else 0
    export = {"faithful": verdict == "faithful", "verdict": verdict, **counts}
    banner = export_banner({"export": export})
    assert banner.alert_type == alert
    assert str(banner.object).startswith(f"**{title}**")
    assert ("cannot tell" in str(banner.object)) == (verdict == "cannot_tell")
