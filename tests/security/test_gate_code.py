"""Code beside the weights is its own verdict, ``code`` (rule security.ships_code).

Each case is built with the real tool (a module on disk, ``site`` .pth files, transformers'
``register_for_auto_class`` + ``save_pretrained``, ``torch.jit.save``) and, where the code is
run by something a user starts, that thing is started in a child process to prove the code
runs (it only creates a marker); then the gate must call it ``code`` and name what runs it.
Benign folders written by the same tools must not be flagged.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from security_oracle import run_as_user

from ckpt_explorer.security import scan_paths
from ckpt_explorer.security.judge import CODE, SHIPS_CODE, UNVERIFIED


def _verdicts(folder: Path, **kw: Any) -> dict[str, Any]:
    report = scan_paths([folder], **kw)
    return {Path(v.path).relative_to(folder).as_posix(): v for v in report.verdicts}


def _marker_module(marker: Path, name: str) -> str:
    return (
        f"open({str(marker)!r}, 'w').close()\n"
        f"raise ModuleNotFoundError('no {name}', name={name!r})\n"  # torch goes on without it
    )


def test_a_module_torch_imports_at_startup_is_code(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    torch.save({"w": torch.ones(2)}, folder / "model.pt")
    marker = tmp_path / "MARK"
    (folder / "pynvml.py").write_text(_marker_module(marker, "pynvml"))
    done = run_as_user(folder, "import torch")
    assert marker.exists(), done.stderr  # `import torch` in that folder runs it
    report = scan_paths([folder])
    by = {Path(v.path).name: v for v in report.verdicts}
    assert by["pynvml.py"].verdict == "code"
    assert "`import torch`" in by["pynvml.py"].reasons[0]
    assert "try `import pynvml` at start-up" in by["pynvml.py"].reasons[0]
    assert by["model.pt"].verdict == "safe"
    assert report.exit_code == 1
    assert scan_paths([folder], allow_code=True).exit_code == 0


def test_any_module_or_package_in_the_folder_is_code(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    (folder / "helpers").mkdir(parents=True)
    marker = tmp_path / "MARK"
    (folder / "helpers" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (folder / "notes.py").write_text("X = 1\n")
    (folder / "checkpoint-5").mkdir()  # not a module name: a data folder
    torch.save({"w": torch.ones(2)}, folder / "checkpoint-5" / "model.pt")
    done = run_as_user(folder, "import helpers")
    assert marker.exists(), done.stderr
    found = _verdicts(folder)
    assert found["helpers/__init__.py"].verdict == "code"
    assert "can import it as helpers" in found["helpers/__init__.py"].reasons[0]
    assert found["notes.py"].verdict == "code"
    assert found["checkpoint-5/model.pt"].verdict == "safe"


def test_a_sourceless_pyc_is_code(tmp_path: Path) -> None:
    import py_compile

    folder = tmp_path / "ckpt"
    folder.mkdir()
    marker = tmp_path / "MARK"
    src = tmp_path / "cached.py"
    src.write_text(f"open({str(marker)!r}, 'w').close()\n")
    py_compile.compile(str(src), cfile=str(folder / "cached.pyc"))
    done = run_as_user(folder, "import cached")
    assert marker.exists(), done.stderr  # the bytecode alone is imported
    v = _verdicts(folder)["cached.pyc"]
    assert v.verdict == "code" and "can import it as cached" in v.reasons[0]


def _site(folder: Path) -> str:
    return f"import site; site.addsitedir({str(folder)!r})"


def test_a_pth_import_line_after_64_kib_is_code(tmp_path: Path) -> None:
    folder = tmp_path / "site"
    folder.mkdir()
    marker = tmp_path / "MARK"
    paths = "".join(f"lib{i:05d}\n" for i in range(9000))  # 81 KiB of path lines
    (folder / "late.pth").write_text(f"{paths}import os; os.mkdir({str(marker)!r})\n")
    done = run_as_user(tmp_path, _site(folder))
    assert marker.exists(), done.stderr  # site runs the late line
    v = _verdicts(folder)["late.pth"]
    assert v.verdict == "code"
    assert "site module executes" in v.reasons[0] and "at byte 81000" in v.reasons[0]


def test_a_pth_import_line_before_undecodable_bytes_is_code(tmp_path: Path) -> None:
    """Python 3.10-3.12 run the lines of earlier chunks before the decode error."""
    folder = tmp_path / "site"
    folder.mkdir()
    marker = tmp_path / "MARK"
    body = f"import os; os.mkdir({str(marker)!r})\n".encode() + b"#" * 20000 + b"\n\xff\xfe\n"
    (folder / "early.pth").write_bytes(body)
    done = run_as_user(tmp_path, _site(folder))
    if sys.version_info < (3, 13):
        assert marker.exists(), done.stderr
    assert _verdicts(folder)["early.pth"].verdict == "code"


def test_a_pth_that_site_stops_before_its_import_line_passes(tmp_path: Path) -> None:
    """The first import line fails to compile: site ignores the rest of the file."""
    folder = tmp_path / "site"
    folder.mkdir()
    marker = tmp_path / "MARK"
    text = f"../lib\nimport (\nimport os; os.mkdir({str(marker)!r})\n"
    (folder / "stops.pth").write_text(text)
    (folder / "paths.pth").write_text("../lib\n# import os\n  import os\n")  # never exec'd
    done = run_as_user(tmp_path, _site(folder))
    assert not marker.exists(), done.stderr
    found = _verdicts(folder)
    assert {v.verdict for v in found.values()} == {"data"}, found


def test_a_torch_saved_pth_model_is_not_code(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    torch.save(model.state_dict(), tmp_path / "model.pth")
    torch.save({"step": 3, "w": torch.arange(4096.0)}, tmp_path / "state.pth")
    found = _verdicts(tmp_path)
    assert {v.verdict for v in found.values()} == {"safe"}, found


def test_a_pth_checkpoint_with_a_planted_import_line_is_code(tmp_path: Path) -> None:
    """A torch zip whose tensor bytes hold ``\\nimport ...``: a site that reads bytes one to a
    character (a single-byte locale) reaches it."""
    line = b"\nimport os\n"
    data = torch.frombuffer(bytearray(line + b"\0" * (16 - len(line) % 16)), dtype=torch.uint8)
    torch.save({"w": data.clone()}, tmp_path / "planted.pth")
    v = _verdicts(tmp_path)["planted.pth"]
    assert v.verdict == "code" and "single-byte locale" in v.reasons[0]


_MODELING = textwrap.dedent(
    """
    import os

    import torch
    from transformers import PretrainedConfig, PreTrainedModel

    if os.environ.get("CKPT_MARK"):
        open(os.environ["CKPT_MARK"], "w").close()


    class TinyConfig(PretrainedConfig):
        model_type = "tiny_remote"

        def __init__(self, width=4, **kw):
            self.width = width
            super().__init__(**kw)


    class TinyModel(PreTrainedModel):
        config_class = TinyConfig

        def __init__(self, config):
            super().__init__(config)
            self.proj = torch.nn.Linear(config.width, config.width)
            self.post_init()
    """
)

_SAVE = """
import sys
sys.path.insert(0, {src!r})
import tiny_modeling as m
m.TinyConfig.register_for_auto_class()
m.TinyModel.register_for_auto_class("AutoModel")
m.TinyModel(m.TinyConfig()).save_pretrained({out!r})
"""


def test_auto_map_with_trust_remote_code_is_code(tmp_path: Path) -> None:
    src, out, marker = tmp_path / "src", tmp_path / "model", tmp_path / "MARK"
    src.mkdir()
    (src / "tiny_modeling.py").write_text(_MODELING)
    done = run_as_user(tmp_path, _SAVE.format(src=str(src), out=str(out)))
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "tiny_modeling.TinyModel"
    assert (out / "tiny_modeling.py").is_file()  # save_pretrained copied the module
    load = (
        "from transformers import AutoModel; "
        f"AutoModel.from_pretrained({str(out)!r}, trust_remote_code=True)"
    )
    done = run_as_user(tmp_path, load, CKPT_MARK=str(marker), HF_HUB_OFFLINE="1")
    assert marker.exists(), done.stderr  # the loader imported the folder's module
    found = _verdicts(out)
    cfg = found["config.json"]
    assert cfg.verdict == "code"
    said = " ".join(cfg.reasons)
    assert "auto_map['AutoModel'] = 'tiny_modeling.TinyModel'" in said
    assert "trust_remote_code=True" in said and "tiny_modeling.py, in this folder" in said
    module = found["tiny_modeling.py"]
    assert module.verdict == "code"
    assert any("config.json's auto_map" in r for r in module.reasons)
    assert found["model.safetensors"].verdict == "data"


def test_auto_map_naming_code_elsewhere_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"auto_map": {"AutoModel": "modeling_x.XModel",
                                 "AutoConfig": "org/other--configuration_x.XConfig"}})
    )  # fmt: skip
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"auto_map": ["tokenization_x.XTokenizer", None]})  # an old pair
    )
    found = _verdicts(tmp_path)
    said = " ".join(found["config.json"].reasons)
    assert found["config.json"].verdict == "code"
    assert "modeling_x.py, which is not in this folder" in said and "from the Hub" in said
    assert "Hub repository org/other" in said
    assert found["tokenizer_config.json"].verdict == "code"


def test_a_diffusers_custom_pipeline_is_code(tmp_path: Path) -> None:
    (tmp_path / "model_index.json").write_text(
        json.dumps({"_class_name": ["my_pipeline", "MyPipeline"], "_diffusers_version": "0.30.0",
                    "unet": ["diffusers", "UNet2DModel"], "scheduler": ["my_sched", "S"]})
    )  # fmt: skip
    (tmp_path / "my_pipeline.py").write_text("X = 1\n")
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "my_sched.py").write_text("S = 1\n")
    found = _verdicts(tmp_path)
    said = " ".join(found["model_index.json"].reasons)
    assert "_class_name" in said and "my_pipeline.py" in said and "scheduler/my_sched.py" in said
    assert "unet" not in said


def test_a_torchscript_archive_is_code(tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(tmp_path / "scripted.pt"))
    v = _verdicts(tmp_path)["scripted.pt"]
    assert v.verdict == "code" and v.format == "TorchScript archive"
    assert "torch.jit.load" in v.reasons[0]
    rules = {f.rule for f in v.findings}
    assert SHIPS_CODE in rules and not rules & {CODE, UNVERIFIED}, v.findings


def test_a_plain_hf_folder_with_tokenizer_files_passes(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    out = tmp_path / "hf"
    BertModel(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=8, vocab_size=16)).save_pretrained(out)  # fmt: skip
    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", "hello", "world"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(out)
    (out / "README.md").write_text("# a model\n")
    report = scan_paths([out])
    assert report.exit_code == 0, [(v.path, v.reasons) for v in report.verdicts]
    assert {v.verdict for v in report.verdicts} == {"data"}


@pytest.mark.parametrize("name", ["zero_to_fp32.py", "zero_to_torch.py"])
def test_deepspeeds_own_recovery_scripts_are_not_code(tmp_path: Path, name: str) -> None:
    import deepspeed

    real = Path(deepspeed.__file__).parent / "utils" / name
    (tmp_path / name).write_bytes(real.read_bytes())
    assert _verdicts(tmp_path)[name].verdict == "data"
    (tmp_path / name).write_bytes(real.read_bytes() + b"\nimport os\n")  # altered: code
    assert _verdicts(tmp_path)[name].verdict == "code"


@pytest.mark.parametrize("name", ["zero_to_fp32.py", "zero_to_torch.py"])
def test_release_table_holds_the_installed_deepspeeds_copy(name: str) -> None:
    """The release digests (security/known_scripts.py) were taken from DeepSpeed's source
    distributions: the installed release's own file must be among them, under its version."""
    import hashlib
    import importlib.metadata

    import deepspeed

    from ckpt_explorer.security.known_scripts import DEEPSPEED_SCRIPTS

    real = Path(deepspeed.__file__).parent / "utils" / name
    releases = DEEPSPEED_SCRIPTS[name][hashlib.sha256(real.read_bytes()).hexdigest()]
    version = importlib.metadata.version("deepspeed")
    first, _, last = releases.partition("-")
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert as_tuple(first) <= as_tuple(version) <= as_tuple(last or first)
