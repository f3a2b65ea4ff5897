"""What a Keras model config makes ``keras.saving.load_model`` import or run.

Keras rebuilds a model from its config (``config.json`` of a ``.keras`` archive or folder,
the ``model_config`` / ``training_config`` attributes of a legacy ``.h5``) by walking the
JSON: every object with a ``class_name`` names a class or function by ``module``,
``class_name`` and ``registered_name``, resolved by ``_retrieve_class_or_fn`` and built with
``from_config``. What that resolution reaches depends on the Keras release, so the verdict is
the worst over Keras 3 (read in 3.8.0 and 3.15.1):

* a Python lambda (``__lambda__``, or a legacy ``Lambda`` whose ``function_type`` is
  ``lambda``) is marshalled bytecode that ``python_utils.func_load`` turns into a function and
  the layer calls while the model is rebuilt: ``code`` in a ``.keras`` (refused unless
  ``safe_mode=False``), ``unsafe`` in a legacy ``.h5`` (Keras before 3.11.3 ignored
  ``safe_mode`` there, CVE-2025-9905);
* a function outside Keras's modelling namespaces, a non-modelling Keras API (``get_file``,
  ``enable_unsafe_deserialization``, ``load_model``, ...), or a module that runs commands is
  ``unsafe``: Keras up to 3.8 imported any module a config named and returned its attribute
  (CVE-2025-1550), up to 3.10 it called non-modelling APIs (CVE-2025-8747, CVE-2025-9906);
* ``TFSMLayer`` loads the TensorFlow SavedModel its ``filepath`` names (before 3.13.2 even in
  safe mode, CVE-2026-1462): ``unsafe``; ``TorchModuleWrapper`` ``torch.load``s the pickled
  module in its config with ``weights_only=False`` when ``safe_mode=False``: ``code``;
* a class of another package (a custom object the user registers) or anything else this
  model does not place is a doubt: Keras 3.9+ resolves only registered objects, older
  releases import the module it names.

Keras's own built-ins (``keras``, ``keras.*``, ``keras_hub`` / ``keras_cv`` / ``keras_nlp``
classes, built-in functions by name) are data. Nothing is imported here: the names are read.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .inert import what_it_does

KERAS_PACKAGES = ("keras", "keras_hub", "keras_cv", "keras_nlp")
# classes Keras's serializer writes for values (special-cased before any resolution)
VALUE_CLASSES = frozenset(
    {"__keras_tensor__", "__tensor__", "__numpy__", "__bytes__", "__ellipsis__", "__slice__"}
)
# namespaces of Keras functions that only compute (activations, losses, metrics, ops...)
_MODELLING = (
    "activations",
    "constraints",
    "initializers",
    "losses",
    "metrics",
    "ops",
    "optimizers",
    "regularizers",
    "random",
    "layers",
    "quantizers",
)
# Keras functions that read, write, fetch, load or switch safe mode off: Keras 3.15's own
# NON_MODELING_APIS by name, and what the published bypasses called
_NON_MODELLING = frozenset(
    {
        "audio_dataset_from_directory",
        "clear_session",
        "deserialize_keras_object",
        "enable_unsafe_deserialization",
        "get_file",
        "image_dataset_from_directory",
        "load_img",
        "load_model",
        "load_weights",
        "model_from_json",
        "register_keras_serializable",
        "save_img",
        "save_model",
        "save_weights",
        "serialize_keras_object",
        "set_global_attribute",
        "text_dataset_from_directory",
    }
)
_CVE_IMPORT = (
    "Keras up to 3.8 imports the module a config names and takes its attribute (CVE-2025-1550)"
)
_LAMBDA_V3 = (
    "a Python lambda (marshalled bytecode): load_model(safe_mode=False) runs it while the "
    "model is rebuilt; safe_mode=True, the default, refuses it"
)
_LAMBDA_H5 = (
    "a Python lambda (marshalled bytecode) in a legacy HDF5 model: Keras before 3.11.3 ignores "
    "safe_mode for .h5 files and runs it on a plain load_model (CVE-2025-9905)"
)
_MAX_MESSAGES = 12


@dataclass
class KerasJudged:
    """What the config makes Keras run on a plain load (``unsafe``), on request (``code``),
    and what this model cannot place (``doubts``); each message names where."""

    unsafe: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    doubts: list[str] = field(default_factory=list)
    objects: int = 0  # object references read

    def _add(self, kind: list[str], msg: str) -> None:
        if msg not in kind and len(kind) < _MAX_MESSAGES:
            kind.append(msg)


def looks_like_keras(doc: Any) -> bool:
    """The JSON is one Keras serialized object (its top names a ``class_name`` and a
    ``config``), as ``config.json`` and ``model_config`` are."""
    return isinstance(doc, dict) and "class_name" in doc and "config" in doc


def judge_config(doc: Any, where: str, legacy: bool = False) -> KerasJudged:
    """Every object reference of the config ``doc`` (parsed JSON), judged; ``legacy``: the
    config of a legacy ``.h5`` (classes may be named without a module there)."""
    out = KerasJudged()
    for path, node in _objects(doc):
        out.objects += 1
        _judge_object(node, f"{where} at {path or '/'}", legacy, out)
    return out


def _objects(doc: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each dict with a ``class_name`` and the JSON path to it (every level, as Keras walks
    nested configs: a layer's initializers, a model's layers, compile configs)."""
    todo: list[tuple[str, Any]] = [("", doc)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, dict):
            if "class_name" in node:
                yield path, node
            todo += [(f"{path}/{k}", v) for k, v in node.items()]
        elif isinstance(node, list):
            todo += [(f"{path}/{i}", v) for i, v in enumerate(node)]


