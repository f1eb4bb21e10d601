"""`synth-llm`: every reference program -> K samples x T turns of candidates written by a model.

Turn 0 sends the prompt template's first messages; every later turn sends the verdict on the
sample's previous candidate (refine.py). Every turn is a row of its own, linked to its problem
(`ref_id`) and its parent turn (`parent_id`), with the conversation, the reasoning, tokens,
latency, cost and sampling parameters, so that the multi-turn traces can be published as they
are. A turn whose reply has no usable program, or whose request failed for good, is a dropped
row; the sample's next turn still asks again where the reply merely lacked code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BadInput
from ...pipeline.progress import Progress
from ...pipeline.step import Outcome, Resources, Step
from ...record import content_hash
from .cache import ResponseCache, reply_key
from .client import Backoff, ChatClient, Reply, RequestFailed, Sampling
from .extract import extract_core, extract_program
from .prompts import Prompt
from .refine import Refiner

log = logging.getLogger("curate")
BACKENDS = ("cuda", "triton")
CACHE_FILE = "llm-cache.sqlite"
# what verify and later stages write: a new candidate starts without them
STALE = ("status", "correct", "speedup", "speedup_ci_low", "speedup_ci_high", "ref_ms",
         "kernel_ms", "max_abs_err", "max_rel_err", "error", "cluster_id", "dup_of", "gpu",
         "sandbox", "torch_version", "triton_version", "cuda_version", "core_name")


@dataclass
class Conversation:
    """One sample of one problem, turn after turn."""

    ref: dict
    sample: int
    messages: list[dict]
    rows: list[dict] = field(default_factory=list)
    stopped: bool = False

    @property
    def last(self) -> dict | None:
        return self.rows[-1] if self.rows else None


class LLMSynth(Step):
    """Candidates from a chat model behind an OpenAI-compatible API (OpenAI, vLLM, SGLang)."""

    name = "synth-llm"
    batch_size = 32

    def __init__(self, model: str, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", backend: str = "cuda", samples: int = 1,
                 turns: int = 1, temperature: float = 0.7, top_p: float = 1.0,
                 max_tokens: int = 8192, concurrency: int = 16, timeout: float = 600.0,
                 stream: bool = False, prompt: str | None = None, prices: dict | None = None,
                 retries: int = 6, device: str = "cpu", verify_timeout: float = 120.0,
                 verify_workers: int | None = None, sandbox: str = "auto",
                 cache: str | None = None, batch_size: int = 32):
        if not model:
            raise BadInput("synth-llm needs a model name", fix="set model: NAME (--model)")
        if backend not in BACKENDS:
            raise BadInput(f"unknown backend {backend!r}", fix="use backend cuda or triton")
        if device == "auto":
            from ...pipeline.config import detect_device
            device = detect_device()
        self.model, self.base_url, self.api_key_env = model, base_url, api_key_env
        self.backend, self.samples, self.turns = backend, int(samples), int(turns)
        self.sampling = Sampling(float(temperature), float(top_p), int(max_tokens))
        self.concurrency, self.timeout, self.stream = int(concurrency), float(timeout), stream
        self.retries, self.device = int(retries), device
        self.prices = _prices(prices)
        self.prompt = Prompt(prompt, backend)
        self.cache_path = cache
        self.batch_size = int(batch_size)
        self._refine_args = dict(timeout=verify_timeout, workers=verify_workers, sandbox=sandbox)
        self.resources = Resources(cpus=1, gpus=1 if turns > 1 and device == "cuda" else 0)
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        if not self.api_key and not base_url:  # before any work: build checks steps first
            raise BadInput(f"${api_key_env or 'OPENAI_API_KEY'} is not set and no base URL is "
                           "given", fix=f"export {api_key_env or 'OPENAI_API_KEY'}=... for "
                           "OpenAI, or --base-url http://HOST:PORT/v1 for a vLLM or SGLang server")
        self.cache: ResponseCache | None = None
        self.refiner: Refiner | None = None
        self.counts: Counter = Counter()

    def config(self) -> dict:
        cfg = {"model": self.model, "base_url": self.base_url, "backend": self.backend,
               "samples": self.samples, "turns": self.turns, "sampling": self.sampling.to_json(),
               "prompt": self.prompt.digest, "prices": self.prices}
        if self.turns > 1:
            cfg["device"] = self.device
        return cfg

    def bind_dir(self, out_dir: Path) -> None:
        """The build directory: where the response cache lives unless one was named."""
        if self.cache_path is None:
            self.cache_path = str(Path(out_dir) / CACHE_FILE)

    def setup(self) -> None:
        self.cache = ResponseCache(self.cache_path or ":memory:")
        if self.turns > 1:
            self.refiner = Refiner(self.device, self.cache, **self._refine_args)

    def teardown(self) -> None:
        if self.refiner is not None:
            self.refiner.close()
            self.refiner = None
        if self.cache is not None:
            self.cache.close()
            self.cache = None

    def stats(self) -> dict:
        c = self.counts
        out = {"model": self.model, "backend": self.backend, "samples": self.samples,
               "turns": self.turns, "sampling": self.sampling.to_json(),
               "prompt": self.prompt.path.name, **{k: c[k] for k in sorted(c)}}
        if self.prices:
            out["cost_usd"] = round(c.get("cost_microusd", 0) / 1e6, 6)
            out.pop("cost_microusd", None)
        return out

    # -- the work --------------------------------------------------------------------------
    def process(self, rows: list[dict]) -> list[Outcome]:
        if self.cache is None:
            self.setup()
        convs = [Conversation(row, s, self.prompt.first(row))
                 for row in rows if row.get("pytorch_code") for s in range(self.samples)]
        for turn in range(self.turns):
            live = [c for c in convs if not c.stopped]
            if not live:
                break
            if turn:
                self._feedback(live)
            replies = asyncio.run(self._ask_all(live, turn))
            for conv, reply in zip(live, replies):
                self._record(conv, reply, turn)
        return [self._outcome(row, [c for c in convs if c.ref is row]) for row in rows]

    def _feedback(self, convs: list[Conversation]) -> None:
        """The verdict on each sample's last candidate becomes its next user message."""
        verdicts = self.refiner.verdicts([c.last for c in convs])
        for conv, verdict in zip(convs, verdicts):
            text = self.prompt.feedback(conv.ref, verdict)
            conv.last["feedback"] = text
            conv.messages.append({"role": "user", "content": text})
            self.counts[f"turn{conv.last['turn']}_{verdict.kind}"] += 1

    async def _ask_all(self, convs: list[Conversation], turn: int) -> list:
        bar = Progress(f"synth-llm turn {turn}", len(convs))
        client = ChatClient(self.model, self.base_url, self.api_key, self.concurrency,
                            self.timeout, self.stream, Backoff(retries=self.retries))
        try:
            async with client:
                async def one(conv):
                    got = await self._ask(client, conv)
                    bar.update(1)
                    return got
                return await asyncio.gather(*(one(c) for c in convs))
        finally:
            bar.close()
            self.counts["requests_sent"] += client.sent
            self.counts["retries"] += client.retried

    async def _ask(self, client: ChatClient, conv: Conversation):
        """(Reply or RequestFailed, from the cache or not)."""
        key = reply_key(self.model, conv.messages, self.sampling.to_json(), conv.sample)
        cached = self.cache.reply(key)
        if cached is not None:
            return Reply.from_json(cached), True
        try:
            reply = await client.complete(conv.messages, self.sampling, seed=conv.sample)
        except RequestFailed as exc:
            return exc, False
        self.cache.put_reply(key, reply.to_json())
        return reply, False

    def _record(self, conv: Conversation, got: tuple, turn: int) -> None:
        reply, cached = got
        self.counts["replies_cached" if cached else "replies_new"] += int(
            not isinstance(reply, RequestFailed))
        prompt_text = conv.messages[-1]["content"]
        if isinstance(reply, RequestFailed):
            row = self._row(conv, turn, None, Reply(attempts=reply.attempts), prompt_text)
            row["error"] = reply.detail
            row["reasons"] = [reply.reason]
            conv.rows.append(row)
            conv.stopped = True
            self.counts[reply.reason] += 1
            return
        conv.messages.append({"role": "assistant", "content": reply.content})
        if self.prompt.reply == "core":
            ex = extract_core(reply.content, reply.reasoning, reply.finish_reason)
            code = (conv.ref.get("prefix") or "") + ex.code + (conv.ref.get("suffix") or "") \
                if ex.code is not None else None
        else:
            ex = extract_program(reply.content, reply.reasoning, reply.finish_reason)
            code = ex.code
        row = self._row(conv, turn, code, reply, prompt_text)
        row["reasoning"] = ex.reasoning
        if self.prompt.reply == "core":
            row["core"] = ex.code
        if code is None:
            row["reasons"] = [ex.reason]
            self.counts[ex.reason] += 1
        conv.rows.append(row)
        self.counts["prompt_tokens"] += reply.prompt_tokens or 0
        self.counts["completion_tokens"] += reply.completion_tokens or 0
        if row.get("cost_usd"):
            self.counts["cost_microusd"] += round(row["cost_usd"] * 1e6)

    def _row(self, conv: Conversation, turn: int, code: str | None, reply: Reply,
             prompt_text: str) -> dict:
        ref = conv.ref
        row = {k: v for k, v in ref.items() if k not in STALE}
        parent = conv.last
        row.update(
            id=content_hash(ref["pytorch_code"], code if code is not None else reply.content),
            kernel_code=code, original_kernel_code=reply.content or None,
            backend=self.backend, generator=reply.model or self.model, model=self.model,
            ref_id=ref.get("id") or content_hash(ref["pytorch_code"]), sample=conv.sample,
            turn=turn, parent_id=parent["id"] if parent else None,
            messages=json.dumps(conv.messages), prompt=prompt_text,
            prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
            latency_s=round(reply.latency_s, 4), cost_usd=self._cost(reply),
            sampling=json.dumps({**self.sampling.to_json(), "seed": conv.sample}),
            reasons=[], feedback=None)
        return row

    def _cost(self, reply: Reply) -> float | None:
        if not self.prices or reply.prompt_tokens is None:
            return None
        return ((reply.prompt_tokens or 0) * self.prices["input"]
                + (reply.completion_tokens or 0) * self.prices["output"]) / 1e6

    def _outcome(self, ref: dict, convs: list[Conversation]) -> Outcome:
        if not ref.get("pytorch_code"):
            return Outcome.drop(dict(ref), "synth:no_reference")
        # latest turn first: where dedup later finds two turns alike, it keeps the first one
        turns = sorted((r for c in convs for r in c.rows), key=lambda r: (-r["turn"], r["sample"]))
        kept = [r for r in turns if r.get("kernel_code")]
        failed = [r for r in turns if not r.get("kernel_code")]
        out = Outcome.keep(*kept)
        if failed:
            out.dropped, out.reasons = failed[0], list(failed[0]["reasons"])
            out.also_dropped = [{"row": r, "reasons": list(r["reasons"])} for r in failed[1:]]
        return out


def _prices(prices: dict | None) -> dict | None:
    """{input, output}: dollars per million prompt and completion tokens."""
    if prices is None:
        return None
    try:
        got = {"input": float(prices["input"]), "output": float(prices["output"])}
    except (KeyError, TypeError, ValueError):
        raise BadInput(f"prices must be {{input: X, output: Y}} in dollars per million tokens, "
                       f"got {prices!r}", fix="e.g. prices: {input: 0.27, output: 1.10}") from None
    if min(got.values()) < 0:
        raise BadInput("prices cannot be negative", fix="dollars per million tokens, >= 0")
    return got
