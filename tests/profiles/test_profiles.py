"""Writer profiles: the registry, detection from evidence, and the HF Trainer profile on a real
Trainer checkpoint folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer import open_checkpoint
from ckpt_explorer.profiles import (
    UNKNOWN,
    Counter,
    Evidence,
    WriterProfile,
    detect_profile,
    match,
    profile,
    profiles,
    register,
)


def test_evidence_value_matches_a_tail() -> None:
    ev = Evidence(values={"trainer_state.json/global_step": 4, "meta.iter": 8})
    assert ev.value("global_step") == 4
    assert ev.value("iter") == 8
    assert ev.value("ter") is None  # a tail only at a '.' or '/' boundary
    assert ev.has("iter") and not ev.has("epoch")


def test_evidence_value_reads_inside_plain_dicts_and_lists() -> None:
    ev = Evidence(values={"meta": {"iter": 8}, "param_schedulers": [{"_global_step": 8}]})
    assert ev.value("meta.iter") == 8
    assert ev.value("param_schedulers.0._global_step") == 8
    assert ev.value("param_schedulers.1._global_step") is None
    assert ev.value("meta.epoch") is None


def test_mmengine_accumulation_is_read_from_its_config_text() -> None:
    from ckpt_explorer.profiles import mmengine

    cfg = "optim_wrapper = dict(accumulative_counts=4, optimizer=dict(type='AdamW'))"
    assert mmengine.facts(Evidence(values={"meta": {"cfg": cfg}})) == {"accumulative_counts": 4}
    plain = "optim_wrapper = dict(optimizer=dict(type='AdamW'))"
    assert mmengine.facts(Evidence(values={"meta": {"cfg": plain}})) == {"accumulative_counts": 1}
    assert mmengine.facts(Evidence(values={"meta": {"cfg": "\n"}})) == {}  # built from objects


def test_unknown_when_nothing_matches() -> None:
    m = match(Evidence(name="x.pt", keys=frozenset({"model", "optimizer"})))
    assert m.profile is UNKNOWN and not m.known
    assert "no writer" in m.describe()


def test_register_orders_by_priority_and_replaces_by_name() -> None:
    def seen(ev: Evidence) -> list[str] | None:
        return ["a key 'zz_test_marker'"] if "zz_test_marker" in ev.keys else None

    p = WriterProfile(
        "zz-test", "Test writer", seen, priority=99, counters=(Counter("it", "micro_batches"),)
    )
    register(p)
    register(p)
    try:
        assert [q.name for q in profiles()].count("zz-test") == 1
        m = match(Evidence(keys=frozenset({"zz_test_marker"})))
        assert m.profile is p and m.reasons == ("a key 'zz_test_marker'",)
        assert p.unit("meta.it") == "micro_batches" and p.unit("iter") is None
    finally:
        from ckpt_explorer.profiles import registry

        registry._REGISTRY[:] = [q for q in registry._REGISTRY if q.name != "zz-test"]


def test_a_detector_that_raises_is_no_match() -> None:
    def broken(ev: Evidence) -> list[str] | None:
        raise ValueError("bug")

    register(WriterProfile("zz-broken", "Broken", broken, priority=-1))
    try:
        assert match(Evidence()).profile is UNKNOWN
    finally:
        from ckpt_explorer.profiles import registry

        registry._REGISTRY[:] = [q for q in registry._REGISTRY if q.name != "zz-broken"]


def test_hf_trainer_profile_says_global_step_counts_optimizer_steps() -> None:
    p = profile("hf-trainer")
    assert p.unit("trainer_state.json/global_step") == "optimizer_steps"
    assert p.scheduler == "saved" and p.rng == "saved"


@pytest.fixture(scope="module")
def hf_corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints("realworld_hf")
    return Path(root), manifest


def test_real_trainer_folder_is_detected_with_evidence(
    hf_corpus: tuple[Path, dict[str, Any]],
) -> None:
    root, manifest = hf_corpus
    case = manifest["cases"]["trainer_step4"]
    m = detect_profile(open_checkpoint(root / case["path"]))
    assert m.profile.name == "hf-trainer", m.describe()
    assert any("global_step" in r for r in m.reasons)
    # an accelerate save_state folder is not the Trainer's
    acc = manifest["cases"]["accelerate_step2"]
    assert detect_profile(open_checkpoint(root / acc["path"])).profile.name != "hf-trainer"
