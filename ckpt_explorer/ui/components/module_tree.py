"""The module tree: collapsible, in natural order, parameters, bytes and dtypes per module.

Like the Hub's safetensors viewer: ``model ▸ layers ▸ 2 ▸ mlp ▸ experts ▸ 17 ▸ down_proj.weight``.
A node opens one level (its children are computed on the server when first opened, so a
90k-tensor checkpoint never sends more than the levels a person opened); a click on a
module filters the weight map to exactly that prefix, a click on a tensor opens its values
in the tensor detail.
"""

from __future__ import annotations

from typing import Any, ClassVar

import param
from panel.custom import JSComponent

from ..module_index import MAX_CHILDREN, ModuleIndex, ModuleNode, ancestors
from ..numbers import fmt_bytes, fmt_count, fmt_int, plural

TREE_CSS = """
:host {display: block; font-size: 13px; font-family: Inter, "Segoe UI", Helvetica, Arial,
  sans-serif;}
.mt {overflow: auto; max-height: 500px; border: 1px solid #e5e7eb; border-radius: 8px;
  background: #fff;}
.mt-head, .mt-row {display: grid; grid-template-columns: minmax(200px, 1fr) 76px 76px 120px;
  align-items: center; column-gap: 8px; padding: 2px 8px;}
.mt-head {position: sticky; top: 0; background: #f8fafc; color: #6b7280; font-size: 11px;
  text-transform: uppercase; letter-spacing: .05em; border-bottom: 1px solid #e5e7eb;
  z-index: 1; padding-top: 5px; padding-bottom: 5px;}
.mt-row {cursor: pointer; border-bottom: 1px solid #f3f4f6; min-height: 24px;}
.mt-row:hover {background: #eef2ff;}
.mt-row.sel {background: #c7d2fe;}
.mt-name {display: flex; align-items: center; min-width: 0; overflow-wrap: anywhere;}
.mt-caret {flex: 0 0 18px; width: 18px; color: #4f46e5; text-align: center;
  user-select: none;}
.mt-label {min-width: 0;}
.mt-label.tensor {font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px;}
.mt-shape {color: #6b7280; margin-left: 6px; font-size: 11px; white-space: nowrap;}
.mt-num {text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap;}
.mt-dt {color: #374151; font-size: 11px; overflow-wrap: anywhere;}
.mt-more {color: #4f46e5; padding: 3px 8px; cursor: pointer;}
"""

TREE_ESM = """
export function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "mt";
  el.appendChild(box);
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;",
    ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

  function rowEl(n, depth) {
    const row = document.createElement("div");
    row.className = "mt-row" + (n.id === model.selected ? " sel" : "");
    row.dataset.id = n.id;
    row.title = n.title;
    const open = model.expanded.includes(n.id);
    const caret = n.kids ? (open ? "▾" : "▸") : "";
    row.innerHTML =
      `<div class="mt-name" style="padding-left:${depth * 14}px">` +
      `<span class="mt-caret">${caret}</span>` +
      `<span class="mt-label${n.kids ? "" : " tensor"}">${esc(n.label)}</span>` +
      (n.shape ? `<span class="mt-shape">${esc(n.shape)}</span>` : "") +
      `</div><div class="mt-num">${esc(n.elements)}</div>` +
      `<div class="mt-num">${esc(n.size)}</div><div class="mt-dt">${esc(n.dtypes)}</div>`;
    row.querySelector(".mt-caret").addEventListener("click", (ev) => {
      ev.stopPropagation();
      if (n.kids) { model.send_msg({toggle: n.id}); }
    });
    row.addEventListener("click", () => model.send_msg({pick: n.id}));
    return row;
  }

  function draw() {
    const top = box.scrollTop;
    box.innerHTML = "";
    const head = document.createElement("div");
    head.className = "mt-head";
    head.innerHTML = "<div>module</div><div class='mt-num'>elements</div>" +
      "<div class='mt-num'>size</div><div>dtypes</div>";
    box.appendChild(head);
    const nodes = model.nodes || {};
    const walk = (id, depth) => {
      const kids = nodes[id];
      if (!kids) return;
      for (const n of kids.rows) {
        box.appendChild(rowEl(n, depth));
        if (n.kids && model.expanded.includes(n.id)) walk(n.id, depth + 1);
      }
      if (kids.more > 0) {
        const more = document.createElement("div");
        more.className = "mt-more";
        more.style.paddingLeft = (depth * 14 + 26) + "px";
        more.textContent = `… ${kids.more.toLocaleString("en-US")} more`;
        more.addEventListener("click", () => model.send_msg({more: id}));
        box.appendChild(more);
      }
    };
    walk("", 0);
    box.scrollTop = top;
  }
  model.on("nodes", draw);
  model.on("expanded", draw);
  model.on("selected", draw);
  draw();
}
"""


