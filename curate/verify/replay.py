"""`curate replay`: run a row's verification again from its record alone (the row's programs
plus the settings its record names) and say whether then and now agree: the same status and,
on the same kind of device, a speedup within the noise of the recorded interval.

    from curate.verify.replay import find_rows, replay
    for r in replay(find_rows("build", ["3f2a9c1d"])):
        print(r.id, r.agree, r.why)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput
from ..tableio import read_rows
from .record import SETTINGS, read

# between two runs on one machine a speed moves by more than one run's interval says: on a
# shared CPU a process pair carries a speed factor of its own (config.RETIME_BAND), on a GPU
# clocks and neighbours move it a few percent
NOISE = {"cpu": 0.20, "cuda": 0.05}
MIN_PREFIX = 6
FIGURES = ("status", "reasons", "error", "max_abs_err", "max_rel_err", "speedup",
           "speedup_ci_low", "speedup_ci_high")


@dataclass
class Replayed:
    id: str
    then: dict
    now: dict = field(default_factory=dict)
    agree: bool = False
    why: str = ""


def tables_of(path: Path) -> list[Path]:
    """The tables a build directory holds, kept pairs first (a pushed dataset's shards are the
    same `data/` layout), then every stage's output, newest first, then the rejected rows."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise BadInput("no such table or build directory", path=str(path),
                       fix="name a .parquet/.jsonl table, a build directory or a downloaded "
                           "dataset folder (with data/train-*.parquet)")
    found = sorted((path / "data").glob("*.parquet")) + \
        sorted((path / "stages").glob("*.parquet"), reverse=True) + \
        [p for p in (path / "rejected.parquet",) if p.exists()] + \
        sorted(p for p in path.glob("*.parquet") if p.name != "rejected.parquet")
    if not found:
        raise BadInput("holds no table", path=str(path),
                       fix="run `curate build` into it, or name a table")
    return found


def find_rows(path: str | Path, ids: list[str]) -> list[dict]:
    """The rows named by `ids` (a full id or a unique prefix of at least 6 characters), each from
    the first table of `path` that holds it with a verification record."""
    path = Path(path)
    want = {i: None for i in ids}
    for table in tables_of(path):
        rows = read_rows(table)
        for i in [i for i, v in want.items() if v is None]:
            want[i] = _match(rows, i, table)
        if all(v is not None for v in want.values()):
            break
    missing = [i for i, v in want.items() if v is None]
    if missing:
        raise BadInput(f"no row with a verification record has id {missing[0]!r}",
                       path=str(path), fix="give a row id (or a unique prefix of at least "
                       f"{MIN_PREFIX} characters) of a row that verify wrote")
    return [want[i] for i in ids]


def _match(rows: list[dict], ident: str, table: Path) -> dict | None:
    hits = [(n, r) for n, r in enumerate(rows) if r.get("id") == ident]
    if not hits and len(ident) >= MIN_PREFIX:
        hits = [(n, r) for n, r in enumerate(rows) if str(r.get("id") or "").startswith(ident)]
    if len(hits) > 1:
        raise BadInput(f"{len(hits)} rows have ids starting {ident!r}", path=str(table),
                       row=hits[0][0], fix="give more characters of the id")
    if not hits:
        return None
    n, row = hits[0]
    if read(row.get("verification")) is None:
        return None   # an earlier stage's copy, before verify: look further
    if not row.get("pytorch_code") or not row.get("kernel_code"):
        raise BadInput("the row lacks its programs (pytorch_code, kernel_code)", path=str(table),
                       row=n, fix="replay from a table that keeps every column")
    return row


