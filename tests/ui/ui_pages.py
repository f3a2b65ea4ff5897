"""What the browser tests do on a page: read its text through Panel's shadow roots, wait for
text, switch tabs, type into the path boxes, take screenshots (kept in test-artifacts/)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


# all text of the page, through Panel's shadow roots (document.body.innerText stops at them)
DEEP_TEXT = """(() => { const out = []; const walk = (n) => {
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.childNodes) { if (c.nodeType === 3) out.push(c.textContent); else walk(c); }
}; walk(document.body); return out.join(' ').replace(/\\s+/g, ' '); })()"""


def text(page: Any) -> str:
    return str(page.evaluate(DEEP_TEXT))


def wait_text(page: Any, predicate: str, arg: Any = None, timeout: float = 90_000) -> None:
    """Wait until ``predicate`` (JS using ``t``, the page text, and ``arg``) holds."""
    page.wait_for_function(
        f"(arg) => {{ const t = {DEEP_TEXT}; return {predicate}; }}", arg=arg, timeout=timeout
    )


def tab(page: Any, name: str) -> None:
    page.locator(".bk-tab", has_text=name).first.click()


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    time.sleep(0.8)  # let plotly finish drawing
    page.screenshot(path=str(ARTIFACTS / f"ui-{name}.png"))


def pick(page: Any, index: int, rel: str) -> None:
    """Type ``rel`` into the ``index``-th path picker and press Enter."""
    box = page.get_by_placeholder("relative to the root").nth(index)
    box.fill(rel)
    box.press("Enter")


def open_path(page: Any, rel: str) -> None:
    """Open ``rel`` with the sidebar picker; wait until it is open or refused."""
    pick(page, 0, rel)
    page.get_by_role("button", name="Open").click()
    wait_text(page, "t.includes('Open: ' + arg) || t.includes('expected')", rel)


def count_text(page: Any) -> str:
    return page.locator("text=/of [0-9,]+ tensors/").first.inner_text()
