"""The config area: config.json against the tensors, and tied embeddings (``tied.*``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, WARN, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _config(run: Run) -> list[Finding]:
    from ..config import check_model

    return [f for m in run.parts.models for f in check_model(m)]


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="config",
    rules=(
        declare("config.vocab_size", ERR, "the embedding rows disagree with config vocab_size"),
        declare(
            "config.vocab_padding",
            ERR,
            "the embedding is padded past vocab_size in a way no loader fits",
        ),
        declare("config.missing_layers", ERR, "the config names layers the tensors lack"),
        declare("config.extra_layers", ERR, "the tensors hold layers beyond the config's count"),
        declare("config.hidden_size", ERR, "tensor widths disagree with config hidden_size"),
        declare("config.dtype", WARN, "the config's torch_dtype is not the dtype of most bytes"),
        declare("tied.lm_head_missing", ERR, "no lm_head and tie_word_embeddings is false"),
        declare("tied.lm_head_differs", ERR, "tied embeddings saved with a differing lm_head"),
        declare("tied.untied_but_equal", INFO, "an untied lm_head equal to the embedding"),
    ),
    steps=(Step("config", _config),),
)