def node_row(node: ModuleNode) -> dict[str, Any]:
    """What the page draws for a node: texts only (numbers by the dashboard's rule)."""
    dtypes = ", ".join(d for d, _ in node.dtypes[:3]) + (" …" if len(node.dtypes) > 3 else "")
    what = node.tensor or node.filter
    title = (
        f"{what}\n{plural(node.tensors, 'tensor')} · {fmt_int(node.numel)} elements · "
        f"{fmt_int(node.nbytes)} bytes\n" + ", ".join(f"{d} ×{fmt_int(c)}" for d, c in node.dtypes)
    )
    return {
        "id": node.filter,
        "label": node.label,
        "kids": node.has_children,
        "shape": node.shape,
        "tensor": node.tensor,
        "elements": fmt_count(node.numel),  # every tensor's: optimizer moments too
        "size": fmt_bytes(node.nbytes),
        "dtypes": dtypes,
        "title": title,
    }


class ModuleTree(JSComponent):  # type: ignore[misc]
    """The tree of one weight map's :class:`ModuleIndex`; ``on_module(filter)`` and
    ``on_tensor(name)`` run on a click (in the page's session)."""

    nodes = param.Dict(default={}, doc="opened node -> {'rows': [...], 'more': n}")
    expanded = param.List(default=[], doc="filters of the open nodes")
    selected = param.String(default="", doc="the node the weight map is filtered to")

    _esm = TREE_ESM
    _stylesheets: ClassVar[list[str]] = [TREE_CSS]

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.index: ModuleIndex | None = None
        self._limits: dict[str, int] = {}
        self.on_module: Any = None
        self.on_tensor: Any = None

    def set_index(self, index: ModuleIndex | None) -> None:
        """A new weight map: the root level, and the module holding most tensors opened."""
        self.index = index
        self._limits = {}
        if index is None:
            self.param.update(nodes={}, expanded=[], selected="")
            return
        nodes = {"": self._level("")}
        expanded: list[str] = []
        modules = [n for n in index.children("") if n.has_children]
        if modules:  # the module holding most tensors ("model" beside "lm_head"): open
            top = max(modules, key=lambda n: n.tensors).filter
            expanded.append(top)
            nodes[top] = self._level(top)
        self.param.update(nodes=nodes, expanded=expanded, selected="")

    def _level(self, node: str) -> dict[str, Any]:
        assert self.index is not None
        kids = self.index.children(node)
        limit = self._limits.get(node, MAX_CHILDREN)
        return {"rows": [node_row(n) for n in kids[:limit]], "more": max(0, len(kids) - limit)}

    def open(self, node: str) -> None:
        """Open ``node`` (and the nodes above it), loading its children once."""
        if self.index is None:
            return
        nodes = dict(self.nodes)
        expanded = list(self.expanded)
        for n in [*ancestors(node)[1:], node]:
            if n not in nodes:
                nodes[n] = self._level(n)
            if n not in expanded:
                expanded.append(n)
        self.param.update(nodes=nodes, expanded=expanded)

    def toggle(self, node: str) -> None:
        if node in self.expanded:
            self.expanded = [n for n in self.expanded if n != node]
        else:
            self.open(node)

    def reveal(self, node: str) -> None:
        """Show ``node`` selected with the way down to it open ("" clears the selection)."""
        if node and self.index is not None:
            for n in ancestors(node)[1:]:
                if n not in self.expanded:
                    self.open(n)
        self.selected = node

    def more(self, node: str) -> None:
        self._limits[node] = self._limits.get(node, MAX_CHILDREN) + MAX_CHILDREN
        self.nodes = {**self.nodes, node: self._level(node)}

    def pick(self, node: str) -> None:
        """A click: a tensor opens its detail; a module filters the weight map and opens."""
        row = self._row(node)
        if row is None:
            return
        if not row["kids"]:
            self.selected = node
            if self.on_tensor is not None:
                self.on_tensor(row["tensor"] or node)
            return
        self.open(node)
        self.selected = node
        if self.on_module is not None:
            self.on_module(node)

    def _row(self, node: str) -> dict[str, Any] | None:
        """The drawn row of ``node`` (its parent's level is loaded when it was clickable)."""
        parent = ancestors(node)[-1] if node else ""
        for r in self.nodes.get(parent, {}).get("rows", []):
            if r["id"] == node:
                return r  # type: ignore[no-any-return]
        return None

    def _handle_msg(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        if isinstance(data.get("toggle"), str):
            self.toggle(data["toggle"])
        elif isinstance(data.get("pick"), str):
            self.pick(data["pick"])
        elif isinstance(data.get("more"), str):
            self.more(data["more"])
