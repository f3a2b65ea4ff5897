"""A path picker limited to the app's root: type or choose a path under it, or type a URL
under a ``serve --allow-remote`` prefix."""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from typing import Any

import panel as pn
import param

from ...remote.urls import public
from .common import in_session, later, on_press, sync
from .path_box import PathBox


class PathPicker(pn.viewable.Viewer):
    """A box over the paths under the root, with an action button.

    ``value`` is the chosen path relative to the root (or a URL); ``on_pick(value)`` runs
    when the button is pressed, Enter is hit or a suggestion chosen. Enter keeps what was
    typed (:class:`~.path_box.PathBox`). ``options`` is a list, or the app state (its
    ``paths`` parameter lists them, ``refresh_paths()`` lists the root again, so
    every picker then offers a path as soon as it exists). Nothing outside the root is
    offered, and the state refuses whatever is typed that resolves outside it or is a URL
    under no allowed prefix (``urls``, named in the placeholder). ``warn(path)``: a red line
    under the box (worked out in the background). ``busy=(obj, "param")``: a grey line under
    the box showing that string parameter (e.g. "fetching the structure of ...").
    """

    value = param.String(default="")

    def __init__(
        self,
        options: Any,
        label: str,
        on_pick: Callable[[str], Any] | None = None,
        button: str = "Open",
        warn: Callable[[str], str] | None = None,
        urls: Sequence[str] = (),
        busy: tuple[param.Parameterized, str] | None = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        hint = "relative to the root, e.g. run/step-100"
        if urls:
            hint += f", or a URL under {', '.join(public(u) for u in urls)}"
        catalog = None if isinstance(options, list | tuple) else options
        self._input = PathBox(
            label=label,
            options=list(catalog.candidates() if catalog is not None else options),
            value=self.value,
            placeholder=hint,
            sizing_mode="stretch_width",
        )
        if catalog is not None:
            catalog.param.watch(in_session(self._new_paths), "paths")
            self._input.on_focus = catalog.refresh_paths
        sync(self, "value", self._input, "value")
        self._on_pick = on_pick
        self._last: tuple[str, float] = ("", 0.0)
        self._layout: pn.viewable.Viewable
        if on_pick is None:
            self._layout = self._input
        else:
            btn = pn.widgets.Button(label=button, color="primary", width=90, align="end")
            on_press(btn, self.pick)
            # choosing a suggestion (or typing a path and pressing Enter) opens it at once
            self.param.watch(lambda *_: self.pick(), "value")
            self._input.on_commit = lambda _text: self.pick()
            self._layout = pn.Row(self._input, btn, sizing_mode="stretch_width")
        if warn is not None:  # a red line under the box when the path holds an unsafe file
            self._layout = pn.Column(self._layout, self._warning(warn), sizing_mode="stretch_width")
        if busy is not None:  # a background open (a URL's structure being fetched)
            owner, name = busy
            line = pn.pane.HTML("", styles={"color": "#6b7280"}, sizing_mode="stretch_width")

            def progress(*_: Any) -> None:
                text = str(getattr(owner, name) or "")
                line.object = html.escape(text)
                line.visible = bool(text)

            owner.param.watch(progress, name)
            progress()
            self._layout = pn.Column(self._layout, line, sizing_mode="stretch_width")

    def _new_paths(self, event: Any) -> None:
        self._input.options = list(event.new)

    def _warning(self, warn: Callable[[str], str]) -> pn.pane.HTML:
        """The note under the box: ``warn(value)``, judged in the background for a served
        page (a scan of a large folder must not hold it), shown when still current."""
        note = pn.pane.HTML(
            "", styles={"color": "#b91c1c"}, sizing_mode="stretch_width", visible=False
        )

        def judge(*_: Any) -> None:
            value = self.value

            def put(text: str) -> None:
                if value == self.value:
                    note.object = html.escape(text)
                    note.visible = bool(text)

            note.visible = False
            later(lambda: warn(value), put, "ckpt-explorer-warn")

        self.param.watch(judge, "value")
        judge()
        return note

    def pick(self) -> None:
        if self._on_pick is None or not self.value:
            return
        now = time.monotonic()
        if self._last[0] == self.value and now - self._last[1] < 1.0:
            return  # the value change and the button's click of one gesture: open once
        self._last = (self.value, now)
        self._on_pick(self.value)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
