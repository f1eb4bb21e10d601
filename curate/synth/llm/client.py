"""Chat completions from OpenAI-compatible servers (OpenAI, vLLM, SGLang) through AsyncOpenAI.

Concurrency is bounded by a semaphore; every request has its own timeout; 429, 5xx, timeouts,
dropped connections, malformed bodies and streams cut short are retried with exponential
backoff and full jitter (a 429's Retry-After is honoured). Errors that a retry cannot fix (bad
key, unknown model) stop the run; a request the server refuses (400) costs only its row.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field

from ...errors import NotAvailable


POOL_SIZE = 8  # requests in flight per connection pool


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters: part of the response cache's key and recorded on every row."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 8192

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Reply:
    content: str = ""
    reasoning: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None
    attempts: int = 1
    model: str | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Reply":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


class RequestFailed(Exception):
    """The request did not succeed after its retries, or the server refused it: its row drops."""

    def __init__(self, reason: str, detail: str, attempts: int):
        super().__init__(detail)
        self.reason, self.detail, self.attempts = reason, detail, attempts


class FatalServerError(Exception):
    """An answer that no retry or other row can change (bad key, unknown model): stop the run."""


class StreamCut(Exception):
    """The stream ended without a finish_reason (the connection went away mid-reply)."""


@dataclass
class Backoff:
    retries: int = 6
    base_s: float = 0.5
    cap_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Full jitter (AWS's recipe): uniform in [0, min(cap, base * 2^attempt)], never less
        than what the server asked for."""
        d = self.rng.uniform(0, min(self.cap_s, self.base_s * 2 ** attempt))
        return max(d, retry_after or 0.0)


def _openai():
    for name in ("httpx", "httpx2"):  # a line per request would bury the build's own log
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        import openai
    except ModuleNotFoundError:
        raise NotAvailable("synth-llm needs the openai client, a dependency of curate: "
                           "pip install openai") from None
    return openai


class ChatClient:
    """One model behind one base URL. Use inside a running event loop: `async with client:`."""

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 concurrency: int = 16, timeout: float = 600.0, stream: bool = False,
                 backoff: Backoff | None = None):
        self.model, self.base_url, self.api_key = model, base_url, api_key
        self.concurrency, self.timeout, self.stream = concurrency, float(timeout), stream
        self.backoff = backoff or Backoff()
        self.sent = 0      # HTTP requests sent, retries included
        self.retried = 0
        self._clients: list = []
        self._turn = 0
        self._sem: asyncio.Semaphore | None = None

    async def __aenter__(self) -> "ChatClient":
        """A client (connection pool) per POOL_SIZE requests in flight: httpcore scans every
        pooled connection for each request, which at 64 connections cost more CPU than the
        request itself."""
        openai = _openai()
        self._clients = [openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "none",
                                            timeout=self.timeout, max_retries=0)
                         for _ in range(-(-self.concurrency // POOL_SIZE))]
        self._sem = asyncio.Semaphore(self.concurrency)
        return self

    async def __aexit__(self, *_):
        for c in self._clients:
            await c.close()

    @property
    def _client(self):
        self._turn = (self._turn + 1) % len(self._clients)
        return self._clients[self._turn]

    async def complete(self, messages: list[dict], sampling: Sampling, seed: int) -> Reply:
        """One reply, retried until it comes or the retries run out (RequestFailed)."""
        openai = _openai()
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                     openai.APIConnectionError, openai.APIResponseValidationError, StreamCut,
                     ValueError, *_transport_errors())
        last = ""
        for attempt in range(self.backoff.retries + 1):
            try:
                async with self._sem:
                    self.sent += 1
                    return await self._once(messages, sampling, seed, attempt + 1)
            except (openai.AuthenticationError, openai.PermissionDeniedError,
                    openai.NotFoundError) as exc:
                raise FatalServerError(f"{self.base_url or 'OpenAI'}: {exc}") from None
            except openai.APIStatusError as exc:
                if exc.status_code < 500 and exc.status_code not in (408, 409, 429):
                    raise RequestFailed("synth:request_refused", str(exc)[:500], attempt + 1) \
                        from None
                last, wait = str(exc)[:500], _retry_after(exc)
            except retryable as exc:
                last, wait = f"{type(exc).__name__}: {exc}"[:500], None
            if attempt < self.backoff.retries:
                self.retried += 1
                await asyncio.sleep(self.backoff.delay(attempt, wait))
        raise RequestFailed("synth:request_failed", last, self.backoff.retries + 1)

    async def _once(self, messages: list[dict], sampling: Sampling, seed: int,
                    attempt: int) -> Reply:
        t0 = time.monotonic()
        args = dict(model=self.model, messages=messages, temperature=sampling.temperature,
                    top_p=sampling.top_p, max_tokens=sampling.max_tokens, seed=seed)
        if self.stream:
            reply = await self._streamed(args)
        else:
            raw = await self._client.chat.completions.with_raw_response.create(**args)
            reply = _whole(json.loads(raw.text))
        reply.latency_s, reply.attempts = time.monotonic() - t0, attempt
        return reply

    async def _streamed(self, args: dict) -> Reply:
        """Server-sent events read as raw lines and parsed with json: the client's typed chunks
        cost ~0.4 ms each, and a real server sends a chunk per token."""
        content, reasoning, reply = [], [], Reply()
        async with self._client.chat.completions.with_streaming_response.create(
                **args, stream=True, stream_options={"include_usage": True}) as resp:
            async for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                _chunk(json.loads(data), reply, content, reasoning)
        if reply.finish_reason is None:
            raise StreamCut("the stream ended before the reply did")
        reply.content = "".join(content)
        reply.reasoning = "".join(reasoning) or None
        return reply


def _whole(body: dict) -> Reply:
    """A whole-body reply, read as plain JSON (the typed one costs more than the request)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not choices:
        raise ValueError("the reply has no choices")
    msg = choices[0].get("message") or {}
    usage = body.get("usage") or {}
    return Reply(content=msg.get("content") or "",
                 reasoning=msg.get("reasoning_content") or msg.get("reasoning") or None,
                 finish_reason=choices[0].get("finish_reason"), model=body.get("model"),
                 prompt_tokens=usage.get("prompt_tokens"),
                 completion_tokens=usage.get("completion_tokens"))


def _chunk(chunk: dict, reply: Reply, content: list, reasoning: list) -> None:
    if chunk.get("error"):
        raise StreamCut(f"the server reported an error mid-stream: {chunk['error']}")
    usage = chunk.get("usage")
    if usage:
        reply.prompt_tokens = usage.get("prompt_tokens")
        reply.completion_tokens = usage.get("completion_tokens")
    reply.model = chunk.get("model") or reply.model
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        content.append(delta.get("content") or "")
        reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
        if choice.get("finish_reason"):
            reply.finish_reason = choice["finish_reason"]


def _transport_errors() -> tuple:
    """The HTTP library's errors for a connection that broke mid-stream (openai wraps them
    only before the body is read): httpx, or httpx2 in newer openai releases."""
    import importlib
    out = []
    for name in ("httpx2", "httpx"):
        try:
            out.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(out)


def _retry_after(exc) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return min(float(value), 120.0) if value else None
    except (AttributeError, TypeError, ValueError):
        return None
