"""What an adversarial pass found at the inputs a model file or a request
controls, each reproduction as a test: a chat template that crashed the
process or walked around its time and memory limits (through `shoal
template`, `shoal serve --chat-template-file` and a GGUF carrying it), a
grammar that pinned a thread and one that stalled the batch, parameters
answered 200 and ignored, /tokenize keeping gigabytes, a worker allocating
what a frame header declares and resetting away its ERROR frame, and a
cluster file that crashed `shoal plan`. Each gets a clean error within the
limits (templates: 5 s, 32 MiB of values and 16 MiB of output), and what
serves goes on serving. Flags out of range: tests/e2e/test_broken_input.py.

Bounded: each test starts at most one server or worker and sends a fixed
number of requests."""
import json
import os
import secrets
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, Worker, run_shoal
from server_fixtures import Server
from shoal_wire import ERROR, FORWARD, HELLO, VERSION, Peer, header

sys.path.insert(0, str(ROOT / "tests" / "models"))
from gguf_files import with_chat_template  # noqa: E402

# Runs alone, not beside other tests (a request's time beside a costly grammar, and CPU left idle,
# measured): scripts/test runs the serial tests after the others, which go two at a time.
pytestmark = pytest.mark.serial

MESSAGES = [{"role": "user", "content": "Hi"}]


def rss_mib(pid):
    """Resident memory of a process now, MiB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_measured(argv, timeout=60):
    """(returncode, stdout, stderr, seconds, peak RSS in MiB) of one process.
    The peak is GNU time's: a child's own ru_maxrss counts the Python process
    it was forked from until it execs."""
    start = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-f", "peak-rss-kib %M", *map(str, argv)], capture_output=True, text=True,
                       timeout=timeout)
    seconds = time.monotonic() - start
    err, _, last = r.stderr.rstrip("\n").rpartition("\n")
    assert last.startswith("peak-rss-kib "), r.stderr[-300:]
    return r.returncode, r.stdout, err, seconds, int(last.split()[1]) / 1024


# --- templates -------------------------------------------------------------

# Shapes that an adversarial pass found (issue 54), scaled as it ran them.
CHAINS = {
    "10,000 additions": "{{ " + "+".join(["1"] * 10000) + " }}",
    "20,000 string filters": "{{ 1" + "|string" * 20000 + " }}",
    "20,000 attributes": "{{ messages" + ".x" * 20000 + " }}",
    "20,000 concatenations": "{{ " + "~".join(["'a'"] * 20000) + " }}",
    "20,000 ands": "{{ " + " and ".join(["1"] * 20000) + " }}",
}
# Stopped while rendering, by the clock or the memory limit.
RENDERED = {
    "a list repeated in a loop of 60": "{% for i in range(60) %}{% set l = [0] * 4000000 %}{% endfor %}",
    "a list repeated in a loop of 1000": "{% for i in range(1000) %}{% set l = [0] * 4000000 %}{% endfor %}",
    "a megabyte string repeated 3000 times and printed":
        '{% set s = "x" * 1000000 %}{% set l = [s] * 3000 %}{{ l }}',
    "a megabyte string joined 20000 times": '{% set s = "x" * 1000000 %}{{ ([s] * 20000) | join }}',
    "statements nested in recursive macros":
        "{% macro f(n) %}" + "{% for i in [1] %}" * 150 + "{{ f(n + 1) }}" + "{% endfor %}" * 150
        + "{% endmacro %}{{ f(0) }}",
    "a million lines indented by a million": '{{ ("a\\n" * 1000000) | indent(1000000) }}',
}
# Shared, not copied: a list that repeats one string costs its slots only.
SHARED = '{% set s = "x" * 1000000 %}{% set l = [s] * 20000 %}{{ l | length }}'


def shoal_template(shoal_bin, tmp_path, template=None, model=None):
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(MESSAGES))
    argv = [shoal_bin, "template", "--messages", messages]
    if template is not None:
        path = tmp_path / "t.jinja"
        path.write_text(template)
        argv += ["--chat-template-file", path]
    if model:
        argv += ["-m", model]
    return run_measured(argv)


@pytest.fixture(scope="module")
def template_baseline(shoal_bin, tmp_path_factory):
    """Peak RSS of `shoal template` on a trivial template, MiB."""
    rc, _, err, _, peak = shoal_template(shoal_bin, tmp_path_factory.mktemp("baseline"), "{{ messages[0].content }}")
    assert rc == 0, err
    return peak


def assert_bounded(rc, err, seconds, what):
    assert rc == 1, (what, err[-300:])
    assert "template" in err and "Segmentation" not in err, (what, err[-300:])
    assert seconds < 10, (what, seconds)  # the 5 s limit, and a process start


@pytest.mark.parametrize("kind", sorted(CHAINS))
def test_a_long_chain_is_refused_not_a_crash(shoal_bin, tmp_path, kind):
    rc, out, err, seconds, _ = shoal_template(shoal_bin, tmp_path, CHAINS[kind])
    assert_bounded(rc, err, seconds, kind)
    assert "chained deeper than" in err, err


@pytest.mark.parametrize("kind", sorted(RENDERED))
def test_a_template_stops_within_its_time_and_memory(shoal_bin, tmp_path, template_baseline, kind):
    rc, out, err, seconds, peak = shoal_template(shoal_bin, tmp_path, RENDERED[kind])
    assert_bounded(rc, err, seconds, kind)
    assert "template line 1" in err, err
    print(f"\n{kind}: {seconds:.2f} s, peak RSS {peak:.0f} MiB (a trivial template: {template_baseline:.0f} MiB): "
          f"{err.strip()[-80:]}")
    assert peak < template_baseline + 64, (kind, peak)


def test_a_repeated_string_is_shared_not_copied(shoal_bin, tmp_path, template_baseline):
    rc, out, err, seconds, peak = shoal_template(shoal_bin, tmp_path, SHARED)
    assert rc == 0 and out == "20000", err
    assert peak < template_baseline + 64


@pytest.mark.parametrize("kind", sorted(CHAINS) + sorted(RENDERED))
def test_a_gguf_carrying_a_hostile_template_is_stopped(shoal_bin, test_data, tmp_path, template_baseline, kind):
    """The same shapes in a model file's tokenizer.chat_template."""
    template = CHAINS.get(kind) or RENDERED[kind]
    model = with_chat_template(test_data / "models/stories260K.gguf", tmp_path / "hostile.gguf", template)
    rc, _, err, seconds, peak = shoal_template(shoal_bin, tmp_path, model=model)
    assert_bounded(rc, err, seconds, kind)
    assert peak < template_baseline + 64, (kind, peak)


