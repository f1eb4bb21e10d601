"""The sandboxed worker pool: hostile tasks cost one task, never the pool or the parent."""

import os
import time

import pytest

from curate.isolation import Limits, WorkerPool, scrubbed_env

HANDLER = "tests.support.isolation_handlers:handle"


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.getcwd())
    with WorkerPool(HANDLER, workers=2, timeout=5, limits=Limits(output_bytes=1 << 20)) as p:
        yield p


def test_hostile_tasks_each_get_their_status_and_honest_ones_finish(pool):
    kinds = ["echo", "raise", "exit", "segv", "hang", "flood", "garbage", "echo"]
    tasks = [{"kind": k, "value": i} for i, k in enumerate(kinds)]
    results = dict(pool.map(tasks))
    got = {i: results[i].status for i in range(len(kinds))}
    assert got == {0: "ok", 1: "error", 2: "crashed", 3: "crashed", 4: "timeout",
                   5: "output_flood", 6: "crashed", 7: "ok"}
    assert results[7].value["echo"] == 7
    assert "candidate failed" in results[1].error
    assert results[2].exit_code == 3
    assert pool.replaced == 5


def test_timeout_kills_the_whole_process_group(pool, tmp_path):
    pidfile = tmp_path / "child.pid"
    res = pool.run({"kind": "fork_hang", "pidfile": str(pidfile)}, timeout=3)
    assert res.status == "timeout"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # a killed child of ours stays a zombie until reaped by init; treat zombies as dead
        if open(f"/proc/{child}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the worker's child {child} outlived the timeout")


def test_credentials_never_reach_the_worker(pool, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "canary-hf-123")
    monkeypatch.setenv("MY_SERVICE_API_KEY", "canary-key-456")
    monkeypatch.setenv("DB_PASSWORD", "canary-pw-789")
    pool.close()  # restart so the workers see the new parent environment
    env = pool.run({"kind": "env"}).value["env"]
    assert not any("canary" in v for v in env.values())
    assert "PATH" in env


def test_worker_runs_in_a_private_scratch_directory(pool):
    res = pool.run({"kind": "write_file"})
    assert res.ok
    path = res.value["path"]
    assert "curate-w" in path and not path.startswith(os.getcwd())


def test_scrubbed_env_drops_names_like_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    monkeypatch.setenv("SOME_SECRET", "x")
    monkeypatch.setenv("CURATE_HARMLESS", "y")
    env = scrubbed_env()
    assert "OPENAI_API_KEY" not in env and "SOME_SECRET" not in env
    assert env["CURATE_HARMLESS"] == "y"


def test_held_worker_defers_its_replacement_until_the_hold_ends(pool):
    """A row that handed out device memory keeps its worker alive until it lets go."""
    with pool.hold() as w:
        first = w.call({"kind": "pid", "recycle": True}).value["pid"]
        assert w.alive
        assert w.call({"kind": "pid"}).value["pid"] == first  # same process, not replaced
    assert not w.alive  # replaced once the hold ended
    assert pool.recycled == 1 and pool.replaced == 0  # on purpose, not a crash
    # the slot is back in the pool and starts a fresh process
    pids = {pool.call({"kind": "pid"}).value["pid"] for _ in range(4)}
    assert first not in pids
    # outside a hold, the request is honoured at once
    a = pool.call({"kind": "pid", "recycle": True}).value["pid"]
    assert all(pool.call({"kind": "pid"}).value["pid"] != a for _ in range(4))
    assert pool.recycled == 2


def test_a_reused_pid_is_not_taken_for_an_exited_worker():
    """The fork server reports exits by pid, and pids are reused (in a sandbox's PID namespace
    after a few thousand processes): a new child that got an earlier child's pid is alive."""
    import threading

    from curate.isolation.zygote import Zygote
    msgs = [{"exit": 7, "code": 0}, {"pid": 7}, None]
    z = Zygote.__new__(Zygote)
    z._exits, z._replies, z._cond, z.closed = {}, [], threading.Condition(), False
    z._read = lambda: msgs.pop(0)
    z._listen()
    assert z._replies == [{"pid": 7}]
    z.closed = False  # _listen marks the end of the messages as the server gone
    assert z.exit_code(7) is None


def test_workers_never_inherit_the_parents_compile_caches(tmp_path, monkeypatch):
    """torch sets TORCHINDUCTOR_CACHE_DIR in a process that compiled once; a worker must get a
    cache folder of its own (under the sandbox another uid's folder is not writable)."""
    from curate.isolation.pool import WorkerPool
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "parents"))
    with WorkerPool("tests.support.isolation_handlers:handle", workers=1, timeout=30,
                    scratch_root=str(tmp_path)) as pool:
        env = pool.call({"kind": "env"}).value["env"]
    assert env["TORCHINDUCTOR_CACHE_DIR"] != str(tmp_path / "parents")
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path))


