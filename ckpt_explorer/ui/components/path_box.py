"""A text box with path suggestions where Enter keeps what was typed.

Bokeh's AutocompleteInput takes the first suggestion on Enter, so a typed ``run/step-2`` became
``run/step-20``. Here a suggestion is taken only when chosen: clicked, or picked with the
arrow keys before Enter. Suggestions are the paths whose text holds what was typed (any case),
at most :data:`SHOWN` of them; focusing the box asks the server for a fresh listing, so a
folder written since the page opened is offered without a reload.
"""

from __future__ import annotations

from typing import Any, ClassVar

import param
from panel.custom import JSComponent

SHOWN = 60  # suggestions listed at once

BOX_CSS = """
:host {display: block;}
.pb {position: relative; font-family: Inter, "Segoe UI", Helvetica, Arial, sans-serif;}
.pb label {display: block; font-size: 13px; margin: 0 0 3px 2px; color: #111827;}
.pb input {box-sizing: border-box; width: 100%; height: 31px; padding: 4px 8px;
  border: 1px solid #ced4da; border-radius: 4px; font-size: 14px; background: #fff;}
.pb input:focus {outline: none; border-color: #86b7fe; box-shadow: 0 0 0 2px #c7d2fe;}
.pb .menu {position: absolute; left: 0; right: 0; z-index: 1000; background: #fff;
  border: 1px solid #d1d5db; border-radius: 4px; max-height: 300px; overflow-y: auto;
  box-shadow: 0 4px 12px rgba(0,0,0,.12); margin-top: 2px;}
.pb .item {padding: 4px 8px; cursor: pointer; font-size: 13px; overflow-wrap: anywhere;}
.pb .item.active, .pb .item:hover {background: #eef2ff;}
"""

BOX_ESM = f"""
const SHOWN = {SHOWN};
export function render({{ model, el }}) {{
  const wrap = document.createElement("div");
  wrap.className = "pb";
  const label = document.createElement("label");
  const input = document.createElement("input");
  input.type = "text";
  input.autocomplete = "off";
  input.spellcheck = false;
  const menu = document.createElement("div");
  menu.className = "menu";
  menu.style.display = "none";
  wrap.append(label, input, menu);
  el.appendChild(wrap);
  let active = -1;   // the suggestion chosen with the arrow keys (-1: none, Enter keeps text)
  let shown = [];
  let focused = false;  // (document.activeElement is the shadow host, not the input)

  function sync() {{
    label.textContent = model.label;
    label.style.display = model.label ? "" : "none";
    input.placeholder = model.placeholder;
  }}
  function hide() {{ menu.style.display = "none"; active = -1; }}
  function draw() {{
    const q = input.value.toLowerCase();
    shown = model.options.filter((o) => o.toLowerCase().includes(q)).slice(0, SHOWN);
    menu.innerHTML = "";
    shown.forEach((o, i) => {{
      const item = document.createElement("div");
      item.className = "item" + (i === active ? " active" : "");
      item.textContent = o;
      item.addEventListener("mousedown", (ev) => {{ ev.preventDefault(); take(o); }});
      menu.appendChild(item);
    }});
    menu.style.display = shown.length && focused ? "" : "none";
  }}
  function take(text) {{
    input.value = text;
    hide();
    model.value = text;
    model.send_msg({{ commit: text }});
  }}
  input.addEventListener("focus", () => {{
    focused = true;
    model.send_msg({{ refresh: true }});
    draw();
  }});
  input.addEventListener("input", () => {{ active = -1; draw(); }});
  input.addEventListener("blur", () => {{
    focused = false;
    hide();
    if (input.value !== model.value) model.value = input.value;
  }});
  input.addEventListener("keydown", (ev) => {{
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {{
      ev.preventDefault();
      if (menu.style.display === "none") {{ draw(); }}
      const n = shown.length;
      if (!n) return;
      active = ev.key === "ArrowDown" ? Math.min(active + 1, n - 1) : Math.max(active - 1, -1);
      draw();
      const item = menu.children[active];
      if (item) item.scrollIntoView({{ block: "nearest" }});
    }} else if (ev.key === "Enter") {{
      ev.preventDefault();
      take(active >= 0 && active < shown.length ? shown[active] : input.value);
    }} else if (ev.key === "Escape") {{
      hide();
    }}
  }});
  model.on("value", () => {{ if (input.value !== model.value) input.value = model.value; }});
  model.on("options", () => {{ if (focused) draw(); }});
  model.on("label", sync);
  model.on("placeholder", sync);
  input.value = model.value;
  sync();
}}
"""


class PathBox(JSComponent):  # type: ignore[misc]
    """The box: ``value`` is what was typed or chosen; ``on_commit(text)`` runs on Enter or
    a chosen suggestion (also when the text did not change), ``on_focus()`` when the box is
    entered (to refresh ``options``)."""

    value = param.String(default="")
    options = param.List(default=[], item_type=str)
    label = param.String(default="")
    placeholder = param.String(default="")

    _esm = BOX_ESM
    _stylesheets: ClassVar[list[str]] = [BOX_CSS]

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.on_commit: Any = None
        self.on_focus: Any = None

    def _handle_msg(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        if isinstance(data.get("commit"), str):
            if self.value != data["commit"]:
                self.value = data["commit"]
            if self.on_commit is not None:
                self.on_commit(data["commit"])
        elif data.get("refresh") and self.on_focus is not None:
            self.on_focus()
