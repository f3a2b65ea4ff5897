"""Real outputs of the writers users run are never called unsafe or unverified.

Each file is written by the real library (torch.save, numpy, joblib with every compressor it
ships, torch.distributed.checkpoint) and loaded back by it; ``scan`` must say ``safe`` (a pickle
of inert objects) or ``data`` (nothing unpickled). Each benign layout has a malicious twin
written by the same library, which must never pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ckpt_explorer.security import judge_file, scan_paths

joblib = pytest.importorskip("joblib")


class _Mark:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (self.marker,))


def _verdicts(folder: Path) -> dict[str, str]:
    return {v.path.name: v.verdict for v in scan_paths([folder]).verdicts}


def test_torch_return_types_are_inert(tmp_path: Path) -> None:
    x = torch.arange(12.0).reshape(3, 4)
    torch.save(
        {"max": torch.max(x, 0), "topk": torch.topk(x, 2), "sort": torch.sort(x)},
        tmp_path / "stats.pt",
    )
    torch.load(tmp_path / "stats.pt", weights_only=False)
    verdict = judge_file(tmp_path / "stats.pt")
    assert verdict.verdict == "safe", verdict.findings


@pytest.mark.parametrize(
    "compress", [0, ("zlib", 3), ("gzip", 3), ("bz2", 3), ("lzma", 3), ("xz", 3)]
)
def test_joblib_dumps_are_safe_and_their_payloads_are_not(tmp_path: Path, compress: Any) -> None:
    arrays = {
        "f": np.arange(10, dtype="f8"),
        "u": np.array(["ab", "c"]),
        "big": np.zeros((64, 64), dtype=">i2"),
        "obj": np.array([1, "x", None], dtype=object),
        "structured": np.zeros(3, dtype=[("a", "<i4"), ("b", "f4")]),
        "scalar": np.float32(2.5),
    }
    path = tmp_path / "arrays.joblib"
    joblib.dump(arrays, path, compress=compress)
    assert joblib.load(path)["u"][0] == "ab"
    verdict = judge_file(path)
    assert verdict.verdict == "safe", verdict.findings
    marker = tmp_path / "MARK"
    evil = tmp_path / "evil.joblib"
    joblib.dump({"x": np.array([_Mark(marker)], dtype=object)}, evil, compress=compress)
    assert judge_file(evil).verdict == "unsafe"
    subprocess.run(
        [sys.executable, "-c", f"import joblib; joblib.load({str(evil)!r})"],
        timeout=120,
        check=False,
        capture_output=True,
    )
    assert marker.exists()  # the control: joblib.load runs it


def test_numpy_files_are_data_and_object_arrays_are_judged(tmp_path: Path) -> None:
    np.save(tmp_path / "plain.npy", np.arange(5))
    np.savez(tmp_path / "plain.npz", a=np.arange(3), b=np.ones((2, 2)))
    np.savez_compressed(tmp_path / "packed.npz", a=np.arange(300))
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, [2, 3]], dtype=object))
    np.savez(tmp_path / "objects.npz", o=np.array([(1, 2)], dtype=object))
    np.savez(tmp_path / "evil.npz", o=np.array([_Mark(tmp_path / "MARK")], dtype=object))
    assert _verdicts(tmp_path) == {
        "plain.npy": "data",
        "plain.npz": "data",
        "packed.npz": "data",
        "objects.npy": "safe",
        "objects.npz": "safe",
        "evil.npz": "unsafe",
    }


def test_torch_save_variants_are_safe(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    torch.save(model.state_dict(), tmp_path / "model.pt")
    torch.save(model.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    torch.save(opt.state_dict(), tmp_path / "optimizer.bin")
    torch.save(
        {"np": np.arange(3), "f": np.float64(1.5), "rng": np.random.get_state()},
        tmp_path / "numpy_values.pth",
    )
    for proto in (2, 3, 4, 5):
        torch.save({"w": torch.ones(2)}, tmp_path / f"proto{proto}.pt", pickle_protocol=proto)
    verdicts = _verdicts(tmp_path)
    assert set(verdicts.values()) == {"safe"}, verdicts


def test_tensors_pickled_with_pickle_are_judged_through_their_nested_bytes(
    tmp_path: Path,
) -> None:
    """``pickle.dumps(tensor)`` calls ``torch.storage._load_from_bytes(b)``, a
    ``torch.load(b, weights_only=False)`` of bytes in the pickle: the bytes are judged."""
    import io
    import pickle

    path = tmp_path / "tensors.pkl"
    path.write_bytes(pickle.dumps({"w": torch.ones(3), "b": torch.zeros(2)}))
    assert pickle.loads(path.read_bytes())["w"].sum() == 3
    assert judge_file(path).verdict == "safe"
    inner = io.BytesIO()
    torch.save(_Mark(tmp_path / "MARK"), inner, _use_new_zipfile_serialization=False)
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(
        pickle.dumps(torch.storage._load_from_bytes, protocol=2)[:-1]
        + pickle.dumps((inner.getvalue(),), protocol=2)[2:-1]
        + b"R."
    )
    verdict = judge_file(evil)
    assert verdict.verdict == "unsafe"
    assert "_load_from_bytes loads" in " ".join(verdict.reasons)
    subprocess.run(
        [sys.executable, "-c", f"import pickle, torch; pickle.load(open({str(evil)!r}, 'rb'))"],
        timeout=120,
        check=False,
        capture_output=True,
    )
    assert (tmp_path / "MARK").exists()  # the control


_MAKERS = sorted(
    p.name[: -len("_maker.py")]
    for p in (Path(__file__).parent.parent / "fixture_makers").glob("*_maker.py")
)


# the writer's own source tree a maker keeps beside its outputs (llama.cpp's converter and its
# gguf-py, which do shadow the installed gguf when Python starts in gguf-py/): not an output
_TOOL_TREES = {"gguf": ("llama.cpp",), "kquant": ("llama.cpp",)}


def _is_code_by_nature(v: Any) -> bool:
    """Files that are code and that a writer puts beside its checkpoints on purpose: Python
    sources (mmengine dumps its config as a ``.py`` that ``Config.fromfile`` executes) and
    TorchScript archives. The gate must call them ``code``: never ``safe`` or ``data``."""
    return v.path.suffix == ".py" or "TorchScript" in " ".join(v.reasons)


@pytest.mark.parametrize("maker", _MAKERS)
def test_every_fixture_file_is_safe_or_data(maker: str, real_checkpoints: Any) -> None:
    """Every file the real writers made for the test-suite (torch, transformers, accelerate,
    DeepSpeed, DCP, Lightning, ColossalAI, Megatron, torchtune, diffusers, mmengine, timm,
    fvcore, LitGPT, llama.cpp's converter...) passes: each is a pickle of inert objects or a
    format the gate proves to be data; a writer's own code files are ``code``, nothing else."""
    folder, _ = real_checkpoints(maker)
    skip = [folder / t for t in _TOOL_TREES.get(maker, ())]
    roots = [p for p in folder.iterdir() if p not in skip]
    report = scan_paths(roots)
    bad = {str(v.path): (v.verdict, v.reasons[:1]) for v in report.verdicts}
    bad = {
        k: v
        for k, v in bad.items()
        if v[0] not in ("safe", "data")
        and not (v[0] == "code" and _is_code_by_nature(_by_path(report)[k]))
    }
    assert report.verdicts and not bad, bad


def _by_path(report: Any) -> dict[str, Any]:
    return {str(v.path): v for v in report.verdicts}


def test_a_folder_named_like_a_package_shadows_only_what_it_holds(tmp_path: Path) -> None:
    """A work dir named after the package its pickles import (``mmengine/``, no ``__init__``)
    is a namespace portion: the installed package wins over it, and where none is installed it
    runs only a module file on an imported dotted path. Its checkpoints are judged as files;
    a planted ``mmengine/logging/history_buffer.py`` shadows."""
    pytest.importorskip("mmengine")
    from mmengine.logging.history_buffer import HistoryBuffer

    work = tmp_path / "mmengine" / "run"
    work.mkdir(parents=True)
    buf = HistoryBuffer()
    buf.update(1.0)
    torch.save({"message_hub": {"log_scalars": {"loss": buf}}}, work / "iter_4.pth")
    (work / "last_checkpoint").write_text(str(work / "iter_4.pth"))
    verdicts = {v.path.name: v.verdict for v in scan_paths([tmp_path]).verdicts}
    assert verdicts == {"iter_4.pth": "safe", "last_checkpoint": "data"}, verdicts
    planted = tmp_path / "mmengine" / "logging" / "history_buffer.py"
    planted.parent.mkdir()
    planted.write_text("import os\nos.mkdir('PWNED')\n")
    out = {v.path.name: v for v in scan_paths([tmp_path]).verdicts}
    assert out["history_buffer.py"].verdict == "unsafe"
    assert "mmengine.logging.history_buffer" in " ".join(out["history_buffer.py"].reasons)
    assert out["iter_4.pth"].verdict == "unsafe"  # loaded from tmp_path, it runs that file


def test_transformers_folders_with_tokenizers_are_data(tmp_path: Path) -> None:
    """save_pretrained of a model, a fast BPE tokenizer (tokenizer.json, vocab.json,
    merges.txt, a chat template) and a sentencepiece tokenizer (its .model file)."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    spm = pytest.importorskip("sentencepiece")
    texts = [f"the quick brown fox {i} jumps over the lazy dog" for i in range(300)]
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
    bpe.train_from_iterator(
        texts, tokenizers.trainers.BpeTrainer(vocab_size=80, special_tokens=["<unk>"])
    )
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=80, n_positions=16)
    )
    model.save_pretrained(tmp_path / "gpt2")
    fast.save_pretrained(tmp_path / "gpt2")
    bpe.model.save(str(tmp_path / "gpt2"))  # vocab.json and merges.txt
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=60, minloglevel=2
    )
    slow = transformers.T5Tokenizer(vocab_file=str(tmp_path / "sp.model"), extra_ids=0)
    slow.save_pretrained(tmp_path / "t5")
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "gpt2")("the fox")["input_ids"]
    assert transformers.T5Tokenizer.from_pretrained(tmp_path / "t5")("the fox")["input_ids"]
    folders = [tmp_path / "gpt2", tmp_path / "t5", tmp_path / "sp.model"]
    verdicts = {v.path.name: v.verdict for v in scan_paths(folders).verdicts}
    wanted = {"model.safetensors", "tokenizer.json", "merges.txt", "vocab.json", "sp.model"}
    assert wanted <= set(verdicts), verdicts
    assert set(verdicts.values()) == {"data"}, verdicts


def test_accelerate_save_state_is_safe_or_data(tmp_path: Path) -> None:
    accelerate = pytest.importorskip("accelerate")
    acc = accelerate.Accelerator(cpu=True)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    model, opt, sched = acc.prepare(model, opt, sched)
    acc.backward(model(torch.randn(3, 4)).sum())
    opt.step()
    sched.step()
    acc.save_state(str(tmp_path / "state"))
    acc.load_state(str(tmp_path / "state"))
    verdicts = _verdicts(tmp_path / "state")
    assert verdicts and set(verdicts.values()) <= {"safe", "data"}, verdicts