def _judge_object(node: dict[str, Any], where: str, legacy: bool, out: KerasJudged) -> None:
    name = node.get("class_name")
    module = node.get("module")
    registered = node.get("registered_name")
    config = node.get("config")
    if not isinstance(name, str) or not (module is None or isinstance(module, str)):
        out._add(out.doubts, f"{where}: a class_name or module that is not a string")
        return
    if name == "__lambda__":
        out._add(
            out.unsafe if legacy else out.code, f"{where}: {_LAMBDA_H5 if legacy else _LAMBDA_V3}"
        )
        return
    if name in VALUE_CLASSES:
        return
    if name == "__typespec__":
        spec = node.get("spec_name")
        _judge_named(str(spec), module, "class", where, out, registered)
        return
    if name == "function":
        if not isinstance(config, str):
            out._add(out.doubts, f"{where}: a function reference whose name is not a string")
            return
        _judge_named(config, module, "function", where, out, registered)
        return
    _judge_named(name, module, "class", where, out, registered, legacy)
    if isinstance(config, dict):
        _judge_layer(name, config, where, legacy, out)


def _judge_named(
    name: str,
    module: str | None,
    kind: str,
    where: str,
    out: KerasJudged,
    registered: Any = None,
    legacy: bool = False,
) -> None:
    """One class or function named by ``module`` and ``name``."""
    qualified = f"{module}.{name}" if module else name
    last = name.rsplit(".", 1)[-1]
    if last in _NON_MODELLING:
        out._add(
            out.unsafe,
            f"{where}: names {qualified}, a Keras API that reads, writes, fetches or turns "
            "safe mode off: Keras before 3.11 calls it while the model is rebuilt "
            "(CVE-2025-8747, CVE-2025-9906)",
        )
        return
    package = (module or "").split(".", 1)[0]
    own = package in KERAS_PACKAGES and registered == f"{package}>{name}"  # keras_hub's own
    if (
        registered not in (None, name)
        and not own
        and (kind, registered) != ("function", "function")
    ):
        out._add(
            out.doubts,
            f"{where}: {kind} registered as {registered!r}: a custom object that the loading "
            "code registers (Keras resolves it to whatever is registered under that name)",
        )
        return
    if module is None:
        if legacy or kind == "function":
            return  # resolved by name among Keras's own objects (legacy layers, built-ins)
        out._add(out.doubts, f"{where}: {kind} {name} without a module: a custom object")
        return
    if module == "builtins" and kind == "function":
        if hasattr(builtins, name):
            out._add(
                out.unsafe,
                f"{where}: names Python's builtins.{name}: {_CVE_IMPORT}, so a Lambda calls "
                f"it on a plain load (it {what_it_does('builtins', name)})",
            )
        return  # otherwise Keras's built-in functions by name (activations, losses, ...)
    if package in KERAS_PACKAGES:
        if kind == "function" and not _modelling(module):
            out._add(
                out.doubts,
                f"{where}: function {qualified}, outside Keras's modelling namespaces: not "
                "judged here",
            )
        return
    does = what_it_does(module, name)
    if not does.startswith("imports "):
        out._add(out.unsafe, f"{where}: names {qualified}: {_CVE_IMPORT}; it {does}")
        return
    out._add(
        out.doubts,
        f"{where}: {kind} {qualified} of another package: Keras 3.9+ resolves only registered "
        f"custom objects, but {_CVE_IMPORT}",
    )


def _modelling(module: str) -> bool:
    parts = module.split(".")
    return any(p in _MODELLING for p in parts[1:]) or parts == ["keras"]


def _judge_layer(
    name: str, config: dict[str, Any], where: str, legacy: bool, out: KerasJudged
) -> None:
    """Built-in layers that run code or read files named in their config."""
    if name == "Lambda" and config.get("function_type") == "lambda":
        out._add(
            out.unsafe if legacy else out.code, f"{where}: {_LAMBDA_H5 if legacy else _LAMBDA_V3}"
        )
    function, home = config.get("function"), config.get("module")
    if name == "Lambda" and isinstance(function, str) and isinstance(home, str):
        # the legacy Lambda resolves the name in the namespace of the module it names
        does = what_it_does(home, function)
        kind = out.unsafe if not does.startswith("imports ") else out.doubts
        out._add(kind, f"{where}: a Lambda calling {home}.{function}: it {does}")
    if name == "TFSMLayer":
        out._add(
            out.unsafe,
            f"{where}: a TFSMLayer: Keras before 3.13.2 loads the TensorFlow SavedModel at "
            f"{config.get('filepath')!r} (its graph and functions) even in safe mode "
            "(CVE-2026-1462)",
        )
    if name == "TorchModuleWrapper" and "module" in config:
        out._add(
            out.code,
            f"{where}: a TorchModuleWrapper holding a pickled torch module: "
            "load_model(safe_mode=False) torch.load()s it with weights_only=False",
        )
    if name in ("TFOpLambda", "SlicingOpLambda"):  # tf.keras 2 legacy models
        out._add(
            out.doubts,
            f"{where}: a {name} calling the TensorFlow function {config.get('function')!r} "
            "that tf.keras resolves by name: not judged",
        )
    if name in ("JaxLayer", "FlaxLayer"):
        out._add(out.doubts, f"{where}: a {name} (functions of another framework): not judged")
    vocabulary = config.get("vocabulary")
    if isinstance(vocabulary, str) and name.endswith(("Lookup", "TextVectorization")):
        out._add(
            out.doubts,
            f"{where}: a {name} whose vocabulary is the file {vocabulary!r}: Keras reads it",
        )


__all__ = ["KERAS_PACKAGES", "KerasJudged", "judge_config", "looks_like_keras"]
