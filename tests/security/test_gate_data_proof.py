"""``data`` is a proof: only formats the gate parses completely, each written here by the real
tool that writes it; bytes the gate cannot place are ``unverified``, never ``data``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ckpt_explorer.security import judge_file


def _verdict(path: Path) -> tuple[str, str]:
    v = judge_file(path)
    return v.verdict, v.format


def test_written_data_formats_are_data(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2, 3)}, tmp_path / "model.safetensors", metadata={"k": "v"})
    np.save(tmp_path / "a.npy", np.arange(6, dtype="<f4").reshape(2, 3))
    np.savez_compressed(tmp_path / "b.npz", x=np.arange(3), y=np.ones(2, dtype="u1"))
    (tmp_path / "config.json").write_text(json.dumps({"hidden": 4, "names": ["é", "ü"]}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\nĠ a\n", encoding="utf-8")
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}{{ m }}{% endfor %}\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    with gzip.open(tmp_path / "log.json.gz", "wt") as f:
        f.write('{"loss": [1.0, 0.5]}')
    expect = {
        "model.safetensors": "safetensors",
        "a.npy": "npy",
        "b.npz": "npz",
        "config.json": "JSON",
        "merges.txt": "text",
        "chat_template.jinja": "text",
        "empty.txt": "empty file",
        "log.json.gz": "gzip stream of JSON",
    }
    for name, fmt in expect.items():
        assert _verdict(tmp_path / name) == ("data", fmt), name


def test_images_are_data_and_damaged_ones_are_not(tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    pic = image.new("RGB", (17, 9), (10, 200, 30))
    for fmt, ext in (("PNG", "png"), ("JPEG", "jpg"), ("GIF", "gif"), ("WEBP", "webp")):
        pic.save(tmp_path / f"p.{ext}", fmt)
    pic.save(tmp_path / "p.bmp", "BMP")
    for ext, name in (("png", "PNG"), ("jpg", "JPEG"), ("gif", "GIF"), ("webp", "WebP")):
        assert _verdict(tmp_path / f"p.{ext}") == ("data", f"{name} image"), ext
    assert _verdict(tmp_path / "p.bmp") == ("data", "BMP image")
    raw = (tmp_path / "p.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "tail.png").write_bytes(raw + b"\x80\x02}q\x00.")
    assert _verdict(tmp_path / "cut.png")[0] == "unverified"
    assert _verdict(tmp_path / "tail.png")[0] == "unverified"


def test_gguf_header_is_parsed(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.0])
    w.add_tensor("w", np.ones((2, 3), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert _verdict(path) == ("data", "GGUF")
    raw = bytearray(path.read_bytes())
    raw[24:32] = (1 << 40).to_bytes(8, "little")  # a count no file holds
    (tmp_path / "bad.gguf").write_bytes(bytes(raw))
    assert _verdict(tmp_path / "bad.gguf")[0] == "unverified"


def test_sentencepiece_model_is_data(tmp_path: Path) -> None:
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(f"the quick brown fox {i} jumps over the lazy dog" for i in range(200))
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=40, minloglevel=2
    )
    model = tmp_path / "sp.model"
    assert spm.SentencePieceProcessor(model_file=str(model)).encode("the fox")
    assert _verdict(model) == ("data", "sentencepiece model")
    raw = model.read_bytes()
    (tmp_path / "cut.model").write_bytes(raw[:-7])
    assert _verdict(tmp_path / "cut.model")[0] == "unverified"


def test_unplaceable_bytes_are_unverified(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    cases = {
        "weights.bin": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "zeros.dat": bytes(1000),
        "text_with_nul.txt": b"hello\x00world\n",
        "bad_utf8.txt": "caf\u00e9".encode("latin-1") * 10,
        "bad.npy": b"\x93NUMPY\x01\x00\x10\x00{'descr': 'garbage'}",
        "notjson.json": b"{not json at all\x01",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        v = judge_file(tmp_path / name)
        assert v.verdict == "unverified", (name, v.format)
        assert "cannot place" in " ".join(v.reasons), name
    torch.save({"w": torch.ones(1)}, tmp_path / "t.pt")
    with gzip.open(tmp_path / "weird.gz", "wb") as f:
        f.write(rng.integers(0, 256, 512, dtype=np.uint8).tobytes())
    assert _verdict(tmp_path / "weird.gz")[0] == "unverified"


def test_yaml_values_are_data_and_python_tags_are_code(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create({"model": {"dim": 4, "act": "gelu"}, "lr": 1e-3})
    omegaconf.OmegaConf.save(cfg, tmp_path / "config.yaml")
    (tmp_path / "hparams.yaml").write_text(yaml.dump({"shape": (2, 3), "name": "x"}))
    assert "!!python/tuple" in (tmp_path / "hparams.yaml").read_text()
    assert _verdict(tmp_path / "config.yaml")[0] == "data"
    assert _verdict(tmp_path / "hparams.yaml") == ("data", "YAML")
    marker = tmp_path / "MARK"
    evil = tmp_path / "evil.yaml"
    evil.write_text(f"x: !!python/object/apply:os.mkdir [{str(marker)!r}]\n")
    hidden = tmp_path / "hidden.yaml"  # the tag spelled through a %TAG handle
    hidden.write_text(
        "%TAG !p! tag:yaml.org,2002:pyth\n---\n"
        f"x: !p!on/object/apply:os.mkdir [{str(tmp_path / 'MARK2')!r}]\n"
    )
    for path in (evil, hidden):
        v = judge_file(path)
        assert v.verdict == "code", v.findings
        assert "yaml.unsafe_load" in v.findings[0].message
    code = "import sys, yaml; [yaml.unsafe_load(open(p)) for p in sys.argv[1:]]"
    subprocess.run(
        [sys.executable, "-c", code, str(evil), str(hidden)],
        timeout=60,
        check=False,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert marker.exists() and (tmp_path / "MARK2").exists()  # the control: the loader runs it


def test_zip_of_unplaceable_member_is_not_data(tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(tmp_path / "x.npz", "w") as z:
        z.writestr("a.npy", b"")  # replaced below by a real array
    np.savez(tmp_path / "x.npz", a=np.arange(3))
    with zipfile.ZipFile(tmp_path / "x.npz", "a") as z:
        z.writestr("blob", np.random.default_rng(1).integers(0, 256, 300, np.uint8).tobytes())
    assert np.load(tmp_path / "x.npz")["a"].sum() == 3
    assert _verdict(tmp_path / "x.npz")[0] == "unverified"


def test_a_cloned_repositorys_git_store_is_data(tmp_path: Path) -> None:
    """A model repository cloned with git: its .git objects, packs, index and commit graph."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text('{"a": 1}')
    git = ["git", "-C", str(repo), "-c", "user.email=a@b.c", "-c", "user.name=n"]
    try:
        subprocess.run([*git, "init", "-q"], check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not available")
    subprocess.run([*git, "add", "."], check=True, timeout=60)
    subprocess.run([*git, "commit", "-qm", "one"], check=True, timeout=60)
    subprocess.run([*git, "gc", "-q"], check=True, timeout=120)
    (repo / "more.txt").write_text("two")
    subprocess.run([*git, "add", "."], check=True, timeout=60)
    subprocess.run([*git, "commit", "-qm", "two"], check=True, timeout=60)
    from ckpt_explorer.security import scan_paths

    verdicts = scan_paths([repo]).verdicts
    formats = {v.format for v in verdicts}
    assert {"git pack", "git pack index", "git index", "git object"} <= formats, formats
    assert {v.verdict for v in verdicts} == {"data"}, [
        (v.path, v.reasons) for v in verdicts if v.verdict != "data"
    ]


def test_large_text_is_streamed_and_still_searched_for_python_tags(tmp_path: Path) -> None:
    line = b"token_%07d 0.125 some text\n"
    body = b"".join(line % i for i in range(2_600_000))  # about 70 MB
    (tmp_path / "big.txt").write_bytes(body)
    (tmp_path / "big.yaml").write_bytes(body + b"x: !!python/object/apply:os.system [id]\n")
    assert _verdict(tmp_path / "big.txt") == ("data", "text")
    assert judge_file(tmp_path / "big.yaml").verdict == "code"


def test_tensorboard_event_files_are_data(tmp_path: Path) -> None:
    """A training folder's TensorBoard events (tensorboardX, the writer Lightning falls back
    to) are TFRecords: data; the same bytes damaged are not placed."""
    tbx = pytest.importorskip("tensorboardX")
    logs = tmp_path / "runs"
    with tbx.SummaryWriter(str(logs)) as writer:
        for step in range(20):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
            writer.add_histogram("w", np.random.default_rng(step).normal(size=256), step)
        writer.add_text("args", "lr=3e-4", 0)
    [events] = list(logs.glob("events.out.tfevents.*"))
    assert _verdict(events) == ("data", "TFRecord (TensorBoard events)")
    raw = events.read_bytes()
    cut = tmp_path / "cut.tfevents"
    cut.write_bytes(raw[: len(raw) - 7])  # the last record cut short
    flipped = tmp_path / "flipped.tfevents"
    flipped.write_bytes(raw[:3] + bytes([raw[3] ^ 1]) + raw[4:])  # a length whose CRC fails
    assert _verdict(cut)[0] == "unverified"
    assert _verdict(flipped)[0] == "unverified"
