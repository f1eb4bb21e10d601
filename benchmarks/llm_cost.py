"""What a real synth-llm run over KernelBench levels 1-3 would cost: requests and tokens, and
dollars at prices given on the command line.

Prompt tokens come from the real templates (pipelines/prompts/) rendered for every problem;
completion tokens from the sizes of the replay replies (tests/fixtures/llm_replay/, their
`<think>` sections and reasoning sidecars included). A turn after the first resends the whole
conversation: the first prompt, the reply and the feedback (rendered from the real feedback
block for a compiler error, a mismatch and a speedup, averaged). Tokens are characters / 4,
the average of code and English under BPE tokenizers such as cl100k (no tokenizer can be
fetched here); --chars-per-token changes it.

    python benchmarks/llm_cost.py --kernelbench ../shared/data/kernelbench --samples 4 --turns 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curate.synth.llm.prompts import Prompt, Verdict  # noqa: E402

LEVELS = ("level1", "level2", "level3")
# a typical compiler error tail as refine.py sends it (nvcc and ninja output), ~1.2 kB
COMPILER_ERROR = ("/tmp/ext/cuda.cu(41): error: identifier \"blockDim\" is undefined\n" * 12
                  + "ninja: build stopped: subcommand failed.\n")


def tokens(chars: float, cpt: float) -> int:
    return round(chars / cpt)


def problems(kb: Path) -> dict[str, list[str]]:
    out = {}
    for level in LEVELS:
        files = sorted((kb / level).glob("*.py"))
        if not files:
            raise SystemExit(f"no problems in {kb / level}: pass --kernelbench DIR")
        out[level] = [p.read_text() for p in files]
    return out


def reply_sizes(folder: Path, backend: str) -> dict[int, list[int]]:
    """Characters of every replay reply (content plus reasoning sidecar), by turn."""
    sizes: dict[int, list[int]] = {}
    for p in sorted(folder.glob(f"*/{backend}-s*-t*.md")):
        turn = int(p.stem.rsplit("-t", 1)[1])
        side = p.with_name(p.name[:-3] + ".reasoning.txt")
        n = len(p.read_text()) + (len(side.read_text()) if side.is_file() else 0)
        sizes.setdefault(turn, []).append(n)
    return sizes


def feedback_chars(prompt: Prompt, code: str) -> float:
    row = {"pytorch_code": code}
    kinds = [Verdict("compile_error", status="compile_error", error=COMPILER_ERROR),
             Verdict("incorrect", status="incorrect", max_abs_err=0.0123),
             Verdict("correct", status="verified", speedup=1.37, device="NVIDIA H200")]
    return statistics.mean(len(prompt.feedback(row, v)) for v in kinds)


def estimate(kb: Path, replay: Path, backend: str, samples: int, turns: int,
             cpt: float) -> dict:
    prompt = Prompt(None, backend)
    sizes = reply_sizes(replay, backend)
    if not sizes:
        raise SystemExit(f"no {backend} replies under {replay}")
    reply_chars = {t: statistics.mean(v) for t, v in sizes.items()}
    per_turn = [reply_chars.get(t, reply_chars[max(k for k in reply_chars if k <= t)])
                for t in range(turns)]
    levels, feedbacks = {}, []
    for level, codes in problems(kb).items():
        prompt_t = completion_t = 0
        first = [sum(len(m["content"]) for m in prompt.first({"pytorch_code": c})) for c in codes]
        fb = statistics.mean(feedback_chars(prompt, c) for c in codes[:10])
        feedbacks.append(fb)
        for chars in first:
            convo = chars
            for t in range(turns):
                prompt_t += samples * tokens(convo, cpt)
                completion_t += samples * tokens(per_turn[t], cpt)
                convo += per_turn[t] + fb
        levels[level] = {"problems": len(codes), "requests": len(codes) * samples * turns,
                         "prompt_tokens": prompt_t, "completion_tokens": completion_t,
                         "first_prompt_tokens_mean": round(statistics.mean(first) / cpt)}
    total = {k: sum(v[k] for v in levels.values())
             for k in ("problems", "requests", "prompt_tokens", "completion_tokens")}
    return {"levels": levels, "total": total,
            "reply_tokens_mean_by_turn": [round(c / cpt) for c in per_turn],
            "replay_replies": {t: len(v) for t, v in sorted(sizes.items())},
            "feedback_tokens_mean": round(statistics.mean(feedbacks) / cpt)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", default=os.environ.get("CURATE_KERNELBENCH")
                    or str(ROOT.parent / "shared" / "data" / "kernelbench"))
    ap.add_argument("--replay", default=str(ROOT / "tests" / "fixtures" / "llm_replay"))
    ap.add_argument("--backend", default="cuda", choices=["cuda", "triton"])
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--chars-per-token", type=float, default=4.0)
    ap.add_argument("--reasoning-tokens", type=int, default=8000,
                    help="also price a reasoning model that thinks this many tokens a reply "
                         "(billed as completion, not sent back in the next turn)")
    ap.add_argument("--price", nargs=3, action="append", metavar=("NAME", "IN", "OUT"),
                    help="dollars per million prompt and completion tokens (repeatable)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" /
                                         "llm_cost_kernelbench.json"))
    args = ap.parse_args()
    prices = args.price or [["deepseek-v3 (0.27/1.10)", "0.27", "1.10"],
                            ["gpt-4o (2.50/10.00)", "2.50", "10.00"]]
    est = estimate(Path(args.kernelbench), Path(args.replay), args.backend, args.samples,
                   args.turns, args.chars_per_token)
    t = est["total"]
    est["dollars"] = {name: round((t["prompt_tokens"] * float(pin)
                                   + t["completion_tokens"] * float(pout)) / 1e6, 2)
                      for name, pin, pout in prices}
    thinking = t["requests"] * args.reasoning_tokens
    est["reasoning_model"] = {"reasoning_tokens_per_reply": args.reasoning_tokens,
                              "completion_tokens": t["completion_tokens"] + thinking,
                              "dollars": {name: round((t["prompt_tokens"] * float(pin) + (
                                  t["completion_tokens"] + thinking) * float(pout)) / 1e6, 2)
                                  for name, pin, pout in prices}}
    print(f"KernelBench levels 1-3, {args.backend}, K={args.samples} samples, "
          f"T={args.turns} turns (tokens = chars / {args.chars_per_token:g})")
    print(f"{'level':<8} {'problems':>8} {'requests':>9} {'prompt tok':>12} {'compl. tok':>12}")
    for level, v in est["levels"].items():
        print(f"{level:<8} {v['problems']:>8} {v['requests']:>9} {v['prompt_tokens']:>12,} "
              f"{v['completion_tokens']:>12,}")
    print(f"{'total':<8} {t['problems']:>8} {t['requests']:>9} {t['prompt_tokens']:>12,} "
          f"{t['completion_tokens']:>12,}")
    for name, usd in est["dollars"].items():
        think = est["reasoning_model"]["dollars"][name]
        print(f"  ${usd:,.2f} at {name} $/M tokens; ${think:,.2f} with "
              f"{args.reasoning_tokens:,} reasoning tokens a reply")
    doc = {"benchmark": "llm_cost", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "backend": args.backend, "samples": args.samples, "turns": args.turns,
           "chars_per_token": args.chars_per_token, "prices_per_million": {
               n: {"input": float(a), "output": float(b)} for n, a, b in prices},
           "method": __doc__.split("\n\n")[1].replace("\n", " "), **est}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
