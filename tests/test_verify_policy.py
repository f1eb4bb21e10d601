"""verify's pure policy, without a process: budgets, the timing plan, what a row is credited,
verdict rules, typed messages, the scheduler's placement."""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from curate.verify import messages as m
from curate.verify.budget import Budget, RowClock
from curate.verify.findings import Finding, finding, gate_status
from curate.verify.result import VerifyResult
from curate.verify.scheduler import Device, DeviceGate, MemoryGate, Scheduler
from curate.verify.timing import Round, credit, harness_per_call, plan, speed, speedup_ci
from curate.verify.verdict import apply_findings, task_failure


# -- budgets ---------------------------------------------------------------------------------
def test_every_phase_is_bounded_by_timeout_and_the_row_deadline():
    clock = RowClock(Budget(timeout=10, compile_timeout=300))
    assert clock.limit("load") == 10
    clock.charge("load", 4)
    assert clock.limit("load") == 6          # what is left of the phase
    clock.charge("correctness", 10)
    clock.charge("timing", 10)
    assert clock.limit("verdict") == pytest.approx(5)   # verdict gets half a timeout
    clock.charge("compile", 5)
    assert clock.left() == pytest.approx(1) and clock.limit("verdict") == pytest.approx(1)
    clock.charge("verdict", 2)
    assert clock.over and clock.limit("load") == 0


def test_a_later_pass_has_whole_phase_budgets_within_the_rows_deadline():
    """A second shape's correctness gets its own budget (the first pass's correctness may have
    spent the row's), never past the row's deadline; what it spends, the row has spent."""
    row = RowClock(Budget(timeout=10, compile_timeout=300))
    row.charge("correctness", 9)
    assert row.limit("correctness") == pytest.approx(1)
    second = row.next_pass()
    assert second.limit("correctness") == 10 and not second.deadline_binds("correctness")
    second.charge("correctness", 4)
    assert row.spent == pytest.approx(13) and row.by_phase["correctness"] == 9
    row.charge("timing", 10)   # 7 left of the row's deadline (30): the phase's 6 bind
    assert second.limit("correctness") == pytest.approx(6)
    row.charge("load", 2)      # 5 left of the deadline: now it binds
    assert second.limit("correctness") == pytest.approx(5)
    assert second.deadline_binds("correctness") and not second.deadline_binds("correctness", 3)


def test_a_second_pass_timeout_cut_by_the_rows_deadline_is_not_judged():
    """A request that timed out under what was left of the row's deadline says `row_deadline`;
    at the second shape that is not the candidate's doing (the first pass spent the time),
    while a timeout under a budget of its own is (it hangs where the reference did not)."""
    from types import SimpleNamespace

    from curate.verify.resized import not_judged
    from curate.verify.sides import RowOver, Side

    class Hung:
        pid = None

        def call(self, task, limit, **kw):
            return SimpleNamespace(ok=False, status="timeout", seconds=limit, exit_code=None,
                                   output="", error=None, fds=[], value=None)

    got = {}
    for spent in (0.0, 27.0):
        clock = RowClock(Budget(timeout=10, compile_timeout=300))
        clock.charge("timing", spent)
        res = VerifyResult()
        with pytest.raises(RowOver):
            Side(Hung(), "candidate", res, clock.next_pass(), []).ask(
                m.Calls(calls=[[0, 1.0]]), "correctness", (m.Batch,))
        got[spent] = (res.status, res.reasons, not_judged(res.status, res.reasons, "cpu"))
    assert got[0.0] == ("timeout", ["candidate_timeout"], None)
    assert got[27.0] == ("timeout", ["candidate_timeout", "row_deadline"], "row_deadline")


def test_compile_budget_is_the_timeout_and_the_compiler_gets_its_own_grace():
    b = Budget(timeout=10, compile_timeout=300)
    assert b.phase("compile") == 10 and b.compiler_grace == 300
    with pytest.raises(ValueError):
        b.phase("warmup")


# -- timing plan -----------------------------------------------------------------------------
def test_plan_holds_the_device_for_a_bounded_time_per_batch():
    p = plan([500.0, 500.0], [500.0, 500.0], 0, "cuda", 0.5, 20, 1000, hold_s=10.0)
    assert p.per_batch * 0.5 * 2 <= 10.0
    assert p.rounds >= 5


