"""Renders a chat template as Hugging Face's transformers does
(apply_chat_template, with llama-server's undefined tools): Python's jinja2 in an ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loop controls, json.dumps as tojson,
raise_exception, strftime_now, and the {% generation %} tag. The reference
the project's Jinja engine is compared against, byte for byte."""
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def object_arguments(messages):
    """A tool call's arguments sent as a JSON string reach the template as the
    object they encode (as llama-server passes them)."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            if isinstance(fn.get("arguments"), str):
                try:
                    parsed = json.loads(fn["arguments"])
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    fn["arguments"] = parsed
    return out


def render(source, messages, tools=None, add_generation_prompt=True, bos_token="", eos_token="", **kwargs):
    """tools (and documents) stay undefined when the request has none, as
    llama-server leaves them: transformers passes None, on which the tool-use
    templates that loop over tools (Hermes 2 Pro, Hermes 3, Command R+) fail."""
    template = environment().from_string(source)
    variables = dict(messages=object_arguments(messages), add_generation_prompt=add_generation_prompt,
                     bos_token=bos_token, eos_token=eos_token, **kwargs)
    if tools:
        variables["tools"] = tools
    return template.render(**variables)
