"""Accuracy of ckpt_explorer's verdicts on the real-world corpus, as Markdown (DIAGNOSIS.md).

Usage: ``.venv/bin/python scripts/diagnosis_table.py [--out DIAGNOSIS.md] [FOLDER ...]``

Without FOLDER it runs the makers named in ``MAKERS`` (``realworld_hf``, ``realworld_torch``,
``realworld_dist``, ``realworld_lightning``, ``realworld_multiproc``, ``realworld_trainer_ds``,
``realworld_diffusers``, ``realworld_optim``, ``realworld_megatron``, ``realworld_dsuniversal``,
``realworld_tune``, ``realworld_colossal_extra``, ``realworld_timm``, ``realworld_fvcore``,
``realworld_litgpt``, ``realworld_swa``, ``realworld_tiedlm``, ``realworld_profiles``,
``resume_calib``)
through the test suite's cache (``.fixture-cache/``, keyed by the maker's source); a FOLDER is a maker output
holding ``manifest.json``. Each state is scored with ``tests/realworld_check.py``: per setup,
clean states with 0 errors / 0 false warnings, optimizer ids named right / ambiguous / unknown /
WRONG, faults found by validate, planted causes ranked first by the doctor, and the highest
score of a false cause on correct resumes; then one row per state.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent / "tests"
MAKERS = (
    "realworld_hf",
    "realworld_torch",
    "realworld_dist",
    "realworld_lightning",
    "realworld_multiproc",
    "realworld_trainer_ds",
    "realworld_diffusers",
    "realworld_optim",
    "realworld_megatron",
    "realworld_dsuniversal",
    "realworld_tune",
    "realworld_colossal_extra",
    "realworld_timm",
    "realworld_fvcore",
    "realworld_litgpt",
    "realworld_swa",
    "realworld_tiedlm",
    "realworld_profiles",
    "resume_calib",
)
COMMAND = ".venv/bin/python scripts/diagnosis_table.py --out DIAGNOSIS.md"


def _corpora(folders: list[str]) -> list[tuple[Path, dict[str, Any]]]:
    if folders:
        return [(Path(f), json.loads((Path(f) / "manifest.json").read_text())) for f in folders]
    from conftest import run_maker  # the suite's cache logic (tests/ is on sys.path)

    out = []
    for name in MAKERS:
        print(f"running maker {name} (cached in .fixture-cache/)", file=sys.stderr)
        out.append(run_maker(name))
    return out


def _ratio(good: int, total: int) -> str:
    return f"{good}/{total}" if total else "–"


def _row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    return [_row(header), _row("---" for _ in header), *(_row(r) for r in rows)]


def build(corpora: list[tuple[Path, dict[str, Any]]]) -> str:
    """The Markdown tables for every case of every corpus."""
    from realworld_check import UNDECIDABLE, check_resume, check_state

    setups: dict[str, dict[str, Any]] = {}
    detail: list[list[object]] = []
    false_rules: dict[str, Counter[str]] = {}
    for root, manifest in corpora:
        for cid in sorted(manifest["cases"]):
            case = manifest["cases"][cid]
            print(f"  {cid}", file=sys.stderr)
            st = check_state(root, cid, case)
            rs = check_resume(root, manifest, cid) if case.get("resume_of") else None
            s = setups.setdefault(
                st.setup,
                {
                    "n": 0,
                    "clean": 0,
                    "no_err": 0,
                    "no_warn": 0,
                    "names": Counter(),
                    "faults": 0,
                    "found": 0,
                    "pairs": 0,
                    "first": 0,
                    "clean_pairs": 0,
                    "false": 0.0,
                    "crash": 0,
                },
            )
            s["n"] += 1
            s["crash"] += bool(st.crash) + bool(rs and rs.crash)
            if st.expect == "clean":
                s["clean"] += 1
                s["no_err"] += not st.errors and not st.crash
                s["no_warn"] += not st.warnings and not st.crash
                for f in st.errors + st.warnings:
                    false_rules.setdefault(st.setup, Counter())[f"{f.severity} {f.rule}"] += 1
            elif not st.state_shows:  # one state cannot show it: validate must say so
                s["faults"] += 1
                s["found"] += any(f.rule == UNDECIDABLE for f in st.findings)
            elif st.shape_visible and not st.pair_only:
                s["faults"] += 1
                s["found"] += bool(st.fault_found)
            if st.shape_visible:
                s["names"].update(st.verdict_counts())
            if rs is not None and not rs.crash:
                if rs.expect == "clean":
                    s["clean_pairs"] += 1
                    s["false"] = max(s["false"], rs.top_score)
                else:
                    s["pairs"] += 1
                    s["first"] += bool(rs.planted_first)
            counts = st.verdict_counts()
            names = "/".join(
                str(counts[v])
                for v in ("right", "ambiguous_with_truth", "unknown", "ambiguous_without_truth")
            )
            names += f" / **{counts['wrong']}**" if counts["wrong"] else " / 0"
            found = "crash" if st.crash else ("–" if st.fault_found is None else st.fault_found)
            if st.expect != "clean" and not st.shape_visible:
                found = "n/a (same-shape swap)"
            elif st.pair_only:
                found = "n/a (pair only)"
            elif st.expect != "clean" and not st.state_shows:
                said = any(f.rule == UNDECIDABLE for f in st.findings)
                found = "said undecidable (no step counter)" if said else "False"
            doctor = "–"
            if rs is not None:
                doctor = "crash" if rs.crash else f"{rs.top_cause or 'none'} {rs.top_score:.2f}"
            expect = st.expect + (f" (+{', '.join(st.also)})" if st.also else "")
            detail.append(
                [
                    f"`{cid}`",
                    st.setup,
                    expect,
                    len(st.errors),
                    len(st.warnings),
                    names,
                    found,
                    doctor,
                ]
            )

    summary = []
    for setup, s in setups.items():
        n = s["names"]
        summary.append(
            [
                setup,
                s["n"],
                _ratio(s["no_err"], s["clean"]),
                _ratio(s["no_warn"], s["clean"]),
                n["right"],
                n["ambiguous_with_truth"],
                n["unknown"],
                n["ambiguous_without_truth"],
                n["wrong"],
                _ratio(s["found"], s["faults"]),
                _ratio(s["first"], s["pairs"]),
                f"{s['false']:.2f}" if s["clean_pairs"] else "–",
                s["crash"],
            ]
        )
    lines = [
        "# How right ckpt_explorer's verdicts are on real training states",
        "",
        "Every state below was written by the real library, the way training code writes it "
        "(tiny models, a few steps), and every planted fault was made the way it happens: a "
        "file lost before a resume, a load call skipped, an optimizer rebuilt in another "
        "order. The truth (which parameter each optimizer id belongs to, which fault was "
        "planted) is read from the live objects by the makers, never from ckpt_explorer.",
        "",
        "What the figures mean, and their known limits:",
        "",
        "- *ambiguous* names are not failures: accelerate's `save_state` writes no "
        "`config.json` and safetensors sorts names, so the model's parameter order is not in "
        "the files; LoRA adapters have many same-shaped tensors. The candidates always hold "
        "the truth.",
        "- *WRONG* names appear only on a same-shape swap (an optimizer rebuilt in another "
        "order whose swapped parameters have equal shapes, the only reorder after which "
        "training goes on): one state's files are then identical to a correct state's, so "
        "names aligned to the model order are necessarily wrong there. The doctor finds "
        "the fault from the pair: each moved parameter's weight change follows another "
        "id's Adam direction.",
        "- HF Trainer loads optimizer and scheduler together or not at all, so losing one "
        "file resets both; the doctor's top cause is then either of the two (both true).",
        "- DeepSpeed ZeRO-2/3 and DCP `get_state_dict` states record parameter names in their "
        "files (`param_shapes`, FQN keys); their resumes (realworld_dist) are scored here too.",
        "",
        "## Accuracy on the real-world corpus",
        "",
        f"Reproduce: `{COMMAND}` (runs the makers {', '.join(MAKERS)} of "
        "tests/fixture_makers/ and scores each state with tests/realworld_check.py).",
        "",
        "Per setup: clean states with 0 errors and with 0 warnings; optimizer ids named right, "
        "ambiguous with the truth among the candidates, unknown, ambiguous WITHOUT the truth, "
        "WRONG; planted faults found by validate; planted cause ranked first by the doctor; the "
        "highest cause score on correct resumes (a false cause when >= 0.5). Same-shape param "
        "swaps (`shape_visible: false`) are left out of the name and validate columns: their "
        "files cannot show the fault; the doctor column includes them. So are causes only a "
        "pair can show (resumed from another run, RNG not restored, resumed from a stale "
        "pointer: the state saved after such a resume is a normal state): validate is not "
        "scored on them, the doctor is.",
        "",
        *_table(
            [
                "setup",
                "states",
                "clean: 0 errors",
                "clean: 0 warnings",
                "right",
                "ambiguous",
                "unknown",
                "ambiguous w/o truth",
                "WRONG",
                "faults found (validate)",
                "cause first (doctor)",
                "max score, clean resumes",
                "crashes",
            ],
            summary,
        ),
        "",
        "### False findings on clean states",
        "",
    ]
    if false_rules:
        for setup, rules in false_rules.items():
            lines.append(f"- {setup}: " + ", ".join(f"{r} ×{k}" for r, k in sorted(rules.items())))
    else:
        lines.append("none")
    lines += [
        "",
        "### Per state",
        "",
        "names: right / ambiguous / unknown / ambiguous w/o truth / WRONG.",
        "",
        *_table(
            [
                "case",
                "setup",
                "expect",
                "errors",
                "warnings",
                "names",
                "validate found",
                "doctor top",
            ],
            detail,
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", help="maker outputs (with manifest.json)")
    parser.add_argument("--out", help="write the Markdown here instead of stdout")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(TESTS))
    text = build(_corpora(args.folders))
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
