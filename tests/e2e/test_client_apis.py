"""The clients people point at a server in 2026, with their own SDKs from
PyPI, against `shoal serve` on Qwen2.5-Coder-0.5B: Anthropic's Messages
(`anthropic`: plain, streamed, a tool_use / tool_result round trip,
count_tokens), OpenAI's Responses (`openai` responses.create: plain,
streamed, a function call round trip, text.format json_schema), the OpenAI
Agents SDK with its default Responses model class, and llama-server's
/infill as llama.vscode sends it. Every scenario runs twice: on one machine,
and over a cluster of two workers, where each answer must be the local one
(greedy decoding, and the same bits for any split). Bad input to each new
route is a 400 in that API's own error shape."""
import json

import jsonschema
import pytest
from pydantic import BaseModel

from conftest import ROOT, Worker, fetch
from server_fixtures import Server
from test_agents_sdk import check_weather, run_weather_agent

TOOLS = json.loads((ROOT / "tests" / "data" / "chat-templates" / "tools.json").read_text())
WEATHER = {"temperature": 18, "sky": "clear"}


@pytest.fixture(scope="module")
def servers(shoal_bin, tmp_path_factory):
    """{"local": one machine, "cluster": the primary over two workers}."""
    tmp = tmp_path_factory.mktemp("client-apis")
    model = fetch("qwen2.5-coder-0.5b")
    workers = [Worker(shoal_bin, tmp) for _ in range(2)]
    started = []
    try:
        # Greedy by default: the 2026 anthropic SDK no longer sends temperature.
        started.append(Server(shoal_bin, model, tmp, "--temp", "0"))
        started.append(Server(shoal_bin, model, tmp, "--temp", "0", "--rpc", ",".join(w.address for w in workers),
                              threads=1, ready_timeout=300))
        _, view = started[1].get_json("/v1/cluster")
        remote = [d for d in view["devices"] if d["remote"] and d["layer_end"] > d["layer_begin"]]
        assert len(remote) == 2, view["devices"]  # both workers hold layers
        yield {"local": started[0], "cluster": started[1]}
    finally:
        for s in started:
            s.stop()
        for w in workers:
            w.stop()


def both(servers, scenario):
    """Runs scenario(server) locally and over the cluster; the two must agree."""
    local = scenario(servers["local"])
    assert scenario(servers["cluster"]) == local
    return local


def anthropic_client(server, **kw):
    import anthropic
    return anthropic.Anthropic(base_url=server.base, api_key="unused", max_retries=0, timeout=300, **kw)


# --- Anthropic Messages ------------------------------------------------------

def test_anthropic_message_plain_and_streamed(servers):
    def scenario(server):
        client = anthropic_client(server)
        ask = dict(model="claude-sonnet-4-5", max_tokens=48,
                   system="You answer in one short sentence.",
                   messages=[{"role": "user", "content": "What is the capital of France?"}])
        whole = client.messages.create(**ask)
        assert whole.type == "message" and whole.role == "assistant" and whole.id.startswith("msg_")
        assert whole.model == "claude-sonnet-4-5"  # the name sent, echoed
        assert whole.stop_reason == "end_turn" and whole.stop_sequence is None
        [block] = whole.content
        assert block.type == "text" and "Paris" in block.text
        assert whole.usage.output_tokens > 0
        assert whole.usage.input_tokens + whole.usage.cache_read_input_tokens > 10

        events = []
        with client.messages.stream(**ask) as stream:
            for event in stream:
                events.append(event.type)
            streamed = stream.get_final_message()
        assert streamed.content[0].text == block.text and streamed.stop_reason == "end_turn"
        assert streamed.usage.output_tokens == whole.usage.output_tokens
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert events[1] == "content_block_start" and "content_block_stop" in events and "message_delta" in events
        return block.text

    both(servers, scenario)


