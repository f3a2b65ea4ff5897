"""The gate on Keras files: ``.keras`` archives, models saved as folders, ``.weights.h5`` and
legacy ``.h5`` models, as ``keras.saving.load_model`` reads them.

Every file is written by the real Keras 3 (torch backend, in the side folder
scripts/setup_env.sh installs: ``.venv/side/keras`` 3.15.1, ``.venv/side/keras38`` 3.8.0 for
the releases before the fixes), see tests/hostile/keras_corpus.py. The oracle
(tests/security_oracle.py) proves each attack: its marker appears under the real
``load_model`` (a plain load in Keras 3.8 for ``unsafe``, ``safe_mode=False`` for ``code``),
and the clean twins load with no code run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from security_oracle import Oracle

from ckpt_explorer.security import scan_paths
from ckpt_explorer.security.keras_config import judge_config

CORPUS = Path(__file__).resolve().parents[1] / "hostile" / "keras_corpus.py"

EXPECTED = {
    "clean_seq.keras": "data",
    "clean_func.keras": "data",
    "clean.weights.h5": "data",
    "clean_legacy.h5": "data",
    "clean_dir/config.json": "data",
    "clean_dir/metadata.json": "data",
    "clean_dir/model.weights.h5": "data",
    "lambda.keras": "code",
    "lambda_dir/config.json": "code",
    "lambda_dir/metadata.json": "data",
    "lambda_dir/model.weights.h5": "data",
    "lambda_legacy.h5": "unsafe",
    "cve_2025_1550.keras": "unsafe",
    "cve_2025_9906/outer.keras": "unsafe",
    "cve_2025_9906/inner.keras": "code",
    "custom.keras": "unverified",
    "extlink.weights.h5": "unverified",
    "torch_wrapper.keras": "code",
}


def _side(name: str) -> str:
    """A side folder scripts/setup_env.sh installs Keras into."""
    for c in (
        os.environ.get(f"CKPT_{name.upper()}_SIDE", ""),
        os.path.join(sys.prefix, "side", name),
        str(Path(__file__).resolve().parents[2] / ".venv" / "side" / name),
    ):
        if c and os.path.isdir(os.path.join(c, "keras")):
            return c
    raise RuntimeError(f"no {name} side folder: run scripts/setup_env.sh")


def _keras_path(old: bool = False) -> str:
    """PYTHONPATH for Keras 3.15.1, or 3.8.0 (its dependencies from the 3.15.1 folder)."""
    return os.pathsep.join([_side("keras38"), _side("keras")] if old else [_side("keras")])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keras")
    scratch = tmp_path_factory.mktemp("keras-build")
    env = {**os.environ, "PYTHONPATH": _keras_path(), "KERAS_BACKEND": "torch"}
    env["CKPT_ORACLE_MARKERS"] = str(scratch)  # building a Lambda model traces the lambda
    done = subprocess.run(
        [sys.executable, str(CORPUS), str(out)],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    with Oracle(workers=1, timeout=240) as o:
        yield o


def test_each_keras_file_gets_its_verdict(corpus: Path) -> None:
    report = scan_paths([corpus])
    found = {Path(v.path).relative_to(corpus).as_posix(): v for v in report.verdicts}
    assert {k: v.verdict for k, v in found.items()} == EXPECTED
    assert report.exit_code == 1
    for name in ("clean_seq.keras", "clean_func.keras"):
        assert found[name].format == "Keras archive"
    assert found["clean_legacy.h5"].format == "HDF5 (legacy Keras model)"
    # each finding says what and where
    assert "CVE-2025-9905" in " ".join(found["lambda_legacy.h5"].reasons)
    assert "builtins.exec" in " ".join(found["cve_2025_1550.keras"].reasons)
    outer = " ".join(found["cve_2025_9906/outer.keras"].reasons)
    assert "set_global_attribute" in outer and "load_model" in outer
    assert "corpus>Scaled" in " ".join(found["custom.keras"].reasons)
    assert "/etc/other.h5" in " ".join(found["extlink.weights.h5"].reasons)
    assert "safe_mode=False" in " ".join(found["lambda.keras"].reasons)


def test_only_clean_files_pass_alone(corpus: Path) -> None:
    for name, verdict in EXPECTED.items():
        assert (scan_paths([corpus / name]).exit_code == 0) == (verdict == "data"), name


def test_attacks_run_under_the_real_load_model(corpus: Path, oracle: Oracle) -> None:
    new, old = _keras_path(), _keras_path(old=True)
    loaders = ("keras", "keras_unsafe")
    chain = str(corpus / "cve_2025_9906")  # the outer model loads inner.keras beside it
    jobs: list[tuple[Path, tuple[str, ...], dict[str, str]]] = [
        (corpus / "lambda.keras", loaders, {"arg": new}),
        (corpus / "lambda_dir", ("keras_unsafe",), {"arg": new}),
        (corpus / "lambda_legacy.h5", ("keras",), {"arg": old}),
        (corpus / "cve_2025_1550.keras", ("keras",), {"arg": old}),
        (corpus / "cve_2025_1550.keras", ("keras",), {"arg": new}),
        (corpus / "cve_2025_9906" / "outer.keras", ("keras",), {"arg": old, "root": chain}),
        (corpus / "clean_func.keras", ("keras",), {"arg": new}),
        (corpus / "clean_legacy.h5", ("keras",), {"arg": new}),
        (corpus / "clean_dir", ("keras",), {"arg": new}),
    ]
    got = oracle.run_jobs(jobs)
    ran = [{n: (r.status, r.markers) for n, r in res.loaders.items()} for res in got]
    lam, lam_dir, h5_old, exec_old, exec_new, chain_old, clean, clean_h5, clean_dir = ran
    # the lambda: refused by safe_mode (the default), run by safe_mode=False
    assert lam["keras"] == ("error", []), lam
    assert lam["keras_unsafe"][1] == ["PWNED-keras-lambda"], lam
    assert lam_dir["keras_unsafe"][1] == ["PWNED-keras-lambda"], lam_dir
    # a plain load in Keras 3.8 runs each of these (3.15.1 refuses them)
    assert h5_old["keras"][1] == ["PWNED-keras-lambda-h5"], h5_old
    assert exec_old["keras"][1] == ["PWNED-keras-cve-2025-1550"], exec_old
    assert chain_old["keras"][1] == ["PWNED-keras-cve-2025-9906"], chain_old
    assert exec_new["keras"] == ("error", []), exec_new
    # the clean twins load, nothing runs
    for r in (clean, clean_h5, clean_dir):
        assert all(status == "ok" and not marks for status, marks in r.values()), r


def _config(corpus: Path, name: str) -> dict:
    with zipfile.ZipFile(corpus / name) as z:
        doc: dict = json.loads(z.read("config.json"))
    return doc


def test_config_rules_on_real_configs(corpus: Path) -> None:
    """Edits of a real config: each reference Keras would resolve is judged by its kind."""
    clean = _config(corpus, "clean_func.keras")
    assert judge_config(clean, "c").objects > 5
    assert not any(vars(judge_config(clean, "c")).get(k) for k in ("unsafe", "code", "doubts"))

    def with_layer(layer: dict) -> dict:
        doc = json.loads(json.dumps(clean))
        doc["config"]["layers"].append(layer)
        return doc

    def kinds(layer: dict) -> tuple[bool, bool, bool]:
        got = judge_config(with_layer(layer), "c")
        return bool(got.unsafe), bool(got.code), bool(got.doubts)

    def ref(module: str | None, name: str, **kw: object) -> dict:
        return {"module": module, "class_name": name, "config": kw, "registered_name": None}

    def fn(module: str, name: str) -> dict:
        return {"module": module, "class_name": "function", "config": name}

    tfsm = ref("keras.layers", "TFSMLayer", filepath="/elsewhere/saved_model")
    assert kinds(tfsm) == (True, False, False)  # CVE-2026-1462
    assert kinds(ref("keras.layers", "Lambda", function=fn("keras.utils", "get_file"))) == (
        True,
        False,
        False,
    )  # CVE-2025-8747
    assert kinds(ref("keras.layers", "Lambda", function=fn("os", "system"))) == (True, False, False)
    assert kinds(ref("keras.layers", "Lambda", function=fn("mypkg.ops", "scale"))) == (
        False,
        False,
        True,
    )
    assert kinds(ref("keras.layers", "Dense", activation=fn("keras.activations", "relu"))) == (
        False,
        False,
        False,
    )
    assert kinds(ref("keras.layers", "Dense", activation=fn("builtins", "relu"))) == (
        False,
        False,
        False,
    )  # a Keras built-in by name
    lookup = ref("keras.layers", "StringLookup", vocabulary="/etc/passwd")
    assert kinds(lookup) == (False, False, True)
    assert kinds(ref("subprocess", "Popen")) == (True, False, False)
    assert kinds(ref(None, "MyLayer")) == (False, False, True)
    hub = ref("keras_hub.src.models.gemma.gemma_backbone", "GemmaBackbone")
    assert kinds(hub | {"registered_name": "keras_hub>GemmaBackbone"}) == (False, False, False)
    assert kinds(hub | {"registered_name": "mypkg>GemmaBackbone"}) == (False, False, True)


@pytest.fixture(scope="module")
def polyglots(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A benign pickle in front of a Keras model: as the user block of an HDF5 file (h5py finds
    the superblock at byte 512), and before a .keras zip (Python's zipfile finds the archive)."""
    import pickle

    import h5py

    out = tmp_path_factory.mktemp("keras-poly")
    head = pickle.dumps({"step": 1}, protocol=2)
    h5 = out / "user_block.h5"
    with (
        h5py.File(corpus / "lambda_legacy.h5", "r") as src,
        h5py.File(h5, "w", userblock_size=512) as f,
    ):
        for key, value in src.attrs.items():
            f.attrs[key] = value
        for name in src:
            src.copy(name, f)
    with open(h5, "r+b") as f:
        f.write(head.ljust(512, b"\0"))
    zipped = out / "prefixed.keras"
    zipped.write_bytes(head + (corpus / "cve_2025_1550.keras").read_bytes())
    return {"h5": h5, "keras": zipped}


