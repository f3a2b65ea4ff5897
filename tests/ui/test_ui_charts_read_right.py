"""Charts that cannot mislead: a lone point is drawn with its value on an axis holding it
and zero, compared magnitudes stand on zero, powers of ten read 1e-10 (never "100p")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ckpt_explorer.demo import make_demo

    return make_demo(tmp_path_factory.mktemp("charts") / "demo")


def test_a_single_lr_point_shows_its_value_on_an_axis_that_holds_it(
    demo: Path, tmp_path: Path
) -> None:
    from ckpt_explorer.timeline import build_timeline
    from ckpt_explorer.ui.components.timeline_view import lines_figure

    shutil.copytree(demo / "run" / "step-6", tmp_path / "run" / "step-6")
    t = build_timeline(tmp_path / "run", cache_dir=None)
    [lr] = t.series()["lr"].values()
    value = lr[0][0] if isinstance(lr[0], list) else lr[0]
    assert 0 < value < 1e-3  # the demo's LR at step 6 (2.1e-4)
    fig = lines_figure(t, "", t.series()["lr"], "lr")
    low, high = fig.layout.yaxis.range
    assert low <= 0 < value < high < 1e-3  # not −0.5…1, where 2.1e-4 reads as 0
    [trace] = fig.data
    assert "text" in trace.mode and trace.text[0] == "0.00021"


def test_compare_bars_stand_on_zero(demo: Path) -> None:
    from ckpt_explorer.diff import diff_checkpoints
    from ckpt_explorer.ui.components.compare import CompareView

    result = diff_checkpoints(demo / "resumed_from", demo / "after_resume")
    fig = CompareView._layer_plot(result).object
    for axis in (fig.layout.yaxis, fig.layout.yaxis2):
        assert axis.type != "log" and axis.rangemode == "tozero"


def test_small_values_are_labelled_as_powers_of_ten() -> None:
    import torch

    from ckpt_explorer.ui.components.tensor_detail import TensorDetailView
    from ckpt_explorer.ui.tensor_stats import tensor_detail

    t = torch.linspace(1e-10, 9e-10, 4096).reshape(64, 64)  # an exp_avg_sq's magnitudes
    fig = TensorDetailView._histogram(tensor_detail("state.0.exp_avg_sq", t))
    assert fig.layout.xaxis.exponentformat == "e"
    assert fig.layout.yaxis.exponentformat == "e"


def test_layout_memory_label_is_a_title_with_a_share_that_is_not_zero(demo: Path) -> None:
    from ckpt_explorer import open_checkpoint
    from ckpt_explorer.fit import Layout, fit_checkpoint, parse_size
    from ckpt_explorer.ui.components.layout_view import LayoutView, share_words

    assert share_words(2**20, 80 * 10**9) == "0.0013 %"
    assert share_words(0, 80 * 10**9) == "0 %" and share_words(35, 100) == "35 %"
    layout = Layout(1, 1, 1, None, "hybrid", None, parse_size("80GB"), "bf16")
    report = fit_checkpoint(open_checkpoint(demo / "resumed_from"), layout)
    fig = LayoutView._memory(report, "80GB").object
    assert not fig.layout.annotations  # nothing drawn over the bars
    words = fig.layout.title.text
    assert words.startswith("total ") and "of 80 GB" in words and "0.00 %" not in words