def test_anthropic_stop_sequence_and_max_tokens(servers):
    def scenario(server):
        client = anthropic_client(server)
        count = [{"role": "user", "content": "Count from 1 to 10, one number a line."}]
        # This coder model answers with a loop; the stop sequence cuts it before its print.
        stopped = client.messages.create(model="x", max_tokens=64, messages=count,
                                         stop_sequences=["never written", "print("])
        assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "print("
        assert "range(1, 11)" in stopped.content[0].text and "print(" not in stopped.content[0].text
        cut = client.messages.create(model="x", max_tokens=3, messages=count)
        assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
        return stopped.content[0].text, cut.content[0].text

    both(servers, scenario)


def anthropic_tools():
    return [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "input_schema": t["function"]["parameters"]} for t in TOOLS]


def test_anthropic_tool_use_round_trip(servers):
    def scenario(server):
        client = anthropic_client(server)
        question = [{"role": "user", "content": "What is the weather in Paris?"}]
        call = client.messages.create(model="x", max_tokens=96, tools=anthropic_tools(),
                                      tool_choice={"type": "any"}, messages=question)
        assert call.stop_reason == "tool_use"
        [use] = [b for b in call.content if b.type == "tool_use"]
        assert use.name == "get_weather" and use.input["city"] == "Paris" and use.id

        # Streamed, the call arrives as input_json_delta pieces the SDK assembles.
        with client.messages.stream(model="x", max_tokens=96, tools=anthropic_tools(),
                                    tool_choice={"type": "any"}, messages=question) as stream:
            deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
            streamed = stream.get_final_message()
        assert "input_json_delta" in deltas
        [streamed_use] = [b for b in streamed.content if b.type == "tool_use"]
        assert streamed_use.input == use.input and streamed.stop_reason == "tool_use"

        history = question + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in call.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "content": json.dumps(WEATHER)}]}]
        final = client.messages.create(model="x", max_tokens=96, tools=anthropic_tools(),
                                       tool_choice={"type": "none"}, messages=history)
        assert final.stop_reason == "end_turn"
        assert not [b for b in final.content if b.type == "tool_use"]
        assert "18" in final.content[0].text
        return use.input, final.content[0].text

    both(servers, scenario)


def test_anthropic_count_tokens_is_the_prompt(servers):
    server = servers["local"]
    client = anthropic_client(server)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    counted = client.messages.count_tokens(model="x", system="Be brief.", messages=messages).input_tokens
    # The prompt the chat template writes for the same turns, tokenized.
    _, rendered = server.post_json("/apply-template", {"messages": [{"role": "system", "content": "Be brief."}]
                                                       + messages})
    _, tokens = server.post_json("/tokenize", {"content": rendered["prompt"], "add_special": True})
    assert counted == len(tokens["tokens"])
    with_tools = client.messages.count_tokens(model="x", messages=messages, tools=anthropic_tools()).input_tokens
    assert with_tools > counted  # the tools are part of the prompt
    # A generation's usage counts the same prompt.
    reply = client.messages.create(model="x", max_tokens=1, system="Be brief.", messages=messages)
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == counted


@pytest.mark.parametrize("body, field", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"max_tokens": 8, "messages": []}, "messages"),
    ({"max_tokens": 8, "messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages.0.content.0.type"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                                  "input": {}}]}]}, "messages.0.content.0.type"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "temperature": 1.5}, "temperature"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "web_search_20250305",
                                                                                   "name": "web_search"}]},
     "tools.0.type"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "any"}},
     "tool_choice"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "mystery": 1}, "mystery"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "stop_sequences": ["x"] * 17},
     "stop_sequences"),
])
def test_anthropic_bad_requests_get_anthropic_errors(servers, body, field):
    status, err = servers["local"].post_json("/v1/messages", body)
    assert status == 400, err
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert field in err["error"]["message"]


def test_anthropic_sdk_raises_on_bad_json_and_unknown_model_route(servers):
    import anthropic
    server = servers["local"]
    status, _, data = server.request("POST", "/v1/messages", b'{"max_tokens": 8, "messages": [')
    err = json.loads(data)
    assert status == 400 and err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client(server).messages.create(model="x", max_tokens=0,
                                                 messages=[{"role": "user", "content": "hi"}])
    assert "max_tokens" in str(e.value)


