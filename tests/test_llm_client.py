"""synth-llm's client against a real OpenAI-protocol server on loopback (tests/support/llmserver.py):
streaming and not, every fault a real server shows, and the replay folder's picking rules."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tests.support.llmserver import NO_CODE, LLMServer, Replay, backend_of  # noqa: E402

from curate.synth.llm.client import (  # noqa: E402
    Backoff,
    ChatClient,
    FatalServerError,
    RequestFailed,
    Sampling,
)

MESSAGES = [{"role": "user", "content": "write a kernel"}]
CONTENT = "```python\nclass ModelNew:\n    pass\n```\n" * 20


@pytest.fixture()
def server():
    with LLMServer(lambda req: (CONTENT, "I think, therefore I fuse.")) as s:
        yield s


def ask(server, *, stream=False, timeout=5.0, retries=4, messages=MESSAGES, seed=0):
    async def go():
        async with ChatClient("m", server.url, "k", concurrency=4, timeout=timeout,
                              stream=stream, backoff=Backoff(retries=retries, base_s=0.01)) as c:
            return await c.complete(messages, Sampling(max_tokens=64), seed)
    return asyncio.run(go())


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reply_with_reasoning_content_and_usage(server, stream):
    r = ask(server, stream=stream)
    assert r.content == CONTENT and r.reasoning == "I think, therefore I fuse."
    assert r.finish_reason == "stop" and r.attempts == 1
    assert r.prompt_tokens > 0 and r.completion_tokens > len(CONTENT) // 5
    req = server.state.requests[-1]
    assert req["seed"] == 0 and req["max_tokens"] == 64 and bool(req.get("stream")) == stream


FAULTS = [(f, False) for f in ("429", "500", "malformed", "slow", "drop")] + \
    [(f, True) for f in ("429", "500", "truncate", "slow", "drop")]


@pytest.mark.parametrize("fault,stream", FAULTS,
                         ids=[f"{f}-{'stream' if s else 'plain'}" for f, s in FAULTS])
def test_each_fault_is_retried_until_the_reply_comes(server, fault, stream):
    server.state.faults.extend([fault, fault])
    server.state.slow_s = 1.5
    r = ask(server, stream=stream, timeout=0.5)
    assert r.content == CONTENT
    assert r.attempts == 3 and len(server.state.requests) == 3


def test_429_waits_as_long_as_retry_after_says(server):
    server.state.retry_after = 0.6
    server.state.faults.append("429")
    t0 = time.monotonic()
    r = ask(server)
    assert r.attempts == 2 and time.monotonic() - t0 >= 0.6


def test_retries_run_out_and_the_request_fails(server):
    server.state.faults.extend(["500"] * 10)
    with pytest.raises(RequestFailed) as exc:
        ask(server, retries=2)
    assert exc.value.reason == "synth:request_failed" and exc.value.attempts == 3
    assert len(server.state.requests) == 3


class _StatusHandler(BaseHTTPRequestHandler):
    """Answers every request with the server's `code` (400: refused, 401: bad key)."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"error": {"message": f"status {self.server.code}"}}).encode()
        self.send_response(self.server.code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.server.hits += 1


def test_refused_request_is_not_retried_and_bad_key_stops_the_run():
    for code, raised in ((400, RequestFailed), (401, FatalServerError)):
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _StatusHandler)
        httpd.code, httpd.hits = code, 0
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            fake = type("S", (), {"url": f"http://127.0.0.1:{httpd.server_address[1]}/v1"})
            with pytest.raises(raised):
                ask(fake, retries=3)
            assert httpd.hits == 1  # neither is retried
        finally:
            httpd.shutdown()
            httpd.server_close()


def test_concurrency_is_bounded(server):
    inflight = {"now": 0, "max": 0}
    lock = threading.Lock()

    def slow(req):
        with lock:
            inflight["now"] += 1
            inflight["max"] = max(inflight["max"], inflight["now"])
        time.sleep(0.05)
        with lock:
            inflight["now"] -= 1
        return "ok", None

    server.httpd.reply = slow

    async def go():
        async with ChatClient("m", server.url, "k", concurrency=3) as c:
            return await asyncio.gather(*(c.complete(MESSAGES, Sampling(), i) for i in range(12)))
    replies = asyncio.run(go())
    assert len(replies) == 12 and inflight["max"] == 3


# -- the replay folder ---------------------------------------------------------------------
def _replay(tmp_path: Path) -> Replay:
    ex = tmp_path / "examples"
    ex.mkdir()
    (ex / "01_a.py").write_text("import torch\nclass Model:\n    pass  # a\n")
    (ex / "02_b.py").write_text("import torch\nclass Model:\n    pass  # b\n")
    d = tmp_path / "replay" / "01_a"
    d.mkdir(parents=True)
    for name in ("cuda-s0-t0", "cuda-s1-t0", "cuda-s1-t1", "triton-s0-t0"):
        (d / f"{name}.md").write_text(name)
    (d / "cuda-s1-t0.reasoning.txt").write_text("why s1")
    return Replay(tmp_path / "replay", ex)


def _req(problem_src: str, backend: str, seed: int, assistants: int) -> dict:
    msgs = [{"role": "system", "content": f"Backend: {backend}"},
            {"role": "user", "content": f"Make this faster:\n```python\n{problem_src}\n```"}]
    for _ in range(assistants):
        msgs += [{"role": "assistant", "content": "..."}, {"role": "user", "content": "again"}]
    return {"messages": msgs, "seed": seed}


def test_replay_picks_problem_backend_sample_and_turn(tmp_path):
    rp = _replay(tmp_path)
    a = "import torch\nclass Model:\n    pass  # a"
    assert rp(_req(a, "cuda", 0, 0)) == ("cuda-s0-t0", None)
    assert rp(_req(a, "cuda", 1, 0)) == ("cuda-s1-t0", "why s1")
    assert rp(_req(a, "cuda", 1, 1))[0] == "cuda-s1-t1"
    assert rp(_req(a, "cuda", 0, 1))[0] == "cuda-s0-t0"   # missing turn: highest below it
    assert rp(_req(a, "cuda", 3, 1))[0] == "cuda-s1-t1"   # missing sample: modulo
    assert rp(_req(a, "triton", 5, 0))[0] == "triton-s0-t0"
    b = "import torch\nclass Model:\n    pass  # b"
    assert rp(_req(b, "cuda", 0, 0)) == (NO_CODE, None)    # no reply for the problem
    assert rp.misses[-1] == ("02_b", "cuda")


def test_backend_comes_from_the_prompt():
    assert backend_of({"messages": [{"content": "Backend: triton\n load_inline"}]}) == "triton"
    assert backend_of({"messages": [{"content": "write Triton kernels"}]}) == "triton"
    assert backend_of({"messages": [{"content": "use load_inline"}]}) == "cuda"
