"""The tokenizer area: the tokenizer saved beside a model against its input embedding
(``validate/tokenizer.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _step(run: Run) -> list[Finding]:
    from ..tokenizer import check_tokenizer

    return [f for m in run.parts.models for f in check_tokenizer(m)]


def _applies(run: Run) -> bool:
    from ..tokenizer import has_tokenizer

    return any(map(has_tokenizer, run.parts.models))


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="tokenizer",
    rules=(
        declare(
            "tokenizer.ids_past_embedding", ERR, "the tokenizer gives ids past the embedding's rows"
        ),
    ),
    steps=(Step("tokenizer", _step, _applies),),
)
