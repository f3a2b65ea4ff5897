"""Chat templates are Jinja code: a template written to leave Jinja's sandbox is ``code``.

Written by the real tools (transformers' ``save_pretrained``, gguf's ``GGUFWriter``) and
rendered by the real renderers: transformers' ``apply_chat_template`` (sandboxed: it refuses)
and a plain ``jinja2.Environment`` (what llama-cpp-python used before 0.2.72, CVE-2024-34359:
the payload runs). Clean templates with loops, generation blocks, tool schemas and lookups by
the names they are given stay ``data``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from security_oracle import run_as_user

from ckpt_explorer.security import scan_paths
from ckpt_explorer.security.chat_templates import judge_template

_ESCAPE = (
    "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    "{{ self.__init__.__globals__.__builtins__.__import__('os')"
    ".open(mark, 65)|default('') }}"  # os.open(mark, O_CREAT | O_WRONLY)
)
# the same escape without one private name written out: the name is computed
_COMPUTED = (
    "{% set g = '_' * 2 ~ 'globals' ~ '_' * 2 %}"
    "{{ (lipsum|attr(g))['os'].open(mark, 65)|default('') }}"
)
_CLEAN = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' %}{% set ns.system = m['content'] %}"
    "{%- elif m.role == 'assistant' %}<|assistant|>{% generation %}{{ m.content | trim }}"
    "{% endgeneration %}"
    "{%- else %}<|{{ roles[m['role']] }}|>{{ m['content'] }}{% endif -%}"
    "{%- endfor -%}"
    "{%- if tools %}{% for t in tools %}{% for key in ['name', 'description'] %}"
    "{{ t['function'][key] }}{% endfor %}"
    "{% for p in t['function']['parameters']['properties'] %}"
    "{{ t['function']['parameters']['properties'][p] | tojson }}{% endfor %}{% endfor %}"
    "{%- endif -%}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif -%}"
)


def _render_plain(folder: Path, template_file: Path, mark: Path) -> Any:
    """Render as a plain jinja2 renderer does (no sandbox), in a child process."""
    code = (
        "import jinja2, sys\n"
        f"t = jinja2.Environment().from_string(open({str(template_file)!r}).read())\n"
        f"t.render(messages=[{{'role': 'user', 'content': 'hi'}}], mark={str(mark)!r})\n"
    )
    return run_as_user(folder, code)


def _tokenizer(folder: Path, template: str) -> Path:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(WordLevel({"<unk>": 0, "hi": 1}, unk_token="<unk>"))
    tok = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="<unk>")
    tok.chat_template = template
    tok.save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("name", ["escape", "computed"])
def test_a_template_that_leaves_the_sandbox_runs_in_a_plain_renderer(
    tmp_path: Path, name: str
) -> None:
    template = _ESCAPE if name == "escape" else _COMPUTED
    folder = _tokenizer(tmp_path / "tok", template)
    saved = folder / "chat_template.jinja"
    assert saved.read_text() == template
    mark = tmp_path / "MARK"
    done = _render_plain(tmp_path, saved, mark)
    assert mark.exists(), done.stderr  # a plain renderer ran os.open

    mark.unlink()
    sandboxed = (
        "from transformers import AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained({str(folder)!r})\n"
        "try:\n"
        "    tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False,\n"
        f"                            mark={str(mark)!r})\n"
        "except Exception as e:\n"
        "    print(type(e).__name__)\n"
    )
    done = run_as_user(tmp_path, sandboxed)
    assert "SecurityError" in done.stdout and not mark.exists(), done.stderr

    report = scan_paths([folder])
    found = {Path(v.path).name: v for v in report.verdicts}
    v = found["chat_template.jinja"]
    said = " ".join(v.reasons)
    if name == "escape":
        assert v.verdict == "code" and "reads .__globals__" in said
        assert "CVE-2024-34359" in said
    else:
        assert v.verdict == "unverified" and "attr filter's attribute computed from strings" in said
    assert report.exit_code == 1
    assert found["tokenizer.json"].verdict == "data"


def test_a_clean_template_is_data_and_renders(tmp_path: Path) -> None:
    folder = _tokenizer(tmp_path / "tok", _CLEAN)
    code = (
        "from transformers import AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained({str(folder)!r})\n"
        "tools = [{'type': 'function', 'function': {'name': 'f', 'description': 'd', "
        "'parameters': {'type': 'object', 'properties': {'x': {'type': 'string'}}}}}]\n"
        "print(tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tools=tools,\n"
        "      tokenize=False, roles={'user': 'u'}, add_generation_prompt=True))\n"
    )
    done = run_as_user(tmp_path, code)
    assert "<|u|>hi" in done.stdout, done.stderr  # the sandbox renders it
    report = scan_paths([folder])
    assert {v.verdict for v in report.verdicts} == {"data"} and report.exit_code == 0


def test_templates_in_tokenizer_config_lists_and_gguf_metadata(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    folder = tmp_path / "release"
    folder.mkdir()
    config = {
        "chat_template": [
            {"name": "default", "template": _CLEAN},
            {"name": "tool_use", "template": _ESCAPE},
        ]
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    writer = gguf.GGUFWriter(str(folder / "model.gguf"), "llama")
    writer.add_chat_template(_ESCAPE)
    writer.add_tensor("w", __import__("numpy").ones(4, dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    found = {Path(v.path).name: v for v in scan_paths([folder]).verdicts}
    cfg = " ".join(found["tokenizer_config.json"].reasons)
    assert found["tokenizer_config.json"].verdict == "code"
    assert "chat_template[1] (tool_use)" in cfg and "chat_template[0]" not in cfg
    gg = found["model.gguf"]
    assert gg.verdict == "code" and "(tokenizer.chat_template)" in " ".join(gg.reasons)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ ''|attr('__class__') }}", "code"),
        ("{{ cycler['__init__'] }}", "code"),
        ("{{ '{0.__class__}'.format(x) }}", "code"),
        ("{% for k in ['__class__'] %}{{ x[k] }}{% endfor %}", "code"),
        ("{% set k %}__class__{% endset %}{{ x|attr(k) }}", "code"),
        ("{% set k = 'ssalc__'|reverse %}{{ x[k] }}", "unverified"),
        ("{{ x['_' ~ name] }}", "unverified"),
        ("{{ roles[message['role']] }}{{ messages[loop.index0 + 1] }}", "data"),
        ("{% set role = message.role|lower %}{{ role_map[role] }}", "data"),
        ("{{ m.content.split('_')[0] }}{{ m.content[:10] }}", "data"),
        ("{% for %}", "data"),  # no renderer gets past parsing it
        ("{{ messages|selectattr('__class__') }}", "code"),
        ("{{ messages|map(attribute='content.__class__') }}", "code"),
        ("{{ messages|selectattr('role', 'equalto', 'system')|list }}", "data"),
        ("{{ x|attr(eos_token) }}", "unverified"),
        ("{{ x[eos_token] }}", "unverified"),
        ("{{ x[additional_special_tokens[0]] }}", "unverified"),
        ("{{ x[bos_token|trim] }}", "unverified"),
        ("{% set k = '%c' % 95 ~ 'x' %}{{ x[k] }}", "unverified"),
        ("{{ x[(lipsum|string)[18]] }}", "unverified"),
        ("{% set seg = raw|replace('~1', '/') %}{{ node[seg] }}{{ node[seg|int] }}", "data"),
        ("{{ weekdays[strftime_now('%A')] }}", "data"),
    ],
)
def test_judged_as_jinja_parses(template: str, expected: str) -> None:
    v = judge_template(template)
    got = "code" if v.code else "unverified" if v.doubts else "data"
    assert got == expected, (v.code, v.doubts)
