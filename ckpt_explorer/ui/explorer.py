"""``Explorer``: the dashboard as a notebook object (import is light; panel loads on use)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import AppState


def in_notebook() -> bool:
    """True inside a Jupyter kernel."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class Explorer:
    """The dashboard for one or two checkpoints, shown inline in a notebook (offline).

    Args:
        *paths: checkpoints to open; the first is shown, the first two prefill Compare.
        root: folder the pickers may read (default: the paths' common parent).
        tab: view to show first ("Overview", "Weight map", "Compare", ...).

    Example:
        >>> Explorer("run/step-6000")                      # doctest: +SKIP
        >>> Explorer.compare("run/step-6000", "run/step-6010")   # doctest: +SKIP
        >>> Explorer("model.safetensors").ipywidget()      # doctest: +SKIP
    """

    def __init__(
        self, *paths: str | Path, root: str | Path | None = None, tab: str = "Overview"
    ) -> None:
        from .layout import load_extensions, make_state

        load_extensions(notebook=in_notebook())
        self.state: AppState = make_state(list(paths), root)
        self.state.active = tab
        self._panel: Any = None

    # ---- workflows ----------------------------------------------------------------------
    @classmethod
    def compare(
        cls,
        a: str | Path,
        b: str | Path,
        *,
        root: str | Path | None = None,
        wait: bool = True,
        atol: float = 0.0,
        rtol: float = 0.0,
    ) -> Explorer:
        """Explorer showing the diff of ``a`` and ``b`` (run now; ``wait`` until it ends)."""
        ex = cls(a, b, root=root, tab="Compare")
        ex.state.compare.param.update(atol=atol, rtol=rtol)
        ex.panel()
        ex.state.compare.run(wait=wait)
        return ex

    @classmethod
    def validate(
        cls, path: str | Path, *, root: str | Path | None = None, wait: bool = True
    ) -> Explorer:
        """Explorer showing the validation findings of ``path``."""
        ex = cls(path, root=root, tab="Validate")
        ex.panel()
        ex.state.validate.run(wait=wait)
        return ex

    @classmethod
    def resume(
        cls, a: str | Path, b: str | Path, *, root: str | Path | None = None, wait: bool = True
    ) -> Explorer:
        """Explorer showing the resume doctor's ranked causes for ``a`` → ``b``."""
        ex = cls(a, b, root=root, tab="Resume doctor")
        ex.panel()
        ex.state.resume.run(wait=wait)
        return ex

    # ---- display ------------------------------------------------------------------------
    def panel(self) -> Any:
        """The Panel object (built once)."""
        if self._panel is None:
            from .layout import embedded

            self._panel = embedded(self.state)
        return self._panel

    def ipywidget(self) -> Any:
        """The dashboard as an ipywidget (``pn.ipywidget``; needs jupyter_bokeh)."""
        import panel as pn

        from .notebook import keep_offline

        widget = pn.ipywidget(self.panel())
        keep_offline(self.panel())
        return widget

    def servable(self) -> Any:
        return self.panel().servable()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        from .notebook import keep_offline

        bundle = self.panel()._repr_mimebundle_(include, exclude)
        keep_offline(self.panel())  # the document just made, for every later change
        return bundle

    def __repr__(self) -> str:
        return f"Explorer(root={str(self.state.guard.root)!r}, open={self.state.browse.path!r})"