def test_plan_measures_a_far_slower_candidate_with_the_fewest_calls():
    p = plan([50.0, 50.0], [1.0, 1.0], 0, "cpu", 1.0, 20, 1000, hold_s=10.0)
    assert (p.per_batch, p.rounds) == (1, 5)


def test_plan_counts_the_harness_cost_of_every_call():
    # a 10 us kernel under a 1.2 ms harness: batches sized by what a call really costs, so the
    # row holds the device for about its time budget, not for hundreds of calls per batch
    p = plan([0.01, 0.01], [0.01, 0.01], 1 << 20, "cuda", 0.5, 20, 1000, hold_s=10.0,
             harness_s=1.2e-3)
    held = p.rounds * p.per_batch * 2 * (0.01e-3 + 1.2e-3)
    assert 10 <= p.per_batch <= 20 and held < 1.0
    free = plan([0.01, 0.01], [0.01, 0.01], 1 << 20, "cuda", 0.5, 20, 1000, hold_s=10.0,
                harness_s=0.0)
    assert free.per_batch == 256                        # a harness that costs nothing
    # a dearer harness (a large digest) means fewer calls per batch, never more
    dear = plan([0.01, 0.01], [0.01, 0.01], 1 << 20, "cuda", 0.5, 20, 1000, hold_s=10.0,
                harness_s=5e-3)
    assert dear.per_batch < p.per_batch


def test_the_harness_cost_is_the_trusted_batch_wall_less_its_calls():
    assert harness_per_call(0.012, [1.0] * 10) == pytest.approx(0.2e-3)
    assert harness_per_call(0.005, [1.0] * 10) == 0.0      # never negative
    assert harness_per_call(0.005, []) is None


# -- what a row is credited ------------------------------------------------------------------
def _rounds(cand_true_ms, cand_reported_ms, n=8, overhead_s=0.001):
    out = []
    for _ in range(6):
        out.append(Round(ref_wall=n * (2.0 + 0.0) / 1e3 + overhead_s * n, ref_ms=[2.0] * n,
                         cand_wall=n * cand_true_ms / 1e3 + overhead_s * n,
                         cand_ms=[cand_reported_ms] * n))
    return out


def test_an_honest_report_is_credited_as_reported():
    got = credit(_rounds(1.0, 1.0), "cuda")
    assert not got.findings
    assert max(got.cand_ms) == pytest.approx(1.0)


def test_a_report_below_the_parents_clock_is_credited_the_clock():
    got = credit(_rounds(cand_true_ms=1.0, cand_reported_ms=0.5), "cuda")
    assert min(got.cand_ms) == pytest.approx(1.0, rel=1e-6)   # refined up, never down
    assert not got.findings                                   # within the slack: credited


def test_a_third_of_the_true_time_beyond_slack_fails_the_row():
    got = credit(_rounds(cand_true_ms=3.0, cand_reported_ms=0.2), "cuda")
    assert [f.reason for f in got.findings] == ["timing_disagrees"]


def test_a_worker_that_answers_without_the_harness_gains_nothing_by_skipping_it():
    # answers each batch at once (no harness loop) with a fifth of its time as its report: it is
    # charged at least the harness's cost of its calls, so the fixed cost subtracted from every
    # batch cannot turn into speed for it
    rounds = _rounds(cand_true_ms=0.0, cand_reported_ms=0.01, overhead_s=0.05e-3)
    for r in rounds:
        r.cand_wall = 0.0
    got = credit(rounds, "cpu")
    assert min(got.cand_ms) == pytest.approx(0.01)   # nothing below what it reported
    assert got.check["wall_ms"] == pytest.approx(0.0, abs=1e-9)


def _varied_rounds(cand_true_ms, cand_reported_ms, n=8, overhead_s=0.001):
    rounds = _rounds(cand_true_ms, cand_reported_ms, n, overhead_s)
    for j, r in enumerate(rounds):   # calls that move a little, as real ones do
        r.ref_ms = [2.0 * (1 + 0.01 * ((j + i) % 5)) for i in range(n)]
        r.cand_ms = [cand_reported_ms * (1 + 0.01 * ((2 * j + i) % 7)) for i in range(n)]
    return rounds


