"""Remote checkpoints on a real S3 server (moto's ThreadedMotoServer on 127.0.0.1) through
s3fs, with the endpoint and credentials taken from the standard ``AWS_*`` environment."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.cli import main

sys.path.insert(0, str(Path(__file__).parent.parent))
from remote_servers import moto_s3

pytest.importorskip("s3fs")
pytest.importorskip("moto")

BUCKET = "ckpts"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-value",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3(real_checkpoints: Any) -> Iterator[Any]:
    """An S3 bucket holding the hf, deepspeed and dcp fixture checkpoints under run/."""
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    saved = {k: os.environ.get(k) for k in [*ENV, "AWS_ENDPOINT_URL_S3"]}
    with moto_s3() as endpoint:
        os.environ.update(ENV, AWS_ENDPOINT_URL_S3=endpoint)
        try:
            fs = s3fs.S3FileSystem(endpoint_url=endpoint)
            fs.mkdir(BUCKET)
            for maker in ("hf", "deepspeed", "dcp"):
                out, _ = real_checkpoints(maker)
                for f in out.rglob("*"):
                    if f.is_file():
                        fs.put_file(str(f), f"{BUCKET}/run/{maker}/{f.relative_to(out)}")
            yield fs
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture checkpoints are tiny: read them the way large ones are read."""
    from ckpt_explorer.io import store_file
    from ckpt_explorer.remote import store

    monkeypatch.setattr(store, "HEAD", 16)
    monkeypatch.setattr(store, "TAIL", 16)
    monkeypatch.setattr(store, "MERGE_GAP", 0)
    monkeypatch.setattr(store_file, "BUFFER", 512)


def _outcome(argv: list[str], capsys: pytest.CaptureFixture[str], url: str, local: Path) -> Any:
    code = main(argv)
    got = capsys.readouterr()
    text = (got.out + got.err).replace(url, str(local))
    if code == 0 and argv[0] == "inspect":
        doc = json.loads(text)
        doc.pop("path")
        # the loader table needs the whole local folder: null for a URL, present for a path
        loaders = doc.pop("loaders")
        assert (loaders is None) == argv[1].startswith("s3://"), loaders
        return code, doc
    return code, text


@pytest.mark.parametrize(
    ("maker", "case"),
    [
        ("hf", "gpt2_sharded"),
        ("hf", "gpt2_bin_sharded"),
        ("deepspeed", "ds_zero2"),
        ("dcp", "dcp_training_state"),
    ],
)
def test_inspect_over_s3_equals_local(
    maker: str,
    case: str,
    s3: Any,
    real_checkpoints: Any,
    tiny_blocks: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, _ = real_checkpoints(maker)
    url = f"s3://{BUCKET}/run/{maker}/{case}"
    remote = _outcome(["inspect", url, "--json"], capsys, url, out / case)
    local = _outcome(["inspect", str(out / case), "--json"], capsys, url, out / case)
    assert remote == local
    detect = _outcome(["detect", url], capsys, url, out / case)
    assert detect == _outcome(["detect", str(out / case)], capsys, url, out / case)


def test_remote_vs_local_diff_is_identical(
    s3: Any, real_checkpoints: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = real_checkpoints("hf")
    url = f"s3://{BUCKET}/run/hf/gpt2_sharded"
    assert main(["diff", url, str(out / "gpt2_sharded"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["equal"] and summary["identical"] == summary["tensors"] == 28, summary


def test_convert_from_s3_is_bit_for_bit(
    s3: Any, real_checkpoints: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = real_checkpoints("hf")
    url = f"s3://{BUCKET}/run/hf/gpt2_bin_sharded"
    args = ["--to", "safetensors"]
    assert main(["convert", url, str(tmp_path / "remote.safetensors"), *args]) == 0
    assert "verified" in capsys.readouterr().out
    assert (
        main(["convert", str(out / "gpt2_bin_sharded"), str(tmp_path / "local.safetensors"), *args])
        == 0
    )
    assert (tmp_path / "remote.safetensors").read_bytes() == (
        tmp_path / "local.safetensors"
    ).read_bytes()
    converted = open_checkpoint(tmp_path / "remote.safetensors")
    source = open_checkpoint(out / "gpt2_bin_sharded")
    assert converted.names() and set(converted.names()) <= set(source.names())
    for name in converted.names():
        a, b = converted.load(name), source.load(name)
        assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_open_checkpoint_loads_lazily(s3: Any, real_checkpoints: Any) -> None:
    out, _ = real_checkpoints("deepspeed")
    view = open_checkpoint(f"s3://{BUCKET}/run/deepspeed/ds_zero2")
    local = open_checkpoint(out / "ds_zero2")
    for name in local.names():
        assert torch.equal(view.load(name), local.load(name)), name


def test_secret_is_not_in_the_error(s3: Any, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "wr0ng-S3cret-Key-Value"
    argv = ["inspect", "s3://no-such-bucket/x", "--storage-option", f"secret={secret}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "s3://no-such-bucket/x" in err and len(err.strip().splitlines()) == 1
    assert secret not in err and ENV["AWS_SECRET_ACCESS_KEY"] not in err


def test_a_changed_object_is_refused_not_mixed(s3: Any, tmp_path: Path) -> None:
    """Reads ask S3 for the version listed (IfMatch on the ETag): an object rewritten since
    is refused with one line naming the URL."""
    from safetensors.torch import save_file

    from ckpt_explorer.remote.backend import RemoteError

    g = torch.Generator().manual_seed(3)
    sd = {f"w.{i}": torch.randn(64, 64, generator=g) for i in range(4)}
    save_file(sd, str(tmp_path / "m.safetensors"))
    s3.put_file(str(tmp_path / "m.safetensors"), f"{BUCKET}/changing/m.safetensors")
    url = f"s3://{BUCKET}/changing/m.safetensors"
    view = open_checkpoint(url)
    assert torch.equal(view.load("w.0"), sd["w.0"])
    sd["w.1"] += 1  # the same size: only the bytes (and so the ETag) change
    save_file(sd, str(tmp_path / "m.safetensors"))
    s3.put_file(str(tmp_path / "m.safetensors"), f"{BUCKET}/changing/m.safetensors")
    with pytest.raises(RemoteError, match="changed since it was listed") as e:
        view.load("w.1")
    assert url in str(e.value) and "\n" not in str(e.value)
    assert torch.equal(open_checkpoint(url).load("w.1"), sd["w.1"])
