"""The card's figures (PNG, matplotlib Agg): speedup histogram and rejections.

Labels are wrapped, never cut, and the bars of a panel add up to the count its title states.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .facts import Facts  # noqa: E402

BACKEND_COLORS = {"cuda": "#76b900", "triton": "#1f77b4", "cpp": "#ff7f0e"}
DPI = 110


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
    n = len(values)
    what = f"the {n} kept pairs" if n == facts.kept else \
        f"the {n} kept pairs with a measured speedup (of {facts.kept})"
    ax.set_title(_wrap(f"Speedup of {what} on {facts.where()}", 80), fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _wrap(label: str, width: int = 44) -> str:
    """Break a long label into lines after separators (space : . / _), never dropping text."""
    lines, line = [], ""
    for piece in re.findall(r"[^ :./_]+[ :./_]?|[ :./_]", label):
        if line and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    return "\n".join(lines + [line.rstrip()] if line else lines)


def _bars(ax, labels: list[str], counts: list[int], color: str, rows: int) -> None:
    """Horizontal bars, largest on top, one slot per row of the tallest panel (even bar size)."""
    ys = [rows - 1 - i for i in range(len(labels))]
    labels = [_wrap(lb) for lb in labels]
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
    """Why rows were dropped: one bar per stage and reason, each row counted once (the bars add
    up to the title's count); and, where verify ran, which failing gates fired."""
    labels, counts = _dropped_bars(facts, top)
    caught: dict[str, int] = {}
    for r in facts.caught():
        caught[r["reason"]] = caught.get(r["reason"], 0) + r["count"]
    caught_top = sorted(caught.items(), key=lambda kv: -kv[1])[:top]
    panels = 2 if caught_top else 1
    lines = max([_wrap(lb).count("\n") + 1 for lb in labels + [k for k, _ in caught_top]] + [1])
    rows = max(len(labels), len(caught_top), 3)
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 1.0 + 0.32 * rows * lines),
                             dpi=DPI, squeeze=False)
    ax = axes[0][0]
    if not labels:
        ax.text(0.5, 0.5, "no row was dropped", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        _bars(ax, labels, counts, "#9467bd", rows)
        ax.set_xlabel("rows dropped (each row once, by the stage that dropped it)")
    ax.set_title(f"{sum(counts)} rows dropped, by stage and reason", fontsize=10)
    if caught_top:
        ax2 = axes[0][1]
        _bars(ax2, [k for k, _ in caught_top], [v for _, v in caught_top], "#d62728", rows)
        ax2.set_xlabel("failed rows carrying the reason (a row can carry several)")
        ax2.set_title("Failing gates and checks that fired", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def _dropped_bars(facts: Facts, top: int) -> tuple[list[str], list[int]]:
    """The largest (stage, reason) groups of dropped rows and one bar for the rest."""
    dropped = facts.drop_labels()
    shown = dropped[:top - 1] if len(dropped) > top else dropped
    labels = [f"{r['stage']}: {r['reason']}" for r in shown]
    counts = [r["count"] for r in shown]
    if len(dropped) > len(shown):
        labels.append(f"{len(dropped) - len(shown)} other reasons")
        counts.append(sum(r["count"] for r in dropped[len(shown):]))
    return labels, counts


PLOTS = (("speedup_histogram", speedup_histogram), ("rejections", rejections_chart))


def render_all(facts: Facts, assets: Path) -> dict[str, str]:
    """Write every figure into `assets`; return name -> path relative to the card."""
    assets.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, fn in PLOTS:
        p = fn(facts, assets / f"{name}.png")
        out[name] = f"{assets.name}/{p.name}"
    for old in assets.glob("*.png"):  # a figure this version no longer draws is not published
        if f"{assets.name}/{old.name}" not in out.values():
            old.unlink()
    return out
