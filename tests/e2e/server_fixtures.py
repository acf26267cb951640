"""A `shoal serve` process for the end-to-end tests: started on a free port
(--port 0; the port is read from its first stdout line), waited for, talked
to with plain HTTP or the official `openai` client, always killed at the end."""
import http.client
import json
import re
import select
import subprocess
import time
from pathlib import Path

from conftest import ManagedProcess

T = 30  # seconds for any single HTTP exchange that is not a generation


class Server(ManagedProcess):
    def __init__(self, shoal_bin, model, tmp, *args, threads=2, wait=True, ready_timeout=120):
        argv = [shoal_bin, "serve", "-m", str(model), "--port", "0", "-t", str(threads), *map(str, args)]
        self.log_path = Path(tmp) / f"serve-{id(self)}.log"
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], T)
        line = self.proc.stdout.readline() if ready else ""
        m = re.match(r"server listening on http://([^\s:]+):(\d+)", line)
        if not m:
            err = self.stderr()
            self.stop()
            raise RuntimeError(f"server did not start: {line!r}\n{err}")
        self.port = int(m.group(2))
        self.base = f"http://127.0.0.1:{self.port}"
        if wait:
            self.wait_ready(ready_timeout)

    # --- process -----------------------------------------------------------
    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.stderr()}")
            try:
                status, _, _ = self.request("GET", "/health", timeout=5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready after {timeout} s:\n{self.stderr()}")

    # --- HTTP --------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=T):
        """(status, headers, body bytes); body may be bytes, str or a JSON-able object."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if body is not None and not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            hdrs = {"Content-Type": "application/json"} if body is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def get_json(self, path, headers=None):
        status, _, body = self.request("GET", path, headers=headers)
        return status, json.loads(body)

    def post_json(self, path, body, headers=None, timeout=T):
        status, _, data = self.request("POST", path, body, headers=headers, timeout=timeout)
        return status, json.loads(data)

    def metrics(self):
        """/metrics as {"name{labels}": value}."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def client(self, api_key="unused", timeout=300):
        import openai
        # No retries: a 5xx must show up as the error it is, not as a slow pass.
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key, max_retries=0, timeout=timeout)


def run_chat(run_shoal, shoal_bin, model, question, n, *extra):
    """`shoal run --chat` greedy: (stdout, prompt tokens, generated tokens)."""
    r = run_shoal(shoal_bin, "run", "-m", model, "--chat", "-p", question, "--temp", "0", "-n", n, "--no-echo",
                  "-t", "2", *extra, timeout=600)
    assert r.returncode == 0, r.stderr
    m = re.search(r"prompt: (\d+) tokens.*generation: (\d+) tokens", r.stderr)
    return r.stdout, int(m.group(1)), int(m.group(2))


# Greedy completions through a cluster, undisturbed and with a fault in the
# middle of a stream (test_cluster_recovery.py, test_tensor_split.py).
STORY_PROMPT = "Once upon a time, in a small village by the sea, there lived"


def complete(server, prompt=STORY_PROMPT, n=64):
    r = server.client().completions.create(model=server.model, prompt=prompt, max_tokens=n, temperature=0,
                                           extra_body={"ignore_eos": True})
    return r.choices[0].text


def cluster(server):
    status, c = server.get_json("/v1/cluster")
    assert status == 200
    return c


def stream_with_fault(server, fault, after_chunks=6, prompt=STORY_PROMPT, n=64):
    """Streams a greedy completion; after `after_chunks` pieces of text runs
    fault() (once) and reads on. Returns (text, time the fault happened)."""
    stream = server.client().completions.create(model=server.model, prompt=prompt, max_tokens=n, temperature=0,
                                                stream=True, extra_body={"ignore_eos": True})
    text, pieces, fault_at = "", 0, None
    for chunk in stream:
        text += chunk.choices[0].text
        pieces += 1
        if pieces == after_chunks:
            fault_at = time.time()
            fault()
    assert fault_at is not None, "the completion ended before the fault"
    return text, fault_at


def netns_stream_with_cut(net, client, victim, after_chunks=6):
    """In network namespaces (tests/tools/netns.py): runs `client`
    (tests/tools/stream_client.py's argv) in host 0 once undisturbed, then
    again cutting host `victim`'s link after `after_chunks` pieces of text.
    Returns (undisturbed text, text, monotonic and wall time of the cut)."""
    undisturbed = net.run(0, client, timeout=120).stdout.splitlines()
    expected = "".join(json.loads(line).get("text", "") for line in undisturbed)
    assert json.loads(undisturbed[-1]) == {"done": "length"}, undisturbed
    reader = net.popen(0, client, stdout=subprocess.PIPE, text=True)
    text, pieces, cut_at, cut_wall = "", 0, None, None
    for line in reader.stdout:
        event = json.loads(line)
        assert "error" not in event, event
        text += event.get("text", "")
        pieces += 1
        if pieces == after_chunks:
            cut_at, cut_wall = time.monotonic(), time.time()
            net.cut(victim)
    reader.wait(timeout=60)
    assert cut_at is not None, "the completion ended before the cut"
    return expected, text, cut_at, cut_wall
