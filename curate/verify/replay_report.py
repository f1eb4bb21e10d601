"""How `curate replay` shows one row: then and now side by side, and whether they agree."""

from __future__ import annotations

import click

WIDTH = 34


def _speed(fig: dict) -> str:
    if fig.get("speedup") is None:
        return "-"
    low, high = fig.get("speedup_ci_low"), fig.get("speedup_ci_high")
    ci = f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else ""
    return f"{fig['speedup']:.3g}x{ci}"


def _where(fig: dict) -> str:
    d = fig.get("device") or {}
    return str(d.get("gpu") or d.get("cpu") or d.get("kind") or "-")


def _errors(fig: dict) -> str:
    a, r = fig.get("max_abs_err"), fig.get("max_rel_err")
    if a is None and r is None:
        return "-"
    return f"abs {_num(a)}, rel {_num(r)}"


def _num(v) -> str:
    return v if isinstance(v, str) else "-" if v is None else f"{v:.2e}"


def _error(fig: dict) -> str:
    text = (fig.get("error") or "-").strip().splitlines()
    return (text[0] if text else "-")[:WIDTH - 1]


def echo_replayed(r) -> None:
    lines = [("status", r.then.get("status") or "-", r.now.get("status") or "-"),
             ("reasons", ", ".join(r.then.get("reasons") or []) or "-",
              ", ".join(r.now.get("reasons") or []) or "-"),
             ("max err", _errors(r.then), _errors(r.now)),
             ("error", _error(r.then), _error(r.now)),
             ("speedup", _speed(r.then), _speed(r.now)),
             ("device", _where(r.then), _where(r.now))]
    click.echo(f"row {r.id}")
    click.echo(f"  {'':8}  {'then':{WIDTH}}  now")
    for name, a, b in lines:
        click.echo(f"  {name:8}  {a[:WIDTH]:{WIDTH}}  {b[:WIDTH]}")
    click.echo(f"  {'agree':8}  {'yes' if r.agree else 'NO'}: {r.why}")