def test_a_credited_rows_interval_spans_the_clock_and_the_report_but_keeps_on_the_clock():
    rounds = _varied_rounds(cand_true_ms=1.0, cand_reported_ms=0.8)
    got = credit(rounds, "cuda")
    assert got.factor > 1.2
    sp = speed(rounds, got, seed=3)
    assert sp["speedup"] == pytest.approx(2.0 / 1.0, rel=0.05)        # what the clock says
    assert sp["speedup_ci_low"] < 2.1                                  # keeps on the clock
    assert sp["speedup_ci_high"] >= 2.0 / 0.8 * 0.99                   # what it reported
    on_clock = speedup_ci(got.ref_ms, got.cand_ms, seed=3, rounds=[
        (r.ref_ms, [ms * got.factor for ms in r.cand_ms]) for r in rounds])
    assert (sp["speedup"], sp["speedup_ci_low"]) == (on_clock["speedup"],
                                                      on_clock["speedup_ci_low"])


def test_an_uncredited_rows_interval_is_the_bootstrap_alone():
    rounds = _varied_rounds(cand_true_ms=1.0, cand_reported_ms=1.0)
    got = credit(rounds, "cuda")
    assert got.factor == 1.0
    sp = speed(rounds, got, seed=3)
    assert 1.8 < sp["speedup_ci_low"] <= sp["speedup"] <= sp["speedup_ci_high"] < 2.25
    # the median ratio of the samples as given, and an interval inside what any resampling of
    # them can give (the slowest reference call over the fastest candidate call, and back)
    ref = [ms for r in rounds for ms in r.ref_ms]
    cand = [ms for r in rounds for ms in r.cand_ms]
    assert sp["speedup"] == pytest.approx(statistics.median(ref) / statistics.median(cand))
    assert min(ref) / max(cand) <= sp["speedup_ci_low"]
    assert sp["speedup_ci_high"] <= max(ref) / min(cand)
    # the bootstrap of the calls and of each round's own calls, nothing added
    assert sp == speedup_ci(got.ref_ms, got.cand_ms, seed=3,
                            rounds=[(r.ref_ms, r.cand_ms) for r in rounds])


# -- verdict rules ---------------------------------------------------------------------------
def test_deception_outranks_a_broken_check_and_warnings_decide_nothing():
    res = VerifyResult(status="verified")
    assert not apply_findings([finding("torch_ops_in_forward")], res)
    assert res.status == "verified" and res.reasons == ["torch_ops_in_forward"]
    res = VerifyResult()
    assert apply_findings([Finding("check_failed:x"), Finding("input_mutated")], res)
    assert res.status == "deceptive"
    res = VerifyResult()
    assert apply_findings([Finding("reference_ignores_inputs")], res)
    assert res.status == gate_status("reference_ignores_inputs") == "degenerate_reference"


def test_pool_failures_map_to_statuses():
    assert task_failure("timeout", "candidate", seconds=3)[:2] == ("timeout",
                                                                    ["candidate_timeout"])
    assert task_failure("crashed", "candidate", exit_code=-11)[:2] == ("crashed",
                                                                       ["signal:SIGSEGV"])
    assert task_failure("output_flood", "judge")[0] == "crashed"


# -- typed messages --------------------------------------------------------------------------
def test_messages_round_trip_and_refuse_what_is_not_theirs():
    reply = m.Batch(ms=[0.5, 0.25], findings=[Finding("input_mutated")], recycle=True)
    wire = m.encode(reply)
    assert wire["_recycle"] is True and wire["kind"] == "batch"
    back = m.decode(wire, (m.Batch,))
    assert back == reply
    for bad in ({"kind": "batch", "ms": [], "flags": []},        # a renamed field
                {"kind": "verdict", "status": "verified"},        # an unknown kind
                {"kind": "batch", "ms": "fast"},                  # a wrong type
                {"kind": "batch", "findings": [{"reason": "x", "severity": "ok"}]}):
        with pytest.raises(m.ProtocolError):
            m.decode(bad)
    with pytest.raises(m.ProtocolError):
        m.decode(m.encode(m.Released(released=1)), (m.Batch,))   # not what was asked for


