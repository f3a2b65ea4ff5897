"""Writer profiles: what each training framework's saved files record and mean.

The readers decide what an entry *is* (model, optimizer, scheduler, RNG, run position); a
profile says what its *writer* meant: which parts it saves and under which keys, what each
counter counts (optimizer steps, micro-batches, epochs, samples), whether it saves its LR
scheduler or rebuilds it from a counter, whether it saves RNG states, and its folder layout
and ``last``/``latest`` pointers. Rules and the doctor ask the profile; none hard-codes one
writer's convention. A state no profile recognises gets :data:`UNKNOWN`, and a rule that
depends on a convention then says "cannot tell" (info) instead of warning.

API contract (stable; add profiles, do not change these):

- :class:`WriterProfile` (``spec.py``): frozen; ``name``, ``title``, ``detect``,
  ``priority``, ``parts``, ``counters`` (:class:`Counter`: ``key``, ``counts`` a
  :data:`Unit`, ``meaning``), ``accumulation``, ``optimizer`` / ``scheduler`` / ``rng``
  (:data:`Policy`: ``saved`` | ``optional`` | ``rebuilt`` | ``not_saved`` | ``unknown``),
  ``scheduler_from``, ``pointers``, ``copies``, ``save_name`` / ``save_counter``, ``notes``;
  ``known``, ``counter(key)``, ``unit(key)``.
- :class:`Evidence` (``spec.py``): what the files show: ``name``, ``files``, ``siblings``,
  ``keys``, ``values``, ``kinds``; ``value(key)`` and ``has(key)`` match a key or a tail of
  one (``global_step`` finds ``trainer_state.json/global_step``, ``iter`` finds
  ``meta.iter``). A detector is ``Callable[[Evidence], list[str] | None]``: the evidence
  lines that identify the writer, or None. Detectors look at content (keys, values, file
  names), never at a format family id.
- :func:`register` / :func:`profiles` / :func:`profile` (``registry.py``); :func:`match`
  (Evidence -> :class:`ProfileMatch`); :func:`detect_profile` (view -> ProfileMatch:
  ``profile``, ``reasons``, ``evidence``, ``known``, ``describe()``).
- ``validate.parts.collect`` puts the match on ``Components.writer``; rules read
  ``parts.writer.profile``.

Adding a writer: one module here defining ``PROFILE = WriterProfile(...)`` with its detector
and a module docstring saying what the writer saves (from its source), plus one line below.
"""

from __future__ import annotations

from . import accelerate, hf_trainer, lightning, megatron, mmengine
from .detect import detect_profile
from .registry import match, profile, profiles, register
from .spec import (
    UNITS,
    UNKNOWN,
    Counter,
    Detector,
    Evidence,
    Policy,
    ProfileMatch,
    Unit,
    WriterProfile,
)

register(hf_trainer.PROFILE)
register(lightning.PROFILE)
register(mmengine.PROFILE)
register(megatron.PROFILE)
register(accelerate.PROFILE)

__all__ = [
    "UNITS",
    "UNKNOWN",
    "Counter",
    "Detector",
    "Evidence",
    "Policy",
    "ProfileMatch",
    "Unit",
    "WriterProfile",
    "detect_profile",
    "match",
    "profile",
    "profiles",
    "register",
]
