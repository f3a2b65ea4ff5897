"""The resume doctor calibrated on resumes made by real writers with their own resume paths.

Every pair (A = the state resumed from, B = one saved after resuming) comes from a fixture
maker: the plain torch loop, Lightning and mmengine runs of ``resume_calib`` (CNN with
BatchNorm: many same-shaped small tensors; faults as users make them), and the pairs the
real-world makers already give (HF Trainer ``resume_from_checkpoint``, Lightning
``ckpt_path=``, nanoGPT-style loops, other optimizers). A planted fault must be ranked first; a
correct resume (bit-identical to the uninterrupted run, an exact continuation, or A itself) may
score no cause above 0.1.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from realworld_check import check_resume, resume_cases

from ckpt_explorer import resume_doctor
from ckpt_explorer.resume import rng_lineage
from ckpt_explorer.resume.pointer import is_pointer

CORRECT_MAX = 0.1
MAKERS = (
    "resume_calib",
    "realworld_hf",
    "realworld_lightning",
    "realworld_torch",
    "realworld_optim",
    "realworld_timm",
    "realworld_fvcore",
    "realworld_swa",
    "realworld_litgpt",
    "realworld_tiedlm",
    "realworld_profiles",
)


def _pairs(real_checkpoints, maker):
    root, manifest = real_checkpoints(maker)
    return root, manifest, resume_cases(manifest)


@pytest.mark.parametrize("maker", MAKERS)
def test_every_pair_ranked_right(real_checkpoints, maker):
    root, manifest, ids = _pairs(real_checkpoints, maker)
    assert ids, f"{maker} gives no resume pair"
    bad = []
    for cid in ids:
        r = check_resume(root, manifest, cid)
        ranked = ", ".join(f"{c} {s:.2f}" for c, s in r.causes) or "no cause"
        if r.crash:
            bad.append(f"{cid}: crashed {r.crash.strip().splitlines()[-1]}")
        elif r.expect == "clean" and r.false_score > CORRECT_MAX:
            bad.append(f"{cid} (correct resume): {ranked}")
        elif r.expect != "clean" and not r.planted_first:
            bad.append(f"{cid} (planted {r.expect}): {ranked}")
    assert not bad, "\n".join(bad)


def test_calibration_covers_every_fault(real_checkpoints):
    """The plain loop's pairs plant each fault users make, and correct resumes of each kind."""
    _root, manifest, ids = _pairs(real_checkpoints, "resume_calib")
    expects = {manifest["cases"][c]["expect"] for c in ids}
    assert expects >= {
        "clean",
        "scheduler_not_restored",
        "optimizer_moments_reset",
        "param_order_changed",
        "rng_not_restored",
        "resumed_from_another_run",
        "stale_pointer",
    }


def test_bit_identical_resume_and_itself_score_nothing(real_checkpoints):
    root, manifest = real_checkpoints("resume_calib")
    cases = manifest["cases"]
    a = root / cases["cnn_step16"]["path"]
    for b in (a, root / cases["cnn_resume_clean"]["path"], root / cases["cnn_step24"]["path"]):
        report = resume_doctor(a, b)
        assert all(c.score <= CORRECT_MAX for c in report.causes), report.format_text()


def test_param_order_evidence_names_a_permutation(real_checkpoints):
    """The reorder is found from the conv weights (2304 elements each); the 16-element BN
    tensors take no vote."""
    root, manifest = real_checkpoints("resume_calib")
    cases = manifest["cases"]
    report = resume_doctor(
        root / cases["cnn_step16"]["path"], root / cases["cnn_param_order"]["path"]
    )
    assert report.top is not None and report.top.cause == "param_order_changed"
    moved = [e for e in report.top.evidence if "moved along state" in e]
    assert moved and all(".0.weight" in e for e in moved), report.top.evidence


def test_rng_restarted_from_the_seed_is_told():
    torch.manual_seed(3)
    torch.rand(20000)
    a = rng_lineage.parse(torch.get_rng_state().numpy().tobytes())
    torch.rand(5000)
    later = rng_lineage.parse(torch.get_rng_state().numpy().tobytes())
    torch.manual_seed(3)
    torch.rand(5000)
    restarted = rng_lineage.parse(torch.get_rng_state().numpy().tobytes())
    torch.manual_seed(4)
    other_seed = rng_lineage.parse(torch.get_rng_state().numpy().tobytes())
    assert a is not None and later is not None and restarted is not None
    assert other_seed is not None
    assert rng_lineage.not_restored(a, a) is None
    assert rng_lineage.not_restored(a, later) is None
    assert "started again from the seed" in (rng_lineage.not_restored(a, restarted) or "")
    assert "seeded with 4" in (rng_lineage.not_restored(a, other_seed) or "")


def test_twist_matches_torch():
    torch.manual_seed(11)
    start = rng_lineage.parse(torch.get_rng_state().numpy().tobytes())
    assert start is not None
    assert np.array_equal(start.array, rng_lineage.seeded_array(11))
    torch.randint(0, 2**31, (624 * 3,))
    moved = rng_lineage.parse(torch.get_rng_state().numpy().tobytes())
    assert moved is not None
    assert rng_lineage.twists_to(start.array, moved.array, limit=16) is not None


def test_pointer_names(tmp_path):
    for name in ("last.ckpt", "latest.pt", "last-v1.ckpt", "checkpoint_latest.pt"):
        (tmp_path / name).write_bytes(b"x")
        assert is_pointer(tmp_path / name), name
    for name in ("epoch=0-step=8.ckpt", "step_16.pt", "blast.pt"):
        (tmp_path / name).write_bytes(b"x")
        assert not is_pointer(tmp_path / name), name


@pytest.mark.parametrize(
    ("maker", "case_id", "quoted"),
    [
        ("realworld_timm", "timm_resnet_no_resume_opt", "no_resume_opt=True"),
        ("realworld_swa", "swa_optimizer_not_restored", "n_averaged is 18"),
        ("realworld_swa", "swa_main_scheduler_not_restored", "per-epoch schedulers"),
        ("realworld_fvcore", "fvcore_optimizer_not_restored", "the optimizer step 4 is behind"),
    ],
)
def test_b_own_finding_is_the_evidence(real_checkpoints, maker, case_id, quoted):
    """Where the counters of A and B alone cannot show the restart (a run position in epochs,
    none at all, or an index the rate misreads), the finding B's own parts give names the
    cause and is quoted as its evidence."""
    root, manifest = real_checkpoints(maker)
    cases = manifest["cases"]
    case = cases[case_id]
    report = resume_doctor(root / cases[case["resume_of"]]["path"], root / case["path"])
    top = report.causes[0]
    assert top.cause == case["expect"], report.format_text()
    assert any(quoted in e for e in top.evidence), top.evidence
