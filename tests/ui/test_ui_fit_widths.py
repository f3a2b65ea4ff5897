"""A fitted table's column settings (``table(..., fit=True)``): each column at least as wide as
its longest unbreakable word, number or title, words breaking only after "." "/" "_", empty
columns hidden, and the order in which columns fold under their rows where the page is narrow
(the browser side is tests/ui/test_ui_narrow_results.py)."""

from __future__ import annotations

import pandas as pd

from ckpt_explorer.ui.components.common import (
    CELL_PX,
    CHAR_PX,
    JS_WORDS,
    NAME_BREAKS,
    WORD_BREAKS,
    _longest_word,
    table,
)
from ckpt_explorer.ui.components.compare import alike_sides


def columns(tbl: object) -> dict[str, dict[str, object]]:
    return {c["field"]: c for c in tbl._configuration["columns"]}  # type: ignore[attr-defined]


def test_words_break_only_after_dot_slash_underscore() -> None:
    """A rule id breaks into its parts, never inside one; a number never at its point."""
    assert WORD_BREAKS.split("integrity.total_size_convention") == [
        "integrity.",
        "total_",
        "size_",
        "convention",
    ]
    assert WORD_BREAKS.split("0.5068359375") == ["0.5068359375"]
    assert NAME_BREAKS.split("model.layers.0.self_attn.q_proj") == [
        "model.",
        "layers.",
        "0.",
        "self_attn.",
        "q_proj",
    ]
    assert _longest_word(["total_size 0.5068359375 is a float"], WORD_BREAKS) == 12
    assert "<wbr>" in JS_WORDS and "[\\/_]" in JS_WORDS  # the browser's rule is the same


def test_fitted_columns_hold_their_longest_word() -> None:
    df = pd.DataFrame(
        {
            "rule": ["integrity.total_size_convention", "bundle.missing_rng"],
            "severity": ["info", "warning"],
            "tensor": ["", ""],
            "value": [0.000990445, 12.5],
        }
    )
    cols = columns(table(df, fit=True))
    assert cols["rule"]["minWidth"] >= CHAR_PX * len("convention") + CELL_PX
    assert cols["severity"]["minWidth"] >= 8 * len("severity")  # the title whole
    assert cols["value"]["minWidth"] >= CHAR_PX * len("0.000990445") + CELL_PX
    assert cols["rule"]["responsive"] == 0  # the first column never folds
    tbl = table(df, fit=True)
    assert "tensor" in tbl.hidden_columns  # empty in every row: its width given back
    assert tbl._configuration["responsiveLayout"] == "collapse"


def test_fold_first_folds_before_the_rest() -> None:
    df = pd.DataFrame({"name": ["a.b"], "x": [1.5], "part": ["optimizer"], "state": ["m"]})
    cols = columns(table(df, fit=True, fold_first=("state", "part")))
    rank = {c: cols[c]["responsive"] for c in ("name", "x", "part", "state")}
    assert rank["state"] > rank["part"] > rank["x"] > rank["name"] == 0


def test_compare_shows_one_dtype_column_when_both_sides_agree() -> None:
    rows = pd.DataFrame(
        {
            "dtype_a": ["float32", "bfloat16"],
            "dtype_b": ["float32", "bfloat16"],
            "shape_a": ["2 × 3", "4"],
            "shape_b": ["2 × 3", "5"],
        }
    )
    assert alike_sides(rows) == ["dtype"]
    assert alike_sides(rows.drop(columns="dtype_b")) == []  # one side only: nothing merged
