"""Requests per second of synth-llm's client against the loopback OpenAI server.

The server (tests/support/llmserver.py --fixed CHARS) runs in a process of its own, so that the figure
is the client's: AsyncOpenAI behind curate's semaphore, retries and reply parsing, and the
response-cache writes the step does for every reply. Streaming and whole-body replies, at the
concurrency given (64 by default).

    python benchmarks/llm_throughput.py --requests 2000 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curate.card.machine import host  # noqa: E402
from curate.synth.llm.cache import ResponseCache, reply_key  # noqa: E402
from curate.synth.llm.client import ChatClient, Sampling  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(chars: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "llmserver.py"), "--fixed",
                             str(chars), "--port", str(port)], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/models", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the loopback server did not start")


async def run(url: str, n: int, concurrency: int, stream: bool, cache: ResponseCache) -> dict:
    latencies = []
    sampling = Sampling(max_tokens=2048)
    async with ChatClient("bench", url, "k", concurrency=concurrency, timeout=60,
                          stream=stream) as client:
        async def one(i: int):
            messages = [{"role": "user", "content": f"problem {i}: make it fast " * 40}]
            reply = await client.complete(messages, sampling, seed=i)
            cache.put_reply(reply_key("bench", messages, sampling.to_json(), i),
                            reply.to_json())
            latencies.append(reply.latency_s)
        await one(-1)  # connection set up, imports warm
        latencies.clear()
        t0, cpu0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        sent = client.sent - 1
    lat = sorted(latencies)
    return {"stream": stream, "requests": n, "concurrency": concurrency,
            "seconds": round(wall, 3), "requests_per_s": round(n / wall, 1),
            "latency_p50_ms": round(1e3 * statistics.median(lat), 2),
            "latency_p99_ms": round(1e3 * lat[int(0.99 * (len(lat) - 1))], 2),
            "http_requests": sent,
            # the client's own CPU per request: what is left of a core is the server's
            "client_cpu_ms_per_request": round(1e3 * cpu / n, 2)}


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {"python": platform.python_version()}
    for pkg in ("torch", "triton", "openai", "httpx", "httpx2", "polars"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--reply-chars", type=int, default=4000,
                    help="size of each reply (a KernelBench CUDA answer is 3-6 kB)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "llm_throughput.json"))
    args = ap.parse_args()
    proc, url = start_server(args.reply_chars)
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cache = ResponseCache(os.path.join(tmp, "cache.sqlite"))
            for stream in (False, True):
                results.append(asyncio.run(run(url, args.requests, args.concurrency, stream,
                                               cache)))
            cache.close()
    finally:
        proc.terminate()
        proc.wait()
    print(f"{'mode':<8} {'requests':>8} {'conc':>5} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'client cpu ms/req':>18}")
    for r in results:
        print(f"{'stream' if r['stream'] else 'plain':<8} {r['requests']:>8} "
              f"{r['concurrency']:>5} {r['requests_per_s']:>8} {r['latency_p50_ms']:>8} "
              f"{r['latency_p99_ms']:>8} {r['client_cpu_ms_per_request']:>18}")
    doc = {"benchmark": "llm_throughput", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "reply_chars": args.reply_chars, "load_average": os.getloadavg(), "server": "tests/support/llmserver.py (ThreadingHTTPServer, "
           "its own process)", "hardware": host(), "versions": versions(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
