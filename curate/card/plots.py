"""The card's figures (PNG, matplotlib Agg): speedup histogram, per-source table, rejections."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .facts import Facts  # noqa: E402

BACKEND_COLORS = {"cuda": "#76b900", "triton": "#1f77b4", "cpp": "#ff7f0e"}
DPI = 110


def _fmt(v: float | None, spec: str = ".2f", suffix: str = "x") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def speedup_histogram(facts: Facts, path: Path) -> Path:
    """Speedups of the kept pairs on a log axis, stacked by backend, threshold marked."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=DPI)
    sp = facts.rows.get("speedup") or []
    be = facts.rows.get("backend") or [None] * len(sp)
    by_backend: dict[str, list[float]] = {}
    for v, b in zip(sp, be):
        if v is not None and v > 0:
            by_backend.setdefault(b or "?", []).append(v)
    values = [v for vs in by_backend.values() for v in vs]
    if not values:
        ax.text(0.5, 0.5, "no speedup was measured for any kept pair", ha="center",
                va="center", transform=ax.transAxes, fontsize=12)
        ax.set_axis_off()
    else:
        lo = min(values + [v for v in facts.speedups_low if v > 0]
                 + [facts.threshold or min(values)])
        hi = max(values)
        lo_e, hi_e = math.log10(lo) - 0.05, math.log10(hi) + 0.05
        if hi_e - lo_e < 0.3:
            lo_e, hi_e = lo_e - 0.15, hi_e + 0.15
        nbins = max(8, min(40, int(len(values) ** 0.5 * 2)))
        bins = [10 ** (lo_e + (hi_e - lo_e) * i / nbins) for i in range(nbins + 1)]
        names = sorted(by_backend, key=lambda b: -len(by_backend[b]))
        ax.hist([by_backend[b] for b in names], bins=bins, stacked=True,
                color=[BACKEND_COLORS.get(b, "#888888") for b in names],
                label=[f"{b} ({len(by_backend[b])})" for b in names], edgecolor="white",
                linewidth=0.5)
        ax.set_xscale("log")
        if facts.threshold:
            ax.axvline(facts.threshold, color="#c00000", linestyle="--", linewidth=1.2,
                       label=f"keep threshold {facts.threshold:g}x (applied to the 95% CI lower bound)")
        low = [v for v in facts.speedups_low if v > 0]
        if low:
            ax.hist(low, bins=bins, histtype="step", color="#222222", linewidth=1.2,
                    label=f"95% CI lower bound ({len(low)})")
        med = facts.speedup_summary()["median"]
        ax.axvline(med, color="#333333", linestyle=":", linewidth=1.2, label=f"median {med:.2f}x")
        ax.set_xlabel("speedup = reference time / kernel time (bars: median of trials; log scale)")
        ax.set_ylabel("kept pairs")
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        fmt = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x")
        ax.xaxis.set_major_formatter(fmt)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda x, _: f"{x:g}x" if f"{x:g}"[0] in "235" else ""))
        ax.tick_params(axis="x", which="both", labelsize=9)
        ax.legend(frameon=False, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        for s in ("top", "right"):
            ax.spines[s].set_visible(False)
    where = _where(facts)
    ax.set_title(f"Speedup of the {facts.kept} kept pairs{where}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _where(facts: Facts) -> str:
    gpus = [g for g, _ in facts.counter("gpu") if g != "(none)"]
    if len(gpus) == 1:
        return f" on {gpus[0]}"
    if gpus:
        return f" on {len(gpus)} device types"
    return " on the CPU" if facts.device == "cpu" else f" (device: {facts.device})"


def per_source_table(facts: Facts, path: Path) -> Path:
    """The per-source table as an image: pairs, share, backends, speedup quantiles."""
    rows = facts.per_source()
    header = ["source", "pairs", "share", "backends", "measured", "p10", "median", "p90", "max"]
    cells = [[r["source"], str(r["pairs"]), f"{r['share']:.0%}", r["backends"], str(r["measured"]),
              _fmt(r["p10"]), _fmt(r["median"]), _fmt(r["p90"]), _fmt(r["max"])] for r in rows]
    total_sp = facts.speedup_summary()
    cells.append(["all", str(facts.kept), "100%", ", ".join(f"{b} {n}" for b, n in
                                                            facts.counter("backend")),
                  str(total_sp["n"] if total_sp else 0),
                  _fmt(total_sp and total_sp["p10"]), _fmt(total_sp and total_sp["median"]),
                  _fmt(total_sp and total_sp["p90"]), _fmt(total_sp and total_sp["max"])])
    height = max(1.8, 0.45 + 0.3 * (len(cells) + 1))
    fig, ax = plt.subplots(figsize=(9, height), dpi=DPI)
    ax.set_axis_off()
    table = ax.table(cellText=cells, colLabels=header, loc="center", cellLoc="right",
                     colLoc="right")
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.auto_set_column_width(list(range(len(header))))
    table.scale(1, 1.3)
    for (r, c), cell in table.get_celld().items():
        cell.set_edgecolor("#dddddd")
        if c in (0, 3):
            cell.get_text().set_horizontalalignment("left")
        if r == 0:
            cell.set_facecolor("#f0f0f0")
            cell.get_text().set_fontweight("bold")
        elif r == len(cells):
            cell.get_text().set_fontweight("bold")
    ax.set_title("Kept pairs per source (speedup quantiles over measured pairs)", fontsize=11,
                 pad=6)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def _bars(ax, labels: list[str], counts: list[int], color: str, rows: int) -> None:
    """Horizontal bars, largest on top, one slot per row of the tallest panel (even bar size)."""
    ys = [rows - 1 - i for i in range(len(labels))]
    labels = [lb if len(lb) <= 42 else lb[:40] + "..." for lb in labels]
    bars = ax.barh(ys, counts, color=color, height=0.7)
    ax.set_yticks(ys, labels)
    ax.set_ylim(-0.6, rows - 0.4)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.bar_label(bars, padding=2, fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlim(0, max(counts) * 1.18)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)


def rejections_chart(facts: Facts, path: Path, top: int = 12) -> Path:
    """Why rows were dropped: per stage and reason, and (where verify ran) which checks fired."""
    reasons = facts.rejection_reasons()[:top]
    caught: dict[str, int] = {}
    for r in facts.caught():
        caught[r["reason"]] = caught.get(r["reason"], 0) + r["count"]
    caught_top = sorted(caught.items(), key=lambda kv: -kv[1])[:top]
    panels = 2 if caught_top else 1
    rows = max(len(reasons), len(caught_top), 3)
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 1.0 + 0.32 * rows), dpi=DPI,
                             squeeze=False)
    ax = axes[0][0]
    if not reasons:
        ax.text(0.5, 0.5, "no row was dropped", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        _bars(ax, [f"{r['stage']}: {r['reason']}" for r in reasons],
              [r["count"] for r in reasons], "#9467bd", rows)
        ax.set_xlabel("rows dropped")
    more = len(facts.rejection_reasons()) - len(reasons)
    ax.set_title(f"Rows dropped, by stage and reason ({facts.rejected_total} in all"
                 + (f"; {more} smaller not shown" if more > 0 else "") + ")", fontsize=10)
    if caught_top:
        ax2 = axes[0][1]
        _bars(ax2, [k for k, _ in caught_top], [v for _, v in caught_top], "#d62728", rows)
        ax2.set_xlabel("failed rows carrying the reason (a row can carry several)")
        ax2.set_title("Why verification failed them", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def render_all(facts: Facts, assets: Path) -> dict[str, str]:
    """Write every figure into `assets`; return name -> path relative to the card."""
    assets.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, fn in (("speedup_histogram", speedup_histogram), ("per_source", per_source_table),
                     ("rejections", rejections_chart)):
        p = fn(facts, assets / f"{name}.png")
        out[name] = f"{assets.name}/{p.name}"
    return out
