"""Chat templates: Jinja code that a tokenizer's consumers render, judged as Jinja parses it.

Where they are and who renders them:

* transformers ``apply_chat_template`` (and vLLM, SGLang through it): ``chat_template`` of
  ``tokenizer_config.json`` / ``chat_template.json`` / ``processor_config.json`` (a string, or
  a list of ``{"name", "template"}``), ``chat_template.jinja`` and
  ``additional_chat_templates/*.jinja``; rendered in Jinja's ``ImmutableSandboxedEnvironment``;
* llama-cpp-python: a GGUF's ``tokenizer.chat_template`` (and ``tokenizer.chat_template.<name>``)
  metadata, rendered by its ``Jinja2ChatFormatter``: in the same sandbox since 0.2.72, in a plain
  ``jinja2.Environment`` before (CVE-2024-34359), where a template reaches Python's internals
  (``__globals__``, ``__builtins__``) and runs anything;
* anything that renders a template with ``jinja2.Template`` or a plain ``Environment``.

A template that names Python internals is written to leave the sandbox: sandboxed renderers
refuse it, plain ones run what it reaches, so it is ``code``. Real templates never need them.
A template that reads attributes or items by names it builds from strings (``attr`` with a
computed argument, ``x['_' ~ '_class' ~ '__']``) cannot be proven to stay inside the data it is
given: ``unverified``. Anything else (loops, filters, ``namespace``, ``tojson``, methods of
strings, lists and dicts) is what every sandbox allows and a template needs. Nothing is
rendered or compiled: the template is only parsed.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..io.gguf_header import GGUFError, parse
from ..io.location import Location, as_location

_MAX_TEXT = 64 * 2**20  # a config or template read whole up to this (as the placer parses)
_JSON_NAMES = ("tokenizer_config.json", "chat_template.json", "processor_config.json")
TEMPLATE_SUFFIXES = (".jinja", ".gguf", *_JSON_NAMES)  # the files that can hold one
# attributes Jinja's sandbox refuses that do not start with "_" (jinja2.sandbox's UNSAFE_* sets,
# and the frame / code objects they lead to)
_UNSAFE_NAMES = frozenset(
    {
        "mro", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await",
        "ag_code", "ag_frame", "ag_await", "f_globals", "f_builtins", "f_locals", "f_back",
        "f_code", "tb_frame", "tb_next", "func_globals", "func_code", "im_func", "im_self",
        "co_code",
    }
)  # fmt: skip
_DUNDER = re.compile(r"__\w+__")
_WRITES_UNDERSCORE = re.compile(r"_|%[-#0 +]*\d*c|\{[^{}]*:[^{}]*c\}")
# filters that read an attribute by the name given (a dotted path) as their first argument
_NAME_FILTERS = frozenset({"attr", "selectattr", "rejectattr", "groupby"})
# filters whose result is a number, and those that write an object's text (its repr)
_NUMBER_FILTERS = frozenset({"length", "count", "int", "float", "abs", "round", "sum", "wordcount"})
_TEXT_FILTERS = frozenset({"string", "pprint", "format"})
# objects a template can reach by name whose text is not data (their repr holds "_")
_OBJECTS = frozenset(
    {"lipsum", "cycler", "joiner", "namespace", "range", "dict", "self", "loop", "caller",
     "varargs", "kwargs", "raise_exception", "strftime_now"}
)  # fmt: skip
_SPECIAL_TOKENS = frozenset(
    {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
     "mask_token", "additional_special_tokens"}
)  # fmt: skip
# a str.format field that reads an attribute or item whose name starts with "_"
_FORMAT_FIELD = re.compile(r"\{[^{}]*[.\[]\s*_")


def internal_name(name: str) -> bool:
    """A name Jinja's sandbox refuses to read: private, dunder, or a frame/code attribute."""
    return name.startswith("_") or name in _UNSAFE_NAMES


@dataclass
class TemplateVerdict:
    """What one template does beyond the data it is given."""

    code: list[str] = field(default_factory=list)  # reaches Python internals
    doubts: list[str] = field(default_factory=list)  # reads names it builds