def replay(rows: list[dict], device: str | None = None, sandbox: str = "auto",
           cache_dir: str | None = None) -> list[Replayed]:
    """Verify `rows` again with the settings of their records (rows recorded with different
    settings run in separate verifiers), on `device` or the recorded one."""
    from .engine import Verifier
    groups: dict[tuple, list[int]] = {}
    for n, row in enumerate(rows):
        groups.setdefault(_settings_key(row, device), []).append(n)
    out: list[Replayed | None] = [None] * len(rows)
    for key, members in groups.items():
        options = {**dict(key), "sandbox": sandbox}
        options.update({"cache_dir": cache_dir} if cache_dir else {})
        with Verifier(**options) as v:
            for i, res in v.verify([_program(rows[n]) for n in members]):
                n = members[i]
                out[n] = compare(rows[n], {k: getattr(res, k) for k in FIGURES},
                                 options["device"], read(res.verification) or {})
    return out


def _settings_key(row: dict, device: str | None) -> tuple:
    s = dict(read(row["verification"]).get("settings") or {})
    s.pop("backend", None)
    s = {k: v for k, v in s.items() if k in SETTINGS and v is not None}
    if device:
        s["device"] = device
    return tuple(sorted(s.items()))


def _program(row: dict) -> dict:
    """What verify reads of the row: its programs and what says how they were made."""
    return {k: row.get(k) for k in ("id", "pytorch_code", "kernel_code", "backend", "generator",
                                    "source")}


def then_of(row: dict) -> dict:
    rec = read(row.get("verification")) or {}
    got = rec.get("outcome") or {}
    timing = rec.get("timing") or {}
    low, high = (timing.get("interval") or [None, None])[:2]
    errs = rec.get("correctness") or {}
    return {"status": got.get("status", row.get("status")),
            "reasons": got.get("reasons", row.get("reasons") or []),
            "error": got.get("error", row.get("error")),
            "max_abs_err": errs.get("max_abs_err", row.get("max_abs_err")),
            "max_rel_err": errs.get("max_rel_err", row.get("max_rel_err")),
            "speedup": timing.get("speedup", row.get("speedup")),
            "speedup_ci_low": low if low is not None else row.get("speedup_ci_low"),
            "speedup_ci_high": high if high is not None else row.get("speedup_ci_high"),
            "device": rec.get("device") or {}}


def compare(row: dict, now: dict, device: str, now_rec: dict) -> Replayed:
    then = then_of(row)
    now = {**now, "device": now_rec.get("device") or {}}
    r = Replayed(id=str(row.get("id")), then=then, now=now)
    if then["status"] != now["status"]:
        r.why = f"status {then['status']} then, {now['status']} now"
        return r
    r.agree, r.why = speed_agrees(then, now, device)
    return r


def speed_agrees(then: dict, now: dict, device: str) -> tuple[bool, str]:
    if then.get("speedup") is None and now.get("speedup") is None:
        return True, "same status (no speed measured)"
    if then["device"].get("kind") != now["device"].get("kind") or \
            then["device"].get("gpu") != now["device"].get("gpu"):
        return True, "same status; speed not compared (measured on another device)"
    if then.get("speedup") is None or now.get("speedup") is None:
        return False, "same status; speed measured only " + ("now" if then.get("speedup") is
                                                              None else "then")
    noise = NOISE.get(device, NOISE["cuda"])
    low = (then.get("speedup_ci_low") or then["speedup"]) * (1 - noise)
    high = (then.get("speedup_ci_high") or then["speedup"]) * (1 + noise)
    # two measurements agree when their intervals meet: now's interval carries its own noise
    # (a credit by the parent's clock moves between process pairs), not only then's
    now_low = now.get("speedup_ci_low") or now["speedup"]
    now_high = now.get("speedup_ci_high") or now["speedup"]
    if now_low <= high and now_high >= low:
        return True, f"same status; speedup within the interval's noise (+-{noise:.0%})"
    return False, (f"same status; speedup {now['speedup']:.3g} [{now_low:.3g}, "
                   f"{now_high:.3g}] outside [{low:.3g}, {high:.3g}] (the interval then, "
                   f"+-{noise:.0%})")
