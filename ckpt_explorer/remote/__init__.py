"""Checkpoints where they live: ``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``hf://``.

A URL opens as a location in an fsspec store (:mod:`.store`): the readers read it as they read
a local folder, in byte ranges: listing moves only the structure they parse, a tensor load
moves that tensor's bytes. ``--cache DIR`` keeps fetched bytes on disk (:mod:`.disk_cache`).
Needs the ``remote`` extra (fsspec and its backends); imported only when a URL is given.
"""

from . import stores as _stores  # noqa: F401  (registers the stores this package reads)
from .urls import is_url

__all__ = ["is_url"]
