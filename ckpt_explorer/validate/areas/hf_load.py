"""The hf_load area: ``from_pretrained`` on CPU (``validate/hf_load.py``), only when asked
(``--hf-load``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, WARN, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _step(run: Run) -> list[Finding]:
    from ..hf_load import check_hf_load

    return [f for m in run.parts.models for f in check_hf_load(m)]


def _asked(run: Run) -> bool:
    return run.hf_load


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="hf_load",
    rules=(
        declare(
            "hf_load.skipped",
            INFO,
            "from_pretrained not run (not an HF folder, or no transformers)",
        ),
        declare("hf_load.failed", ERR, "from_pretrained raised"),
        declare("hf_load.missing_keys", ERR, "from_pretrained initialised weights randomly"),
        declare("hf_load.unexpected_keys", WARN, "from_pretrained ignored tensors"),
        declare(
            "hf_load.mismatched_keys",
            ERR,
            "from_pretrained found shapes that differ from the config",
        ),
        declare("hf_load.tensor_differs", ERR, "a loaded tensor differs from the file's"),
    ),
    steps=(Step("hf_load", _step, _asked),),
)