def test_thinking_goes_to_thinking_blocks_and_reasoning_items(shoal_bin, tmp_path):
    """A thinking template (QwQ's opens <think> in the prompt itself): the
    reasoning chat gives as reasoning_content is Anthropic's thinking block
    and the Responses reasoning item, whole and streamed."""
    template = ROOT / "tests" / "data" / "chat-templates" / "Qwen-QwQ-32B.jinja"
    question = [{"role": "user", "content": "What is 2+2?"}]
    with Server(shoal_bin, fetch("qwen2.5-coder-0.5b"), tmp_path, "--temp", "0", "--chat-template-file",
                template) as server:
        chat = server.client().chat.completions.create(model="x", messages=question, max_tokens=40).choices[0]
        reasoning = chat.message.model_extra["reasoning_content"]
        assert reasoning and "</think>" not in reasoning + (chat.message.content or "")

        client = anthropic_client(server)
        whole = client.messages.create(model="x", max_tokens=40, messages=question,
                                       thinking={"type": "enabled", "budget_tokens": 1024})
        assert whole.content[0].type == "thinking" and whole.content[0].thinking == reasoning
        with client.messages.stream(model="x", max_tokens=40, messages=question) as stream:
            deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
            streamed = stream.get_final_message()
        assert "thinking_delta" in deltas and streamed.content[0].thinking == reasoning

        responses = server.client().responses.create(model="x", input=question, max_output_tokens=40,
                                                     reasoning={"effort": "medium"})
        [item] = [i for i in responses.output if i.type == "reasoning"]
        assert item.content[0].text == reasoning
        text = "".join(e.delta for e in server.client().responses.create(
            model="x", input=question, max_output_tokens=40, stream=True)
            if e.type == "response.reasoning_text.delta")
        assert text == reasoning


# --- OpenAI Responses ----------------------------------------------------------

def test_responses_plain_and_streamed(servers):
    def scenario(server):
        client = server.client()
        ask = dict(model="gpt-4o-mini", instructions="You answer in one short sentence.",
                   input="What is the capital of France?", temperature=0, max_output_tokens=48)
        whole = client.responses.create(**ask)
        assert whole.id.startswith("resp_") and whole.status == "completed" and whole.model == "gpt-4o-mini"
        assert "Paris" in whole.output_text
        assert whole.usage.output_tokens > 0 and whole.usage.total_tokens > whole.usage.output_tokens
        assert whole.instructions == ask["instructions"] and whole.max_output_tokens == 48

        types, text = [], ""
        for event in client.responses.create(**ask, stream=True):
            types.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
            if event.type == "response.completed":
                completed = event.response
        assert text == whole.output_text == completed.output_text
        assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
        assert types.index("response.output_item.added") < types.index("response.output_text.delta")
        assert "response.output_text.done" in types and "response.output_item.done" in types

        cut = client.responses.create(model="x", input="Count from 1 to 10.", temperature=0, max_output_tokens=3)
        assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
        return whole.output_text, cut.output_text

    both(servers, scenario)


def responses_tools():
    return [{"type": "function", "name": t["function"]["name"], "description": t["function"].get("description", ""),
             "parameters": t["function"]["parameters"]} for t in TOOLS]


def test_responses_function_call_round_trip(servers):
    def scenario(server):
        client = server.client()
        question = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = client.responses.create(model="x", input=question, tools=responses_tools(), tool_choice="required",
                                        temperature=0, max_output_tokens=96)
        [call] = [item for item in first.output if item.type == "function_call"]
        assert call.name == "get_weather" and json.loads(call.arguments)["city"] == "Paris"
        assert call.call_id and call.id.startswith("fc_")

        arguments = ""
        for event in client.responses.create(model="x", input=question, tools=responses_tools(),
                                             tool_choice="required", temperature=0, max_output_tokens=96,
                                             stream=True):
            if event.type == "response.function_call_arguments.delta":
                arguments += event.delta
            if event.type == "response.function_call_arguments.done":
                assert event.arguments == arguments
        assert json.loads(arguments) == json.loads(call.arguments)

        # The SDK's items go back as they came, with the function's output.
        history = question + [call.model_dump(exclude_none=True),
                              {"type": "function_call_output", "call_id": call.call_id,
                               "output": json.dumps(WEATHER)}]
        final = client.responses.create(model="x", input=history, tools=responses_tools(), tool_choice="none",
                                        temperature=0, max_output_tokens=96)
        assert not [item for item in final.output if item.type == "function_call"]
        assert "18" in final.output_text
        return call.arguments, final.output_text

    both(servers, scenario)