def test_every_request_and_reply_encodes():
    for cls in m.REQUESTS + m.REPLIES:
        assert m.decode(m.encode(cls())) == cls()


# -- devices and gates -----------------------------------------------------------------------
def test_scheduler_places_rows_on_the_least_busy_device_and_pins_workers():
    devs = [Device(index=i) for i in range(3)]
    s = Scheduler(devs)
    with s.place() as a, s.place() as b, s.place() as c:
        assert {a.index, b.index, c.index} == {0, 1, 2}
        with s.place() as d:
            assert d.rows == 2
    assert devs[2].env() == {"CUDA_VISIBLE_DEVICES": "2"}
    assert Device(index=None).env() == {}


def test_memory_gate_admits_rows_while_they_fit():
    gate = MemoryGate(10.0)
    gate.acquire(6)
    got = []
    t = threading.Thread(target=lambda: (gate.acquire(6), got.append(1)))
    t.start()
    time.sleep(0.1)
    assert not got
    gate.release(6)
    t.join(2)
    assert got == [1]


def test_memory_gate_admits_no_more_rows_than_the_device_has_worker_pairs():
    """Rows past the slots would hold memory while they wait for workers: they wait here,
    holding nothing, and the next one in gets its workers at once."""
    gate = MemoryGate(100.0, slots=2)
    gate.acquire(1)
    gate.acquire(1)
    got = []
    t = threading.Thread(target=lambda: (gate.acquire(1), got.append(1)))
    t.start()
    time.sleep(0.1)
    assert not got and gate.holders == 2 and gate.used == 2
    gate.release(1)
    t.join(2)
    assert got == [1] and gate.holders == 2


def test_memory_gate_lets_the_whole_device_in_once_every_row_gave_back():
    """Floats given back in another order than they were taken leave a residue: a row that
    needs the whole device must still get in once no row holds memory."""
    gate = MemoryGate(10.0)
    for gb in (0.1, 0.2, 0.7):
        gate.acquire(gb)
    for gb in (0.7, 0.1, 0.2):
        gate.release(gb)
    t = threading.Thread(target=gate.acquire, args=(gate.capacity,))
    t.start()
    t.join(2)
    assert not t.is_alive() and gate.holders == 1


def test_a_timed_batch_may_take_ten_times_its_plan_and_a_quarter_of_the_timeout():
    from curate.verify.budget import Budget
    assert Budget(120, 300).batch_cap(0.02) == 30.0      # a loaded machine is not a hang
    assert Budget(20, 300).batch_cap(0.02) == 5.0
    assert Budget(60, 300).batch_cap(0.02) == 15.0
    assert Budget(60, 300).batch_cap(4.0) == 40.0        # ten times a long plan
    assert Budget(600, 300).batch_cap(0.02) == 30.0      # the device is never held for long


def test_a_large_row_reserves_for_the_larger_of_its_phases_not_their_sum():
    """A small row computes the judge's reference beside the candidate's first batch and
    reserves for both peaks at once; a larger one works one side after the other
    (correctness.side_by_side) and reserves for one side at its peak beside the other at
    rest: the candidate's gate calls beside the judge's buffers, or its kept output beside the
    judge's comparison."""
    from curate.verify.correctness import side_by_side
    from curate.verify.row import ROW_MEMORY_BASE_GB, ROW_MEMORY_SLACK, row_memory_gb
    gib = 2**30
    small = {"inputs": 0.1, "outputs": 0.1}
    assert side_by_side(small, gib) and not side_by_side(None, gib)
    assert not side_by_side({"inputs": 6, "outputs": 6}, gib)        # sets made again
    assert not side_by_side({"inputs": 0.5, "outputs": 2}, gib)      # outputs one at a time
    assert not side_by_side({"inputs": 0.05, "outputs": 0.2}, gib)   # 7 outputs pass 1 GiB

    def reserved(both):
        return pytest.approx(ROW_MEMORY_SLACK * both + ROW_MEMORY_BASE_GB)
    # candidate: sets .4, kept outputs .7, buffers and pristine .2, gate calls .3; judge: the
    # same but its float64 run (.4) for the calls: both at once
    assert row_memory_gb(small, gpu=True) == reserved(1.6 + 1.7)
    # i = o = 6, sets made again: the candidate's buffers, kept output and gate calls (6 + 6 +
    # 12) beside the judge's buffers (6); or its buffers and kept output (12) beside the
    # judge's buffers, reference output and received copy (18): 30, where the sum was 42
    assert row_memory_gb({"inputs": 6, "outputs": 6}, gpu=True) == reserved(30)
    assert row_memory_gb(None) == row_memory_gb({"inputs": 0.125, "outputs": 0.125})


