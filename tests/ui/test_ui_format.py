"""Numbers for people in every table, the 2-D slice wording, 1 − cos in the Compare table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer.ui.components.common import table
from ckpt_explorer.ui.components.compare import TITLES, diff_rows
from ckpt_explorer.ui.components.resume import facts_frame
from ckpt_explorer.ui.numbers import display_frame, display_number, fmt_number, fmt_value
from ckpt_explorer.ui.tensor_stats import ordinal, slice_2d


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (0.00020999999999999998, "0.00021"),  # lr after float arithmetic
        (6.0, "6"),  # a step saved as a float
        (6, "6"),
        (np.int64(7), "7"),
        (np.float32(0.1), "0.1"),
        (0.1 + 0.2, "0.3"),
        (1e-08, "1e-08"),
        (1.23456789e-08, "1.23457e-08"),
        (-2.5, "-2.5"),
        (123456.7, "123457"),
        (1e20, "1e+20"),
        (float(2**53 + 2), "9.0072e+15"),  # an integral float past exact integers: rounded
        (float("nan"), "NaN"),
        (1.5e12, "1.5e+12"),  # large magnitudes: scientific
        (5e-07, "5e-07"),
        (0.0, "0"),
        (1500000000000, "1500000000000"),  # an integer stays an integer
        (float("-inf"), "-inf"),
        (True, "True"),
    ],
)
def test_fmt_number(x: object, text: str) -> None:
    assert fmt_number(x) == text


def test_display_number_keeps_numbers_numeric() -> None:
    assert display_number(0.00020999999999999998) == 0.00021
    assert isinstance(display_number(6.0), int) and display_number(6.0) == 6
    assert display_number("6.0") == "6.0" and display_number(None) is None
    assert display_number(True) is True
    assert math.isnan(display_number(float("nan")))


def test_fmt_value_formats_numbers_inside_values() -> None:
    assert fmt_value([0.00020999999999999998, 6.0]) == "[0.00021, 6]"
    assert fmt_value((0.9, 0.999)) == "[0.9, 0.999]"  # JSON-like, not Python's repr
    assert fmt_value((1.0,)) == "[1]"
    assert fmt_value({"lr": 3e-4 * 0.7, "name": "adam"}) == '{"lr": 0.00021, "name": "adam"}'
    assert fmt_value("adam") == "adam" and fmt_value("") == '""' and fmt_value(None) == "null"
    assert fmt_value(False) == "false" and fmt_value([None, True]) == "[null, true]"
    long = fmt_value(list(range(100)))
    assert len(long) == 160 and long.endswith("...")


def test_every_table_shows_numbers_by_the_one_rule() -> None:
    df = pd.DataFrame(
        {
            "step": [6.0, 12.0],
            "lr": [0.00020999999999999998, 1.0],
            "missing": [0.5, float("nan")],
            "betas": [(0.9, 0.999), [0.9, 0.95]],
            "name": ["a", None],
        }
    )
    out = display_frame(df)
    assert out["step"].dtype == np.int64 and list(out["step"]) == [6, 12]
    assert list(out["lr"]) == [0.00021, 1.0]
    assert out["missing"][0] == 0.5 and math.isnan(out["missing"][1])
    assert list(out["betas"]) == ["[0.9, 0.999]", "[0.9, 0.95]"]
    assert out["name"].equals(df["name"])
    mixed = display_frame(pd.DataFrame({"v": pd.Series([None, 6.0, "x"], dtype=object)}))
    assert list(mixed["v"]) == [None, 6, "x"]
    assert df["lr"][0] == 0.00020999999999999998  # the caller's frame is not changed
    shown = table(df).value
    assert list(shown["lr"]) == [0.00021, 1.0] and list(shown["step"]) == [6, 12]


def test_doctor_facts_show_integer_steps() -> None:
    facts = {"optimizer step": (6.0, 8.0), "lr": (0.00020999999999999998, 3e-4)}
    df = facts_frame(facts)
    assert list(df["A"]) == ["6", "0.00021"] and list(df["B"]) == ["8", "0.0003"]
    assert list(df["as expected"]) == ["NO", "NO"]  # no expectation given: B should equal A


def test_doctor_facts_expect_b_to_be_a_plus_the_steps_run() -> None:
    from ckpt_explorer.resume.doctor import expected_b

    facts = {
        "optimizer step": (6.0, 8.0),
        "scheduler steps": (6, 2),
        "run position": (6, 8),
        "RNG state saved": (False, False),
    }
    df = facts_frame(facts, expected_b(facts))
    assert list(df["B expected"]) == ["8", "8", "8", "false"]
    assert list(df["as expected"]) == ["yes", "NO", "yes", "yes"]
    unknown = {"optimizer step": (6, 8), "run position": (None, 8)}
    df = facts_frame(unknown, expected_b(unknown))
    assert list(df["A"]) == ["6", "not recorded"]
    assert list(df["as expected"]) == ["unknown", "unknown"]


def test_ordinal() -> None:
    cases = [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "23rd",
        "101st",
        "111th",
        "112th",
    ]
    assert [ordinal(int(c[:-2])) for c in cases] == cases


def test_slice_label_says_which_rows_and_columns() -> None:
    _, label = slice_2d(torch.zeros(300, 100))
    assert label == "[:, :] (every 3rd row, every column)"
    _, label = slice_2d(torch.zeros(4, 256, 2000))
    assert label == "[0, :, :] (every 2nd row, every 16th column)"
    _, label = slice_2d(torch.zeros(20, 30))
    assert label == "[:, :]"


def test_compare_table_shows_one_minus_cos(tmp_path: Path) -> None:
    """Two states one small step apart: cos rounds to 1, the table shows 1 − cos itself."""
    from ckpt_explorer.diff import diff_checkpoints

    g = torch.Generator().manual_seed(9)
    a = torch.randn(4000, generator=g, dtype=torch.float64)
    b = a + 1e-4 * torch.randn(4000, generator=g, dtype=torch.float64)
    save_file({"w": a.float()}, str(tmp_path / "a.safetensors"))
    save_file({"w": b.float()}, str(tmp_path / "b.safetensors"))
    r = diff_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    row = r.tensors[0]
    assert row.one_minus_cos is not None and 1e-10 < row.one_minus_cos < 1e-7
    shown = table(diff_rows(r.tensors, True), titles=TITLES)
    assert shown.titles["one_minus_cos"] == "1−cos" and "cosine" not in shown.value
    value = shown.value["one_minus_cos"][0]
    assert value == pytest.approx(row.one_minus_cos, rel=1e-5) and value != 0
