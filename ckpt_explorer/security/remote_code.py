"""Code that ``from_pretrained(..., trust_remote_code=True)`` imports, named by a folder's
JSON configs.

transformers: the ``auto_map`` of ``config.json``, ``tokenizer_config.json``,
``preprocessor_config.json``, ``processor_config.json`` (any JSON config that holds one) maps
an auto class to ``"module.Class"`` (the folder's ``module.py``) or ``"repo--module.Class"``
(``module.py`` of another Hub repository); a tokenizer's entry may be a ``[slow, fast]`` pair,
and an old ``tokenizer_config.json`` may hold that pair as ``auto_map`` itself
(``get_class_from_dynamic_module`` splits the reference on ``--`` and ``.``). diffusers'
``model_index.json``: ``_class_name`` given as ``[module, Class]`` loads the folder's
``module.py`` as a custom pipeline, and a component ``[module, Class]`` whose
``<component>/<module>.py`` exists loads that file; its models' configs use ``auto_map`` too.
transformers' ``pipeline(model, trust_remote_code=True)`` imports the ``impl`` of each
``custom_pipelines`` task of ``config.json`` the same way, and sentence-transformers each
``type`` of ``modules.json`` outside its own namespace (before its 6.0, a local folder's without
``trust_remote_code``). A reference whose repository is a
path (``"../other--module.Class"``) is read from that folder, relative to the working directory.
Keys are matched after JSON decoding, as the loaders' ``json.loads`` sees them
(``"auto\\u005fmap"`` is ``auto_map``). Nothing is imported here: the JSON is read, the names are
joined as the loaders join them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..io.location import Location, as_location

_MAX_CONFIG = 64 * 2**20  # parsed whole up to this (the placer parses JSON as large)
_CHUNK = 1 << 20
_KEYS = (b"auto_map", b"_class_name", b"custom_pipelines")
_NAMES = "auto_map, custom_pipelines or _class_name"
_ESCAPED_ASCII = re.compile(rb"\\u00[4-7][0-9a-fA-F]")


@dataclass(frozen=True)
class RemoteCode:
    """One reference to code: the config naming it, the key, the module file (relative to the
    config's folder) and whether that file is there."""

    config: Location
    key: str
    module: str  # e.g. "modeling_tiny.py" or "unet/my_unet.py"
    present: bool
    hub_repo: str = ""  # the other Hub repository it is fetched from ("repo--module.Class")
    unread: bool = False  # a config too large to read here that may name code

    @property
    def loader(self) -> str:
        if self.key.startswith("model_index"):
            return "DiffusionPipeline.from_pretrained"
        if self.key.startswith("modules.json"):
            return "SentenceTransformer"
        return "pipeline" if self.key.startswith("custom_pipelines") else "from_pretrained"

    def message(self, label: str) -> str:
        if self.unread:
            return (
                f"{label}: {self.key}: from_pretrained / pipeline(trust_remote_code=True) read "
                "it whole and may import the code it names"
            )
        flag = self.loader
        if self.hub_repo and _is_path(self.hub_repo):
            where = (
                f"{self.module} of the folder {self.hub_repo} (a path, read relative to the "
                "working directory; outside this folder, so not judged here)"
            )
        elif self.hub_repo:
            where = (
                f"{self.module} of the Hub repository {self.hub_repo} (downloaded and imported; "
                "not in this folder, so not judged here)"
            )
        elif self.present:
            where = f"{self.module}, in this folder"
        else:
            where = (
                f"{self.module}, which is not in this folder: the loader fetches it from the Hub "
                "repository this folder came from (not judged here)"
            )
        older = (
            " (sentence-transformers before 6.0: also without it, for a local folder)"
            if flag == "SentenceTransformer"
            else ""
        )
        return (
            f"{label}: {self.key} names code that {flag}(trust_remote_code=True){older} "
            f"imports: {where}"
        )


def remote_code(config: Location) -> list[RemoteCode]:
    """The code references of one JSON file (none when it is not a config that names code).

    The loaders read a config of any size; one too large to parse here that may spell a key is
    returned as a single reference with ``unread`` set (the caller makes it unverified)."""
    config = as_location(config)
    try:
        size = config.stat().st_size
        if size > _MAX_CONFIG:
            return _large(config, size)
        raw = config.read_bytes()
        modules = config.name == "modules.json"
        if not modules and not _may_name_code(raw):
            return []
        doc = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return []
    if modules:
        return _st_modules(config, doc)
    if not isinstance(doc, dict):
        return []
    out = _auto_map(config, doc.get("auto_map"))
    out += _custom_pipelines(config, doc.get("custom_pipelines"))
    if config.name == "model_index.json":
        out += _diffusers(config, doc)
    return out


def _may_name_code(raw: bytes) -> bool:
    """Whether ``json.loads`` could make one of the keys: spelled out, or with an escaped ASCII
    letter (``json.dumps`` escapes only non-ASCII and control characters, so real configs and
    tokenizers never have one)."""
    return any(k in raw for k in _KEYS) or _ESCAPED_ASCII.search(raw) is not None


def _large(config: Location, size: int) -> list[RemoteCode]:
    """A JSON over the parse limit, searched in overlapping chunks for what could name code."""
    with config.open("rb") as f:
        tail = b""
        while chunk := f.read(_CHUNK):
            if _may_name_code(tail + chunk):
                key = f"a JSON of {size} bytes (too large to read here) that may set {_NAMES}"
                return [RemoteCode(config, key, "", False, unread=True)]
            tail = chunk[-32:]
    return []


def _refs(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def _auto_map(config: Location, auto_map: Any) -> list[RemoteCode]:
    if isinstance(auto_map, (list, tuple)):  # an old tokenizer_config.json: [slow, fast]
        auto_map = {"AutoTokenizer": auto_map}
    if not isinstance(auto_map, dict):
        return []
    out = []
    for cls, value in auto_map.items():
        for ref in _refs(value):
            found = _reference(config, f"auto_map[{str(cls)!r}] = {ref!r}", ref)
            out += [found] if found else []
    return out


def _custom_pipelines(config: Location, tasks: Any) -> list[RemoteCode]:
    """``{"task": {"impl": "module.Class", ...}}``: ``pipeline`` imports each ``impl``."""
    if not isinstance(tasks, dict):
        return []
    out = []
    for task, spec in tasks.items():
        ref = spec.get("impl") if isinstance(spec, dict) else None
        if isinstance(ref, str):
            found = _reference(config, f"custom_pipelines[{str(task)!r}].impl = {ref!r}", ref)
            out += [found] if found else []
    return out


def _st_modules(config: Location, doc: Any) -> list[RemoteCode]:
    """sentence-transformers' ``modules.json``: each module's ``type`` outside the
    ``sentence_transformers.`` namespace is imported (``get_class_from_dynamic_module`` first,
    then an import of the dotted path)."""
    out = []
    for item in doc if isinstance(doc, list) else []:
        ref = item.get("type") if isinstance(item, dict) else None
        if isinstance(ref, str) and not ref.startswith("sentence_transformers."):
            found = _reference(config, f"modules.json type = {ref!r}", ref)
            out += [found] if found else []
    return out


def _reference(config: Location, key: str, ref: str) -> RemoteCode | None:
    """``"module.Class"`` or ``"repo--module.Class"``, split as transformers splits it."""
    repo, _, local = ref.rpartition("--") if "--" in ref else ("", "", ref)
    module = local.split(".")[0]
    if not module:
        return None
    file = f"{module}.py"
    return RemoteCode(config, key, file, not repo and _exists(config, file), hub_repo=repo)


def _is_path(repo: str) -> bool:
    """A repository reference that is a folder path (transformers tries ``os.path.isdir``
    first), not a Hub id ``owner/name``."""
    return repo.startswith(("/", ".", "~")) or repo.count("/") > 1 or "\\" in repo


def _diffusers(config: Location, doc: dict[str, Any]) -> list[RemoteCode]:
    out = []
    name = doc.get("_class_name")
    if isinstance(name, (list, tuple)) and name and isinstance(name[0], str) and name[0]:
        file = f"{name[0]}.py"
        if _exists(config, file):  # otherwise the name is looked up among diffusers' pipelines
            out.append(
                RemoteCode(config, f"model_index.json _class_name = {list(name)!r}", file, True)
            )
    for component, value in doc.items():
        if component.startswith("_") or not isinstance(value, (list, tuple)) or not value:
            continue
        module = value[0]
        if isinstance(module, str) and module:
            file = f"{component}/{module}.py"
            if _exists(config, file):
                key = f"model_index.json {component!r} = {list(value)!r}"
                out.append(RemoteCode(config, key, file, True))
    return out


def _exists(config: Location, rel: str) -> bool:
    try:
        return (config.parent / rel).is_file()
    except (OSError, ValueError):
        return False


__all__ = ["RemoteCode", "remote_code"]
