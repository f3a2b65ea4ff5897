"""The quantized area: a quantized export's quantization_config against its stored parts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, WARN, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _quantized(run: Run) -> list[Finding]:
    from ..quantized import check_quantized

    return check_quantized(run.opened)


def _is_quantized(run: Run) -> bool:
    from ..quantized import QUANT_KEY

    return QUANT_KEY in run.opened.values


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="quantized",
    # listed ahead of loadable's rules (README's table and `rules` keep that order)
    rules_before="loadable",
    rules=(
        declare(
            "quantized.parts_disagree",
            ERR,
            "a quantized weight's parts do not fit the config's scheme",
        ),
        declare(
            "quantized.ignored_but_quantized",
            WARN,
            "a module the config ignores is stored quantized",
        ),
        declare(
            "quantized.target_not_quantized", WARN, "a module the config targets is stored in float"
        ),
    ),
    steps=(Step("quantized", _quantized, _is_quantized),),
)
