"""An installed distribution's version, without importing it or ``importlib.metadata``.

``importlib.metadata`` (and the ``email`` parser it brings) took about a tenth of a listing's
start-up. For the plain case — a ``<name>-<version>.dist-info`` folder directly in a
``sys.path`` folder, as pip and uv install — the version is read from that folder's
``METADATA``, the first ``sys.path`` entry holding one winning as with ``importlib.metadata``;
anything else (egg-info, zip archives, two candidates in one folder) asks
``importlib.metadata`` itself.
"""

from __future__ import annotations

import os
import re
import sys

_SEPARATORS = re.compile(r"[-_.]+")


def installed_version(name: str) -> str | None:
    """``importlib.metadata.version(name)``, or None when ``name`` is not installed."""
    wanted = _normal(name)
    for entry in sys.path:
        folder = entry or "."
        if not os.path.isdir(folder):
            if os.path.exists(folder):
                return _from_importlib(name)  # a zip archive on the path
            continue
        try:
            with os.scandir(folder) as it:
                found = [e.name for e in it if _is_candidate(e.name, wanted)]
        except OSError:
            return _from_importlib(name)
        if not found:
            continue
        if len(found) > 1 or not found[0].endswith(".dist-info"):
            return _from_importlib(name)
        version = _metadata_version(os.path.join(folder, found[0], "METADATA"))
        return version if version is not None else _from_importlib(name)
    return _from_importlib(name)


def _normal(name: str) -> str:
    return _SEPARATORS.sub("_", name).lower()


def _is_candidate(entry: str, wanted: str) -> bool:
    stem, dot, suffix = entry.rpartition(".")
    if not dot or suffix.lower() not in ("dist-info", "egg-info", "egg"):
        return False
    return _normal(stem.partition("-")[0]) == wanted


def _metadata_version(path: str) -> str | None:
    """The ``Version:`` header of a METADATA file (the headers end at the first blank line)."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    return None
                key, _, value = line.partition(":")
                if key.lower() == "version":
                    return value.strip()
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _from_importlib(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
