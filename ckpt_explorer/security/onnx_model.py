"""ONNX models (``ModelProto``) parsed as ``onnx.load`` and onnxruntime parse them.

An ONNX file is a protobuf: the graph's nodes (operators named by ``domain`` and
``op_type``), its tensors (initializers, constant attributes, sparse tensors, in the graph
and in every subgraph and model-local function) and metadata. Nothing in it is Python.
Two things make a consumer do more than read it:

* a tensor stored outside the file (``data_location`` EXTERNAL, ``external_data`` key
  ``location``): ``onnx.load`` and onnxruntime open that path relative to the model's folder
  and read it into the weights; a path that is absolute or climbs out of the folder reads any
  file of the machine (onnx before 1.16 did not refuse it): a doubt naming the path;
* an operator domain that is neither ONNX's own nor onnxruntime's built-in contrib ops nor a
  function defined in the model: it runs only with a custom-op library the user registers
  (code this file does not carry): a doubt naming the domain.

A file that parses completely as a ``ModelProto`` with a graph, with neither of those, is
data. The walk reads field tags and lengths only (tensor bytes are skipped), so a large model
is read only where its messages are.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from .protobuf_wire import WireError, fields

BUILTIN_DOMAINS = frozenset(
    {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"}
    | {"com.microsoft", "com.microsoft.nchwc", "com.microsoft.experimental"}
    | {"org.pytorch.aten", "com.ms.internal.nhwc"}
)
MAX_MESSAGES = 5_000_000
MAX_DEPTH = 64

# field numbers, from onnx.proto (IR version 10)
_MODEL_GRAPH, _MODEL_OPSET, _MODEL_TRAINING, _MODEL_FUNCTIONS = 7, 8, 20, 25
_GRAPH_NODE, _GRAPH_INIT, _GRAPH_SPARSE_INIT = 1, 5, 15
_NODE_ATTR, _NODE_DOMAIN, _NODE_OP = 5, 7, 4
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS = 5, 6, 10, 11
_ATTR_SPARSE, _ATTR_SPARSES = 22, 23
_TENSOR_EXTERNAL = 13  # external_data: key / value entries (data_location, 14, says EXTERNAL)
_SPARSE_VALUES, _SPARSE_INDICES = 1, 2
_FUNC_NODE, _FUNC_DOMAIN, _FUNC_NAME = 7, 10, 1
_TRAINING_INIT, _TRAINING_ALGO = 1, 2


@dataclass
class OnnxModel:
    """What the walk found: domains used and defined, external locations, doubts."""

    domains: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)  # domains of model-local functions
    locations: list[str] = field(default_factory=list)
    nodes: int = 0
    tensors: int = 0
    messages: int = 0


class OnnxError(ValueError):
    """The bytes are not a ModelProto as protobuf parses it."""


def parse_model(buf: Any, size: int) -> OnnxModel:
    """Walk the ModelProto ``buf[:size]``; OnnxError unless it is one with a graph."""
    try:
        return _model(buf, size)
    except WireError as e:
        raise OnnxError(str(e)) from e


def _model(buf: Any, size: int) -> OnnxModel:
    out = OnnxModel()
    graphs = 0
    for number, wire, a, b in fields(buf, 0, size):
        if number == _MODEL_GRAPH and wire == 2:
            graphs += 1
            _graph(buf, a, b, out, 0)
        elif number == _MODEL_OPSET and wire == 2:
            for n, w, x, y in fields(buf, a, b):
                if n == 1 and w == 2:
                    out.domains.add(_text(buf, x, y))
        elif number == _MODEL_FUNCTIONS and wire == 2:
            _function(buf, a, b, out)
        elif number == _MODEL_TRAINING and wire == 2:
            for n, w, x, y in fields(buf, a, b):
                if n in (_TRAINING_INIT, _TRAINING_ALGO) and w == 2:
                    _graph(buf, x, y, out, 1)
        elif number in (_MODEL_GRAPH, _MODEL_OPSET, _MODEL_FUNCTIONS) and wire != 2:
            raise OnnxError(f"field {number} is not a message")
    if graphs == 0:
        raise OnnxError("no graph")
    return out


def _count(out: OnnxModel, depth: int) -> None:
    out.messages += 1
    if out.messages > MAX_MESSAGES or depth > MAX_DEPTH:
        raise OnnxError("over the walk's limits")


def _text(buf: Any, a: int, b: int) -> str:
    try:
        return bytes(buf[a:b]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise OnnxError("a string that is not UTF-8") from e


def _graph(buf: Any, a: int, b: int, out: OnnxModel, depth: int) -> None:
    _count(out, depth)
    for n, w, x, y in fields(buf, a, b):
        if w != 2:
            continue
        if n == _GRAPH_NODE:
            _node(buf, x, y, out, depth + 1)
        elif n == _GRAPH_INIT:
            _tensor(buf, x, y, out)
        elif n == _GRAPH_SPARSE_INIT:
            _sparse(buf, x, y, out)


def _node(buf: Any, a: int, b: int, out: OnnxModel, depth: int) -> None:
    _count(out, depth)
    out.nodes += 1
    domain = ""
    for n, w, x, y in fields(buf, a, b):
        if n == _NODE_DOMAIN and w == 2:
            domain = _text(buf, x, y)
        elif n == _NODE_ATTR and w == 2:
            _attribute(buf, x, y, out, depth + 1)
    out.domains.add(domain)


def _attribute(buf: Any, a: int, b: int, out: OnnxModel, depth: int) -> None:
    _count(out, depth)
    for n, w, x, y in fields(buf, a, b):
        if w != 2:
            continue
        if n in (_ATTR_T, _ATTR_TENSORS):
            _tensor(buf, x, y, out)
        elif n in (_ATTR_G, _ATTR_GRAPHS):
            _graph(buf, x, y, out, depth + 1)
        elif n in (_ATTR_SPARSE, _ATTR_SPARSES):
            _sparse(buf, x, y, out)


def _function(buf: Any, a: int, b: int, out: OnnxModel) -> None:
    _count(out, 1)
    for n, w, x, y in fields(buf, a, b):
        if n == _FUNC_NODE and w == 2:
            _node(buf, x, y, out, 2)
        elif n == _FUNC_DOMAIN and w == 2:
            out.functions.add(_text(buf, x, y))


def _sparse(buf: Any, a: int, b: int, out: OnnxModel) -> None:
    for n, w, x, y in fields(buf, a, b):
        if n in (_SPARSE_VALUES, _SPARSE_INDICES) and w == 2:
            _tensor(buf, x, y, out)


def _tensor(buf: Any, a: int, b: int, out: OnnxModel) -> None:
    out.tensors += 1
    for n, w, x, y in fields(buf, a, b):
        if n == _TENSOR_EXTERNAL and w == 2:
            entry = {k: _text(buf, p, q) for k, _w, p, q in fields(buf, x, y) if _w == 2}
            if entry.get(1) == "location" and 2 in entry:
                out.locations.append(entry[2])


def doubts(model: OnnxModel) -> list[str]:
    """Why the model is not plain data (empty: it is)."""
    out = []
    for loc in sorted(set(model.locations)):
        norm = posixpath.normpath(loc.replace("\\", "/"))
        if loc.startswith(("/", "\\")) or norm.startswith("..") or ":" in loc[:3]:
            out.append(
                f"a tensor's external data at {loc!r}, outside the model's folder: onnx.load "
                "and onnxruntime read that file into the weights (onnx before 1.16 does not "
                "refuse it)"
            )
    custom = sorted(model.domains - BUILTIN_DOMAINS - model.functions)
    if custom:
        out.append(
            f"operators of the custom domain(s) {', '.join(map(repr, custom[:4]))}: they run "
            "only with a custom-op library the user registers, not judged here"
        )
    return out


__all__ = ["BUILTIN_DOMAINS", "OnnxError", "OnnxModel", "doubts", "parse_model"]
