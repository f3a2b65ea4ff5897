"""The gate on Hydra / OmegaConf configs whose ``_target_`` names a callable, alone and inside
a ``.nemo`` archive (a tar of ``model_config.yaml`` and ``model_weights.ckpt``).

NeMo's ``SaveRestoreConnector.restore_from`` untars the archive, ``OmegaConf.load``s
``model_config.yaml`` and builds the model with ``from_config_dict`` (``_target_`` through
``hydra.utils.instantiate``); the weights are ``torch.load``ed. NeMo is too heavy to install
here: the oracle runs the step that imports and calls, ``hydra.utils.instantiate`` (Hydra
1.3.2 in the side folder scripts/setup_env.sh installs, ``.venv/side/hydra``), on configs
written by OmegaConf; the archives are written by ``tarfile`` and ``torch.save``.
"""

from __future__ import annotations

import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from security_oracle import Oracle

from ckpt_explorer.security import scan_paths
from ckpt_explorer.security.hydra_targets import find_targets

_MARK = (
    "open(__import__('os').path.join(__import__('os').environ.get('CKPT_ORACLE_MARKERS', '.'),"
    " 'PWNED-hydra-target'), 'w').close()"
)
CLEAN = {
    "model": {"_target_": "torch.nn.Linear", "in_features": 2, "out_features": 3},
    "optim": {"lr": 0.001, "betas": [0.9, 0.99]},
}
ATTACK = {
    "model": {"encoder": {"_target_": "builtins.exec", "_args_": [_MARK]}, "d_model": 8},
}


def _side() -> str:
    for c in (
        os.environ.get("CKPT_HYDRA_SIDE", ""),
        os.path.join(sys.prefix, "side", "hydra"),
        str(Path(__file__).resolve().parents[2] / ".venv" / "side" / "hydra"),
    ):
        if c and os.path.isdir(os.path.join(c, "hydra")):
            return c
    raise RuntimeError("no hydra side folder: run scripts/setup_env.sh")


def _nemo(path: Path, config: dict, mode: str) -> Path:
    """A .nemo as NeMo's save_to lays it out: ./model_config.yaml, ./model_weights.ckpt."""
    work = path.with_suffix(".d")
    work.mkdir()
    OmegaConf.save(OmegaConf.create(config), work / "model_config.yaml")
    torch.save({"encoder.weight": torch.zeros(3, 2)}, work / "model_weights.ckpt")
    with tarfile.open(path, mode) as tar:
        for name in ("model_config.yaml", "model_weights.ckpt"):
            tar.add(work / name, arcname=f"./{name}")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hydra")
    out = {}
    for name, config in (("clean", CLEAN), ("attack", ATTACK)):
        (root / name).mkdir()
        yaml_path = root / name / "config.yaml"
        OmegaConf.save(OmegaConf.create(config), yaml_path)
        out[f"{name}.yaml"] = yaml_path
        out[f"{name}.nemo"] = _nemo(root / name / "model.nemo", config, "w:")
        out[f"{name}_gz.nemo"] = _nemo(root / name / "model_gz.nemo", config, "w:gz")
    return out


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    with Oracle(workers=1, timeout=240) as o:
        yield o


def test_a_target_is_code_and_an_inert_one_is_not(files: dict[str, Path]) -> None:
    want = {
        "clean.yaml": "data",
        "clean.nemo": "safe",
        "clean_gz.nemo": "safe",
        "attack.yaml": "code",
        "attack.nemo": "code",
        "attack_gz.nemo": "code",
    }
    for name, verdict in want.items():
        report = scan_paths([files[name]])
        (v,) = report.verdicts
        assert v.verdict == verdict, (name, v.reasons)
        assert (report.exit_code == 0) == (verdict in ("data", "safe")), name
        if verdict == "code":
            assert any("builtins.exec" in r and "/model/encoder" in r for r in v.reasons), v.reasons


def test_the_target_runs_under_hydra_instantiate(files: dict[str, Path], oracle: Oracle) -> None:
    side = _side()
    attack, clean = oracle.run_jobs(
        [
            (files["attack.yaml"], ("hydra",), {"arg": side}),
            (files["clean.yaml"], ("hydra",), {"arg": side}),
        ]
    )
    assert attack.loaders["hydra"].markers == ["PWNED-hydra-target"], attack.loaders
    assert clean.loaders["hydra"].status == "ok" and not clean.loaders["hydra"].markers


def test_targets_are_found_as_the_yaml_composes() -> None:
    text = (
        "a: &enc\n  _target_: mypkg.Encoder\n  n: 2\nb: *enc\n"
        "c: {cls: nemo.collections.asr.modules.ConvASREncoder, params: {feat_in: 64}}\n"
        "'_target_': quoted.Name\n"
        "d: [{_target_: torch.nn.Linear, in_features: 1, out_features: 1}]\n"
    )
    got = find_targets(text) or []
    assert sorted(name for _, name in got) == [
        "mypkg.Encoder",  # once: the alias is the same node
        "nemo.collections.asr.modules.ConvASREncoder",
        "quoted.Name",
        "torch.nn.Linear",
    ]
    assert ("/c", "nemo.collections.asr.modules.ConvASREncoder") in got
    assert ("/d/0", "torch.nn.Linear") in got and ("/", "quoted.Name") in got
    # text that mentions the key but has no mapping with it is not a target
    assert find_targets("# _target_: os.system\nplain: value\n") == []
