"""Write README's rule table from the rule catalogue (ckpt_explorer/validate/catalogue.py).

python scripts/rules_table.py          # rewrite the table between README's markers
python scripts/rules_table.py --check  # exit 1 when README's table is not the generated one
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "<!-- rules-table:start -->", "<!-- rules-table:end -->"


def _catalogue() -> object:
    """The catalogue module of this checkout, with the areas it registers from their modules
    (light: it loads no reader and no tensor library)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("ckpt_explorer.validate.catalogue")


def table() -> str:
    rules = _catalogue().rules()  # type: ignore[attr-defined]
    lines = ["| rule | area | severity | finds |", "| --- | --- | --- | --- |"]
    for r in rules:
        lines.append(f"| `{r.id}` | {r.area} | {' / '.join(r.severities)} | {r.doc} |")
    return "\n".join(lines)


def with_table(text: str) -> str:
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise SystemExit(f"README.md has no {START} ... {END} markers")
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    wanted = with_table(text)
    if "--check" in argv:
        if wanted != text:
            print("README.md's rule table is not the generated one: run scripts/rules_table.py")
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