def test_a_holders_reservation_grows_for_its_second_pass_only_where_waiting_cannot_deadlock():
    """A row's second shape grows the reservation it holds: at once where it fits, else it
    waits (ahead of rows not yet admitted) only when every holder still to grow could grow
    one after another once the others are done; otherwise it takes nothing and says so."""
    gate = MemoryGate(10.0)
    a, b = gate.acquire(4), gate.acquire(3)
    assert gate.regrow(a, 3) is True and gate.used == 10 and a.held == 7
    gate.give_back(a, 3)
    assert gate.used == 7 and a.held == 4 and gate.holders == 2
    # 4 + 3 held, a asks 5 more: it waits for b, and a newcomer may not take the room
    grew = threading.Thread(target=gate.regrow, args=(a, 5))
    grew.start()
    time.sleep(0.2)
    assert grew.is_alive() and gate.used == 7
    newcomer = threading.Thread(target=gate.acquire, args=(1,))
    newcomer.start()
    time.sleep(0.2)
    assert newcomer.is_alive(), "a newcomer took the room a waiting grower needs"
    gate.release(b)
    grew.join(2)
    assert not grew.is_alive() and a.held == 9
    newcomer.join(2)
    assert not newcomer.is_alive() and gate.used == 10
    # a row still to grow (2 held, 7 more) beside a (9 held): a may not wait for 2 more,
    # since neither could grow while the other holds
    c = MemoryGate(12.0)
    big, small = c.acquire(9), c.acquire(2, then=9)
    assert small.extra == 7 and c.regrow(big, 2) is False and c.used == 11 and big.held == 9


def test_device_gate_writer_waits_only_for_young_readers():
    gate = DeviceGate(patience=0.2)
    with gate.shared():
        t0 = time.monotonic()
        with gate.exclusive():
            waited = time.monotonic() - t0
    assert 0.15 < waited < 2.0

def test_device_gate_reports_where_the_device_time_went():
    """Held alone, waited for by a timed batch, and waited for by a shared request queued
    behind that batch: each in its own figure."""
    gate = DeviceGate(patience=5.0)

    def writer():
        with gate.exclusive():
            time.sleep(0.2)

    def reader():
        with gate.shared():
            pass

    w, r = threading.Thread(target=writer), threading.Thread(target=reader)
    with gate.shared():
        w.start()
        time.sleep(0.15)    # the timed batch waits for this shared holder
    r.start()               # and this request waits behind the timed batch
    w.join(2)
    r.join(2)
    got = gate.report()
    assert got["exclusive"] == 1 and got["shared"] == 2
    assert 0.1 < got["exclusive_wait_s"] < 1.0
    assert 0.15 < got["exclusive_held_s"] < 1.0
    assert got["shared_waited"] == 1 and 0.05 < got["shared_wait_s"] < 1.0


# -- what the parent decides before anything runs ----------------------------------------------
class _Run:
    """The engine's shared state, as much of it as a row's precheck reads."""

    def __init__(self, device: str):
        from curate.verify.config import VerifyConfig
        from curate.verify.watch import InFlight
        self.cfg = VerifyConfig(device=device, devices=[0] if device == "cuda" else None)
        self.budget = Budget(self.cfg.timeout, self.cfg.compile_timeout)
        self.secret = b"0" * 16
        self.inflight = InFlight()

    @staticmethod
    def static_findings(kernel_code, pytorch_code):
        return []


REF_CODE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n" \
           "        return x\n"


@pytest.mark.parametrize("device,backend,reason", [("cuda", "cpp", "cpp_needs_cpu"),
                                                    ("cpu", "cuda", "cuda_needs_gpu")])
