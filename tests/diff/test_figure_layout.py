"""The figure layout (diff/figure_layout.py) is the one declaration of the diff figures: the
compiled kernels are generated from it, the row type carries its figures, and the figures added
through it equal a float64 torch computation on the compiled and the torch paths, in the CLI's
JSON too: ``n_differ`` (elements whose values differ at all, whatever the tolerance) and
``n_sign_flips`` (elements whose sign flipped), the latter added by its one layout entry only
(no typed field, no other file): it reaches the JSON, the CLI's table, the frame (CSV) and the
dashboard's Compare table, and equals the float64 count on the raw (numpy views of mapped
files), the compiled-over-torch and the torch paths, on a real Trainer run's tensors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import open_checkpoint
from ckpt_explorer.cli import main
from ckpt_explorer.diff import DiffResult, diff_checkpoints, kernel, pair_source
from ckpt_explorer.diff.engine import Engine, plan_pairs
from ckpt_explorer.diff.figure_layout import (
    FIGURE_NAMES,
    FIGURES,
    FUSED_PARTIALS,
    OWN_PARTIALS,
    PARTIALS,
    Partial,
)
from ckpt_explorer.diff.rows import TensorDiff
from ckpt_explorer.diff.stats import ChunkStats

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["numba", "torch"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numba":
        pytest.importorskip("numba")
        monkeypatch.delenv("CKPT_EXPLORER_KERNEL", raising=False)
        monkeypatch.setattr(kernel, "_loaded", False)
        assert kernel.have_numba()
    else:
        monkeypatch.setattr(kernel, "_nk", None)
        monkeypatch.setattr(kernel, "_loaded", True)
        assert not kernel.have_numba()
    return str(request.param)


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    """Positions whose values differ, in float64 torch: finite pairs that are not equal, and
    non-finite positions whose two values are not the same (NaN with NaN is the same)."""
    x, y = a.to(torch.float64).ravel(), b.to(torch.float64).ravel()
    fin = torch.isfinite(x) & torch.isfinite(y)
    same = (torch.isnan(x) & torch.isnan(y)) | (x == y)
    return int(((x != y) & fin).sum()) + int(((~fin) & ~same).sum())


def sign_flips(a: torch.Tensor, b: torch.Tensor) -> int:
    """Positions finite on both sides where one value is above zero and the other below, in
    float64 torch."""
    x, y = a.to(torch.float64).ravel(), b.to(torch.float64).ravel()
    fin = torch.isfinite(x) & torch.isfinite(y)
    return int((fin & (((x > 0) & (y < 0)) | ((x < 0) & (y > 0)))).sum())


def pair(dtype_a: torch.dtype, dtype_b: torch.dtype, n: int = 30_000) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(7)
    a = torch.randn(n, generator=g, dtype=torch.float64)
    b = a.clone()
    hit = torch.randperm(n, generator=g)[: n // 10]
    b[hit] += 1e-3 * torch.randn(len(hit), generator=g, dtype=torch.float64)  # 10% move a bit
    b[hit[:50]] += 10.0  # a few move far
    b[hit[50:90]] *= -1.0  # some change sign
    a[[11, 4001, 9000]] = torch.tensor([float("nan"), float("inf"), 1.0], dtype=torch.float64)
    b[[11, 4001, 9000, 12000]] = torch.tensor(
        [float("nan"), float("-inf"), float("nan"), 0.5], dtype=torch.float64
    )
    # no sign (zeros) and float64 values whose product underflows to -0.0
    a[[13, 14, 15, 16]] = torch.tensor([-0.0, 0.0, 1e-200, -3e-200], dtype=torch.float64)
    b[[13, 14, 15, 16]] = torch.tensor([0.0, -1.0, -1e-200, 2e-200], dtype=torch.float64)
    return a.to(dtype_a), b.to(dtype_b)


def row_of(
    tmp_path: Path, a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float
) -> TensorDiff:
    save_file({"w": a.reshape(100, -1)}, str(tmp_path / "a.safetensors"))
    torch.save({"w": b.reshape(100, -1)}, tmp_path / "b.bin")
    va, vb = open_checkpoint(tmp_path / "a.safetensors"), open_checkpoint(tmp_path / "b.bin")
    eng = Engine(va, vb, atol=atol, rtol=rtol, threads=2, chunk_bytes=8192)
    return eng.run(plan_pairs(va, vb))[0]


@pytest.mark.parametrize(
    "dtypes",
    [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float16),
        (torch.float64, torch.float64),
        (torch.bfloat16, torch.float32),
    ],
    ids=str,
)
def test_n_differ_is_the_float64_count(path: str, dtypes: tuple, tmp_path: Path) -> None:
    a, b = pair(*dtypes)
    row = row_of(tmp_path, a, b, atol=1e-2, rtol=1e-2)
    want = differing(a, b)
    assert row.n_differ == want > 0
    assert row.n_outside is not None and 0 < row.n_outside < want  # the tolerance hides some
    assert row.figure("n_sign_flips") == sign_flips(a, b) >= 40


def test_identical_bytes_differ_nowhere(path: str, tmp_path: Path) -> None:
    a, _ = pair(torch.float32, torch.float32)
    row = row_of(tmp_path, a, a.clone(), atol=0.0, rtol=0.0)
    assert row.status == "identical" and row.n_differ == 0 == differing(a, a)
    assert row.figure("n_sign_flips") == 0 == sign_flips(a, a)


def test_n_differ_in_the_diff_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = pair(torch.float32, torch.float32)
    save_file({"w": a.reshape(100, -1)}, str(tmp_path / "a.safetensors"))
    save_file({"w": b.reshape(100, -1)}, str(tmp_path / "b.safetensors"))
    code = main(["diff", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors"),
                 "--json", "--atol", "0.01"])  # fmt: skip
    assert code == 1
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["tensors"]}
    assert rows["w"]["n_differ"] == differing(a, b)
    assert rows["w"]["n_sign_flips"] == sign_flips(a, b)


def test_the_row_carries_the_layout_figures_in_order() -> None:
    """The typed figure fields stand together in the layout's order, and a row's dict holds
    every figure of the layout (typed or not) in the layout's order where they stand."""
    names = [f.name for f in fields(TensorDiff)]
    typed = [n for n in names if n in FIGURE_NAMES]
    start = names.index(typed[0])
    assert names[start : start + len(typed)] == typed
    assert typed == [n for n in FIGURE_NAMES if n in typed]
    keys = list(TensorDiff("w", "changed").to_dict())
    start = keys.index(FIGURE_NAMES[0])
    assert tuple(keys[start : start + len(FIGURE_NAMES)]) == FIGURE_NAMES
    assert keys[:start] == names[: names.index(typed[0])]
    assert len({p.name for p in PARTIALS}) == len(PARTIALS)
    assert len(set(FIGURE_NAMES)) == len(FIGURES)


