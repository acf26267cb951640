"""A whole tool-call round trip through the official openai client with
Qwen2.5-Coder-0.5B: tools offered → tool_calls whose arguments are valid
JSON for the declared parameters → the tool's result sent back as a `tool`
message → a final answer; streamed (argument deltas) and not. The parser's
families on their own texts."""
import json

from conftest import ROOT

TOOLS = json.loads((ROOT / "tests" / "data" / "chat-templates" / "tools.json").read_text())
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def ask(client, messages, **kw):
    return client.chat.completions.create(model="default", messages=messages, tools=TOOLS, temperature=0,
                                          max_tokens=96, **kw)


def test_tool_call_round_trip(qwen):
    client = qwen.client()
    out = ask(client, QUESTION)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert args["city"] == "Paris" and set(args) <= {"city", "unit"}
    assert args.get("unit", "celsius") in ("celsius", "fahrenheit")

    # The result goes back as a tool message, rendered by the model's template.
    history = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})}]
    status, body = qwen.post_json("/apply-template", {"messages": history, "tools": TOOLS})
    assert "<tool_response>" in body["prompt"] and '"temperature": 18' in body["prompt"]
    # Offered the tools again, this 0.5B model calls them again (parsed as
    # calls: it writes one JSON object a line); "none" asks for the answer,
    # as agent loops do to end a turn.
    again = ask(client, history)
    assert again.choices[0].finish_reason in ("tool_calls", "length"), again
    final = ask(client, history, tool_choice="none")
    assert final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls
    assert "18" in final.choices[0].message.content


def test_streamed_tool_call_arrives_in_argument_deltas(qwen):
    client = qwen.client()
    whole = ask(client, QUESTION).choices[0].message.tool_calls[0]
    calls, finish, content = {}, None, ""
    n_deltas = 0
    for chunk in ask(client, QUESTION, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            n_deltas += 1
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            c["name"] += tc.function.name or ""
            c["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert list(calls) == [0] and n_deltas > 2
    assert calls[0]["name"] == whole.function.name
    assert json.loads(calls[0]["arguments"]) == json.loads(whole.function.arguments)


def test_without_tools_or_with_tool_choice_none_nothing_is_a_call(qwen):
    client = qwen.client()
    out = client.chat.completions.create(model="default", messages=QUESTION, temperature=0, max_tokens=24)
    assert out.choices[0].message.tool_calls is None and out.choices[0].finish_reason in ("stop", "length")
    out = ask(client, QUESTION, tool_choice="none")
    assert out.choices[0].message.tool_calls is None


def test_bad_tool_requests_are_refused_by_name(qwen):
    for body, param in (({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
                        ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
                        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
                        ({"tool_choice": "required"}, "tool_choice"),
                        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
                         "tool_choice"),
                        ({"tools": "get_weather"}, "tools")):
        status, out = qwen.post_json("/v1/chat/completions", {"messages": QUESTION, **body})
        assert status == 400 and out["error"]["param"] == param, (body, out)
