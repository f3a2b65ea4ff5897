"""Attacks from a red-team round, each proven under its real consumer, and benign twins.

- A ``config.json`` whose ``auto_map`` key is spelled with a JSON escape (``"auto\\u005fmap"``):
  transformers' ``json.loads`` reads ``auto_map``, so ``from_pretrained(trust_remote_code=True)``
  imports the module it names; the gate must read the key as the loader does.
- ``custom_pipelines`` in ``config.json``: ``pipeline(model=folder, trust_remote_code=True)``
  imports each task's ``impl``, which may live outside the folder (``"/path--module.Class"``
  is read from that folder, ``"owner/repo--module.Class"`` from another Hub repository).
- A ``torch.package`` archive ships Python modules: ``PackageImporter.import_module`` runs them
  (and ``load_pickle`` for every class its pickles name); its pickles alone can be inert.

Each attack's code only creates a marker file; each case is built with the real writer
(``save_pretrained``, ``PackageExporter``), the consumer is run in a child process to prove
the code runs, then ``scan`` must fail the file. Benign twins from the same writers must pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from security_oracle import run_as_user

from ckpt_explorer.security import scan_paths


def _verdicts(folder: Path) -> tuple[int, dict[str, Any]]:
    report = scan_paths([folder])
    found = {Path(v.path).relative_to(folder).as_posix(): v for v in report.verdicts}
    return report.exit_code, found


_SAVE_GPT2 = """
import json, sys
from transformers import GPT2Config, GPT2Model
cfg = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8,
                 id2label={0: "caf\\u00e9", 1: "na\\u00efve"})
model = GPT2Model(cfg)
extra = json.loads(sys.argv[2])
for k, v in extra.items():
    setattr(model.config, k, v)
