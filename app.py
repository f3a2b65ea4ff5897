"""The ckpt_explorer dashboard: ``panel serve app.py``.

Environment: ``CKPT_EXPLORER_ROOT`` (the folder the page may read; default the current
directory) and ``CKPT_EXPLORER_PATH`` (checkpoints to open, separated by ``os.pathsep``).
"""

from __future__ import annotations

import os

from ckpt_explorer.ui.layout import create_app

paths = [p for p in os.environ.get("CKPT_EXPLORER_PATH", "").split(os.pathsep) if p]
create_app(paths=paths, root=os.environ.get("CKPT_EXPLORER_ROOT") or None).servable()
