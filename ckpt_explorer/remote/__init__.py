"""Checkpoints where they live: ``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``hf://``.

A remote checkpoint is read through a sparse local mirror (:mod:`.mirror`): only structure is
fetched for listing (:mod:`.structure`), tensor bytes on demand or, for commands that read
them all, in large parallel range reads; :mod:`.guard` makes sure a hole is never read.
Needs the ``remote`` extra (fsspec and its backends); imported only when a URL is given.
"""

from .urls import is_url

__all__ = ["is_url"]
