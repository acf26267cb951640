"""Constrained output through the official openai client on Qwen2.5-Coder-
0.5B: response_format json_schema replies validate (PyPI jsonschema) for a
set of nested schemas, greedy and sampled, streamed and not; json_object
replies parse; a GBNF `grammar` holds a completion; tool_choice "required"
and a named function always give a call whose arguments validate; a schema
or grammar the server cannot hold to is a 400 naming it, and the server
serves on. Split across workers, a constrained reply is the same text as on
one machine."""
import datetime
import json
import re
import uuid
from typing import Annotated, List, Optional, Tuple

import jsonschema
import pydantic
import pytest

from conftest import ROOT
from server_fixtures import Server

TOOLS = json.loads((ROOT / "tests" / "data" / "chat-templates" / "tools.json").read_text())

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 40},
            "age": {"type": "integer"},
            "address": {"type": "object",
                        "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                       "zip": {"type": "string", "maxLength": 10}},
                        "required": ["city", "zip"], "additionalProperties": False},
            "hobbies": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        },
        "required": ["name", "age", "address", "hobbies"],
        "additionalProperties": False,
    },
    "order": {  # $defs and $ref, enums, arrays of objects, a nullable field (pydantic's shape)
        "type": "object",
        "$defs": {"item": {"type": "object",
                           "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"},
                                          "size": {"enum": ["S", "M", "L"]}},
                           "required": ["sku", "qty", "size"], "additionalProperties": False}},
        "properties": {"id": {"type": "integer"},
                       "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 2},
                       "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                       "paid": {"type": "boolean"}},
        "required": ["id", "items", "note", "paid"],
        "additionalProperties": False,
    },
    "library": {  # three levels of objects in arrays; recursion through $ref is in the unit tests
        "type": "object",
        "properties": {"shelves": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
            "type": "object",
            "properties": {"topic": {"type": "string", "maxLength": 20},
                           "books": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
                               "type": "object",
                               "properties": {"title": {"type": "string", "maxLength": 40},
                                              "author": {"type": "object",
                                                         "properties": {"name": {"type": "string", "maxLength": 30},
                                                                        "born": {"type": ["integer", "null"]}},
                                                         "required": ["name", "born"],
                                                         "additionalProperties": False}},
                               "required": ["title", "author"], "additionalProperties": False}}},
            "required": ["topic", "books"], "additionalProperties": False}}},
        "required": ["shelves"], "additionalProperties": False,
    },
    "matrix": {"type": "object",
               "properties": {"rows": {"type": "array", "minItems": 2, "maxItems": 2,
                                       "items": {"type": "array", "items": {"type": "number"},
                                                 "minItems": 2, "maxItems": 2}},
                              "unit": {"const": "m"}},
               "required": ["rows", "unit"], "additionalProperties": False},
}
PROMPTS = {"person": "Invent a person and describe them.", "order": "Make up a shop order.",
           "library": "Describe a small library.", "matrix": "Give a 2x2 matrix."}


def schema_format(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}}


def chat(client, content, stream=False, **kw):
    kw.setdefault("temperature", 0)
    out = client.chat.completions.create(model="default", messages=[{"role": "user", "content": content}],
                                         max_tokens=kw.pop("max_tokens", 256), stream=stream, **kw)
    if not stream:
        return out.choices[0].message.content, out.choices[0].finish_reason
    text, finish = "", None
    for chunk in out:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_json_schema_replies_validate(qwen, name):
    client = qwen.client()
    for stream, sampling in ((False, {}), (True, {}), (False, {"temperature": 0.9, "seed": 7})):
        text, finish = chat(client, PROMPTS[name], stream=stream, response_format=schema_format(name),
                            max_tokens=480, **sampling)
        assert finish == "stop", (name, stream, text)
        jsonschema.validate(json.loads(text), SCHEMAS[name])


# Models as pydantic writes their schemas (what an Agents SDK output_type
# sends): integer bounds (conint), dates, times and UUIDs (format), a tuple
# (prefixItems), nested models through $ref. Each reply must load into the
# model itself, which checks what jsonschema leaves to format checkers.
class Guest(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=30)
    age: pydantic.conint(ge=0, le=120)


class Booking(pydantic.BaseModel):
    id: uuid.UUID
    code: str = pydantic.Field(pattern=r"^[A-Z]{3}-\d{4}(/[a-z]+)?$")
    day: datetime.date
    nights: pydantic.conint(ge=1, le=14)
    room: Tuple[int, Annotated[str, pydantic.StringConstraints(max_length=12)]]
    guests: List[Guest] = pydantic.Field(min_length=1, max_length=2)
    note: Optional[str] = pydantic.Field(default=None, max_length=40)


class Meeting(pydantic.BaseModel):
    starts: datetime.datetime
    ends_by: datetime.time
    priority: pydantic.conint(gt=-3, lt=3)
    attendees: pydantic.conint(ge=2)


@pytest.mark.parametrize("model,prompt", [(Booking, "Book a hotel room for two guests."),
                                          (Meeting, "Plan a team meeting.")])
