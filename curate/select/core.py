"""Selection after verify (ConCuR's recipe): among the verified samples of each problem, keep
the fastest, the most concise of those near the fastest, or the first.

The table work is polars: one small frame of what selection reads (problem, status, speedup,
reasoning length, turn, sample), ranked within each problem by a window expression.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import NotAvailable
from ..record import content_hash

RULES = ("fastest", "concise", "first")


@dataclass
class Selection:
    keep: list[bool]
    reasons: list[str | None]   # why a row was dropped (None: kept)
    stats: dict = field(default_factory=dict)


def _polars():
    try:
        import polars as pl
    except ModuleNotFoundError:
        raise NotAvailable("select needs polars, a dependency of curate: "
                           "pip install polars") from None
    return pl


def frame(rows: list[dict]):
    """What selection reads of each row, one row per input row (`i` is its index)."""
    pl = _polars()
    return pl.DataFrame({
        "i": list(range(len(rows))),
        "problem": [r.get("ref_id") or content_hash(r.get("pytorch_code")) for r in rows],
        "verified": [r.get("status") == "verified" for r in rows],
        "speedup": [_num(r.get("speedup")) for r in rows],
        "reasoning_len": [len(r.get("reasoning") or "") for r in rows],
        "turn": [int(r.get("turn") or 0) for r in rows],
        "sample": [int(r.get("sample") or 0) for r in rows],
    }, schema={"i": pl.Int64, "problem": pl.Utf8, "verified": pl.Boolean,
               "speedup": pl.Float64, "reasoning_len": pl.Int64, "turn": pl.Int64,
               "sample": pl.Int64})


def select(rows: list[dict], by: str = "fastest", per_problem: int = 1,
           within: float = 0.1) -> Selection:
    """Keep `per_problem` verified rows of each problem by `by`.

    fastest: highest speedup (unmeasured speed last); concise: shortest reasoning among those
    whose speedup is at least (1 - within) x the problem's best (all of them where no speed was
    measured); first: the earliest turn, then the lowest sample index."""
    if by not in RULES:
        raise ValueError(f"by must be one of {RULES}, not {by!r}")
    pl = _polars()
    df = frame(rows)
    ok = df.filter(pl.col("verified"))
    best = pl.col("speedup").max().over("problem")
    if by == "concise":
        near = pl.col("speedup").is_null() | best.is_null() | \
            (pl.col("speedup") >= best * (1.0 - within))
        ok = ok.filter(near)
    order = {"fastest": (["speedup", "reasoning_len", "turn", "sample"], [True, False, False, False]),
             "concise": (["reasoning_len", "speedup", "turn", "sample"], [False, True, False, False]),
             "first": (["turn", "sample"], [False, False])}[by]
    ranked = ok.sort(order[0], descending=order[1], nulls_last=True).with_columns(
        rank=pl.int_range(pl.len()).over("problem"))
    chosen = set(ranked.filter(pl.col("rank") < per_problem)["i"].to_list())
    near_best = set(ok["i"].to_list())
    keep, reasons = [], []
    for i, verified in enumerate(df["verified"].to_list()):
        keep.append(i in chosen)
        reasons.append(None if i in chosen else "select:unverified" if not verified
                       else f"select:not_chosen:{by}" if i in near_best
                       else f"select:slower_than_best:{within:g}")
    problems = df["problem"].n_unique()
    with_verified = ok["problem"].n_unique() if by != "concise" else \
        df.filter(pl.col("verified"))["problem"].n_unique()
    stats = {"rule": by, "per_problem": per_problem, "rows": len(rows), "problems": problems,
             "problems_with_verified": with_verified, "verified": int(df["verified"].sum()),
             "kept": len(chosen)}
    if by == "concise":
        stats["within"] = within
    return Selection(keep, reasons, stats)


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None  # NaN: not measured
