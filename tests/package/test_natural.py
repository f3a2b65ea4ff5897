"""The natural order's fast text key sorts exactly as the tuple key it replaces in bulk sorts."""

from __future__ import annotations

import random

import pytest

from ckpt_explorer.natural import natural_key, natural_sorted, natural_text_key


def test_text_key_orders_as_the_tuple_key() -> None:
    rng = random.Random(0)
    alphabet = "ab.0123_9-/ x→Z"
    for _ in range(20_000):
        names = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(6)]
        assert sorted(names, key=natural_key) == sorted(names, key=natural_text_key), names
    # the cases a zero-padded number makes: "0" < "00", but "01" < "1"
    assert natural_sorted(["00x", "0", "1", "01", "10", "9"]) == ["0", "00x", "01", "1", "9", "10"]


def test_shards_and_layers() -> None:
    shards = [f"model-{i:05d}-of-00163.safetensors" for i in (163, 1, 20, 2)]
    assert natural_sorted(shards) == sorted(shards)
    layers = [f"model.layers.{i}.mlp.experts.{e}.w" for i in (10, 2, 1) for e in (255, 3, 30)]
    assert natural_sorted(layers)[:3] == [f"model.layers.1.mlp.experts.{e}.w" for e in (3, 30, 255)]


def test_text_key_when_its_number_memo_is_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digit-run encodings are kept in a bounded memo; cleared mid-sort, keys stay equal."""
    from ckpt_explorer import natural

    monkeypatch.setattr(natural, "_KEPT", 8)
    natural._ENCODED.clear()
    names = [f"layers.{i}.experts.{j:03d}.w" for i in range(40) for j in (0, 7, 10, 100)]
    random.Random(1).shuffle(names)
    assert sorted(names, key=natural_key) == sorted(names, key=natural_text_key)
    assert len(natural._ENCODED) <= 8
