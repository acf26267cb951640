"""The Jinja engine against Python's jinja2: every template of the corpus in
tests/data/chat-templates (the templates of the models people run) with
every conversation of conversations.json renders byte for byte as
transformers' apply_chat_template renders it, or fails where it fails; the
fetched models' own templates too. Hostile templates stop with an error that
names the line, and the server serves on."""
import json
import time
from pathlib import Path

import gguf
import pytest

from conftest import ROOT, fetch, random_model, run_shoal
from hf_chat_template import render
from server_fixtures import Server

CORPUS = ROOT / "tests" / "data" / "chat-templates"
TEMPLATES = sorted(p.name for p in CORPUS.glob("*.jinja"))
CONVERSATIONS = json.loads((CORPUS / "conversations.json").read_text())
TOOLS = json.loads((CORPUS / "tools.json").read_text())


def shoal_template(shoal_bin, tmp_path, conversation, template=None, model=None):
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(conversation["messages"]))
    args = ["template", "--messages", messages]
    if template:
        args += ["--chat-template-file", template]
    if model:
        args += ["-m", model]
    if conversation.get("tools"):
        args += ["--tools", CORPUS / "tools.json"]
    if not conversation.get("add_generation_prompt", True):
        args += ["--no-generation-prompt"]
    if conversation.get("kwargs"):
        args += ["--chat-template-kwargs", json.dumps(conversation["kwargs"])]
    return run_shoal(shoal_bin, *args, timeout=60)


def reference(source, conversation, **tokens):
    try:
        return render(source, conversation["messages"], TOOLS if conversation.get("tools") else None,
                      conversation.get("add_generation_prompt", True), **tokens, **conversation.get("kwargs", {}))
    except Exception as e:  # the template refuses the conversation
        return e


# Templates that need more than apply_chat_template's variables: jinja2
# refuses every conversation of the corpus, and so does Shoal (checked).
NEEDS_OTHER_VARIABLES = {
    "fireworks-ai-llama-3-firefunction-v2.jinja",      # a `functions` variable
}


@pytest.mark.parametrize("template", TEMPLATES)
def test_corpus_template_renders_as_jinja2_does(shoal_bin, tmp_path, template):
    source = (CORPUS / template).read_text()
    rendered = 0
    for name, conversation in CONVERSATIONS.items():
        want = reference(source, conversation)
        r = shoal_template(shoal_bin, tmp_path, conversation, template=CORPUS / template)
        if isinstance(want, Exception):
            # Python's jinja2 raises (a role the template refuses, a sandboxed
            # list.append): Shoal refuses too, naming the template's line.
            if "generator" in str(want):
                continue  # a Python generator where Shoal has a list: nothing to compare
            assert r.returncode == 1 and "template line" in r.stderr, (name, str(want), r.stdout[-300:])
            continue
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout == want, name
        rendered += 1
    if template not in NEEDS_OTHER_VARIABLES:
        assert rendered >= 1, template


# Tool-use templates loop over `tools`; a request without tools leaves it
# undefined (as llama-server does), so they render the plain conversations
# instead of failing on None.
@pytest.mark.parametrize("template,preamble", [
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<tools>"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<tools>"),
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "# System Preamble"),
])
def test_tool_use_templates_render_without_tools(shoal_bin, tmp_path, template, preamble):
    source = (CORPUS / template).read_text()
    rendered = 0
    for conversation in (c for c in CONVERSATIONS.values() if not c.get("tools")):
        want = reference(source, conversation)
        r = shoal_template(shoal_bin, tmp_path, conversation, template=CORPUS / template)
        if isinstance(want, Exception):  # a role the template refuses: not what this test is about
            continue
        assert r.returncode == 0, r.stderr
        assert r.stdout == want
        assert preamble in r.stdout and "get_weather" not in r.stdout
        rendered += 1
    assert rendered >= 1


def model_tokens(path):
    reader = gguf.GGUFReader(path)

    def field(key):
        f = reader.fields.get(key)
        return None if f is None else f.parts[f.data[0]]

    source = bytes(field("tokenizer.chat_template")).decode()
    tokens = reader.fields["tokenizer.ggml.tokens"]

    def token(key):
        index = field(key)
        return "" if index is None else bytes(tokens.parts[tokens.data[int(index[0])]]).decode()

    return source, token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")