@pytest.mark.parametrize("fork_server", [None, ["curate.isolation.protocol"]])
def test_memory_files_pass_from_one_worker_to_another_sealed(tmp_path, fork_server):
    """Large outputs travel as sealed memory files: one worker's descriptor reaches another
    worker through the parent, which reads no byte of it; a file left writable is refused by
    the reader, and descriptors that a task did not ask for are closed at once."""
    from curate.isolation import protocol
    kw = dict(workers=1, timeout=30, scratch_root=str(tmp_path), fork_server=fork_server)
    with WorkerPool("tests.support.isolation_handlers:handle", **kw) as a, \
            WorkerPool("tests.support.isolation_handlers:handle", **kw) as b:
        with a.hold() as sender, b.hold() as reader:
            got = sender.call({"kind": "memfd_out", "value": "sealed bytes"}, accept_fds=True)
            assert got.ok and len(got.fds) == 1, (got.status, got.error)
            assert protocol.sealed_size(got.fds[0]) == len("sealed bytes")
            read = reader.call({"kind": "memfd_in"}, fds=got.fds)
            for fd in got.fds:
                os.close(fd)
            assert read.ok and read.value["read"] == ["sealed bytes"], (read.status, read.error)
            bad = sender.call({"kind": "memfd_out", "value": "x", "unsealed": True},
                              accept_fds=True)
            refused = reader.call({"kind": "memfd_in"}, fds=bad.fds)
            for fd in bad.fds:
                os.close(fd)
            assert refused.status == "error" and "still writable" in refused.error
            before = len(os.listdir("/proc/self/fd"))
            for _ in range(5):
                unasked = sender.call({"kind": "memfd_out", "value": "y"})
                assert unasked.ok and unasked.fds == []
            assert len(os.listdir("/proc/self/fd")) <= before


def test_fork_server_refuses_imports_that_initialized_cuda(monkeypatch):
    """A fork server whose preloaded imports initialized CUDA would fork workers that cannot
    use it (every row: "Cannot re-initialize CUDA in forked subprocess"): it fails at start,
    naming the imports."""
    import torch
    from curate.isolation import zygote
    zygote._refuse_initialized_cuda("torch")  # a CPU build: nothing initialized
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match=r"\(torch,triton\) initialized CUDA"):
        zygote._refuse_initialized_cuda("torch,triton")


def test_synth_fork_server_on_the_gpu_leaves_inductor_to_each_worker():
    """On a CUDA build, importing inductor's compile_fx initializes CUDA: the GPU synth fork
    server preloads only what verify's (which runs CUDA in its forked workers) preloads."""
    from curate.synth import inductor
    from curate.verify import placement
    assert "torch._inductor.compile_fx" not in inductor.PRELOAD["cuda"]
    assert set(inductor.PRELOAD["cuda"]) <= set(placement.PRELOAD)


def test_compiler_names_and_the_deadline_that_credits_them():
    """Seconds in which a compiler ran are given back up to the grace, and only while one ran;
    frozen seconds are given back once, never also as a compiler's."""
    from curate.isolation.deadline import Deadline, is_compiler
    assert all(is_compiler(n) for n in ("cc1plus", "x86_64-linux-gnu-g++-12", "nvcc", "ld.gold"))
    assert not any(is_compiler(n) for n in ("python3", "python", "sleep", "bash"))
    now, frozen, compiling = [0.0], [0.0], [True]
    d = Deadline(1.0, frozen=lambda: frozen[0], grace=2.0, observe=lambda: compiling[0],
                 clock=lambda: now[0])
    for _ in range(4):  # one second of compiling: credited
        now[0] += 0.25
        assert not d.expired()
    assert d.compiler_s == 1.0
    frozen[0], now[0] = 5.0, 6.0  # frozen while compiling: given back once, as frozen time
    assert not d.expired() and d.compiler_s == 1.0
    compiling[0] = False
    now[0] = 6.9
    assert not d.expired()
    now[0] = 7.1
    assert d.expired() and d.compiler_s == 1.0
    now[0], compiling[0] = 0.0, True
    capped = Deadline(1.0, grace=0.5, observe=lambda: True, clock=lambda: now[0])
    for _ in range(6):  # compiling on and on: 0.5 s of grace, then the limit runs
        now[0] += 0.25
        assert not capped.expired()
    now[0] += 0.25
    assert capped.expired() and capped.compiler_s == 0.5
    seen = [True]
    stalled = Deadline(1.0, grace=10.0, observe=lambda: seen[0], clock=lambda: now[0])
    now[0] += 0.25
    assert not stalled.expired()
    now[0] += 3.0  # the parent did not sample for 3 s; a compiler at both ends: all credited
    assert not stalled.expired() and stalled.compiler_s == 3.25
    seen[0] = False
    late = Deadline(1.0, grace=10.0, observe=lambda: seen[0], clock=lambda: now[0])
    now[0] += 0.25
    assert not late.expired()
    seen[0] = True
    now[0] += 3.0  # a compiler seen only at the end of a long gap: one sample's worth
    assert late.expired() and late.compiler_s == 0.25


def _compile_pool(tmp_path):
    return WorkerPool(HANDLER, workers=1, timeout=30, scratch_root=str(tmp_path))


@pytest.mark.skipif(__import__("shutil").which("g++") is None,
                    reason="needs g++ to run a build longer than the timeout")