def judge_template(text: str) -> TemplateVerdict:
    """Parse ``text`` as Jinja (with the extensions transformers loads) and walk its tree."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError

    out = TemplateVerdict()
    try:
        tree = _environment().parse(text)
    except TemplateSyntaxError:  # no Jinja renderer gets past parsing it: nothing of it runs
        return out
    except RecursionError:
        out.doubts.append("a template nested too deeply to parse")
        return out
    built = _built_names(tree)
    dynamic = False
    for node in tree.find_all(nodes.Getattr):
        if internal_name(node.attr):
            out.code.append(f"reads .{node.attr} (line {node.lineno})")
    # (expression, what it is, read as a dotted attribute path)
    keys: list[tuple[Any, str, bool]] = [
        (n.arg, "an item key", False) for n in tree.find_all(nodes.Getitem)
    ]
    for node in tree.find_all(nodes.Filter):
        what = f"the {node.name} filter's attribute"
        if node.name in _NAME_FILTERS and node.args:
            keys.append((node.args[0], what, True))
        keys += [(k.value, what, True) for k in node.kwargs if k.key == "attribute"]
    for key, what, dotted in keys:
        if isinstance(key, nodes.Const):
            if isinstance(key.value, str):
                parts = key.value.split(".") if dotted else [key.value]
                if any(internal_name(p) for p in parts):
                    out.code.append(f"reads {key.value!r} as {what} (line {key.lineno})")
            continue
        if isinstance(key, nodes.Slice):
            continue
        dynamic = True
        if dotted and not _data_lookup(key):
            out.doubts.append(
                f"{what} given by an expression at line {key.lineno}: a plain jinja2 renderer "
                "reads the attribute of whatever name it holds"
            )
        elif _computed(key, built.computed) and _may_write_underscore(key, built.underscore):
            out.doubts.append(
                f"{what} computed from strings at line {key.lineno}: a plain jinja2 renderer "
                "reads the attribute of whatever name it makes"
            )
        elif tokens := sorted(_names(key) & _SPECIAL_TOKENS):
            out.doubts.append(
                f"{what} taken from {tokens[0]} at line {key.lineno}, a string the tokenizer's "
                "config sets: a plain jinja2 renderer reads the attribute of that name"
            )
    strings = [c.value for c in tree.find_all(nodes.Const) if isinstance(c.value, str)]
    strings += [
        d.data for b in tree.find_all(nodes.AssignBlock) for d in b.find_all(nodes.TemplateData)
    ]
    formats = any(
        isinstance(n.node, nodes.Getattr) and n.node.attr in ("format", "format_map")
        for n in tree.find_all(nodes.Call)
    )
    for s in strings:
        if formats and _FORMAT_FIELD.search(s):
            out.code.append(f"a str.format field reaching a private name ({s[:40]!r})")
        elif dynamic and (_DUNDER.search(s) or s in _UNSAFE_NAMES):
            out.code.append(f"names {s[:40]!r} and reads names it is given")
    return out


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    """A Jinja environment that parses what transformers' renderer parses: loop controls and
    the ``{% generation %}`` block of its assistant-mask extension."""
    from jinja2 import Environment, nodes
    from jinja2.ext import Extension

    class _Generation(Extension):
        tags = {"generation"}  # noqa: RUF012 (as jinja2.ext.Extension declares it)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return Environment(extensions=["jinja2.ext.loopcontrols", _Generation])


@dataclass
class _Built:
    computed: set[str] = field(default_factory=set)  # bound to strings the template computes
    underscore: set[str] = field(default_factory=set)  # ... that may hold a "_" it writes


def _built_names(tree: Any) -> _Built:
    """Names a ``set`` or ``for`` binds to strings the template computes (to a fixed point)."""
    from jinja2 import nodes

    built = _Built()
    for _ in range(8):
        before = (len(built.computed), len(built.underscore))
        bindings = [(n.target, n.node) for n in tree.find_all(nodes.Assign)]
        bindings += [(n.target, n.iter) for n in tree.find_all(nodes.For)]
        for target, value in bindings:
            if _computed(value, built.computed):
                built.computed |= _bound(target)
                if _may_write_underscore(value, built.underscore):
                    built.underscore |= _bound(target)
        for node in tree.find_all(nodes.AssignBlock):
            built.computed |= _bound(node.target)
            built.underscore |= _bound(node.target)
        if (len(built.computed), len(built.underscore)) == before:
            break
    return built


def _may_write_underscore(node: Any, underscore: set[str]) -> bool:
    """Whether a computed string may get a "_" from the template rather than from the data it
    is given: a string the template writes holding "_" (or a ``%c`` / ``{:c}`` that makes one
    from a number), a name bound to such a string, or the text of an object (``|string``,
    ``~`` of a function such as ``lipsum``: its repr is full of them)."""
    from jinja2 import nodes

    found = [node, *node.find_all(nodes.Node)]
    called = {id(n.node) for n in found if isinstance(n, nodes.Call)}  # strftime_now(...)
    for n in found:
        if (
            isinstance(n, nodes.Const)
            and isinstance(n.value, str)
            and _WRITES_UNDERSCORE.search(n.value)
        ):
            return True
        if isinstance(n, nodes.Name) and n.name in underscore:
            return True
        if isinstance(n, nodes.Name) and n.name in _OBJECTS and id(n) not in called:
            return True
        if isinstance(n, nodes.Filter) and n.name in _TEXT_FILTERS:
            return True
    return False


def _data_lookup(node: Any) -> bool:
    """A name or a lookup in the values the template is given (``m.key``, ``t['name']``)."""
    from jinja2 import nodes

    while isinstance(node, (nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Const):
            return False
        node = node.node
    return isinstance(node, nodes.Name) and node.name not in _OBJECTS


def _names(node: Any) -> set[str]:
    """The names in an expression, itself included (``find_all`` skips the node itself)."""
    from jinja2 import nodes

    if isinstance(node, nodes.Name):
        return {node.name}
    return {n.name for n in node.find_all(nodes.Name)}


def _bound(target: Any) -> set[str]:
    """The names a ``set`` / ``for`` target binds (a name, or a tuple of them)."""
    return _names(target)


def _stringy(node: Any, built: set[str]) -> bool:
    """A string the template writes or computes (not a value it was given)."""
    from jinja2 import nodes

    if isinstance(node, nodes.Const):
        return isinstance(node.value, str)
    return _computed(node, built)


def _computed(node: Any, built: set[str]) -> bool:
    """Whether ``node`` computes a string the template did not write out whole: joined,
    repeated, formatted, filtered, sliced or picked from its own strings or built names.
    A lookup in the data it is given (``message['role']``) computes nothing."""
    from jinja2 import nodes

    if isinstance(node, nodes.Name):
        return node.name in built
    if isinstance(node, nodes.Concat):
        return True
    if isinstance(node, nodes.BinExpr):
        return _stringy(node.left, built) or _stringy(node.right, built)
    if isinstance(node, nodes.Filter) and node.name in _NUMBER_FILTERS:
        return False
    if isinstance(node, nodes.Filter) and node.name in _TEXT_FILTERS:
        return True
    if (
        isinstance(node, nodes.Call)
        and isinstance(node.node, nodes.Name)
        and node.node.name == "range"
    ):
        return False
    if isinstance(node, (nodes.Filter, nodes.Call)):
        target = node.node  # the filtered value; a method call's object
        if isinstance(node, nodes.Call) and isinstance(target, nodes.Getattr):
            target = target.node
        args = [*node.args, *(k.value for k in node.kwargs)]
        return any(_stringy(x, built) for x in (target, *args) if x is not None)
    if isinstance(node, nodes.Getitem):
        return _stringy(node.node, built)
    if isinstance(node, nodes.CondExpr):
        return _computed(node.expr1, built) or (
            node.expr2 is not None and _computed(node.expr2, built)
        )
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return any(_computed(x, built) for x in node.items)
    return False


# --- where templates are -----------------------------------------------------------------------


def templates_in(path: Location | Any) -> Iterator[tuple[str, str]]:
    """``(where, template text)`` for every chat template a renderer reads from this file."""
    loc = as_location(path)
    name = loc.name
    try:
        size = loc.stat().st_size
    except OSError:
        return
    if name.endswith(".jinja") and size <= _MAX_TEXT:
        text = _text(loc)
        if text is not None:
            yield "", text
    elif name in _JSON_NAMES and size <= _MAX_TEXT:
        yield from _json_templates(loc)
    elif name.endswith(".gguf"):
        yield from _gguf_templates(loc, size)


def _text(loc: Location) -> str | None:
    try:
        return loc.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _json_templates(loc: Location) -> Iterator[tuple[str, str]]:
    try:
        raw = loc.read_bytes()
        if b"chat" not in raw and b"\\u" not in raw:
            return
        doc = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return
    if not isinstance(doc, dict):
        return
    value = doc.get("chat_template")
    if isinstance(value, str):
        yield "chat_template", value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict) and isinstance(item.get("template"), str):
                yield f"chat_template[{i}] ({item.get('name', '')})", item["template"]


def _gguf_templates(loc: Location, size: int) -> Iterator[tuple[str, str]]:
    try:
        with loc.open("rb") as f:

            def fetch(start: int, end: int) -> bytes:
                f.seek(start)
                return f.read(end - start)

            header = parse(fetch, size)
    except (OSError, GGUFError, ValueError):
        return  # the placer says what is wrong with the file
    for key, value in header.metadata.items():
        if key.startswith("tokenizer.chat_template") and isinstance(value, str):
            yield key, value


def chat_template_findings(path: Location | Any, label: str) -> TemplateVerdict:
    """Every template of one file judged, each message naming the file and where."""
    out = TemplateVerdict()
    for where, text in templates_in(path):
        found = judge_template(text)
        at = f"{label} ({where})" if where else label
        renderers = (
            "sandboxed renderers (transformers, llama-cpp-python >= 0.2.72) refuse it; a plain "
            "jinja2 renderer (llama-cpp-python < 0.2.72, CVE-2024-34359) runs what it reaches"
        )
        if found.code:
            shown = "; ".join(found.code[:3])
            out.code.append(
                f"{at}: a chat template reaching Python internals ({shown}): {renderers}"
            )
        for doubt in found.doubts[:3]:
            out.doubts.append(f"{at}: a chat template with {doubt}")
    return out
