"""torch.export ``.pt2`` archives: their nested ``torch.save`` zips are judged, header-only.

``torch.export.load`` unpickles ``data/sample_inputs/*.pt`` with a ``weights_only=False``
fallback, so a code-running pickle planted there must make ``scan`` say UNSAFE; a clean
export stays SAFE; nested zips are bounded (a zip bomb is never inflated, and never safe).
"""

from __future__ import annotations

import io
import os
import time
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from ckpt_explorer.cli import main
from ckpt_explorer.security.judge import CODE, UNVERIFIED, judge_file
from ckpt_explorer.security.views import MAX_DEPTH

torch = pytest.importorskip("torch")


class _Evil:
    """Pickled only, never loaded: unpickling it would touch ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ``torch.export.save`` of a tiny module with example inputs."""

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)
            self.register_buffer("scale", torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x)) * self.scale

    path = tmp_path_factory.mktemp("pt2") / "exported.pt2"
    program = torch.export.export(Tiny(), (torch.randn(2, 8),))
    torch.export.save(program, str(path))
    return path


@pytest.fixture()
def planted(exported: Path, tmp_path: Path) -> tuple[Path, Path]:
    """``exported`` with its sample inputs replaced by a real torch.save of ``_Evil``."""
    marker = tmp_path / "PWNED"
    buf = io.BytesIO()
    torch.save(_Evil(marker), buf)  # pickles only; nothing runs
    path = tmp_path / "planted.pt2"
    with zipfile.ZipFile(exported) as src, zipfile.ZipFile(path, "w") as dst:
        names = [i.filename for i in src.infolist()]
        assert any(n.endswith("data/sample_inputs/model.pt") for n in names), names
        for info in src.infolist():
            swap = info.filename.endswith("data/sample_inputs/model.pt")
            dst.writestr(info, buf.getvalue() if swap else src.read(info))
    return path, marker


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue() + err.getvalue()


def test_clean_export_is_safe_with_one_info(exported: Path) -> None:
    verdict = judge_file(exported)
    assert verdict.verdict == "safe", [f.message for f in verdict.findings]
    assert not [f for f in verdict.findings if f.rule == CODE]
    assert verdict.pickles >= 1  # the nested sample inputs' data.pkl was read
    infos = [f for f in verdict.findings if "torch.export archive" in f.message]
    assert len(infos) == 1 and infos[0].severity == "info"
    assert verdict.format == "torch.export archive"
    assert _cli("scan", str(exported))[0] == 0
    torch.export.load(str(exported))  # our own clean export still loads


def test_planted_sample_inputs_are_unsafe_and_nothing_runs(planted: tuple[Path, Path]) -> None:
    path, marker = planted
    verdict = judge_file(path)
    code = [f.message for f in verdict.findings if f.rule == CODE]
    assert verdict.unsafe, verdict.findings
    assert any(
        "data/sample_inputs/model.pt) (archive/data.pkl)" in m and "system" in m for m in code
    ), code
    rc, text = _cli("scan", str(path))
    assert rc == 1 and "UNSAFE" in text
    rc, text = _cli("validate", "--no-numeric", str(path))
    assert rc != 0 and "system" in text
    assert not marker.exists()


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_opening_a_pt2_says_what_it_is_once(exported: Path, command: str) -> None:
    rc, text = _cli(command, str(exported))
    assert rc != 0
    lines = [ln for ln in text.splitlines() if "torch.export ExportedProgram archive" in ln]
    assert len(lines) == 1, text
    assert "data.pkl" not in text


def _nest(payload: bytes, depth: int) -> bytes:
    for i in range(depth):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr(f"z{i}/data/inner.pt", payload)
        payload = buf.getvalue()
    return payload


def test_nested_zip_bomb_is_refused_quickly(tmp_path: Path) -> None:
    deep = tmp_path / "deep.pt2"
    deep.write_bytes(_nest(b"\x80\x02N.", MAX_DEPTH + 20))
    big = tmp_path / "big.pt2"
    with zipfile.ZipFile(big, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big/archive_format", "pt2")
        zf.writestr("big/data/sample_inputs/model.pt", b"PK\x03\x04" + bytes(80 << 20))
    for path in (deep, big):
        start = time.perf_counter()
        verdict = judge_file(path)
        assert time.perf_counter() - start < 5.0  # refused, not inflated or walked
        assert verdict.verdict == "unverified", verdict.findings
        reasons = " ".join(f.message for f in verdict.findings if f.rule == UNVERIFIED)
        assert "nested more than" in reasons or "over the limit" in reasons, reasons
        assert _cli("scan", str(path))[0] == 1


def test_storage_bytes_that_look_like_a_zip_are_not_judged(tmp_path: Path) -> None:
    """A torch.save checkpoint whose tensor bytes are a zip of a code-running pickle: torch
    never unpickles storages, so no finding (a false one on a clean file is the worst bug)."""
    buf = io.BytesIO()
    torch.save(_Evil(tmp_path / "never"), buf)
    path = tmp_path / "weights.pt"
    blob = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    torch.save({"blob": blob.clone()}, path)
    verdict = judge_file(path)
    assert verdict.verdict == "safe", [f.message for f in verdict.findings]