def test_a_compiler_in_the_worker_gets_its_grace_and_nothing_else_does(tmp_path, monkeypatch):
    """A C++ build beyond the row's timeout finishes within `compiler_grace`, a grace too short
    for it ends in a timeout, and a task that only sleeps gets no grace at all."""
    monkeypatch.setenv("PYTHONPATH", os.getcwd())
    with _compile_pool(tmp_path) as pool:
        pool.call({"kind": "pid"}, timeout=30)  # started: the interpreter's start is not timed
        built = pool.call({"kind": "compile", "size": 300}, timeout=1.0, compiler_grace=120)
        assert built.ok, (built.status, built.error, built.output)
        assert built.seconds > 1.0 and built.compiler_s > built.seconds - 1.0 - 0.5
        short = pool.call({"kind": "compile", "size": 300}, timeout=1.0, compiler_grace=0.5)
        assert short.status == "timeout" and short.compiler_s <= 0.5
        with pool.hold() as w:
            slept = w.call({"kind": "hang"}, timeout=1.0, compiler_grace=120)
        assert slept.status == "timeout" and slept.compiler_s == 0.0 and slept.seconds < 5


@pytest.mark.parametrize("fork_server", [None, ["json"]])
def test_a_holds_env_is_in_the_worker_before_its_setup_runs(tmp_path, monkeypatch, fork_server):
    """Verify pins a worker to its GPU through `hold(env=...)`: a worker already started for
    other settings is replaced, so that its setup sees the pin; the next caller without the pin
    does not inherit it."""
    monkeypatch.setenv("PYTHONPATH", os.getcwd())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pin = {"CUDA_VISIBLE_DEVICES": "3", "TRITON_CACHE_DIR": str(tmp_path / "row-cache")}
    with WorkerPool(HANDLER, workers=1, timeout=30, setup="tests.support.isolation_handlers:setup",
                    scratch_root=str(tmp_path), fork_server=fork_server) as pool:
        assert "CUDA_VISIBLE_DEVICES" not in pool.call({"kind": "setup_env"}).value["env"]
        with pool.hold(env=pin) as w:
            env = w.call({"kind": "setup_env"}).value["env"]
            assert {k: env.get(k) for k in pin} == pin
        after = pool.call({"kind": "setup_env"}).value["env"]
        assert "CUDA_VISIBLE_DEVICES" not in after
        assert after["TRITON_CACHE_DIR"] != pin["TRITON_CACHE_DIR"]


def test_time_spent_frozen_is_given_back(tmp_path, monkeypatch):
    """A worker stopped while another pair is timed keeps its whole limit for its own work."""
    import threading

    from curate.isolation.freeze import Freezer
    monkeypatch.setenv("PYTHONPATH", os.getcwd())
    freezer = Freezer()
    with WorkerPool(HANDLER, workers=1, timeout=30, scratch_root=str(tmp_path),
                    freezer=freezer) as pool:
        pool.call({"kind": "pid"})

        def freeze():
            time.sleep(0.2)
            with freezer.quiet(keep=()):
                time.sleep(2.0)
        t = threading.Thread(target=freeze)
        t.start()
        res = pool.call({"kind": "sleep", "seconds": 0.5}, timeout=1.0)
        t.join()
    assert res.ok, (res.status, res.error)
    assert res.seconds > 2.0  # longer than its limit, all of the excess frozen


def _state(pid: int, want: str, within: float = 2.0) -> str:
    """`pid`'s scheduler state, waited for until it is `want` (a signal takes a moment)."""
    end = time.monotonic() + within
    while True:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        if (state == "T") == (want == "T") or time.monotonic() > end:
            return state
        time.sleep(0.01)


def test_a_timed_batch_stops_other_stages_workers(tmp_path, monkeypatch):
    """A streaming build runs synth beside verify: synth's workers (registered with the
    BACKGROUND freezer) are stopped while verify times a pair, on the GPU as on the CPU, and go
    on afterwards; synth's step registers its pool there."""
    from types import SimpleNamespace

    from curate.isolation.freeze import BACKGROUND, Freezer
    from curate.synth.inductor import InductorSynth
    from curate.verify.timed import _quiet
    monkeypatch.setenv("PYTHONPATH", os.getcwd())
    step = InductorSynth(device="cpu", workers=1, sandbox="off")
    step.setup()
    try:
        assert step.pool.freezer is BACKGROUND
    finally:
        step.teardown()
    with WorkerPool(HANDLER, workers=1, timeout=30, scratch_root=str(tmp_path),
                    freezer=BACKGROUND) as pool:
        pid = pool.call({"kind": "pid"}).value["pid"]
        for device in ("cuda", "cpu"):
            row = SimpleNamespace(cfg=SimpleNamespace(device=device),
                                  run=SimpleNamespace(freezer=Freezer()))
            with _quiet(row, set()):
                assert _state(pid, "T") == "T", device
            assert _state(pid, "running") != "T", device
        assert pool.call({"kind": "pid"}).value["pid"] == pid   # it went on where it was