def test_the_compiled_kernels_are_generated_from_the_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loaded kernels are the layout's text, from a file holding that text; another
    layout is another text (and another cache folder)."""
    pytest.importorskip("numba")
    monkeypatch.delenv("CKPT_EXPLORER_KERNEL", raising=False)
    monkeypatch.setattr(kernel, "_loaded", False)
    assert kernel.have_numba()
    pk = kernel._pk
    text = pair_source.source()
    assert Path(pk.__file__).read_text(encoding="utf-8") == text
    for p in PARTIALS:
        if p.term is not None:
            assert p.term in text
    extra = Partial("above", "count", "y > x + atol")
    other = pair_source.source(own=(*OWN_PARTIALS, extra))
    assert other != text and "v_above += 1 if y > x + atol else 0" in other
    assert f"SLOTS = {len(PARTIALS) + 1}" in other


def test_a_figure_s_own_sum_leaves_the_fused_loop_as_it_was() -> None:
    """The fast block's fused loop (vectorised with reassociation: its rounding depends on
    all it accumulates) is the same text whatever the figures' own partials are; each of
    those has a loop of its own."""
    alone = pair_source.source(FUSED_PARTIALS, ())
    start = alone.index("    for i in range(a.size):")
    fused = alone[start : alone.index("    return", start)]
    assert fused.count("for i in range") == 1
    for own in (OWN_PARTIALS, (*OWN_PARTIALS, Partial("above", "count", "y > x + atol"))):
        text = pair_source.source(FUSED_PARTIALS, own)
        block = text[text.index("def _pair_block") : text.index("def pair_fast")]
        assert fused in block
        assert block.count("for i in range(a.size):") == 1 + len(own)


def _probe(env: dict[str, str]) -> list[str]:
    """Cache hits and misses of pair_fast in a fresh process (its kernels' file, last)."""
    probe = (
        "from ckpt_explorer.diff import kernel; assert kernel.have_numba(); "
        "f = kernel._pk.pair_fast; "
        "print(sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values()), "
        "kernel._pk.__file__)"
    )
    env = {**env}
    env.pop("CKPT_EXPLORER_KERNEL", None)
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_second_process_loads_the_kernels_from_the_cache(tmp_path: Path) -> None:
    """``cache=True`` works for the generated kernels: a second process compiles nothing."""
    pytest.importorskip("numba")
    env = {**os.environ, "CKPT_EXPLORER_CACHE": str(tmp_path / "cache")}
    first, second = _probe(env), _probe(env)
    assert first[:2] == ["0", "1"]  # the first process compiles (and writes the cache)
    assert second[:2] == ["1", "0"]  # the second loads it
    assert first[2] == second[2] and first[2].startswith(str(tmp_path / "cache" / "kernels"))


def test_a_changed_kernel_file_is_never_run(tmp_path: Path) -> None:
    """What runs is the generated text: a kernels' file changed on disk is written back, not
    executed (its code would create a marker)."""
    pytest.importorskip("numba")
    env = {**os.environ, "CKPT_EXPLORER_CACHE": str(tmp_path / "cache")}
    path = Path(_probe(env)[2])
    marker = tmp_path / "PWNED"
    path.write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    assert _probe(env)[2] == str(path)
    assert not marker.exists()
    assert path.read_text(encoding="utf-8") == pair_source.source()


def test_a_figure_of_the_layout_alone_reaches_every_table(tmp_path: Path) -> None:
    """``n_sign_flips`` has no typed field: it is in the row's dict after ``n_differ``, the
    frame (so CSV), the CLI's table (its column), the dashboard's Compare table, and survives
    the JSON round trip (the torchrun job's rows travel that way)."""
    assert "n_sign_flips" not in {f.name for f in fields(TensorDiff)}
    a, b = pair(torch.float32, torch.float32)
    save_file({"w": a.reshape(100, -1)}, str(tmp_path / "a.safetensors"))
    save_file({"w": b.reshape(100, -1)}, str(tmp_path / "b.safetensors"))
    result = diff_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    want = sign_flips(a, b)
    keys = list(result.tensors[0].to_dict())
    assert keys[keys.index("n_differ") + 1] == "n_sign_flips"
    assert result.to_frame()["n_sign_flips"].tolist() == [want]
    assert "n_sign_flips" in result.to_frame().to_csv(index=False).splitlines()[0].split(",")
    again = DiffResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.tensors[0].figure("n_sign_flips") == want
    text = result.format_text().splitlines()
    header, line = next(text[i : i + 2] for i, t in enumerate(text) if t.split()[:1] == ["status"])
    assert header.split()[-2:] == ["flips", "name"] and line.split()[-2:] == [str(want), "w"]
    pytest.importorskip("panel")
    from ckpt_explorer.ui.components.compare import diff_rows

    table = diff_rows(result.tensors, False)
    assert "n_sign_flips" in table.columns and table["n_sign_flips"].tolist() == [want]


def _reference(folder: Path, name: str) -> torch.Tensor:
    """A tensor of a Trainer checkpoint folder, read with safetensors / torch.load."""
    from safetensors.torch import load_file

    part, _, key = name.partition("/")
    if part == "model":
        return load_file(folder / "model.safetensors")[key]
    obj: Any = torch.load(folder / part, weights_only=True)
    for k in key.split("."):
        obj = obj[int(k)] if k.isdigit() and isinstance(obj, dict) and int(k) in obj else obj[k]
    assert isinstance(obj, torch.Tensor)
    return obj


@pytest.mark.parametrize("route", ["raw", "compiled", "torch"])
def test_sign_flips_of_a_real_run_on_every_path(
    route: str, real_checkpoints: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two checkpoints of a real Trainer run (model in safetensors, Adam moments in
    optimizer.pt): the count equals float64 torch's on every path, each path really taken."""
    root, _ = real_checkpoints("realworld_hf")
    a, b = root / "trainer" / "run" / "checkpoint-2", root / "trainer" / "run" / "checkpoint-4"
    calls: dict[str, int] = {}

    def spy(owner: Any, name: str) -> None:
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    if route == "torch":
        monkeypatch.setattr(kernel, "_nk", None)
        monkeypatch.setattr(kernel, "_loaded", True)
        spy(ChunkStats, "reduce")
    else:
        pytest.importorskip("numba")
        monkeypatch.delenv("CKPT_EXPLORER_KERNEL", raising=False)
        monkeypatch.setattr(kernel, "_loaded", False)
        spy(kernel, "raw_pair_partials")
        spy(kernel, "pair_partials")
        if route == "compiled":
            monkeypatch.setattr(Engine, "_raw_pair", lambda self, x, y: None)
    rows = [
        r
        for r in diff_checkpoints(a, b).tensors
        if r.name.startswith(("model/", "optimizer.pt/")) and r.n_differ
    ]
    assert len(rows) > 100
    total = 0
    for r in rows:
        want = sign_flips(_reference(a, r.name), _reference(b, r.name))
        assert r.figure("n_sign_flips") == want, r.name
        total += want
    assert total > 1000  # Adam's first moments flip often
    expected = {"raw": "raw_pair_partials", "compiled": "pair_partials", "torch": "reduce"}
    assert calls.get(expected[route], 0) > 0, calls
    if route == "compiled":
        assert "raw_pair_partials" not in calls
