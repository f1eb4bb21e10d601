"""A row's correctness phase, driven by the parent: the judge computes the reference's outputs
of a sequence of calls, the candidate's worker runs the same calls, and every output of the
candidate goes to the judge (by the transport the parent chose) to be compared."""

from __future__ import annotations

import contextlib
import os
import time

from ..isolation.freeze import cpu_seconds
from ..isolation.protocol import MAX_MESSAGE
from . import messages as msg
from .findings import Finding

# on the GPU, outputs larger than this go to the judge through host memory (sealed memory files)
# rather than device memory (two more device copies: the export and the judge's own). Below it,
# the device way: a round trip of a multi-GiB output through the host costs seconds a call, and
# since large correctness outputs go one call at a time, the two copies fit the row's estimate
DEVICE_TRANSPORT_BYTES = 8 * 2**30
# outputs larger than this cannot travel inline: their base64 (4/3 of the bytes) inside one
# reply would pass the protocol's message limit, and the worker would die sending it
INLINE_BYTES = MAX_MESSAGE // 2
CORRECTNESS_CALLS = 7   # at most: two scaled calls, three trial sets, set 0 again, the poked set
IDLE_CPU = (0.02, 0.10)   # a candidate idle while the judge works: < 20 ms or 10% of it
SETTLE_S = 0.03           # CPU: the candidate's OpenMP threads spin a few ms after its work


def scale(rng) -> float:
    """A call's input scale: 1 + m / 2**14, m in 1024..4096 (exact in float32; 1.0625 to 1.25,
    so an output that depends on its inputs' size moves past every tolerance)."""
    return 1.0 + rng.randint(1024, 4096) / 2**14


def correctness_calls(rng, trials: int, second_pass: bool = False) -> list[list]:
    """One or two calls on scaled inputs first (how many, of which set, at what scale: drawn
    from the run's secret), then every trial set unscaled; the last ones rewrite the same
    buffers in place: set 0, then set 0 with one element poked (a cache keyed by buffer and a
    few sampled values answers stale). Always one scaled call at least: a reduction over many
    random inputs (a mean loss) gives nearly the same output for every trial set, and without
    a scaled call a run's secret alone decided whether its reference was degenerate.
    A second shape's pass (`second_pass`) asks whether the candidate is right at other sizes,
    after its first pass checked it against caches and stale answers: set 0 scaled, then set
    0 (the gates watch the first call; two different inputs for the judge's degeneracy
    check), at a fraction of the first pass's calls at sizes several times as large."""
    if second_pass:
        return [[0, scale(rng)], [0, 1.0]]
    calls = [[rng.randrange(trials), scale(rng)] for _ in range(rng.randint(1, 2))]
    calls += [[k, 1.0] for k in range(trials)]
    return calls + [[0, 1.0], [trials, 1.0]]


def correctness(row, device, cand, judge) -> tuple[list, list, int, bool]:
    """Returns the candidate's and the reference's per-call times of these calls (to plan the
    timing from), the candidate's output size, and whether the row is to be timed. Outputs
    too large to keep together (`keep_bytes`) go one call at a time: run, fetch, compare.
    Where the reference's output size is known before it runs (the GPU's compile ahead), the
    candidate's first batch runs while the judge computes the reference's outputs."""
    cfg = row.cfg
    calls = correctness_calls(row.rng, cfg.trials, row.second_pass)
    request = msg.Reference(calls=calls, keep_bytes=cfg.keep_bytes)
    batches = _batches(calls, _known_out_bytes(row), cfg.keep_bytes)
    early = None
    with row.shared(device):
        if batches is None or not side_by_side(row.size_gb, cfg.keep_bytes):
            ref, _ = judge.ask(request, "correctness", (msg.Batch,))
        else:
            ref, early = _together(row, cand, judge, request, batches[0])
    if batches is None:
        batches = _batches(calls, ref.out_bytes, cfg.keep_bytes)
    first_unscaled = next(i for i, c in enumerate(calls) if c == [0, 1.0])
    timed = cfg.device == "cuda" or row.backend == "cpp"
    idle = None if timed else {"cpu_s": 0.0, "wall_s": 0.0}
    ms, wall, ok = [], 0.0, True
    for first, batch in batches:
        if early is not None and first == batches[0][0]:
            run = early
        else:
            with row.shared(device):
                run, _ = cand.ask(_calls_request(first, batch), "correctness", (msg.Batch,))
        ms += list(run.ms)
        wall += cand.last_wall
        row.out_bytes = int(run.out_bytes)
        for j, call in enumerate(batch):
            ok = judge_call(row, device, cand, judge, j, call,
                            precision=first + j == first_unscaled, idle=idle,
                            phase="correctness")
            if not ok:
                break
        if not ok:
            break
    row.res.notes["correctness_s"] = round(wall, 3)
    if len(batches) > 1:
        row.res.notes["correctness_one_by_one"] = True
    if idle is not None:
        row.res.notes["idle_cpu_s"] = round(idle["cpu_s"], 4)
        if idle["cpu_s"] > max(IDLE_CPU[0], IDLE_CPU[1] * idle["wall_s"]):
            cand.take([Finding("work_outside_call", "fail")])
    ok = row.res.status != "incorrect"
    return ms, list(ref.ms), row.out_bytes, timed and ok


