"""Every family, written by the real tool, is detected and listed as the tool itself holds it."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer import detect_format, open_checkpoint
from ckpt_explorer.cli import main
from ckpt_explorer.plain import to_plain

MAKERS = ["torch", "hf", "dcp", "deepspeed", "colossalai"]


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, int | float)
            and isinstance(b, int | float)
            and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        )
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def check_case(root: Path, case_id: str, case: dict[str, Any]) -> list[str]:
    """All mismatches between ckpt_explorer and the tool's manifest for one case."""
    problems: list[str] = []
    path = root / case["path"]
    detection = detect_format(path)
    if (detection.family, detection.kind) != (case["family"], case["kind"]):
        problems.append(
            f"detected {detection.family}/{detection.kind}, tool wrote {case['family']}/{case['kind']}"
        )
    view = open_checkpoint(path)
    listed = {r.name: r for r in view.tensors}
    expected = case.get("tensors", {})
    if set(listed) != set(expected):
        problems.append(
            f"names differ: only listed {sorted(set(listed) - set(expected))[:5]}, "
            f"only in tool {sorted(set(expected) - set(listed))[:5]}"
        )
    for name, want in expected.items():
        rec = listed.get(name)
        if rec is None:
            continue
        if rec.dtype != want["dtype"] or list(rec.shape) != list(want["shape"]):
            problems.append(
                f"{name}: listed {rec.dtype}{list(rec.shape)}, tool {want['dtype']}{want['shape']}"
            )
            continue
        if "sum" in want and want["sum"] is not None:
            got = float(view.load(name).double().sum())
            if not _close(got, float(want["sum"])):
                problems.append(f"{name}: values differ (sum {got} vs {want['sum']})")
    for key, want in case.get("values", {}).items():
        if key not in view.values:
            problems.append(f"value {key} not listed (have {sorted(view.values)[:8]})")
        elif not _close(to_plain(view.values[key]), want):
            problems.append(f"value {key}: {to_plain(view.values[key])!r} vs tool {want!r}")
    if "param_groups" in case:
        groups = to_plain(list(view.optimizer.param_groups)) if view.optimizer else None
        if not _close(groups, case["param_groups"]):
            problems.append(f"param_groups: {groups!r} vs tool {case['param_groups']!r}")
    for part, family in case.get("parts", {}).items():
        got = view.parts.get(part)
        if got is None or got.family != family:
            problems.append(
                f"part {part}: {got.family if got else 'missing'} vs {family} (parts {sorted(view.parts)})"
            )
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        code = main(["inspect", str(path), "--json"])
    report = json.loads(buffer.getvalue())
    if code != 0 or report["format"] != case["family"] or len(report["tensors"]) != len(listed):
        problems.append(f"inspect --json: exit {code}, format {report.get('format')}")
    return [f"[{case_id}] {p}" for p in problems]


@pytest.mark.parametrize("maker", MAKERS)
def test_real_tool_outputs_are_detected_and_listed(maker: str, real_checkpoints: Any) -> None:
    root, manifest = real_checkpoints(maker)
    assert manifest["cases"], f"{maker} maker wrote no cases"
    problems: list[str] = []
    for case_id, case in manifest["cases"].items():
        problems += check_case(root, case_id, case)
    assert not problems, "\n".join(problems)
