"""Held-out attacks on verify's worker (tests/fixtures/hostile/cpp, cases.json): each wraps the
honest swish-add kernel, so its true speed is its honest twin's. Whatever the attack does to the
worker (its pipes, its replies, its frames, its clock) or to the calls (answers only checks'
clones, replays answers), verify must reject the row or credit it no more than the twin's speed.

Both with and without the static gates: the attacks must not depend on being read by them.
Only the public API is used (Verifier, results' status and speedup), so these tests hold the
rebuilt verify to the same bar as the old one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.hostile_table import fixture_rows

ATTACKS = ["pipe_takeover", "reply_interpose", "native_rewrite", "frame_edit",
           "gate_clone_only", "replay_answers", "third_time"]
TWIN = "honest_swish_add"
REJECTED = ("deceptive", "incorrect", "timeout", "crashed")
# the twin's own speed moves from process pair to process pair on a shared CPU (on a loaded one,
# a single pair has measured less than half of what a neutralised attack doing the twin's work
# measured), so it is measured in TWINS fresh pairs and the fastest counts; a credited attack may
# exceed that by SLACK before it counts as credited for a deception: every attack here claims 3x
# or more, so a credited claim still lands above it
TWINS = 3
SLACK = 2.0


# the wide problem (two 1024x1024 inputs): a call takes milliseconds, well above the harness's
# own cost of a call, which the parent's clock cannot attribute to either side (docs/verify.md)
WIDE = (Path(__file__).parent / "fixtures" / "hostile" / "ref" / "wide_swish.py").read_text()


def _verify(static_gates: bool) -> dict:
    from curate.verify import Verifier
    rows = fixture_rows(["cpp"], only={*ATTACKS, TWIN})
    assert {r["_case"]["case"] for r in rows} == {*ATTACKS, TWIN}, "a fixture is missing"
    twin = next(r for r in rows if r["_case"]["case"] == TWIN)
    names = [r["_case"]["case"] for r in rows] + [f"{TWIN}#{k}" for k in range(1, TWINS)]
    rows += [{**twin, "id": f"{twin['id']}#{k}"} for k in range(1, TWINS)]
    clean = [{**{k: v for k, v in r.items() if not k.startswith("_")}, "pytorch_code": WIDE}
             for r in rows]
    with Verifier(device="cpu", timeout=60, static_gates=static_gates) as v:
        return {names[i]: res for i, res in v.verify(clean)}


def fastest_twin(verdicts: dict):
    twins = [res for name, res in verdicts.items() if name.split("#")[0] == TWIN]
    assert len(twins) == TWINS and all(t.status == "verified" and t.speedup for t in twins), [
        (t.status, t.reasons) for t in twins]
    return max(twins, key=lambda t: t.speedup)


@pytest.fixture(scope="module", params=[True, False], ids=["static_gates", "no_static_gates"])
def verdicts(request) -> dict:
    return _verify(request.param)


def test_the_honest_twin_is_verified_and_timed(verdicts):
    assert fastest_twin(verdicts).speedup > 0


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_is_rejected_or_credited_no_more_than_its_honest_twin(verdicts, attack):
    res, twin = verdicts[attack], fastest_twin(verdicts)
    if res.status in REJECTED:
        return
    assert res.status == "verified", (attack, res.status, res.reasons)
    if res.speedup is None:
        return  # verified without a speed: nothing credited
    assert res.speedup <= twin.speedup * SLACK, (
        f"{attack} credited {res.speedup:.2f}x (interval low {res.speedup_ci_low:.2f}) where its "
        f"honest twin measures {twin.speedup:.2f}x at best of {TWINS}")
