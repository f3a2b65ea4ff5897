"""A new remote store is one spec and one registration: fsspec's in-memory filesystem, which no
built-in spec reads, registered here and read end to end (the CLI's URL arguments, the readers'
byte ranges, a tensor's values), its unpinned reads said as such."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch
from safetensors.torch import save

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.cli import main
from ckpt_explorer.remote.locate import open_location
from ckpt_explorer.remote.registry import StoreSpec, register, unregister
from ckpt_explorer.remote.urls import is_url

fsspec = pytest.importorskip("fsspec")

MEMORY = StoreSpec("memory-test", ("memory",), "fsspec")  # the whole store: fsspec opens it


@pytest.fixture
def memory_store() -> Iterator[dict[str, torch.Tensor]]:
    tensors = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(5)}
    fs = fsspec.filesystem("memory")
    fs.pipe("/specs-ckpt/model.safetensors", save(tensors))
    register(MEMORY)
    try:
        yield tensors
    finally:
        unregister(MEMORY.name)
        fs.rm("/specs-ckpt", recursive=True)


def test_an_unregistered_scheme_is_no_url() -> None:
    assert not is_url("memory://specs-ckpt/model.safetensors")
    with pytest.raises(ValueError, match="no registered store"):
        open_location("memory://specs-ckpt/model.safetensors")


def test_a_registered_store_reads_a_checkpoint(
    memory_store: dict[str, torch.Tensor],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = "memory://specs-ckpt/model.safetensors"
    assert is_url(url)
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert "format   safetensors" in out and "3x4" in out

    with caplog.at_level(logging.INFO, logger="ckpt_explorer.remote"):
        view = open_checkpoint(open_location(url))
        got = {name: view.load(name) for name in view.names()}
    assert set(got) == set(memory_store)
    for name, want in memory_store.items():
        assert torch.equal(got[name], want)
    said = [r.getMessage() for r in caplog.records if r.name == "ckpt_explorer.remote"]
    assert any("not pinned" in m and "memory-test" in m for m in said), said


def test_one_store_per_scheme() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(StoreSpec("another-s3", ("s3",), "s3fs"))
