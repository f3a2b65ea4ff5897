"""Which llama.cpp reads a GGUF (readers/gguf/runtimes.py): the table against the llama.cpp
source vendored in the llama-cpp-python sdist the GGUF fixtures are made with, and the notes
``inspect`` shows for exports written by llama.cpp's own converter and llama-quantize."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.readers.gguf import runtime_facts as facts
from ckpt_explorer.readers.gguf.runtimes import RUNTIMES_KEY, runtime_notes

MAKERS = Path(__file__).parents[1] / "fixture_makers"


def _gguf_models() -> Any:
    spec = importlib.util.spec_from_file_location("_gguf_models", MAKERS / "_gguf_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def source(real_checkpoints: Any) -> dict[str, str]:
    """The sdist's vendored llama.cpp files the table speaks of (the sdist is cached by the
    gguf maker, made first)."""
    real_checkpoints("gguf")
    models = _gguf_models()
    tar = models.sdist()
    prefix = f"llama_cpp_python-{models.LLAMA_CPP_PYTHON}/"
    wanted = {
        "ggml.h": "vendor/llama.cpp/ggml/include/ggml.h",
        "gguf.h": "vendor/llama.cpp/ggml/include/gguf.h",
        "gguf.cpp": "vendor/llama.cpp/ggml/src/gguf.cpp",
        "llama-arch.cpp": "vendor/llama.cpp/src/llama-arch.cpp",
        "CHANGELOG.md": "CHANGELOG.md",
    }
    out = {}
    with tarfile.open(tar) as tf:
        for key, rel in wanted.items():
            f = tf.extractfile(prefix + rel)
            assert f is not None
            out[key] = f.read().decode()
    return out


def test_every_type_of_the_vendored_source_is_in_the_table(source: dict[str, str]) -> None:
    enum = {
        int(m[2]): m[1]
        for m in re.finditer(r"^\s*GGML_TYPE_(\w+)\s*=\s*(\d+)\s*,", source["ggml.h"], re.M)
        if m[1] != "COUNT"
    }
    assert 30 in enum and 39 in enum  # BF16 and MXFP4 at least
    for tid, name in enum.items():
        assert facts.TYPES[tid]["name"] == name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", facts.TYPES[tid]["date"]), name
    # ids the enum comments out (Q4_2, Q4_0_4_4 ...) are not readable types
    assert not set(facts.TYPES) & {4, 5, 31, 32, 33, 36, 37, 38}
    version = int(re.search(r"#define GGUF_VERSION (\d+)", source["gguf.h"])[1])  # type: ignore[index]
    assert version == max(facts.GGUF_VERSIONS)
    assert "GGUFv1 is no longer supported" in source["gguf.cpp"]
    # the order of the history: a type is never dated before the types whose ids precede it
    # in the same enum block, except where the enum reuses a freed id (none after 8)
    dates = [facts.TYPES[t]["date"] for t in sorted(enum) if t >= 8]
    assert dates == sorted(dates)


def test_every_architecture_of_the_vendored_source_is_in_the_table(
    source: dict[str, str],
) -> None:
    names = set(re.findall(r'\{\s*LLM_ARCH_\w+\s*,\s*"([\w.-]+)"\s*\}', source["llama-arch.cpp"]))
    assert {"llama", "qwen3", "gemma3"} <= names
    sdist_commit = re.search(r"llama\.cpp@([0-9a-f]{7,40})", source["CHANGELOG.md"])[1]  # type: ignore[index]
    older = {f["by_commit"] for f in facts.ARCHES.values()} - {sdist_commit[:10]}
    for name in names:
        # present by this sdist's llama.cpp commit, or by an older one
        assert facts.ARCHES[name]["by_commit"] in {sdist_commit[:10], *older}, name
    assert facts.ARCHES["llama"]["by_commit"] != sdist_commit[:10]  # older than this sdist


def _llama_cpp(path: Path) -> dict[str, Any]:
    notes = open_checkpoint(path).values[RUNTIMES_KEY]
    assert [n["runtime"] for n in notes] == ["llama.cpp", "Ollama", "LM Studio"]
    assert all(n["reads"] is None and "unverified" in n["note"] for n in notes[1:])
    return notes[0]


@pytest.mark.parametrize("case", ["bf16", "f16", "q8_0"])
def test_inspect_shows_the_minimum_llama_cpp(real_checkpoints: Any, case: str) -> None:
    out, manifest = real_checkpoints("gguf")
    note = _llama_cpp(out / manifest["cases"][case]["path"])
    newest = {"bf16": ("type BF16", facts.TYPES[30]), "f16": ("GGUF v3", facts.GGUF_VERSIONS[3]),
              "q8_0": ("GGUF v3", facts.GGUF_VERSIONS[3])}[case]  # fmt: skip
    assert note["reads"] is True
    assert note["needs"][0]["what"] == newest[0]
    assert note["needs"][0]["since"] == newest[1]["date"]
    assert f"from llama.cpp of {newest[1]['date']} on" in note["note"]
    assert "'llama'" in note["note"]
    # the BF16 export needs a newer llama.cpp than the F16 one
    if case == "bf16":
        assert facts.TYPES[30]["date"] > facts.GGUF_VERSIONS[3]["date"]


def test_k_quant_export_names_its_types(real_checkpoints: Any) -> None:
    out, manifest = real_checkpoints("kquant")
    for case, info in manifest["cases"].items():
        if not str(info["path"]).endswith(".gguf"):
            continue
        note = _llama_cpp(out / info["path"])
        used = {f"type {t}" for t in info["types"].values()}
        assert used == {n["what"] for n in note["needs"] if n["what"].startswith("type ")}, case
        assert note["needs"][0]["since"] == max(n["since"] for n in note["needs"])


def test_cli_json_and_evidence(real_checkpoints: Any) -> None:
    out, manifest = real_checkpoints("gguf")
    path = out / manifest["cases"]["bf16"]["path"]
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", "inspect", "--json", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    doc = json.loads(proc.stdout)
    assert doc["values"][RUNTIMES_KEY][0]["needs"][0]["what"] == "type BF16"
    assert any(e.startswith("llama.cpp: reads: true from") for e in doc["evidence"])


def test_files_no_llama_cpp_reads() -> None:
    assert runtime_notes(1, [0], "llama")[0]["reads"] is False  # GGUFv1 rejected
    assert runtime_notes(4, [0], "llama")[0]["reads"] is False
    removed = runtime_notes(3, [0, 31], "llama")[0]  # Q4_0_4_4, removed from gguf files
    assert removed["reads"] is False and "[31]" in removed["note"]
    unknown = runtime_notes(3, [0], "not-an-arch")[0]
    assert unknown["reads"] is None and "not in the llama.cpp sources" in unknown["note"]
    assert runtime_notes(3, [0], None)[0]["reads"] is False  # no general.architecture


def test_a_llama_cpp_release_tag_is_named_as_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Facts refreshed from llama.cpp's own git dir carry its ``bNNNN`` tags: the note names
    the build instead of the date (ggml's ``vX.Y.Z`` tags are not llama.cpp builds)."""
    bf16 = {**facts.TYPES[30], "tag": "b2800"}
    monkeypatch.setitem(facts.TYPES, 30, bf16)
    note = runtime_notes(3, [0, 30], "llama")[0]
    assert note["needs"][0]["build"] == "b2800"
    assert note["note"].startswith("reads: true from build b2800 on")
    assert runtime_notes(3, [0], "llama")[0]["needs"][0]["build"] is None  # tag v0.9.1
