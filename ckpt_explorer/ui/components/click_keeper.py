"""A click the page re-drew under the pointer, delivered to what is under it now.

A browser fires ``click`` only when the button goes down and up on the same element. Panel's
Tabulator re-draws its rows (new cell elements) whenever it settles its size or page size,
which on a busy machine goes on for a second or more after a table appears; a press on a row
in that time and a release after the re-draw click nothing: the element pressed is gone, so
no click is fired and the row never opens (seen in the browser tests: mousedown on a cell,
the cell detached 100-200 ms later, mouseup on its replacement, no click event).

The keeper watches presses and releases on the whole page (capture phase, through shadow
roots). When the element pressed has left the page by the release, the pointer has not
moved, and the element under it now is of the same kind (tag and classes), that element gets
the click the browser would have fired had the page not been re-drawn: exactly one, whether
the browser fires none or fires one at an ancestor both share (a row whose cell was
replaced), which is then withheld. Anything else (a drag, a release elsewhere, an element
still in the page) is left to the browser.
It is installed once per page, before any table is drawn.
"""

from __future__ import annotations

from typing import Any

from panel.custom import JSComponent

SLOP_PX = 4  # the most the pointer may move between press and release

KEEPER_ESM = f"""
if (!window.__ckpt_click_keeper) {{
  window.__ckpt_click_keeper = true;
  let pressed = null;
  let owed = null;  // a release whose press was re-drawn: where, and the kind of element
  const target = (e) => {{
    const t = e.composedPath()[0];
    return t instanceof Element ? t : null;
  }};
  const kind = (el) => el.tagName + " " + el.getAttribute("class");  // SVG too
  const under = (x, y) => {{  // the element at (x, y), inside shadow roots too
    let el = document.elementFromPoint(x, y);
    while (el && el.shadowRoot) {{
      const inner = el.shadowRoot.elementFromPoint(x, y);
      if (!inner || inner === el) break;
      el = inner;
    }}
    return el;
  }};
  const pay = () => {{  // the element there now (the table may have re-drawn again)
    const o = owed;
    owed = null;
    const el = o && under(o.x, o.y);
    if (el && kind(el) === o.kind) el.click();
  }};
  document.addEventListener("mousedown", (e) => {{
    const t = target(e);
    pressed = e.button === 0 && t ? {{el: t, x: e.clientX, y: e.clientY}} : null;
    owed = null;
  }}, true);
  document.addEventListener("mouseup", (e) => {{
    const p = pressed;
    pressed = null;
    if (!p || e.button !== 0 || p.el.isConnected) return;  // the browser clicks by itself
    if (Math.abs(e.clientX - p.x) > {SLOP_PX} || Math.abs(e.clientY - p.y) > {SLOP_PX}) return;
    const now = target(e);
    if (!now || kind(now) !== kind(p.el)) return;
    owed = {{x: e.clientX, y: e.clientY, kind: kind(now)}};
    setTimeout(pay, 0);  // no click came (the element pressed is gone): click it here
  }}, true);
  document.addEventListener("click", (e) => {{
    if (!owed || !e.isTrusted) return;
    // the browser's click went to what both elements share (a row, not its cell): it is
    // given to the element under the pointer instead, so that it is clicked exactly once
    e.stopImmediatePropagation();
    e.preventDefault();
    pay();
  }}, true);
}}
export function render({{ el }}) {{ el.style.display = "none"; }}
"""


class ClickKeeper(JSComponent):  # type: ignore[misc]
    """An invisible element whose script installs the keeper when the page renders it."""

    _esm = KEEPER_ESM

    def __init__(self, **params: Any) -> None:
        super().__init__(width=0, height=0, margin=0, **params)
