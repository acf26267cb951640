"""What the benchmarks that talk to a server on this machine share: a JSON
POST to a loopback port, and the wait until a server answers."""
import json
import sys
import time
import urllib.request


def post(port, path, body, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def wait_ready(port, proc, seconds=120):
    """Until GET /v1/models answers 200 (both Shoal and llama-server have it);
    exits the script if the server exits or stays silent."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"error: the server on port {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"error: the server on port {port} did not answer in {seconds} s")