def test_a_pair_its_device_cannot_time_is_unsupported_with_the_fix(device, backend, reason):
    from curate.verify.row import RowRun
    from curate.verify.sides import RowOver
    row = RowRun(_Run(device), 0, {"pytorch_code": REF_CODE, "kernel_code": "x = 1\n",
                                   "backend": backend})
    with pytest.raises(RowOver):
        row._precheck()
    assert row.res.status == "unsupported" and row.res.reasons == [reason]
    assert "--device" in row.res.error


def test_devices_are_parsed_and_refused_with_a_reason():
    from curate.verify.config import parse_devices
    assert parse_devices("0,2,3") == [0, 2, 3] and parse_devices(None) is None
    for bad in ("a", "0,0", "-1"):
        with pytest.raises(ValueError, match="--devices"):
            parse_devices(bad)


def test_the_watchdog_sees_only_rows_in_flight():
    from curate.verify.watch import InFlight
    seen = InFlight()
    seen.enter(1, "compiling ahead")
    seen.enter(2, "candidate calls")
    seen.enter(1, "waiting for device memory")     # a row is in one phase at a time
    assert seen.phases() == {"waiting for device memory": 1, "candidate calls": 1}
    seen.leave(1)
    seen.leave(2)
    assert not seen.phases() and seen.finished == 2 and seen.summary() == "nothing"


