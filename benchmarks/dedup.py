"""Dedup benchmark: recall, precision, seconds and peak memory on a corpus with planted duplicates.

    python benchmarks/dedup.py                 # 100,000 programs (~2-3 minutes on 2 cores)
    python benchmarks/dedup.py --n 20000       # quicker

The corpus is KernelBench-like programs generated from random templates (imports, helper
functions, a Model class, constants, get_inputs/get_init_inputs), ~1.2 KB each, among which near
duplicates are planted: renamed identifiers, reordered functions, added comments, changed
constants, and mixes of these. Ground truth is the exact Jaccard similarity of token-shingle
sets (curate's tokens, 5-shingles) on a sample of pairs: every planted pair, every pair a method
reports, and random pairs. A pair is a duplicate when its similarity reaches the threshold.

- recall: of the ground-truth duplicate pairs, the share that a method put in one cluster;
- precision: of the rows a method dropped, the share whose similarity to the row it names as
  the original (dup_of) reaches the threshold.

The baseline runs in the same process on the same corpus: one process, regex tokens, 5-gram
shingles, `MinHash.update_batch` (datasketch's default SHA-1 hashing) per program, and
`MinHashLSH` query-then-insert at the threshold; a program with a candidate is a duplicate of
the first candidate. Results are printed and written to benchmarks/results/dedup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from curate.dedup import tokens as tok  # noqa: E402
from curate.dedup.core import dedup  # noqa: E402
from curate.dedup.minhash import SketchConfig, default_workers, jaccard, shingle_set  # noqa: E402

THRESHOLD = 0.8

# --- the corpus ---------------------------------------------------------------------------------

WORDS = """alpha beta gamma delta sigma omega kappa theta lambda zeta tau rho phi psi chi eta iota
mu nu xi pi upsilon epsilon omicron acc agg aux base bias block buf cache cell chan coef core
ctx data deg depth diff dim dst edge elem enc dec embed err exp feat filt flow gain gate grad
grid head hid hist idx inp key kern last layer left len level lin loc lo hi mask max mean mid
min mix mod mom norm num obs off out pad par peak pool pos pre prev proj qry rate ratio raw
reg res right row scale score seg seq shift sign size skip slope slot span src stat step
stride sum tail temp tile tmp top val var vec view warp weight width win work""".split()

UNARY = ["torch.relu({x})", "torch.sigmoid({x})", "torch.tanh({x})", "F.gelu({x})",
         "F.silu({x})", "F.softplus({x})", "torch.exp({x})", "torch.abs({x})",
         "F.leaky_relu({x}, {c})", "torch.clamp({x}, min={c}, max={d})", "F.elu({x}, alpha={c})",
         "F.hardtanh({x}, min_val=-{c}, max_val={d})", "torch.log1p(torch.abs({x}))",
         "{x} * torch.sigmoid({x})", "F.softmax({x}, dim={i})", "F.log_softmax({x}, dim={i})",
         "torch.cumsum({x}, dim={i})", "{x} / (1.0 + torch.abs({x}))", "torch.erf({x})",
         "{x}.pow({c})", "torch.rsqrt({x} * {x} + {c})", "F.dropout({x}, p={c}, training=False)"]
BINARY = ["{x} + {y}", "{x} * {y}", "{x} - {y}", "torch.maximum({x}, {y})",
          "torch.minimum({x}, {y})", "torch.where({x} > {y}, {x}, {y})", "{x} * {c} + {y}",
          "torch.addcmul({x}, {y}, {y}, value={c})", "torch.lerp({x}, {y}, {c})"]
REDUCE = ["torch.mean({x}, dim={i}, keepdim=True)", "torch.sum({x}, dim={i}, keepdim=True)",
          "torch.amax({x}, dim={i}, keepdim=True)", "torch.std({x}, dim={i}, keepdim=True)",
          "torch.norm({x}, dim={i}, keepdim=True)", "torch.var({x}, dim={i}, keepdim=True)"]
LAYERS = ["nn.Linear({a}, {b})", "nn.Conv1d({a}, {b}, kernel_size={k}, padding={p})",
          "nn.LayerNorm({a})", "nn.BatchNorm1d({a})", "nn.GroupNorm({g}, {a})",
          "nn.Dropout(p={c})", "nn.Embedding({a}, {b})", "nn.GRUCell({a}, {b})"]


def _name(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"


def _const(rng: random.Random) -> str:
    return rng.choice([f"{rng.uniform(0.01, 3):.3f}", str(rng.randint(1, 9) / 10)])


def _fill(t: str, rng: random.Random, x: str, y: str) -> str:
    return t.format(x=x, y=y, c=_const(rng), d=f"{rng.uniform(3, 9):.2f}",
                    i=rng.choice([-1, 1]))


def _expr(rng: random.Random, names: list[str]) -> str:
    kind = rng.random()
    x = rng.choice(names)
    if kind < 0.5:
        return _fill(rng.choice(UNARY), rng, x, x)
    if kind < 0.85:
        return _fill(rng.choice(BINARY), rng, x, rng.choice(names))
    return _fill(rng.choice(REDUCE), rng, x, x)


def _body(rng: random.Random, args: list[str], lines: int, indent: str) -> list[str]:
    names = list(args)
    out = []
    for _ in range(lines):
        v = _name(rng)
        out.append(f"{indent}{v} = {_expr(rng, names)}")
        names.append(v)
    out.append(f"{indent}return {names[-1]}")
    return out


def program(rng: random.Random) -> str:
    """One KernelBench-like program of ~1.2 KB."""
    helpers = []
    for _ in range(rng.randint(1, 3)):
        fname = f"_{_name(rng)}"
        args = [_name(rng) for _ in range(rng.randint(1, 2))]
        helpers.append((fname, [f"def {fname}({', '.join(args)}):"]
                        + _body(rng, args, rng.randint(2, 4), "    ")))
    d1 = _name(rng)
    d2 = _name(rng)
    while d2 == d1:
        d2 = _name(rng)
    dims = {d: rng.choice([16, 32, 64, 128, 256, 512, 1024]) for d in (d1, d2)}
    layers = []
    for _ in range(rng.randint(1, 3)):
        lname = _name(rng)
        layers.append((lname, rng.choice(LAYERS).format(
            a=d1, b=d2, k=rng.choice([1, 3, 5]), p=rng.choice([0, 1, 2]), g=rng.choice([2, 4]),
            c=_const(rng))))
    x = _name(rng)
    fwd = [f"        {x} = self.{layers[0][0]}({x})"]
    names = [x]
    for _ in range(rng.randint(3, 5)):
        v = _name(rng)
        call = rng.choice(helpers)[0]
        expr = _expr(rng, names) if rng.random() < 0.6 else f"{call}({rng.choice(names)})"
        fwd.append(f"        {v} = {expr}")
        names.append(v)
    doc = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))).capitalize()
    cls = (["class Model(nn.Module):", f'    """{doc}."""', "",
            f"    def __init__(self, {d1}, {d2}):",
            "        super().__init__()"]
           + [f"        self.{n} = {layer}" for n, layer in layers]
           + ["", f"    def forward(self, {x}):"] + fwd + [f"        return {names[-1]}"])
    consts = [f"batch_size = {rng.choice([8, 16, 32, 64, 128])}"] + \
             [f"{n} = {v}" for n, v in dims.items()]
    inputs = ["def get_inputs():", f"    return [torch.randn(batch_size, {d1})]", "",
              "def get_init_inputs():", f"    return [{d1}, {d2}]"]
    blocks = ([["import torch", "import torch.nn as nn", "import torch.nn.functional as F"]]
              + [h for _, h in helpers] + [cls, consts, inputs])
    return "\n\n\n".join("\n".join(b) for b in blocks) + "\n"


_IDENT = re.compile(r"\b[a-z]+_[a-z]+\b")
_NUMBER = re.compile(r"(?<![\w.])\d+\.\d+")


def rename(code: str, rng: random.Random, share: float) -> str:
    names = sorted(set(_IDENT.findall(code)))
    chosen = {n: f"{n}_{rng.choice(WORDS)}" for n in names if rng.random() < share}
    return _IDENT.sub(lambda m: chosen.get(m.group(0), m.group(0)), code)


def reorder(code: str, rng: random.Random) -> str:
    blocks = code.strip("\n").split("\n\n\n")
    head, body = blocks[:1], blocks[1:]
    rng.shuffle(body)
    return "\n\n\n".join(head + body) + "\n"


def comment(code: str, rng: random.Random, share: float) -> str:
    out = []
    for line in code.split("\n"):
        if line.strip() and rng.random() < share:
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}# {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)}")
        out.append(line)
    return "\n".join(out)


def constants(code: str, rng: random.Random, share: float) -> str:
    return _NUMBER.sub(lambda m: f"{rng.uniform(0.01, 3):.3f}" if rng.random() < share
                       else m.group(0), code)


EDITS = {
    "rename": lambda c, r: rename(c, r, r.uniform(0.05, 0.3)),
    "reorder": lambda c, r: reorder(c, r),
    "comments": lambda c, r: comment(c, r, r.uniform(0.1, 0.5)),
    "constants": lambda c, r: constants(c, r, r.uniform(0.2, 0.8)),
    "mixed": lambda c, r: constants(comment(reorder(c, r), r, 0.2), r, 0.3),
}


def corpus(n: int, dup_share: float, seed: int) -> tuple[list[str], list[tuple[int, int]],
                                                          dict[str, int]]:
    """n programs; about dup_share of them are edited copies of others. Returns the programs,
    the planted (original, copy) pairs and the count of each kind of edit."""
    rng = random.Random(seed)
    n_orig = int(n * (1 - dup_share))
    codes = [program(rng) for _ in range(n_orig)]
    planted, kinds = [], dict.fromkeys(EDITS, 0)
    while len(codes) < n:
        base = rng.randrange(n_orig)
        kind = rng.choice(list(EDITS))
        kinds[kind] += 1
        planted.append((base, len(codes)))
        codes.append(EDITS[kind](codes[base], rng))
    order = list(range(n))
    rng.shuffle(order)  # copies are not all at the end
    where = {old: new for new, old in enumerate(order)}
    return ([codes[i] for i in order], [(where[a], where[b]) for a, b in planted], kinds)


# --- the baseline -------------------------------------------------------------------------------

_REGEX_TOKENS = re.compile(r"\w+|[^\w\s]")


def baseline(codes: list[str], threshold: float, num_perm: int = 128) -> dict[int, int]:
    """Straightforward datasketch use: returns dropped row -> the row it duplicates."""
    from datasketch import MinHash, MinHashLSH
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    dup_of: dict[int, int] = {}
    for i, code in enumerate(codes):
        toks = _REGEX_TOKENS.findall(code)
        shingles = {" ".join(toks[j:j + 5]).encode() for j in range(max(1, len(toks) - 4))}
        m = MinHash(num_perm=num_perm)
        m.update_batch(shingles)
        found = lsh.query(m)
        if found:
            dup_of[i] = min(found)
        else:
            lsh.insert(i, m)
    return dup_of


# --- measuring ----------------------------------------------------------------------------------

class PeakRSS:
    """Peak resident memory (MiB) and CPU seconds of this process and its descendants, sampled
    every 20 ms. CPU time says what a method costs even when other work shares the machine."""

    def __init__(self):
        self.peak = 0.0
        self.cpu_seconds = 0.0
        self._cpu_start: dict[str, float] = {}
        self._cpu_last: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _rss(pid: int | str = "self") -> int:
        try:
            with open(f"/proc/{pid}/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    @staticmethod
    def _children(pid: str) -> list[str]:
        out = []
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    out += fh.read().split()
        except OSError:
            pass
        return out

    def _tree(self) -> list[str]:
        """This process's descendants (the forkserver's workers are its grandchildren)."""
        todo, seen = [str(os.getpid())], []
        while todo:
            pid = todo.pop()
            for c in self._children(pid):
                if c not in seen:
                    seen.append(c)
                    todo.append(c)
        return seen

    @staticmethod
    def _cpu(pid: str) -> float | None:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def _sample(self, first: bool = False):
        pids = [str(os.getpid())] + self._tree()
        total = self._rss() + sum(self._rss(c) for c in pids[1:])
        self.peak = max(self.peak, total / 2 ** 20)
        for pid in pids:
            cpu = self._cpu(pid)
            if cpu is not None:
                if first:
                    self._cpu_start[pid] = cpu
                self._cpu_last[pid] = cpu

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.02)

    def __enter__(self):
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        self.cpu_seconds = sum(v - self._cpu_start.get(pid, 0.0)
                               for pid, v in self._cpu_last.items())


def clusters_from_links(n: int, links: dict[int, int]) -> np.ndarray:
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b in links.items():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(i) for i in range(n)])


def hardware() -> dict:
    from curate.verify.machine import cpu_model
    cpu = cpu_model() or platform.processor()
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"cpu": cpu, "cores": default_workers(), "memory_gib": mem,
            "load_average_1min_at_start": load}


def versions() -> dict:
    from importlib.metadata import version
    out = {"python": platform.python_version()}
    for pkg in ("datasketch", "numpy", "tree-sitter", "tree-sitter-python"):
        try:
            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dup-share", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--random-pairs", type=int, default=200_000)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dedup.json"))
    args = ap.parse_args()
    hw = hardware()
    import datasketch  # noqa: F401  (imported before timing: both methods use it)
    t = time.monotonic()
    codes, planted, kinds = corpus(args.n, args.dup_share, args.seed)
    print(f"corpus: {len(codes)} programs, {np.mean([len(c) for c in codes]):.0f} bytes on "
          f"average, {len(planted)} planted copies {kinds} ({time.monotonic() - t:.1f}s)")
    cfg = SketchConfig()
    workers = args.workers or default_workers()
    rows = [{"id": f"r{i}", "pytorch_code": c} for i, c in enumerate(codes)]

    results = {}
    # curate
    with PeakRSS() as mem:
        t0 = time.monotonic()
        res = dedup(rows, jaccard_threshold=THRESHOLD, on="pytorch", cfg=cfg, workers=workers)
        secs = time.monotonic() - t0
    ids = {r["id"]: i for i, r in enumerate(rows)}
    links = {i: ids[d.dup_of] for i, d in enumerate(res.decisions) if d.dup_of}
    results["curate"] = {"seconds": secs, "peak_rss_mib": mem.peak, "links": links,
                         "cpu_seconds": mem.cpu_seconds, "stats": res.stats}
    print(f"curate: {secs:.1f}s, {mem.cpu_seconds:.1f} CPU s, {len(links)} dropped, peak RSS "
          f"{mem.peak:.0f} MiB (process and {workers} workers)")
    if not args.skip_baseline:
        with PeakRSS() as mem:
            t0 = time.monotonic()
            links = baseline(codes, THRESHOLD)
            secs = time.monotonic() - t0
        results["baseline"] = {"seconds": secs, "peak_rss_mib": mem.peak, "links": links,
                               "cpu_seconds": mem.cpu_seconds}
        print(f"baseline: {secs:.1f}s, {mem.cpu_seconds:.1f} CPU s, {len(links)} dropped, "
              f"peak RSS {mem.peak:.0f} MiB")

    # ground truth: exact Jaccard similarity on a sample of pairs
    t = time.monotonic()
    rng = np.random.default_rng(args.seed)
    pairs = set()
    by_base: dict[int, list[int]] = {}
    for a, b in planted:
        pairs.add((min(a, b), max(a, b)))
        by_base.setdefault(a, []).append(b)
    for copies in by_base.values():  # copies of one original are pairs too
        for x in range(len(copies)):
            for y in range(x + 1, len(copies)):
                pairs.add((min(copies[x], copies[y]), max(copies[x], copies[y])))
    rand = rng.integers(0, len(codes), (args.random_pairs, 2))
    pairs.update((int(min(a, b)), int(max(a, b))) for a, b in rand if a != b)
    for r in results.values():
        pairs.update((min(a, b), max(a, b)) for a, b in r["links"].items())
    need = sorted({i for p in pairs for i in p})
    sets = {i: shingle_set(codes[i], cfg) for i in need}
    truth = {p: jaccard(sets[p[0]], sets[p[1]]) for p in pairs}
    positives = [p for p, j in truth.items() if j >= THRESHOLD]
    random_pos = sum(1 for a, b in rand if a != b and truth[(min(a, b), max(a, b))] >= THRESHOLD)
    planted_j = np.array([truth[(min(a, b), max(a, b))] for a, b in planted])
    print(f"ground truth: {len(pairs)} pairs, {len(positives)} at Jaccard >= {THRESHOLD} "
          f"({random_pos} among {args.random_pairs} random pairs); planted copies: "
          f"{(planted_j >= THRESHOLD).mean():.1%} at or above the threshold, "
          f"{((planted_j > THRESHOLD - 0.05) & (planted_j < THRESHOLD + 0.05)).mean():.1%} "
          f"within 0.05 of it ({time.monotonic() - t:.1f}s)")

    report = {"benchmark": "dedup", "n_programs": len(codes),
              "mean_program_bytes": round(float(np.mean([len(c) for c in codes])), 1),
              "planted_copies": len(planted), "planted_kinds": kinds, "threshold": THRESHOLD,
              "workers": workers, "ground_truth_pairs": len(pairs),
              "ground_truth_positive_pairs": len(positives),
              "random_pairs_sampled": args.random_pairs, "random_pairs_positive": random_pos,
              "planted_share_above_threshold": round(float((planted_j >= THRESHOLD).mean()), 4),
              "hardware": hw, "versions": versions(), "methods": {}}
    print(f"\n{'method':10s} {'seconds':>8s} {'CPU s':>7s} {'recall':>7s} {'precision':>9s} "
          f"{'dropped':>8s} {'peak MiB':>9s}")
    for name, r in results.items():
        cl = clusters_from_links(len(codes), r["links"])
        recall = float(np.mean([cl[a] == cl[b] for a, b in positives])) if positives else 1.0
        drops = [truth[(min(a, b), max(a, b))] >= THRESHOLD for a, b in r["links"].items()]
        precision = float(np.mean(drops)) if drops else 1.0
        entry = {"seconds": round(r["seconds"], 2), "cpu_seconds": round(r["cpu_seconds"], 2),
                 "recall": round(recall, 4),
                 "precision": round(precision, 4), "dropped": len(r["links"]),
                 "peak_rss_mib": round(r["peak_rss_mib"], 1)}
        if "stats" in r:
            entry["stats"] = r["stats"]
        report["methods"][name] = entry
        print(f"{name:10s} {r['seconds']:8.1f} {r['cpu_seconds']:7.1f} {recall:7.3f} {precision:9.3f} "
              f"{len(r['links']):8d} {r['peak_rss_mib']:9.0f}")
    if "baseline" in results:
        speedup = results["baseline"]["seconds"] / results["curate"]["seconds"]
        cpu_ratio = results["baseline"]["cpu_seconds"] / max(results["curate"]["cpu_seconds"],
                                                             1e-9)
        report["speedup_over_baseline"] = round(speedup, 2)
        report["cpu_ratio_baseline_over_curate"] = round(cpu_ratio, 2)
        print(f"\ncurate is {speedup:.1f}x faster than the baseline in this run (wall clock) "
              f"and uses {cpu_ratio:.1f}x less CPU time")

    # tokenizers on a sample: the tree-sitter definition and the lexer
    sample = codes[:2000]
    t = time.process_time()
    for c in sample:
        tok.ts_tokens(c)
    ts_us = (time.process_time() - t) / len(sample) * 1e6
    t = time.process_time()
    for c in sample:
        tok.lex_tokens(c)
    lex_us = (time.process_time() - t) / len(sample) * 1e6
    agree = sum(tok.ts_tokens(c) == tok.lex_tokens(c) for c in sample[:500])
    report["tokenizer_cpu_us_per_program"] = {"tree-sitter": round(ts_us, 1),
                                              "fast": round(lex_us, 1),
                                              "agree_on_500": agree}
    print(f"tokens, CPU per program: tree-sitter {ts_us:.0f} us, fast lexer {lex_us:.0f} us "
          f"(identical on {agree}/500)")
    try:
        report["load_average_1min_at_end"] = os.getloadavg()[0]
    except OSError:
        pass
    report["note"] = ("wall-clock seconds depend on what else the machine runs (the load "
                      "averages); CPU seconds do not")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
