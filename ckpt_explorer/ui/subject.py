"""Which checkpoint a view acts on, said on screen: the one open in the sidebar, or another
picked in that view (Convert's source, the doctor's A), never silently another one.

Opening a checkpoint makes it the subject of every view (:meth:`AppState._follow_open`); a
view may still act on a checkpoint picked in it, and then says so next to its button.
"""

from __future__ import annotations


def code(path: str) -> str:
    """A path as a Markdown code span (``_`` and ``*`` in names stay as they are)."""
    fence = "``" if "`" in path else "`"
    return f"{fence}{path}{fence}"


def acts_on(action: str, path: str, open_path: str) -> str:
    """``"<action> `path` — the checkpoint open in the sidebar."`` or, for a checkpoint
    picked in the view, that it is not the open one (Markdown, one line)."""
    if not path:
        return "*No checkpoint yet: open one in the sidebar or pick one here.*"
    if path == open_path:
        return f"{action} {code(path)} — the checkpoint open in the sidebar."
    if not open_path:
        return f"{action} {code(path)}, picked here."
    return f"{action} {code(path)}, picked here — not {code(open_path)}, open in the sidebar."


def results_of(kind: str, path: str, open_path: str, again: str) -> str:
    """The line over results of ``path``: when another checkpoint is open now, that these are
    not of it and how to get its own (``again``: the button to press)."""
    if not path:
        return ""
    if path == open_path or not open_path:
        return f"{kind} of {code(path)}."
    return (
        f"{kind} of {code(path)} — not of {code(open_path)}, open now: press {again} to check it."
    )