class Person(BaseModel):
    name: str
    age: int


def test_responses_text_format_json_schema_is_held(servers):
    schema = Person.model_json_schema()

    def scenario(server):
        out = server.client().responses.create(
            model="x", input="Make up a person with a name and an age.", temperature=0, max_output_tokens=64,
            text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
        value = json.loads(out.output_text)
        jsonschema.validate(value, schema)
        assert out.text.format.type == "json_schema"
        return out.output_text

    both(servers, scenario)


@pytest.mark.parametrize("body, param, code", [
    ({}, "input", "missing_required_parameter"),
    ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id", "unsupported_parameter"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation", "unsupported_parameter"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type", "unsupported_parameter"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_parameter"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type", "unsupported_parameter"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object",
                                                                                    "not": {}}}}},
     "text.format", None),
    ({"input": "hi", "mystery": 1}, "mystery", "unknown_parameter"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", "missing_required_parameter"),
])
def test_responses_bad_requests_get_openai_errors(servers, body, param, code):
    status, err = servers["local"].post_json("/v1/responses", body)
    assert status == 400, err
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param
    if code:
        assert err["error"]["code"] == code


# --- the OpenAI Agents SDK, through its default Responses model -----------------

def test_agents_sdk_default_responses_model(servers):
    def scenario(server):
        calls, output = run_weather_agent(server.base, responses=True)
        check_weather(calls, output)
        return output.model_dump()

    both(servers, scenario)


# --- llama-server's /infill ----------------------------------------------------

PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    return "
SUFFIX = "\n\n\nprint(fibonacci(10))\n"
EXTRA = [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n", "time": 1700000000}]


def vscode_infill(prefix=PREFIX, suffix=SUFFIX, extra=EXTRA, **kw):
    """The request llama.vscode / llama.vim send for a completion at the cursor."""
    return {"input_prefix": prefix, "input_suffix": suffix, "input_extra": extra, "prompt": "", "n_predict": 32,
            "n_indent": 4, "top_k": 40, "top_p": 0.99, "temperature": 0, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 60000,
            "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"],
            **kw}


def test_infill_completes_the_middle_of_a_function(servers):
    def scenario(server):
        status, out = server.post_json("/infill", vscode_infill(), timeout=300)
        assert status == 200, out
        assert set(out) == {"content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"}
        assert out["content"].startswith("fibonacci(n - 1) + fibonacci(n - 2)")
        # n_indent 4: the first line that is not indented (the suffix's print) is not written.
        assert "print" not in out["content"]
        return out["content"]

    both(servers, scenario)


def test_infill_prompt_is_llama_servers_layout(servers):
    """The same tokens given to /completion by hand, in llama-server's
    repository-level layout, read the same and answer the same."""
    server = servers["local"]

    def tokens(text):
        _, out = server.post_json("/tokenize", {"content": text, "add_special": False, "with_pieces": True})
        return [t["id"] for t in out["tokens"]]

    special = {name: tokens(name)[0] for name in
               ("<|repo_name|>", "<|file_sep|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")}
    by_hand = ([special["<|repo_name|>"]] + tokens("myproject\n")
               + [special["<|file_sep|>"]] + tokens("util.py\n") + tokens(EXTRA[0]["text"])
               + [special["<|file_sep|>"]] + tokens("filename\n")
               + [special["<|fim_prefix|>"]] + tokens(PREFIX) + [special["<|fim_suffix|>"]] + tokens(SUFFIX)
               + [special["<|fim_middle|>"]])
    _, infill = server.post_json("/infill", vscode_infill(response_fields=[]), timeout=300)
    _, direct = server.post_json("/completion", {"prompt": by_hand, "n_predict": 32, "n_indent": 4,
                                                 "temperature": 0}, timeout=300)
    assert infill["tokens_evaluated"] == direct["tokens_evaluated"] == len(by_hand)
    assert infill["content"] == direct["content"] and infill["stop_type"] == "limit"


