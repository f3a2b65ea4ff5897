"""The tokenizer saved beside a model against its input embedding (``tokenizer.*`` rules).

``tokenizer.ids_past_embedding``: the tokenizer can give ids the embedding has no row for —
tokens added with ``add_tokens`` and no ``resize_token_embeddings`` before the save. The model
loads, and raises ``IndexError: index out of range`` (a device-side assert on a GPU) the first
time such a token is fed. A tokenizer smaller than the embedding (T5's 32,100 ids over 32,128
rows, rows padded to a multiple) is normal and says nothing.

The ids are read as ``tokenizers`` and transformers read them, without importing either:
``tokenizer.json``'s ``model.vocab`` (a token -> id map for BPE, WordPiece and WordLevel; a list
of ``[piece, score]`` for Unigram, the id its position) and its ``added_tokens`` (each with its
``id``); ``tokenizer_config.json``'s ``added_tokens_decoder`` (keys are ids) and the slow
tokenizers' ``added_tokens.json`` / ``vocab.json`` (token -> id).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .config import input_embedding
from .findings import Finding

if TYPE_CHECKING:
    from ..io.location import Location
    from .parts import ModelPart

RULE = "tokenizer.ids_past_embedding"
FILES = ("tokenizer.json", "tokenizer_config.json", "added_tokens.json", "vocab.json")
MAX_BYTES = 256 << 20  # a tokenizer.json is at most tens of MiB (Gemma 3's: 33 MiB)
# a decoupled embedding's extra rows (Idefics: ids past embed_tokens go to this table)
EXTRA_ROWS = "additional_embedding.weight"


def has_tokenizer(model: ModelPart) -> bool:
    """Whether a tokenizer file sits in the model's folder."""
    return model.folder is not None and any((model.folder / f).is_file() for f in FILES)


def check_tokenizer(model: ModelPart) -> list[Finding]:
    """``tokenizer.ids_past_embedding`` for one model (nothing without a tokenizer beside it or
    an input embedding among its tensors)."""
    embed = input_embedding(model.records)
    if model.folder is None or embed is None or len(embed.shape) != 2:
        return []
    rows = embed.shape[0] + sum(
        r.shape[0] for r in model.records if r.name.endswith(EXTRA_ROWS) and len(r.shape) == 2
    )
    past: dict[int, str] = {}
    source = ""
    for name, token, tid in token_ids(model.folder):
        if tid >= rows:
            past.setdefault(tid, token)
            source = source or name
    if not past:
        return []
    shown = ", ".join(f"{t!r} ({i})" for i, t in sorted(past.items())[:5])
    more = f" and {len(past) - 5} more" if len(past) > 5 else ""
    return [
        Finding(
            RULE,
            "error",
            f"{source} gives {len(past)} token id(s) past {model.display(embed.name)}'s {rows} "
            f"rows: {shown}{more} — the first such token fed to the model raises IndexError "
            "(index out of range)",
            "Call model.resize_token_embeddings(len(tokenizer)) after adding tokens and save "
            "the model again, or save the tokenizer the model was trained with.",
            tensor=model.display(embed.name),
            file=source,
        )
    ]


def token_ids(folder: Location) -> Iterator[tuple[str, str, int]]:
    """(file, token, id) of every id the tokenizer files give."""
    doc = _json(folder, "tokenizer.json")
    if isinstance(doc, dict):
        vocab = doc.get("model", {}).get("vocab") if isinstance(doc.get("model"), dict) else None
        if isinstance(vocab, dict):
            yield from (("tokenizer.json", t, i) for t, i in vocab.items() if _is_id(i))
        elif isinstance(vocab, list):  # Unigram: [piece, score], the id its position
            yield from (
                ("tokenizer.json", p[0] if isinstance(p, list) and p else "?", i)
                for i, p in enumerate(vocab)
            )
        for added in doc.get("added_tokens") or ():
            if isinstance(added, dict) and _is_id(added.get("id")):
                yield "tokenizer.json", str(added.get("content", "?")), added["id"]
    config = _json(folder, "tokenizer_config.json")
    decoder = config.get("added_tokens_decoder") if isinstance(config, dict) else None
    if isinstance(decoder, dict):
        for key, added in decoder.items():
            if key.isdigit():
                content = added.get("content", "?") if isinstance(added, dict) else "?"
                yield "tokenizer_config.json", str(content), int(key)
    for name in ("added_tokens.json", "vocab.json"):
        mapping = _json(folder, name)
        if isinstance(mapping, dict):
            yield from ((name, t, i) for t, i in mapping.items() if _is_id(i))


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _json(folder: Location, name: str) -> Any:
    """The parsed file, or None when it is missing, too large or not JSON (no finding then)."""
    path = folder / name
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
