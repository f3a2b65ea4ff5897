"""Small static charts as inline SVG: drawn with the page, no plotting library loaded.

The Overview and the Weight map show a share of bytes by dtype and a bar per shard on every
page load; as plotly figures they cost the server half a second the first time (plotly's
validators) and the browser a plotly render each. Here each mark is an SVG element whose
``<title>`` is its hover text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

CHART_CSS = """
.ck-chart {font: 12px Inter, "Segoe UI", Helvetica, Arial, sans-serif; color: #374151;}
.ck-chart svg {display: block;}
.ck-chart .mark:hover {opacity: 0.75;}
.ck-legend {display: flex; flex-direction: column; gap: 4px; justify-content: center;}
.ck-legend span.swatch {display: inline-block; width: 10px; height: 10px; margin-right: 6px;
  border-radius: 2px;}
"""


def _title(text: str) -> str:
    return f"<title>{html.escape(text)}</title>"


def donut(
    labels: Sequence[str],
    values: Sequence[float],
    hovers: Sequence[str],
    colors: Sequence[str],
    size: int = 240,
) -> str:
    """A ring of ``values``' shares (largest share first as given), each slice labelled with
    its percentage and ``hovers`` as its hover text, with a legend of ``labels``."""
    total = float(sum(values))
    r_out, r_in, c = size / 2 - 4, size * 0.55 / 2, size / 2
    shares = [v / total if total else 0.0 for v in values]
    parts, start = [], -math.pi / 2
    for i, (share, hover) in enumerate(zip(shares, hovers, strict=True)):
        color = colors[i % len(colors)]
        if share >= 0.9999:  # one slice: a full ring (an arc cannot close on itself)
            mid = (r_out + r_in) / 2
            parts.append(
                f"<circle class='mark' cx='{c}' cy='{c}' r='{mid:.2f}' fill='none' "
                f"stroke='{color}' stroke-width='{r_out - r_in:.2f}'>{_title(hover)}</circle>"
            )
        elif share > 0:
            end = start + share * 2 * math.pi
            big = 1 if share > 0.5 else 0
            p = [
                (c + r * math.cos(a), c + r * math.sin(a))
                for r, a in ((r_out, start), (r_out, end), (r_in, end), (r_in, start))
            ]
            d = (
                f"M{p[0][0]:.2f},{p[0][1]:.2f} A{r_out:.2f},{r_out:.2f} 0 {big} 1 "
                f"{p[1][0]:.2f},{p[1][1]:.2f} L{p[2][0]:.2f},{p[2][1]:.2f} "
                f"A{r_in:.2f},{r_in:.2f} 0 {big} 0 {p[3][0]:.2f},{p[3][1]:.2f} Z"
            )
            parts.append(f"<path class='mark' d='{d}' fill='{color}'>{_title(hover)}</path>")
            start = end
    legend = "".join(
        f"<div><span class='swatch' style='background:{colors[i % len(colors)]}'></span>"
        f"{html.escape(label)} · {share:.1%}</div>"
        for i, (label, share) in enumerate(zip(labels, shares, strict=True))
    )
    svg = (
        f"<svg width='{size}' height='{size}' viewBox='0 0 {size} {size}' role='img'>"
        + "".join(parts)
        + "</svg>"
    )
    return (
        "<div class='ck-chart ck-donut' style='display:flex;gap:18px;align-items:center'>"
        f"{svg}<div class='ck-legend'>{legend}</div></div>"
    )


def bars(
    labels: Sequence[str],
    values: Sequence[float],
    hovers: Sequence[str],
    color: str,
    unit: str = "",
    height: int = 320,
    width: int = 420,
    show_labels: bool = True,
) -> str:
    """One vertical bar per value, in the order given, with a y axis of ``unit`` (from 0 to
    the largest value) and ``labels`` under the bars when ``show_labels``; ``hovers`` are the
    bars' hover texts."""
    top = max([float(v) for v in values] + [0.0]) or 1.0
    left, bottom, pad = 52, 46 if show_labels else 14, 8
    plot_w, plot_h = width - left - pad, height - bottom - pad
    step = plot_w / max(len(values), 1)
    gap = min(step * 0.15, 4.0)
    marks = []
    for i, (v, hover) in enumerate(zip(values, hovers, strict=True)):
        h = plot_h * float(v) / top
        x = left + i * step + gap / 2
        marks.append(
            f"<rect class='mark' x='{x:.2f}' y='{pad + plot_h - h:.2f}' "
            f"width='{max(step - gap, 0.5):.2f}' height='{h:.2f}' fill='{color}'>"
            f"{_title(hover)}</rect>"
        )
    axis = []
    for k in range(5):  # four gridlines and zero
        v = top * k / 4
        y = pad + plot_h - plot_h * k / 4
        tick = f"{v:,.0f}" if top >= 10 else f"{v:.2g}"
        axis.append(
            f"<line x1='{left}' x2='{left + plot_w}' y1='{y:.2f}' y2='{y:.2f}' "
            f"stroke='#e5e7eb'/><text x='{left - 6}' y='{y + 4:.2f}' text-anchor='end' "
            f"fill='#6b7280'>{tick}</text>"
        )
    axis.append(
        f"<text x='12' y='{pad + plot_h / 2:.2f}' fill='#6b7280' text-anchor='middle' "
        f"transform='rotate(-90 12 {pad + plot_h / 2:.2f})'>{html.escape(unit)}</text>"
    )
    if show_labels:
        for i, label in enumerate(labels):
            x = left + (i + 0.5) * step
            y = pad + plot_h + 12
            turn = f" transform='rotate(-45 {x:.2f} {y:.2f})'" if len(labels) > 8 else ""
            anchor = "end" if len(labels) > 8 else "middle"
            axis.append(
                f"<text x='{x:.2f}' y='{y:.2f}' text-anchor='{anchor}' fill='#374151'"
                f"{turn}>{html.escape(label)}</text>"
            )
    return (
        f"<div class='ck-chart ck-bars'><svg width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img'>" + "".join(axis + marks) + "</svg></div>"
    )


ROW = 18  # px per bar of :func:`hbars`: a 12 px label and its gap, never overlapping
LABEL_CHARS = 22  # longest label drawn whole in :func:`hbars` (the hover has the full name)


# bars' parameters (the same chart inputs), sideways: the drawing below differs.
def hbars(
    labels: Sequence[str],
    values: Sequence[float],
    hovers: Sequence[str],
    color: str,
    unit: str = "",
    width: int = 420,
    max_height: int = 380,
) -> str:
    """One horizontal bar per value, largest first (ties keep the order given), each on its
    own :data:`ROW`-pixel line with its label on the left and its value after the bar: any
    number of bars without a label drawn over another or over a bar. Past ``max_height``
    the bars scroll under a fixed axis of ``unit`` that starts at 0."""
    order = sorted(range(len(values)), key=lambda i: -float(values[i]))
    top = max([float(v) for v in values] + [0.0]) or 1.0
    shown = [lab if len(lab) <= LABEL_CHARS else lab[: LABEL_CHARS - 1] + "…" for lab in labels]
    left = 12 + 7 * max([len(s) for s in shown] + [4])
    right = 64  # room for the value after the longest bar
    plot_w = width - left - right
    rows = []
    for k, i in enumerate(order):
        v = float(values[i])
        y = k * ROW
        w = plot_w * v / top
        rows.append(
            f"<text x='{left - 6}' y='{y + 13}' text-anchor='end' fill='#374151'>"
            f"{html.escape(shown[i])}</text>"
            f"<rect class='mark' x='{left}' y='{y + 3}' width='{max(w, 0.5):.2f}' "
            f"height='{ROW - 6}' fill='{color}'>{_title(hovers[i])}</rect>"
            f"<text x='{left + w + 4:.2f}' y='{y + 13}' fill='#6b7280'>{_tick(v)}</text>"
        )
    body_h = ROW * len(order)
    axis = [
        f"<text x='{left}' y='14' fill='#6b7280'>0</text>",
        f"<text x='{left + plot_w}' y='14' text-anchor='end' fill='#6b7280'>"
        f"{_tick(top)} {html.escape(unit)}</text>",
        f"<line x1='{left}' x2='{left + plot_w}' y1='20' y2='20' stroke='#9ca3af'/>",
    ]
    return (
        f"<div class='ck-chart ck-hbars'><div class='muted' style='margin-bottom:2px'>"
        f"{len(order)} bars, largest first</div>"
        f"<svg width='{width}' height='22' viewBox='0 0 {width} 22'>{''.join(axis)}</svg>"
        f"<div class='ck-scroll' style='max-height:{max_height - 40}px;overflow-y:auto;"
        f"overflow-x:hidden'><svg width='{width}' height='{body_h}' "
        f"viewBox='0 0 {width} {body_h}' role='img'>{''.join(rows)}</svg></div></div>"
    )


def _tick(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"