def test_pydantic_models_hold(qwen, model, prompt):
    schema = model.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": model.__name__, "schema": schema, "strict": True}}
    for stream, sampling in ((False, {}), (True, {"temperature": 0.9, "seed": 11})):
        text, finish = chat(qwen.client(), prompt, stream=stream, response_format=fmt, max_tokens=400, **sampling)
        assert finish == "stop", text
        jsonschema.validate(json.loads(text), schema)
        model.model_validate_json(text)


def test_properties_come_in_the_schema_order(qwen):
    text, _ = chat(qwen.client(), PROMPTS["person"], response_format=schema_format("person"))
    assert list(json.loads(text)) == ["name", "age", "address", "hobbies"]


def test_json_object_replies_are_objects(qwen):
    text, finish = chat(qwen.client(), "Say hello in JSON.", response_format={"type": "json_object"})
    assert finish == "stop" and isinstance(json.loads(text), dict)


def test_gbnf_grammar_holds_a_completion(qwen):
    client = qwen.client()
    grammar = r'''root ::= " " answer "."
answer ::= ("yes" | "no") (", " [a-z]{1,12}){0,2}'''
    for seed in range(3):
        out = client.completions.create(model="default", prompt="Is the sky blue? Answer:", max_tokens=40,
                                        temperature=1.0, seed=seed, extra_body={"grammar": grammar})
        assert re.fullmatch(r" (yes|no)(, [a-z]{1,12}){0,2}\.", out.choices[0].text), out.choices[0].text
        assert out.choices[0].finish_reason == "stop"


def tool_schema(name):
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_calls_are_valid_calls(qwen, stream):
    client = qwen.client()
    names = [t["function"]["name"] for t in TOOLS]
    cases = [("required", None, "What is the weather in Paris?"),
             ({"type": "function", "function": {"name": names[-1]}}, names[-1], "Hello there!")]
    for choice, want, question in cases:
        out = client.chat.completions.create(model="default", messages=[{"role": "user", "content": question}],
                                             tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=160,
                                             stream=stream)
        calls = {}
        if stream:
            finish = None
            for chunk in out:
                for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    c = calls.setdefault(d.index, {"name": "", "arguments": ""})
                    c["name"] += d.function.name or ""
                    c["arguments"] += d.function.arguments or ""
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
            calls = list(calls.values())
        else:
            finish = out.choices[0].finish_reason
            calls = [{"name": c.function.name, "arguments": c.function.arguments}
                     for c in out.choices[0].message.tool_calls or []]
        assert finish == "tool_calls" and calls, (choice, finish)
        for c in calls:
            assert c["name"] in names and (want is None or c["name"] == want), c
            jsonschema.validate(json.loads(c["arguments"]), tool_schema(c["name"]))


def test_tools_with_a_response_schema_give_a_call_or_a_valid_reply(qwen):
    client = qwen.client()
    out = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS,
        response_format=schema_format("matrix"), temperature=0, max_tokens=160)
    msg = out.choices[0].message
    if msg.tool_calls:
        for c in msg.tool_calls:
            jsonschema.validate(json.loads(c.function.arguments), tool_schema(c.function.name))
    else:
        jsonschema.validate(json.loads(msg.content), SCHEMAS["matrix"])


def test_what_cannot_be_held_is_refused_by_name(qwen):
    msg = [{"role": "user", "content": "hi"}]
    bad = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"id": {"type": "string", "pattern": "^(?=.*[0-9]).+$"}}}}}},
         "response_format", "'pattern'"),
        ({"response_format": {"type": "xml"}}, "response_format.type", "xml"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "json_schema"),
        ({"grammar": "root ::= foo"}, "grammar", "'foo' is used but never defined"),
        ({"grammar": "root ::= root \"a\""}, "grammar", "left-recursive"),
        ({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, "grammar", "only one"),
        ({"grammar": "root ::= \"a\"", "tools": TOOLS}, "grammar", "tools"),
        ({"tool_choice": "required"}, "tool_choice", "no tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"n": {"type": "number", "minimum": 1}}}}}], "tool_choice": "required"},
         "tool_choice", "'minimum'"),
    ]
    for body, param, words in bad:
        status, out = qwen.post_json("/v1/chat/completions", {"messages": msg, **body})
        assert status == 400 and out["error"]["param"] == param and words in out["error"]["message"], (body, out)
    text, _ = chat(qwen.client(), "Say hello in JSON.", response_format={"type": "json_object"}, max_tokens=32)
    assert text.startswith("{")


def test_constrained_reply_across_workers_is_the_local_text(shoal_bin, smollm2, workers, tmp_path):
    def reply(server):
        text, _ = chat(server.client(), PROMPTS["order"], response_format=schema_format("order"), max_tokens=120)
        return text
    s = Server(shoal_bin, smollm2, tmp_path)
    try:
        local = reply(s)
    finally:
        s.stop()
    w1, w2 = workers(2)
    s = Server(shoal_bin, smollm2, tmp_path, "--rpc", f"{w1.address},{w2.address}")
    try:
        split = reply(s)
    finally:
        s.stop()
    assert split == local
    assert local.startswith("{")
