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
    """Open ``rel`` with the sidebar picker; wait until it is open or refused (a refusal
    naming ``rel``'s file: an earlier path's refusal still on screen is not this one's)."""
    pick(page, 0, rel)
    page.get_by_role("button", name="Open").click()
    name = rel.rstrip("/").rsplit("/", 1)[-1]
    wait_text(
        page,
        "t.includes('Open: ' + arg[0]) || (t.includes('expected') && t.includes(arg[1]))",
        [rel, name],
    )


def count_text(page: Any) -> str:
    return page.locator("text=/of [0-9,]+ tensors/").first.inner_text()


# cells and headers of the tables on screen whose text is cut (wider than their box, or a line
# broken after a character other than a space, "." "/" "_" "," or "×": a word split), a table
# scrolling sideways, a column past the right edge of its area (the elements matching the
# selector given: a notebook output, the served page's main column); a table is on screen when
# no element above it is hidden (another tab's table is). Returns {cut: [...], tables: how many were checked}.
CUT_TEXT = """(sel) => { const out = []; let checked = 0;
  const broken = (el) => { const vertical = getComputedStyle(el).writingMode.startsWith('vertical');
    const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT); let line = null; let last = '';
    for (let t = w.nextNode(); t; t = w.nextNode()) { const s = t.textContent;
      for (let i = 0; i < s.length; i += 1) { if (/\\s/.test(s[i])) { last = ' '; continue; }
        const range = document.createRange(); range.setStart(t, i); range.setEnd(t, i + 1);
        const r = range.getBoundingClientRect(); if (!r.width && !r.height) continue;
        const at = vertical ? r.left : r.top;
        if (line !== null && Math.abs(at - line) > 4 && !/[\\s./,×_]/.test(last)) return true;
        line = at; last = s[i]; } }
    return false; };
  const hidden = (el) => { for (let a = el.parentElement || el.getRootNode().host; a;
      a = a.parentElement || a.getRootNode().host) { const cs = getComputedStyle(a);
      if (cs.display === 'none' || cs.visibility === 'hidden') return true; } return false; };
  const tables = []; const find = (n) => { if (n.shadowRoot) find(n.shadowRoot);
    for (const c of n.children || []) { if (c.classList.contains('tabulator')) tables.push(c);
      find(c); } };
  document.querySelectorAll(sel).forEach((area) => {
    const edge = Math.min(area.getBoundingClientRect().right, innerWidth) + 1;
    tables.length = 0; find(area);
    for (const t of tables) {
      const box = t.getBoundingClientRect();
      if (box.width <= 0 || box.top < 0 || box.top + 4 >= innerHeight) continue;
      if (hidden(t)) continue;
      checked += 1;
      const host = t.getRootNode().host;
      const where = (t.parentElement && t.parentElement.className) || (host && host.className);
      const holder = t.querySelector('.tabulator-tableholder');
      if (holder && holder.scrollWidth > holder.clientWidth + 1)
        out.push(`sideways scroll (${holder.scrollWidth} > ${holder.clientWidth} px) in ` +
          `the table of ${where}`);
      t.querySelectorAll('.tabulator-col').forEach((c) => {
        const r = c.getBoundingClientRect();
        if (r.width > 0 && r.right > edge)
          out.push(`column past the right edge: ${c.textContent.trim()} (of ${where})`);
      });
      t.querySelectorAll('.tabulator-cell, .tabulator-col-title').forEach((c) => {
        const r = c.getBoundingClientRect(); const text = c.textContent.trim();
        if (r.width > 0 && r.top < innerHeight && text &&
            (c.scrollWidth > c.clientWidth + 1 || broken(c)))
          out.push(`cut: ${text} (${c.getAttribute('tabulator-field') || 'title'} of ${where}, ${c.scrollWidth} > ${c.clientWidth})`);
      });
    }
  });
  return {cut: out, tables: checked}; }"""


def cut_text(page: Any, area: str) -> tuple[list[str], int]:
    """:data:`CUT_TEXT` on ``page`` within the elements matching ``area``: (what is cut,
    how many tables on screen were checked)."""
    found = page.evaluate(CUT_TEXT, area)
    return list(found["cut"]), int(found["tables"])
