"""An OpenAI chat-completions server on loopback, for the `synth llm` tests and the replay build.

It speaks the part of the protocol that the `openai` client uses for chat: POST
/v1/chat/completions, streaming (server-sent events, `data: [DONE]`, usage in the last chunk
when `stream_options.include_usage` is set) and not, `reasoning_content` beside `content` as
vLLM's and DeepSeek's reasoning parsers send it, and GET /v1/models. Faults can be queued to
make the next requests fail as real servers do: 429 with Retry-After, 500, malformed JSON, a
stream cut short, a reply slower than the client's timeout, a connection dropped.

Replies come from `reply(request) -> (content, reasoning_content | None)`: a function given by
the test, or a replay folder (tests/fixtures/llm_replay/, see `Replay`).

    server = LLMServer(Replay("tests/fixtures/llm_replay")).start()
    server.url  # -> http://127.0.0.1:PORT/v1
    server.stop()

Run as a program to serve a replay folder: python3 tests/support/llmserver.py --replay DIR --port 8011
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

FAULTS = ("429", "500", "malformed", "truncate", "slow", "drop")
NO_CODE = "I could not write a kernel for this program."


def count_tokens(text: str) -> int:
    """About four characters a token, as English and code average under BPE tokenizers."""
    return max(1, (len(text) + 3) // 4) if text else 0


@dataclass
class State:
    faults: collections.deque = field(default_factory=collections.deque)
    requests: list[dict] = field(default_factory=list)  # every request body, faulted or not
    retry_after: float = 0.05
    slow_s: float = 3.0
    chunk_chars: int = 64
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_fault(self) -> str | None:
        with self.lock:
            return self.faults.popleft() if self.faults else None


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep test output clean
        pass

    def setup(self):
        super().setup()
        # headers and body go out in separate writes: without this, Nagle's algorithm holds
        # the body back until the client's delayed ACK (40 ms a reply); uvicorn sets it too
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "replay", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            req = json.loads(raw)
        except ValueError:
            self._json(400, {"error": {"message": "request body is not JSON"}})
            return
        st = self.server.state
        with st.lock:
            st.requests.append(req)
        fault = st.next_fault()
        if fault == "429":
            self._json(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                       {"Retry-After": f"{st.retry_after:g}"})
            return
        if fault == "500":
            self._json(500, {"error": {"message": "internal error"}})
            return
        if fault == "drop":
            self._drop()
            return
        if fault == "slow":
            time.sleep(st.slow_s)
        content, reasoning = self.server.reply(req)
        if req.get("stream"):
            self._stream(req, content, reasoning, truncate=fault == "truncate")
        else:
            body = completion(req, content, reasoning)
            if fault == "malformed":
                self._send(200, json.dumps(body).encode()[:-7])
            else:
                self._json(200, body)

    def _send(self, status: int, body: bytes, headers: dict | None = None,
              ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def _drop(self) -> None:
        """Close the connection without an answer (a proxy or server that went away)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _stream(self, req: dict, content: str, reasoning: str | None, truncate: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        chunks = list(stream_chunks(req, content, reasoning, self.server.state.chunk_chars))
        if truncate:  # the stream stops halfway: no finish_reason, no [DONE]
            chunks = chunks[: max(1, len(chunks) // 2)]
        try:
            for c in chunks:
                self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
            if not truncate:
                self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            return
        if truncate:
            self._drop()


def usage(req: dict, content: str, reasoning: str | None) -> dict:
    prompt = sum(count_tokens(str(m.get("content") or "")) for m in req.get("messages", []))
    completion_t = count_tokens(content) + count_tokens(reasoning or "")
    return {"prompt_tokens": prompt, "completion_tokens": completion_t,
            "total_tokens": prompt + completion_t}


def completion(req: dict, content: str, reasoning: str | None) -> dict:
    msg = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion",
            "created": int(time.time()), "model": req.get("model", "replay"),
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
            "usage": usage(req, content, reasoning)}


def stream_chunks(req: dict, content: str, reasoning: str | None, size: int):
    base = {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": req.get("model", "replay")}

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for i in range(0, len(reasoning or ""), size):
        yield chunk({"reasoning_content": reasoning[i:i + size]})
    for i in range(0, len(content), size):
        yield chunk({"content": content[i:i + size]})
    yield chunk({}, "stop")
    if (req.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": usage(req, content, reasoning)}


class Replay:
    """Replies from a folder laid out as tests/fixtures/llm_replay/ (README there):
    <problem>/<backend>-s<sample>-t<turn>.md, with an optional .reasoning.txt beside it.

    problem: the folder whose example source appears in the first user message; backend: the
    one the prompt names; sample: the request's `seed`; turn: the assistant messages already in
    the conversation. A missing turn falls back to the highest one below it, a missing sample to
    sample modulo the samples there are; no reply at all -> a reply with no code."""

    NAME = re.compile(r"^(cuda|triton)-s(\d+)-t(\d+)\.md$")

    def __init__(self, folder: str | Path, examples: str | Path | None = None):
        self.folder = Path(folder)
        examples = Path(examples) if examples else Path(__file__).resolve().parents[2] / "examples"
        self.sources: dict[str, str] = {}
        for p in sorted(examples.glob("*.py")):
            self.sources[p.stem] = _squash(p.read_text())
        self.files: dict[tuple[str, str], dict[int, dict[int, Path]]] = {}
        for p in sorted(self.folder.glob("*/*.md")) if self.folder.is_dir() else []:
            m = self.NAME.match(p.name)
            if m:
                key = (p.parent.name, m.group(1))
                self.files.setdefault(key, {}).setdefault(int(m.group(2)), {})[int(m.group(3))] = p
        self.misses: list[tuple[str | None, str]] = []

    def problem(self, req: dict) -> str | None:
        first = next((m for m in req.get("messages", []) if m.get("role") == "user"), None)
        text = _squash(str(first.get("content") or "")) if first else ""
        hits = [stem for stem, src in self.sources.items() if src and src in text]
        return max(hits, key=lambda s: len(self.sources[s])) if hits else None

    def pick(self, req: dict) -> Path | None:
        problem, backend = self.problem(req), backend_of(req)
        samples = self.files.get((problem, backend)) if problem else None
        if not samples:
            self.misses.append((problem, backend))
            return None
        order = sorted(samples)
        seed = int(req.get("seed") or 0)
        turns = samples[order[seed % len(order)]] if seed not in samples else samples[seed]
        turn = sum(1 for m in req.get("messages", []) if m.get("role") == "assistant")
        below = [t for t in sorted(turns) if t <= turn]
        return turns[below[-1] if below else min(turns)]

    def __call__(self, req: dict) -> tuple[str, str | None]:
        path = self.pick(req)
        if path is None:
            return NO_CODE, None
        side = path.with_name(path.name[:-3] + ".reasoning.txt")
        return path.read_text(), side.read_text() if side.is_file() else None


def fixed_reply(chars: int) -> str:
    """A reply of about `chars` characters: prose and a fenced program (throughput runs)."""
    line = "    out = out * 1.0001 + 0.0001  # filler that a kernel would hold\n"
    body = line * max(1, (chars - 200) // len(line))
    return ("Here is the program:\n\n```python\nimport torch.nn as nn\n\n\n"
            "class ModelNew(nn.Module):\n  def forward(self, out):\n" + body
            + "    return out\n```\n")


def backend_of(req: dict) -> str:
    """The backend the prompt asks for: an explicit `Backend: cuda|triton` line (the bundled
    templates write one), else whichever the system and first user message name."""
    text = "\n".join(str(m.get("content") or "") for m in req.get("messages", [])[:2])
    m = re.search(r"(?im)^\s*backend:\s*(cuda|triton)\b", text)
    if m:
        return m.group(1).lower()
    return "triton" if "triton" in text.lower() and "load_inline" not in text else "cuda"


def _squash(text: str) -> str:
    return "\n".join(ln.rstrip() for ln in text.strip().splitlines() if ln.strip())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512
    state: State
    reply: Callable[[dict], tuple[str, str | None]]


class LLMServer:
    def __init__(self, reply: Callable[[dict], tuple[str, str | None]], port: int = 0,
                 host: str = "127.0.0.1"):
        self.httpd = _Server((host, port), _Handler)
        self.httpd.state = State()
        self.httpd.reply = reply
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> State:
        return self.httpd.state

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "LLMServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "LLMServer":
        return self.start()

    def __exit__(self, *_):
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description="Serve a replay folder as an OpenAI chat server.")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--replay", help="folder laid out as tests/fixtures/llm_replay")
    what.add_argument("--fixed", type=int, metavar="CHARS",
                      help="answer every request with a program of about CHARS characters")
    ap.add_argument("--examples", default=None, help="the examples the problems are named after")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()
    if args.replay:
        reply = Replay(args.replay, args.examples)
        what = f"{len(reply.files)} problem/backend folders of {args.replay}"
    else:
        text = fixed_reply(args.fixed)
        reply = lambda req: (text, None)  # noqa: E731
        what = f"a fixed reply of {len(text)} characters"
    server = LLMServer(reply, port=args.port, host=args.host)
    print(f"serving {what} at {server.url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