model.save_pretrained(sys.argv[1])
"""

_CONFIG_MODULE = textwrap.dedent(
    """
    import os
    from transformers import GPT2Config

    open(os.environ["CKPT_MARK"], "w").close()


    class EvilConfig(GPT2Config):
        pass
    """
)

_PIPELINE_MODULE = textwrap.dedent(
    """
    import os
    from transformers import Pipeline

    open(os.environ["CKPT_MARK"], "w").close()


    class EvilPipe(Pipeline):
        def _sanitize_parameters(self, **kw):
            return {}, {}, {}

        def preprocess(self, x):
            return x

        def _forward(self, x):
            return x

        def postprocess(self, x):
            return x
    """
)


def _save(tmp_path: Path, name: str, **extra: Any) -> Path:
    out = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-c", _SAVE_GPT2, str(out), json.dumps(extra)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_an_escaped_auto_map_key_is_code_and_its_twin_is_data(tmp_path: Path) -> None:
    ext = tmp_path / "elsewhere"  # the code lives outside the scanned folder
    ext.mkdir()
    (ext / "evil_config.py").write_text(_CONFIG_MODULE)
    model = _save(tmp_path, "model", auto_map={"AutoConfig": f"{ext}--evil_config.EvilConfig"})
    twin = _save(tmp_path, "twin")
    text = (model / "config.json").read_text()
    assert '"auto_map"' in text
    (model / "config.json").write_text(text.replace('"auto_map"', '"auto\\u005fmap"'))
    assert '"auto_map"' not in (model / "config.json").read_text()
    marker = tmp_path / "MARK"
    load = f"from transformers import AutoConfig; AutoConfig.from_pretrained({str(model)!r}, trust_remote_code=True)"
    done = run_as_user(tmp_path, load, CKPT_MARK=str(marker))
    assert marker.exists(), done.stderr  # transformers decoded the key and imported the module

    rc, found = _verdicts(model)
    cfg = found["config.json"]
    assert cfg.verdict == "code" and rc == 1
    said = " ".join(cfg.reasons)
    assert "auto_map['AutoConfig']" in said and "evil_config.py of the folder" in said
    assert found["model.safetensors"].verdict == "data"
    # the twin: the same writer, non-ASCII labels written as \\u escapes, no auto_map
    assert "\\u00e9" in (twin / "config.json").read_text()
    rc, found = _verdicts(twin)
    assert rc == 0 and {v.verdict for v in found.values()} == {"data"}


def test_a_config_past_the_old_16_mib_limit_is_read(tmp_path: Path) -> None:
    ext = tmp_path / "elsewhere"
    ext.mkdir()
    (ext / "evil_config.py").write_text(_CONFIG_MODULE)
    model = _save(tmp_path, "model", auto_map={"AutoConfig": f"{ext}--evil_config.EvilConfig"})
    doc = json.loads((model / "config.json").read_text())
    doc["notes"] = "x" * (17 * 2**20)  # transformers reads a config of any size
    (model / "config.json").write_text(json.dumps(doc, indent=2))
    marker = tmp_path / "MARK"
    load = (
        "from transformers import AutoConfig\n"
        f"AutoConfig.from_pretrained({str(model)!r}, trust_remote_code=True)\n"
    )
    done = run_as_user(tmp_path, load, CKPT_MARK=str(marker))
    assert marker.exists(), done.stderr
    rc, found = _verdicts(model)
    assert found["config.json"].verdict == "code" and rc == 1


def test_a_config_too_large_to_parse_is_unverified_when_it_may_name_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckpt_explorer.security import remote_code as rc_module

    monkeypatch.setattr(rc_module, "_MAX_CONFIG", 1024)
    monkeypatch.setattr(rc_module, "_CHUNK", 256)  # searched in several chunks
    pad = "x" * 4000
    escaped = json.dumps({"notes": pad, "auto_map": {}}).replace('"auto_map"', '"auto\\u005fmap"')
    (tmp_path / "config.json").write_text(escaped)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"notes": pad, "vocab": {"\u0120a": 1}}))
    text = (tmp_path / "config.json").read_text()
    assert "auto_map" not in text and len(text) > 1024
    rc, found = _verdicts(tmp_path)
    v = found["config.json"]
    assert v.verdict == "unverified" and rc == 1
    assert "too large to read here" in " ".join(v.reasons)
    assert found["tokenizer.json"].verdict == "data"


def test_custom_pipelines_impl_is_code(tmp_path: Path) -> None:
    ext = tmp_path / "elsewhere"
    ext.mkdir()
    (ext / "evil_pipe.py").write_text(_PIPELINE_MODULE)
    task = {"impl": f"{ext}--evil_pipe.EvilPipe", "pt": ["AutoModel"], "tf": [], "type": "text"}
    model = _save(tmp_path, "model", custom_pipelines={"evil-task": task})
    assert "custom_pipelines" in json.loads((model / "config.json").read_text())
    marker = tmp_path / "MARK"
    load = (
        "from transformers import pipeline\n"
        f"pipeline(model={str(model)!r}, trust_remote_code=True)\n"
    )
    done = run_as_user(tmp_path, load, CKPT_MARK=str(marker))
    assert marker.exists(), done.stderr  # pipeline imported the impl's module

    rc, found = _verdicts(model)
    cfg = found["config.json"]
    assert cfg.verdict == "code" and rc == 1
    said = " ".join(cfg.reasons)
    assert (
        "custom_pipelines['evil-task'].impl" in said and "pipeline(trust_remote_code=True)" in said
    )
    # another Hub repository: named, not judged
    hub = json.loads((model / "config.json").read_text())
    hub["custom_pipelines"]["evil-task"]["impl"] = "org/other--evil_pipe.EvilPipe"
    (model / "config.json").write_text(json.dumps(hub))
    said = " ".join(_verdicts(model)[1]["config.json"].reasons)
    assert "Hub repository org/other" in said


def _package(path: Path, source: str | None) -> None:
    import torch
    from torch.package import PackageExporter

    with PackageExporter(str(path)) as pe:
        if source is not None:
            pe.save_source_string("helpers", source)
        pe.save_pickle("model", "model.pkl", {"w": torch.ones(2)})


def test_a_torch_package_shipping_modules_is_code_and_its_twin_is_safe(tmp_path: Path) -> None:
    folder = tmp_path / "release"
    folder.mkdir()
    marker = tmp_path / "MARK"
    _package(folder / "weights.pt", f"open({str(marker)!r}, 'w').close()\n")
    _package(folder / "plain.pt", None)
    load = (
        "from torch.package import PackageImporter\n"
        f"imp = PackageImporter({str(folder / 'weights.pt')!r})\n"
        "imp.load_pickle('model', 'model.pkl')\n"
        "import os, sys\n"
        f"assert not os.path.exists({str(marker)!r})  # the pickle alone runs nothing\n"
        "imp.import_module('helpers')\n"
    )
    done = run_as_user(tmp_path, load)
    assert done.returncode == 0 and marker.exists(), done.stderr

    rc, found = _verdicts(folder)
    v = found["weights.pt"]
    assert v.verdict == "code" and rc == 1
    assert "torch.package archive shipping Python modules (helpers.py)" in " ".join(v.reasons)
    assert found["plain.pt"].verdict == "safe"


def test_a_zip_of_modules_on_a_pth_path_line_is_code(tmp_path: Path) -> None:
    import zipfile

    import numpy as np
    import torch

    folder = tmp_path / "site"
    folder.mkdir()
    marker = tmp_path / "MARK"
    module = f"open({str(marker)!r}, 'w').close()\nraise ImportError('no pynvml')\n"
    with zipfile.ZipFile(folder / "mods.zip", "w") as z:  # torch's start-up tries pynvml
        z.writestr("pynvml.py", module)
    (folder / "extra.pth").write_text("mods.zip\n")  # a path line: no import, nothing run
    with zipfile.ZipFile(folder / "notes.zip", "w") as z:  # the twins: zips of data
        z.writestr("README.md", "# notes\n")
        z.writestr("config.json", json.dumps({"lr": 0.1}))
    np.savez(folder / "arrays.npz", a=np.arange(3))
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(folder / "scripted.pt"))
    load = f"import site; site.addsitedir({str(folder)!r}); import torch"
    done = run_as_user(tmp_path, load)
    assert marker.exists(), done.stderr  # zipimport found pynvml in the archive

    rc, found = _verdicts(folder)
    v = found["mods.zip"]
    assert v.verdict == "code" and rc == 1
    assert "a zip holding Python modules (pynvml.py)" in " ".join(v.reasons)
    assert found["notes.zip"].verdict == "data" and found["arrays.npz"].verdict == "data"
    scripted = " ".join(found["scripted.pt"].reasons)
    assert "TorchScript" in scripted and "zip holding Python modules" not in scripted


_ST_MODULE = textwrap.dedent(
    """
    import os

    open(os.environ["CKPT_MARK"], "w").close()
    """
)


def _sbert_side() -> str:
    """The side folder scripts/setup_env.sh installs sentence-transformers into."""
    for c in (
        os.environ.get("CKPT_SBERT_SIDE", ""),
        os.path.join(sys.prefix, "side", "sbert"),
        str(Path(__file__).resolve().parents[2] / ".venv" / "side" / "sbert"),
    ):
        if c and os.path.isdir(os.path.join(c, "sentence_transformers")):
            return c
    raise RuntimeError("no sentence-transformers side folder: run scripts/setup_env.sh")


def test_a_sentence_transformers_module_type_is_code(tmp_path: Path) -> None:
    # sentence-transformers (and the scipy / scikit-learn it imports) live in a side folder:
    # transformers probes for scikit-learn when it is importable
    side = _sbert_side()
    sbert_path = os.pathsep.join(x for x in (side, os.environ.get("PYTHONPATH", "")) if x)
    ext = tmp_path / "elsewhere"
    ext.mkdir()
    (ext / "evil_layer.py").write_text(_ST_MODULE)
    model = tmp_path / "model"
    save = (
        "from sentence_transformers import SentenceTransformer, models\n"
        f"SentenceTransformer(modules=[models.Dense(4, 4)]).save({str(model)!r})\n"
    )
    done = run_as_user(tmp_path, save, PYTHONPATH=sbert_path)
    assert done.returncode == 0, done.stderr
    rc, found = _verdicts(model)  # the twin: what the real writer wrote
    assert rc == 0 and {v.verdict for v in found.values()} == {"data"}

    doc = json.loads((model / "modules.json").read_text())
    assert doc[0]["type"].startswith("sentence_transformers.")
    doc[0]["type"] = f"{ext}--evil_layer.EvilLayer"
    (model / "modules.json").write_text(json.dumps(doc, indent=2))
    marker = tmp_path / "MARK"
    load = (
        "from sentence_transformers import SentenceTransformer\n"
        f"SentenceTransformer({str(model)!r}, trust_remote_code=True)\n"
    )
    done = run_as_user(tmp_path, load, CKPT_MARK=str(marker), PYTHONPATH=sbert_path)
    assert marker.exists(), done.stderr  # the module was imported (the class is not there)
    rc, found = _verdicts(model)
    v = found["modules.json"]
    assert v.verdict == "code" and rc == 1
    said = " ".join(v.reasons)
    assert "SentenceTransformer(trust_remote_code=True)" in said and "evil_layer.py" in said