def test_serve_with_a_hostile_gguf_template_answers_400_and_serves_on(shoal_bin, test_data, tmp_path):
    """`shoal serve` on such a file: one that does not parse (and whose
    family has no built-in format) refuses chat with a 400 and the way out,
    the parse error in its log; one that runs each shape on demand answers each with a 400 within
    the limits; completions and the next chat are served."""
    chain = with_chat_template(test_data / "models/stories260K.gguf", tmp_path / "chain.gguf",
                               CHAINS["10,000 additions"])
    with Server(shoal_bin, chain, tmp_path) as s:
        status, body = s.post_json("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2}, timeout=60)
        assert status == 400 and "--chat-template" in body["error"]["message"], body
        assert s.post_json("/v1/completions", {"prompt": "Once", "max_tokens": 2})[0] == 200
        assert "chained deeper than" in s.stderr()  # the parse error, named in the log at load
    dispatch = with_chat_template(test_data / "models/stories260K.gguf", tmp_path / "dispatch.gguf",
                                  dispatching_template())
    with Server(shoal_bin, dispatch, tmp_path) as s:
        each_shape_is_a_400_and_the_server_serves_on(s)


def dispatching_template():
    """ChatML, but a user message that names a hostile shape runs it."""
    branches = "".join(f"{{% {'if' if i == 0 else 'elif'} m.content == {json.dumps(k)} %}}{v}"
                       for i, (k, v) in enumerate(RENDERED.items()))
    return ("{% for m in messages %}" + branches + "{% endif %}"
            "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_serve_with_a_hostile_template_file_answers_400_and_serves_on(shoal_bin, smollm2, tmp_path):
    # A template that cannot be parsed: the server says so and exits cleanly.
    chain = tmp_path / "chain.jinja"
    chain.write_text(CHAINS["20,000 string filters"])
    r = run_shoal(shoal_bin, "serve", "-m", smollm2, "--port", "0", "--chat-template-file", chain, timeout=60)
    assert r.returncode == 1 and "chained deeper than" in r.stderr, r.stderr[-500:]
    # One that runs each shape on demand.
    template = tmp_path / "dispatch.jinja"
    template.write_text(dispatching_template())
    with Server(shoal_bin, smollm2, tmp_path, "--chat-template-file", template) as s:
        each_shape_is_a_400_and_the_server_serves_on(s)


def each_shape_is_a_400_and_the_server_serves_on(s):
    """Each shape a 400 naming the line, within the limits; the server's
    memory stays near where it was; then a chat is answered."""
    assert s.post_json("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2})[0] == 200
    before = rss_mib(s.proc.pid)
    for kind in RENDERED:
        start = time.monotonic()
        status, body = s.post_json("/v1/chat/completions", timeout=60,
                                   body={"messages": [{"role": "user", "content": kind}], "max_tokens": 2})
        assert status == 400 and "template line 1" in body["error"]["message"], (kind, body)
        assert time.monotonic() - start < 8, kind
        assert rss_mib(s.proc.pid) < before + 128, (kind, rss_mib(s.proc.pid), before)
    status, body = s.post_json("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2, "temperature": 0})
    assert status == 200 and body["choices"][0]["message"]["content"] is not None, body
    assert s.get_json("/health")[1]["status"] == "ok"


# --- grammars --------------------------------------------------------------

def doubled_chain(levels, repeated=False):
    """r{i} ::= r{i+1} | r{i+1}: each rule its successor twice over."""
    rules = ["root ::= r0*" if repeated else "root ::= r0"]
    rules += [f"r{i} ::= r{i + 1} | r{i + 1}" for i in range(levels)]
    return "\n".join(rules + [f'r{levels} ::= "x"']) + "\n"


def branching_chain(levels):
    """Each path leaves its own letter behind: 2^levels distinct readings."""
    rules = ["root ::= r0"] + [f'r{i} ::= r{i + 1} "a" | r{i + 1} "b"' for i in range(levels)]
    return "\n".join(rules + [f'r{levels} ::= "x"']) + "\n"


@pytest.fixture(scope="module")
def smol_server(shoal_bin, smollm2, tmp_path_factory):
    s = Server(shoal_bin, smollm2, tmp_path_factory.mktemp("smol"), "--parallel", "4")
    yield s
    s.stop()


def test_the_872_byte_grammar_answers_and_leaves_no_thread_spinning(smol_server):
    s = smol_server
    grammar = doubled_chain(40)
    assert len(grammar) < 900
    start = time.monotonic()
    status, body = s.post_json("/v1/completions", {"prompt": "Say x:", "grammar": grammar, "max_tokens": 8}, timeout=30)
    assert time.monotonic() - start < 10
    # Each rule reached twice is expanded once: the grammar is cheap, and its
    # reply is its one sentence.
    assert status == 200 and body["choices"][0]["text"] == "x", body
    # Eight at once (the adversarial pass sent 32 and /v1 stopped for good).
    results = []

    def one():
        results.append(s.post_json("/v1/completions", {"prompt": "x", "grammar": grammar, "max_tokens": 8},
                                   timeout=30)[0])
    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * 8
    time.sleep(0.5)
    before = cpu_seconds(s.proc.pid)
    time.sleep(2)
    assert cpu_seconds(s.proc.pid) - before < 0.2  # nothing left running
    assert s.post_json("/v1/completions", {"prompt": "Once", "max_tokens": 2})[0] == 200


def test_a_grammar_past_the_work_bound_is_a_400_naming_it(smol_server):
    status, body = smol_server.post_json("/v1/completions",
                                         {"prompt": "x", "grammar": branching_chain(40), "max_tokens": 4}, timeout=30)
    assert status == 400 and body["error"]["param"] == "grammar", body
    assert "grammar" in body["error"]["message"]


def test_a_slow_grammar_does_not_stall_a_request_beside_it(smol_server):
    s = smol_server
    done = {}

    def constrained():
        start = time.monotonic()
        done["grammar"] = s.post_json("/v1/completions", {"prompt": "x", "grammar": doubled_chain(20, repeated=True),
                                                          "max_tokens": 12, "ignore_eos": True}, timeout=60)
        done["grammar_seconds"] = time.monotonic() - start

    t = threading.Thread(target=constrained)
    t.start()
    time.sleep(0.05)
    start = time.monotonic()
    status, body = s.post_json("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4})
    beside = time.monotonic() - start
    t.join(60)
    assert status == 200 and body["usage"]["completion_tokens"] == 4
    print(f"\n4 tokens beside the grammar: {beside:.2f} s; the grammar's 12: {done['grammar_seconds']:.2f} s")
    assert beside < 2
    assert done["grammar"][0] == 200 and done["grammar"][1]["choices"][0]["text"] == "x" * 12, done


# --- parameters -------------------------------------------------------------

def greedy(s, **extra):
    status, body = s.post_json("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 4,
                                                    "temperature": 0, **extra})
    assert status == 200, body
    return body


def test_logit_bias_is_honoured(smol_server, smollm2):
    s = smol_server
    plain = greedy(s)["choices"][0]["text"]
    tokens = s.post_json("/tokenize", {"content": plain})[1]["tokens"]
    first = tokens[0]
    # OpenAI's form: the greedy first token pushed away, another pulled in.
    banned = greedy(s, logit_bias={str(first): -100})["choices"][0]["text"]
    assert banned != plain
    again = s.post_json("/tokenize", {"content": banned})[1]["tokens"]
    assert again[0] != first
    forced = s.post_json("/tokenize", {"content": " Paris"})[1]["tokens"][0]
    text = greedy(s, logit_bias={str(forced): 100})["choices"][0]["text"]
    assert s.post_json("/tokenize", {"content": text})[1]["tokens"][:2] == [forced, forced], text
    # llama-server's forms: [id, false] bans it; a text's tokens all biased.
    assert greedy(s, logit_bias=[[first, False]])["choices"][0]["text"] == banned
    assert greedy(s, logit_bias=[[plain, False]])["choices"][0]["text"] != plain
    # Through the openai client (chat): honoured, not ignored.
    client = s.client()
    c1 = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=3, temperature=0)
    tok = s.post_json("/tokenize", {"content": c1.choices[0].message.content})[1]["tokens"][0]
    c2 = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=3, temperature=0,
                                        logit_bias={str(tok): -100})
    assert c2.choices[0].message.content != c1.choices[0].message.content
    # Out of the vocabulary, or out of range: a 400 naming it.
    status, body = s.post_json("/v1/completions", {"prompt": "x", "logit_bias": {"99999999": 1}})
    assert status == 400 and body["error"]["param"] == "logit_bias", body
    status, body = s.post_json("/v1/completions", {"prompt": "x", "logit_bias": {"5": 1000}})
    assert status == 400 and "logit_bias" in body["error"]["param"], body


def test_n_probs_returns_the_alternatives(smol_server):
    s = smol_server
    body = greedy(s, n_probs=3)
    lp = body["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 4 and all(len(top) == 3 for top in lp["top_logprobs"]), lp
    status, chat = s.post_json("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2, "n_probs": 2})
    assert status == 200
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 2 and all(len(t["top_logprobs"]) == 2 for t in content), content


def test_a_parameter_the_server_does_not_know_is_refused_by_name(smol_server):
    s = smol_server
    for path, body in (("/v1/completions", {"prompt": "x", "mirostat": 2}),
                       ("/v1/chat/completions", {"messages": MESSAGES, "typical_p": 0.5}),
                       ("/v1/chat/completions", {"messages": MESSAGES, "made_up": True})):
        status, reply = s.post_json(path, body)
        key = next(k for k in body if k not in ("prompt", "messages"))
        assert status == 400 and reply["error"]["param"] == key and reply["error"]["code"] == "unknown_parameter", reply
    # What asks nothing of the generation is taken: who the user is, and
    # llama-server's prompt-cache switch.
    status, _ = s.post_json("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1, "user": "u1",
                                                     "cache_prompt": True, "n_predict": 1})
    assert status == 200


# --- /tokenize and /health ------------------------------------------------------

def test_tokenize_with_pieces_gives_its_memory_back(smol_server):
    s = smol_server
    text = ("The quick brown fox jumps over the lazy dog. " * 20000)[:900_000]
    before = rss_mib(s.proc.pid)
    for _ in range(30):
        status, _, raw = s.request("POST", "/tokenize", {"content": text, "with_pieces": True}, timeout=60)
        assert status == 200
    tokens = json.loads(raw)["tokens"]
    assert tokens[0]["piece"] == "The" and len(tokens) > 100_000
    after = rss_mib(s.proc.pid)
    print(f"\n/tokenize with_pieces x30 on 900 kB: RSS {before:.0f} -> {after:.0f} MiB")
    assert after < before + 200


def test_health_says_ok(smol_server):
    status, body = smol_server.get_json("/health")
    assert status == 200 and body["status"] == "ok"


# --- the worker ------------------------------------------------------------------

@pytest.fixture
def keyed_worker(shoal_bin, tmp_path):
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32))
    w = Worker(shoal_bin, tmp_path, key_file=key, threads=1)
    yield w, key.read_text()
    w.stop()


def test_slow_frame_headers_do_not_hold_what_they_declare(keyed_worker):
    """Six authenticated peers each declare a 255 MiB FORWARD and send a
    byte every half second: the worker holds what arrived, not what was
    declared, and drops each within its timeout (the link's pace)."""
    w, key = keyed_worker
    before = rss_mib(w.proc.pid)
    peers = []
    for _ in range(6):
        p = Peer(w.port)
        assert p.handshake(key=key, role="peer")["type"] != ERROR
        peers.append(p)
    # A frame's header travels in the clear beside its sealed payload: the
    # size is read, and the payload can be checked only once it is whole.
    for p in peers:
        p.sock.sendall(header(FORWARD, 255 << 20, request_id=1))
    peak = 0
    closed = 0
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline and closed < len(peers):
        for p in peers:
            try:
                p.sock.sendall(b"\0")
            except OSError:
                pass
        peak = max(peak, rss_mib(w.proc.pid) - before)
        time.sleep(0.5)
        closed = sum(1 for p in peers if _is_closed(p.sock))
    print(f"\nsix 255 MiB FORWARD headers, a byte each 0.5 s: worker RSS +{peak:.1f} MiB, {closed} dropped")
    assert peak < 64
    assert closed == len(peers)  # the pace rule ends each within the worker's timeout and its window
    for p in peers:
        p.close()
    assert w.alive()


def _is_closed(sock):
    """The worker has ended the connection (what it sent before is dropped)."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def test_the_error_frame_reaches_a_peer_that_sent_garbage(keyed_worker):
    """Garbage, and a frame of another version followed by more bytes: the
    worker answers ERROR naming the fault and closes, and every peer reads
    that ERROR (it is not reset away by the bytes it had not read)."""
    w, _ = keyed_worker
    for i in range(20):
        p = Peer(w.port)
        if i % 2:
            p.sock.sendall(os.urandom(64 << 10))
            words = ["bad frame magic"]
        else:
            p.sock.sendall(header(HELLO, 40, version=VERSION + 7) + os.urandom(64 << 10))
            words = ["version mismatch"]
        reply = p.recv_json()
        assert reply["type"] == ERROR, reply
        assert all(word in reply["json"]["message"] for word in words), reply
        p.close()
    assert w.alive()


# --- the planner's cluster file ------------------------------------------------------------

def test_a_cluster_file_nested_50000_deep_is_refused(shoal_bin, smollm2, tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("[" + ".".join(["a"] * 50000) + "]\n")
    r = run_shoal(shoal_bin, "plan", "-m", smollm2, "--cluster", deep, timeout=30)
    assert r.returncode == 1 and "dotted parts" in r.stderr and "line 1" in r.stderr, r.stderr[-300:]
    nested = tmp_path / "nested.toml"
    nested.write_text("x = " + "[" * 50000 + "]" * 50000 + "\n")
    r = run_shoal(shoal_bin, "plan", "-m", smollm2, "--cluster", nested, timeout=30)
    assert r.returncode == 1 and "nested more than" in r.stderr, r.stderr[-300:]
    twice = tmp_path / "twice.toml"
    twice.write_text('[[device]]\nname = "a"\ncatalogue = "dgx-spark"\n'
                     '[[device]]\nname = "a"\ncatalogue = "dgx-spark"\nlink = { gbit = 10, rtt_ms = 0.2 }\n')
    r = run_shoal(shoal_bin, "plan", "-m", smollm2, "--cluster", twice, timeout=30)
    assert r.returncode == 1 and "two devices are named 'a'" in r.stderr, r.stderr[-300:]


# --- flags ------------------------------------------------------------------------

BAD_FLAGS = [
    (["-t", "100000"], "--threads", "hardware threads"),
    (["-t", "-3"], "--threads", "at least 1"),
    (["--worker-timeout", "nan"], "--worker-timeout", "not a finite number"),
    (["--worker-timeout", "inf"], "--worker-timeout", "not a finite number"),
    (["--discover-wait", "nan"], "--discover-wait", "not a finite number"),
    (["--draft-p-min", "nan"], "--draft-p-min", "not a finite number"),
    (["--tensor-split", "1,nan"], "--tensor-split", "not a finite number"),
    (["--mem", "nan"], "--mem", "bad size"),
]
SAMPLING_FLAGS = [
    (["--temp", "-1"], "--temp", "outside 0..100"),
    (["--temp", "nan"], "--temp", "not a finite number"),
    (["--top-p", "5"], "--top-p", "outside 0..1"),
    (["--min-p", "-inf"], "--min-p", "not a finite number"),
    (["--repeat-penalty", "0"], "--repeat-penalty", "outside 0.01..100"),
    (["--presence-penalty", "9"], "--presence-penalty", "outside -2..2"),
    (["--top-k", "-1"], "--top-k", "outside 0.."),
]
CASES = ([("plan", *c) for c in BAD_FLAGS] + [("run", *c) for c in BAD_FLAGS + SAMPLING_FLAGS] +
         [("serve", *c) for c in BAD_FLAGS + SAMPLING_FLAGS] +
         [("run", ["-n", "-5"], "--n-predict", "outside -1.."),
          ("serve", ["--port", "70000"], "--port", "outside 0..65535"),
          ("serve", ["--http-head-timeout", "nan"], "--http-head-timeout", "not a finite number"),
          ("serve", ["--http-body-timeout", "0"], "--http-body-timeout", "outside 0.1..3600"),
          ("worker", ["--port", "70000"], "--port", "outside 0..65535"),
          ("worker", ["-t", "100000"], "--threads", "hardware threads"),
          ("worker", ["--worker-timeout", "nan"], "--worker-timeout", "not a finite number"),
          ("worker", ["--mem", "nan"], "--mem", "bad size"),
          ("worker", ["--advertise-port", "0"], "--advertise-port", "outside 1..65535")])


@pytest.mark.parametrize("command,args,flag,words", CASES,
                         ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_an_out_of_range_flag_is_refused_by_name(shoal_bin, command, args, flag, words):
    model = [] if command == "worker" else ["-m", "/nonexistent.gguf"]
    r = run_shoal(shoal_bin, command, *model, *args, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and words in lines[0], r.stderr


def test_a_worker_named_twice_is_refused(shoal_bin):
    r = run_shoal(shoal_bin, "run", "-m", "/nonexistent.gguf", "--rpc", "127.0.0.1:1,127.0.0.1:1", timeout=30)
    assert r.returncode == 1 and "names 127.0.0.1:1 twice" in r.stderr, r.stderr