def test_outputs_too_large_for_the_runs_transport_go_by_memory_file():
    """The GPU's device transports carry at most 2 GiB of outputs a call, `inline` at most half
    the protocol's message limit (base64 grows them by a third); past that, memory files."""
    from curate.isolation.protocol import MAX_MESSAGE
    from curate.verify.correctness import DEVICE_TRANSPORT_BYTES, fetch_transport
    assert fetch_transport("inline", 2**20) == "inline"
    assert fetch_transport("inline", 256 * 2**20) == "memfd"       # a 256 MiB output
    assert 4 * (MAX_MESSAGE // 2) // 3 < MAX_MESSAGE
    assert fetch_transport("cuda_ipc", DEVICE_TRANSPORT_BYTES) == "cuda_ipc"
    assert fetch_transport("cuda_fd", DEVICE_TRANSPORT_BYTES + 1) == "memfd"
    assert fetch_transport("memfd", 8 * 2**30) == "memfd"


def test_a_sides_harness_claim_keeps_known_parts_with_finite_numbers():
    """What a worker says its harness spent is evidence only, and a candidate's reply may hold
    anything: unknown parts, non-numbers and non-finite values are left out, never raised."""
    from curate.verify.timed import said_harness
    assert said_harness({"before": 1, "after": 0.5, "digest": 2.0}) == {
        "before": 1.0, "after": 0.5, "digest": 2.0}
    assert said_harness({"before": float("nan"), "after": "x", "digest": True,
                         "other": 1.0}) == {}
    assert said_harness(["before", 1.0]) == {} and said_harness(None) == {}


def test_a_row_enters_with_its_load_and_grows_to_its_estimate_after_it():
    """Starting and loading workers overlap the rows that run: a row holds its load's memory
    first and the rest of its estimate once it grows; while it waits to grow, no row enters."""
    gate = MemoryGate(10.0)
    running = gate.acquire(6)                  # a row that runs, with its whole estimate
    loading = gate.acquire(2, then=7)          # enters beside it with its load only
    assert gate.used == 8 and loading.extra == 5
    grown, entered = [], []
    t = threading.Thread(target=lambda: (gate.grow(loading), grown.append(1)))
    t.start()
    time.sleep(0.1)
    assert not grown                           # 8 + 5 does not fit
    late = threading.Thread(target=lambda: (gate.acquire(1), entered.append(1)))
    late.start()
    time.sleep(0.1)
    assert not entered                         # 1 fits, but in room the grower waits for
    gate.release(running)
    t.join(2)
    late.join(2)
    assert grown == [1] and entered == [1] and loading.held == 7 and gate.used == 8
    gate.release(loading)
    assert gate.used == 1 and gate.holders == 1


def test_rows_that_still_have_to_grow_are_let_in_only_while_they_can_all_grow():
    """Two loaded rows each waiting for room the other holds would wait forever: a row enters
    only while the loads of the rows yet to grow plus the largest growth fit the device."""
    gate = MemoryGate(10.0)
    first = gate.acquire(2, then=9)
    entered = []
    t = threading.Thread(target=lambda: entered.append(gate.acquire(2, then=9)))
    t.start()
    time.sleep(0.1)
    assert not entered                         # 2 + 2 + 7 > 10: could deadlock, so it waits
    gate.grow(first)                           # alone, the first grows at once
    assert gate.used == 9 and not entered
    gate.release(first)
    t.join(2)
    assert entered and gate.used == 2
    gate.grow(entered[0])
    gate.release(entered[0])
    assert gate.used == 0 and gate.holders == 0


def test_a_row_that_ends_before_it_grows_gives_back_its_load():
    gate = MemoryGate(10.0)
    g = gate.acquire(3, then=8)
    gate.release(g)
    assert gate.used == 0 and gate.holders == 0
    # nothing of it is left among the rows yet to grow: a large row enters at once
    gate.acquire(2, then=10)
    assert gate.holders == 1


def test_a_row_enters_beside_a_waiting_grower_only_into_room_the_grower_does_not_need():
    gate = MemoryGate(10.0)
    running = gate.acquire(4)
    loading = gate.acquire(2, then=6)          # will wait to grow by 4: 4 + 2 + 4 = 10 fits
    t = threading.Thread(target=gate.grow, args=(loading,))
    t.start()
    time.sleep(0.1)
    assert t.is_alive() is False and gate.used == 10
    gate.release(loading)
    loading = gate.acquire(3, then=7)          # 4 + 3, and 4 more to grow by: 11 > 10
    t = threading.Thread(target=gate.grow, args=(loading,))
    t.start()
    time.sleep(0.1)
    assert t.is_alive()
    assert gate._admits(1, 0.0) is False       # 7 + 1 + the grower's 4 > 10
    gate.release(running)
    t.join(2)
    assert not t.is_alive() and gate.used == 7
    assert gate._admits(1, 0.0) is True        # nobody waits now: 7 + 1 fits


def test_the_schedule_replay_puts_every_measured_row_through_the_gate():
    """benchmarks/schedule_replay.py drives the real MemoryGate in simulated time: with memory
    and worker pairs for every row at once it takes as long as the longest row; with one pair,
    as long as all rows one after another; and it ends with the gate empty either way."""
    import json
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from benchmarks import schedule_replay as sr
    from curate.verify.row import row_memory_gb
    run = json.loads((repo / "benchmarks/results/verify_throughput_h100-80gb-hbm3.json")
                     .read_text())
    rows = sr.rows_of(run)
    lengths = [r["load_s"] + r["rest_s"] for r in rows]
    for rule in ("whole", "grow"):
        wide = sr.replay(rows, 10_000.0, rule, slots=len(rows))
        assert wide["wall_s"] == pytest.approx(max(lengths), abs=0.1)
        narrow = sr.replay(rows, 10_000.0, rule, slots=1)
        assert narrow["wall_s"] == pytest.approx(sum(lengths), abs=0.1)
        h100 = sr.replay(rows, 63.4, rule, slots=8)
        # rows whose estimate fills the H100's gate run alone, after the others
        fills = sum(row_memory_gb(r["size_gb"], gpu=True) >= 63.4 for r in rows)
        assert h100["alone_rows"] == fills and max(lengths) < h100["wall_s"] < sum(lengths)


def test_a_second_shapes_pass_makes_two_calls_where_the_first_makes_up_to_seven():
    """The first pass: one or two scaled calls, every trial set, set 0 again and the poked set;
    a second shape's pass (sizes several times as large, after the first pass checked caches
    and stale answers): set 0 scaled, then set 0, drawn from the same secret."""
    import random

    from curate.verify.correctness import CORRECTNESS_CALLS, correctness_calls
    for i in range(20):
        first = correctness_calls(random.Random(f"{i}:row"), trials=3)
        assert 6 <= len(first) <= CORRECTNESS_CALLS and first[-2:] == [[0, 1.0], [3, 1.0]]
        second = correctness_calls(random.Random(f"{i}:row:second"), 1, second_pass=True)
        assert len(second) == 2 and second[1] == [0, 1.0]
        assert second[0][0] == 0 and 1.0625 <= second[0][1] <= 1.25