def test_a_keras_model_behind_a_pickle_is_judged(
    polyglots: dict[str, Path], oracle: Oracle
) -> None:
    for path in polyglots.values():
        (v,) = scan_paths([path]).verdicts
        assert v.verdict == "unsafe", (path.name, v.reasons)
    got = oracle.run_jobs(
        [(p, ("keras", "pickle"), {"arg": _keras_path(old=True)}) for p in polyglots.values()]
    )
    for res in got:
        assert res.loaders["keras"].markers, res.loaders  # Keras 3.8 runs it, plain load
        assert res.loaders["pickle"].status == "ok" and not res.loaders["pickle"].non_inert


def test_a_keras_zip_whose_members_do_not_read_is_unverified(corpus: Path, tmp_path: Path) -> None:
    data = bytearray((corpus / "lambda.keras").read_bytes())
    for sig, off in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # every method: 99 (AES)
        at = data.find(sig)
        while at >= 0:
            data[at + off : at + off + 2] = (99).to_bytes(2, "little")
            at = data.find(sig, at + 4)
    path = tmp_path / "method99.keras"
    path.write_bytes(bytes(data))
    (v,) = scan_paths([path]).verdicts
    assert v.verdict == "unverified" and any("does not read" in r for r in v.reasons), v.reasons


def test_a_keras_config_too_large_to_judge_is_unverified(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckpt_explorer.security import known_formats

    doc = json.loads((corpus / "lambda_dir" / "config.json").read_text())
    doc["padding"] = "x" * 4096  # over the (lowered) limit: not parsed, so not data
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(known_formats, "MAX_MEMBER", 2048)
    (v,) = scan_paths([path]).verdicts
    assert v.verdict == "unverified" and any("class_name" in r for r in v.reasons), v.reasons
