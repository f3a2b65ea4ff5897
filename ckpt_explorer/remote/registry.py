"""The registry of remote stores: each entry knows which URLs it reads, how to open one and
whether its reads are pinned to the version listed.

A new store is one module (its :class:`StoreSpec`) plus one :func:`register` call in
``remote/stores.py``; ``remote/locate.py`` opens a URL with the spec that accepts it. A spec's
``open`` returns a :class:`~..io.location.Location` in a store
that also satisfies :class:`RemoteStore` (what a torchrun job and the dashboard ask of it); the
default opens the URL through fsspec (``remote/store.py``), so a scheme fsspec knows needs only
its spec. A store whose ``pins_version`` is False reads the current version of each object: it
says so (the ``ckpt_explorer.remote`` logger, once per object) when it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..io.location import Location

Opener = Callable[[str, "dict[str, Any] | None", "str | None"], "Location"]
# (backend.Backend, backend.RemoteFile, [(start, end)]) -> bytes or an exception per range, or
# None: cannot pin here (the backend's types stay unnamed here: backend imports this registry)
PinnedRead = Callable[[Any, Any, "list[tuple[int, int]]"], "list[Any] | None"]
Options = Callable[["dict[str, Any]"], "dict[str, Any]"]


@dataclass(frozen=True)
class StoreSpec:
    """One kind of remote store.

    ``schemes``: URL schemes it reads (the first is the canonical one: ``s3a://`` is
    ``s3://`` to the dashboard's prefixes). ``package`` and ``install``: what reading needs
    and how to get it (said when it is missing). ``pins_version``: reads ask for the version
    listed (``pinned_read`` does it; it may return None where it cannot, e.g. an object without
    a strong ETag). ``options``: storage options completed from the environment.
    ``html_folders``: a folder is an HTML index page and a server may refuse HEAD (HTTP).
    ``userinfo_is_address``: ``user@host`` names the container (Azure), not credentials.
    ``aliases``: schemes that name the same store (``s3a`` -> ``s3``). ``ports``: each
    scheme's default port (``https://host:443`` is ``https://host``). ``revision_at``: a path
    segment ``repo@revision`` is ``repo`` at a revision (the Hugging Face Hub).
    """

    name: str
    schemes: tuple[str, ...]
    package: str
    install: str = "pip install 'ckpt-explorer[remote]'"
    pins_version: bool = False
    pinned_read: PinnedRead | None = None
    options: Options | None = None
    html_folders: bool = False
    userinfo_is_address: bool = False
    aliases: tuple[tuple[str, str], ...] = ()
    ports: tuple[tuple[str, int], ...] = ()
    revision_at: bool = False
    open: Opener | None = None  # None: through fsspec (remote/store.py open_url)

    def accepts(self, url: str) -> bool:
        head, sep, _ = str(url).partition("://")
        return bool(sep) and head.lower() in self.schemes

    def canonical(self, scheme: str) -> str:
        """``scheme`` as the dashboard's prefixes compare it (an alias as its target)."""
        return dict(self.aliases).get(scheme, scheme)


@runtime_checkable
class RemoteStore(Protocol):
    """What callers other than the readers ask of a remote store: the URL it was opened from,
    its options and cache folder (a torchrun rank reopens it), its root, a location below it,
    whether its listing changed, and closing it."""

    @property
    def url(self) -> str: ...
    @property
    def options(self) -> dict[str, Any]: ...
    @property
    def cache_root(self) -> str | None: ...

    base: PurePosixPath

    def location(self, rel: str) -> Location: ...
    def changed(self) -> bool: ...
    def close(self) -> None: ...


_REGISTRY: list[StoreSpec] = []


def register(spec: StoreSpec) -> None:
    """Add ``spec`` (a scheme already registered raises: one store per scheme)."""
    taken = {s for other in _REGISTRY for s in other.schemes}
    clash = sorted(taken & set(spec.schemes))
    if clash:
        raise ValueError(f"scheme(s) {', '.join(clash)} already registered")
    _REGISTRY.append(spec)


def unregister(name: str) -> None:
    """Remove the spec named ``name`` (tests)."""
    _REGISTRY[:] = [s for s in _REGISTRY if s.name != name]


def specs() -> list[StoreSpec]:
    return list(_REGISTRY)


def spec_for_scheme(scheme: str) -> StoreSpec | None:
    s = scheme.lower()
    return next((spec for spec in _REGISTRY if s in spec.schemes), None)
