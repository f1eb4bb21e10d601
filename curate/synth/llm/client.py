"""Chat completions from OpenAI-compatible servers (OpenAI, vLLM, SGLang) through AsyncOpenAI.

Concurrency is bounded by a semaphore; every request has its own timeout; 429, 5xx, timeouts,
dropped connections, malformed bodies and streams cut short are retried with exponential
backoff and full jitter (a 429's Retry-After is honoured). Errors that a retry cannot fix (bad
key, unknown model) stop the run; a request the server refuses (400) costs only its row.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import asdict, dataclass, field

from ...errors import NotAvailable


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
        self._client = None
        self._sem: asyncio.Semaphore | None = None

    async def __aenter__(self) -> "ChatClient":
        openai = _openai()
        self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "none",
                                          timeout=self.timeout, max_retries=0)
        self._sem = asyncio.Semaphore(self.concurrency)
        return self

    async def __aexit__(self, *_):
        await self._client.close()

    async def complete(self, messages: list[dict], sampling: Sampling, seed: int) -> Reply:
        """One reply, retried until it comes or the retries run out (RequestFailed)."""
        openai = _openai()
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                     openai.APIConnectionError, openai.APIResponseValidationError, StreamCut,
                     ValueError)
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
            resp = await self._client.chat.completions.create(**args)
            if not resp.choices:
                raise ValueError("the reply has no choices")
            msg = resp.choices[0].message
            reply = Reply(content=msg.content or "", reasoning=_reasoning_of(msg),
                          finish_reason=resp.choices[0].finish_reason, model=resp.model)
            _usage(reply, resp.usage)
        reply.latency_s, reply.attempts = time.monotonic() - t0, attempt
        return reply

    async def _streamed(self, args: dict) -> Reply:
        stream = await self._client.chat.completions.create(
            **args, stream=True, stream_options={"include_usage": True})
        content, reasoning, reply = [], [], Reply()
        async for chunk in stream:
            if chunk.usage is not None:
                _usage(reply, chunk.usage)
            reply.model = chunk.model or reply.model
            for choice in chunk.choices or []:
                delta = choice.delta
                if delta is not None:
                    content.append(delta.content or "")
                    reasoning.append(_reasoning_of(delta) or "")
                if choice.finish_reason:
                    reply.finish_reason = choice.finish_reason
        if reply.finish_reason is None:
            raise StreamCut("the stream ended before the reply did")
        reply.content = "".join(content)
        reply.reasoning = "".join(reasoning) or None
        return reply


def _reasoning_of(obj) -> str | None:
    """`reasoning_content` (vLLM, SGLang, DeepSeek) or `reasoning` (some other servers): fields
    outside the OpenAI schema, kept by the client as extras."""
    for name in ("reasoning_content", "reasoning"):
        v = getattr(obj, name, None)
        if v is None and getattr(obj, "model_extra", None):
            v = obj.model_extra.get(name)
        if isinstance(v, str) and v:
            return v
    return None


def _usage(reply: Reply, usage) -> None:
    if usage is not None:
        reply.prompt_tokens = usage.prompt_tokens
        reply.completion_tokens = usage.completion_tokens


def _retry_after(exc) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return min(float(value), 120.0) if value else None
    except (AttributeError, TypeError, ValueError):
        return None