def test_infill_streams_in_llama_servers_pieces(servers):
    server = servers["local"]
    status, _, data = server.request("POST", "/infill", vscode_infill(stream=True, response_fields=[]), timeout=300)
    assert status == 200
    events = [json.loads(line[6:]) for line in data.decode().splitlines() if line.startswith("data: ")]
    assert all(not e["stop"] for e in events[:-1]) and events[-1]["stop"]
    assert "".join(e["content"] for e in events).startswith("fibonacci(n - 1) + fibonacci(n - 2)")


@pytest.mark.parametrize("body, param", [
    ({"input_suffix": ""}, "input_prefix"),
    ({"input_prefix": 3, "input_suffix": ""}, "input_prefix"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": {"text": "x"}}, "input_extra"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a.py"}]}, "input_extra[0].text"),
    ({"input_prefix": "", "input_suffix": "", "samplers": ["top_k", "telepathy"]}, "samplers"),
    ({"input_prefix": "", "input_suffix": "", "n_indent": -1}, "n_indent"),
])
def test_infill_bad_requests(servers, body, param):
    status, err = servers["local"].post_json("/infill", body)
    assert status == 400 and err["error"]["param"] == param, err


def test_infill_on_a_model_without_fim_tokens_is_a_clear_400(shoal_bin, smollm2, tmp_path):
    with Server(shoal_bin, smollm2, tmp_path) as server:
        status, err = server.post_json("/infill", vscode_infill())
    assert status == 400 and err["error"]["code"] == "infill_not_supported"
    assert "no fill-in-the-middle token" in err["error"]["message"]


def test_anthropic_clients_send_their_key_as_x_api_key(shoal_bin, smollm2, tmp_path):
    import anthropic
    key_file = tmp_path / "api.key"
    key_file.write_text("sk-test-0123456789\n")
    with Server(shoal_bin, smollm2, tmp_path, "--api-key-file", key_file) as server:
        messages = [{"role": "user", "content": "hi"}]
        good = anthropic.Anthropic(base_url=server.base, api_key="sk-test-0123456789", max_retries=0)
        assert good.messages.count_tokens(model="x", messages=messages).input_tokens > 0
        with pytest.raises(anthropic.AuthenticationError) as e:
            anthropic.Anthropic(base_url=server.base, api_key="nope", max_retries=0).messages.create(
                model="x", max_tokens=4, messages=messages)
        assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
        # No key at all: the same 401 in Anthropic's shape.
        status, _, data = server.request("POST", "/v1/messages", {"max_tokens": 4, "messages": messages})
        assert status == 401 and json.loads(data)["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"])
def test_rerank_on_a_model_without_a_ranking_head_is_refused_by_name(servers, path):
    # Reranking itself: test_embeddings.py::test_rerank_scores_are_llama_cpps.
    status, err = servers["local"].post_json(path, {"query": "q", "documents": ["a", "b"]})
    assert status == 400 and err["error"]["code"] == "reranking_not_supported", err
    assert "ranking head" in err["error"]["message"]


def test_an_oversized_messages_body_is_refused_in_anthropics_shape(servers):
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    status, _, data = servers["local"].request("POST", "/v1/messages", body)
    err = json.loads(data)
    assert status == 413 and err["type"] == "error" and err["error"]["type"] == "request_too_large"


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/infill"])
@pytest.mark.parametrize("body", [b"[" * 100_000, b"[1, 2]", b'{"a": 1e400}', b"\xff\xfe{"])
def test_hostile_bodies_to_the_new_routes_are_400s_in_their_shape(servers, path, body):
    server = servers["local"]
    status, _, data = server.request("POST", path, body)
    err = json.loads(data)
    assert status == 400, err
    if path.startswith("/v1/messages"):
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    else:
        assert err["error"]["type"] == "invalid_request_error"
    assert server.alive()