# The fetched models that carry a template, and the random Qwen3 (a thinking template).
@pytest.mark.parametrize("model_name", [pytest.param("smollm2", marks=pytest.mark.quick), "qwen2.5-coder-0.5b",
                                        "random-qwen3"])
def test_model_template_renders_as_jinja2_does(shoal_bin, tmp_path, smollm2, model_name):
    model = {"smollm2": smollm2}.get(model_name) or (
        random_model(model_name) if model_name.startswith("random-") else fetch(model_name))
    source, bos, eos = model_tokens(model)
    for name, conversation in CONVERSATIONS.items():
        want = reference(source, conversation, bos_token=bos, eos_token=eos)
        r = shoal_template(shoal_bin, tmp_path, conversation, model=model)
        if isinstance(want, Exception):
            assert r.returncode == 1 and "template line" in r.stderr, (name, str(want))
            continue
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout == want, name


HOSTILE = {
    "endless loop": "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
    "a gigabyte in one go": "{{ 'x' * 1000000000 }}",
    "a gigabyte by a loop": "{% for i in range(1000000) %}{{ 'y' * 1000 }}{% endfor %}",
    "a string doubled until it is huge":
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "unbounded recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "a value nested a million deep":
        "{% set ns = namespace(x=1) %}{% for i in range(1000000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
    "deep nesting": "{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}",
    "a syntax error": "{% for m in messages %}{{ m.content }\n{% endfor %}",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_template_is_stopped_with_a_clear_error(shoal_bin, tmp_path, kind):
    template = tmp_path / "hostile.jinja"
    template.write_text(HOSTILE[kind])
    start = time.monotonic()
    r = shoal_template(shoal_bin, tmp_path, CONVERSATIONS["user"], template=template)
    assert r.returncode == 1, r.stdout[:200]
    assert r.stdout == ""
    assert "template line" in r.stderr, r.stderr
    assert time.monotonic() - start < 60  # stopped, not hung


# Loops forever when the user asks it to; otherwise SmolLM2's ChatML.
ON_DEMAND_LOOP = """{% for m in messages %}{% if m.content == 'loop' %}{% for i in range(1000000) %}\
{% for j in range(1000000) %}{% endfor %}{% endfor %}{% endif %}\
{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"""


def test_server_answers_a_hostile_template_with_an_error_and_serves_on(shoal_bin, smollm2, tmp_path):
    template = tmp_path / "on-demand-loop.jinja"
    template.write_text(ON_DEMAND_LOOP)
    server = Server(shoal_bin, smollm2, tmp_path, "--chat-template-file", template)
    try:
        start = time.monotonic()
        status, body = server.post_json("/v1/chat/completions", timeout=60,
                                        body={"messages": [{"role": "user", "content": "loop"}], "max_tokens": 4})
        assert status == 400, body
        assert "template line 1" in body["error"]["message"]
        assert time.monotonic() - start < 60
        status, body = server.post_json("/v1/chat/completions", timeout=120, body={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0})
        assert status == 200, body
        assert body["choices"][0]["message"]["content"]
    finally:
        server.stop()


def test_apply_template_returns_what_shoal_template_prints(shoal_bin, smollm2, tmp_path):
    template = CORPUS / "Qwen-Qwen2.5-7B-Instruct.jinja"
    conversation = CONVERSATIONS["tool_round_trip"]
    printed = shoal_template(shoal_bin, tmp_path, conversation, template=template)
    assert printed.returncode == 0, printed.stderr
    assert '"name": "get_weather"' in printed.stdout  # the tools reached the template
    server = Server(shoal_bin, smollm2, tmp_path, "--chat-template-file", template)
    try:
        status, body = server.post_json("/apply-template", {"messages": conversation["messages"], "tools": TOOLS})
        assert status == 200, body
        assert body["prompt"] == printed.stdout
        status, body = server.post_json("/apply-template", {"messages": "not a list"})
        assert status == 400, body
        # A body nested too deep for templating is refused before it is read.
        deep = "[" * 100000 + "]" * 100000
        status, _, raw = server.request("POST", "/apply-template",
                                        '{"messages": [{"role": "user", "content": "x", "extra": ' + deep + '}]}')
        assert status == 400 and b"nests deeper" in raw, raw[:200]
        assert server.get_json("/health")[0] == 200
    finally:
        server.stop()