def side_by_side(size_gb: dict | None, keep_bytes: float) -> bool:
    """Whether the judge computes the reference's outputs while the candidate's worker runs its
    first batch: for rows whose input sets and correctness outputs are kept (sizes known, each
    within `keep_bytes`), where it saves the judge's time. A larger row runs them one after the
    other, so that its two workers' correctness peaks (the candidate's gate calls, the
    judge's reference calls) never coincide: row.row_memory_gb reserves for the larger of the
    row's phases instead of their sum."""
    if not size_gb:
        return False
    i, o = size_gb.get("inputs", 0.0) * 2**30, size_gb.get("outputs", 0.0) * 2**30
    return i <= keep_bytes and msg.kept_together(o, CORRECTNESS_CALLS, keep_bytes)


def _calls_request(first: int, batch: list) -> msg.Calls:
    return msg.Calls(calls=batch, check=len(batch), keep=True, first=first)


def _known_out_bytes(row) -> int | None:
    """The reference's output size before it runs: measured by the compile ahead (GPU)."""
    size = row.size_gb or {}
    return None if size.get("outputs") is None else int(size["outputs"] * 2**30)


def _batches(calls: list, out_bytes: int | None, keep_bytes: int) -> list | None:
    """The candidate's correctness batches as (first call, calls): all at once where their
    outputs fit in `keep_bytes` together, else one call at a time (None: size unknown)."""
    if out_bytes is None:
        return None
    if msg.kept_together(out_bytes, len(calls), keep_bytes):
        return [(0, calls)]
    return [(i, [c]) for i, c in enumerate(calls)]


def _together(row, cand, judge, request: msg.Reference, batch: tuple) -> tuple:
    """The reference's outputs and the candidate's first batch at once, in their two
    processes; the judge's reply is read first (a reference that fails decides the row,
    whatever the candidate did)."""
    first, calls = batch
    ref_pending = judge.begin(request, "correctness", (msg.Batch,))
    cand_pending = cand.begin(_calls_request(first, calls), "correctness", (msg.Batch,))
    try:
        row.phase("judge reference")
        ref, _ = ref_pending.wait()
        row.phase("candidate calls")
        run, _ = cand_pending.wait()
    finally:
        ref_pending.drop()
        cand_pending.drop()
    return ref, run


def judge_call(row, device, cand, judge, index: int, call: list, *, precision: bool = False,
               idle: dict | None = None, digest: int | None = None,
               phase: str = "correctness", held: bool = False) -> bool:
    """Output `index` of the candidate's last batch, compared by the judge with the reference's
    output of the same call. False when it differs (the row is then `incorrect`). `held`: the
    caller holds the device alone already."""
    transport = fetch_transport(row.run.placement.transport, row.out_bytes)
    gate = (lambda: contextlib.nullcontext()) if held else (lambda: row.shared(device))
    with gate():
        out, fds = cand.ask(msg.Fetch(index=index, transport=transport), phase, (msg.Outputs,),
                            accept_fds=True)
    try:
        if idle is not None and row.cfg.device == "cpu":
            time.sleep(SETTLE_S)
        cpu0 = cpu_seconds(cand.pid) if idle is not None else None
        t0 = time.perf_counter()
        with gate():
            cmp, _ = judge.ask(msg.Compare(call=call, outputs=out.outputs, structure=out.structure,
                                           precision=precision, transport=transport,
                                           digest=digest), phase, (msg.Compared,), fds=fds)
        cpu1 = cpu_seconds(cand.pid) if cpu0 is not None else None
        if cpu0 is not None and cpu1 is not None:
            idle["cpu_s"] += max(0.0, cpu1 - cpu0)
            idle["wall_s"] += time.perf_counter() - t0
    finally:
        for fd in fds:
            _close(fd)
    if not cmp.ok:
        row.res.status = "incorrect"
        if digest is not None:
            row.res.reason("timed_output_mismatch")
        return False
    return True


def fetch_transport(transport: str, out_bytes: int) -> str:
    """How one call's outputs go to the judge: the run's transport, or sealed memory files for
    outputs too large for it."""
    if transport.startswith("cuda") and out_bytes > DEVICE_TRANSPORT_BYTES:
        return "memfd"
    if transport == "inline" and out_bytes > INLINE_BYTES:
        return "memfd"
    return transport


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
