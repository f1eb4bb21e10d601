"""Where workers run, decided once per run before any row: the sandbox (bubblewrap and a uid
per worker), Landlock confinement, the worker limits and environment, and how outputs travel to
the judge. Each decision that the machine may refuse is tried with a real worker first."""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..isolation import Limits, WorkerPool
from ..isolation.freeze import Freezer
from ..isolation.sandbox import choose as choose_sandbox, label as sandbox_label, uid_block
from . import messages as msg
from .config import VerifyConfig

log = logging.getLogger("curate.verify")

HANDLER, SETUP = "curate.verify.worker.main:handle", "curate.verify.worker.main:setup"
# what the fork server imports once (no device is touched before the fork)
PRELOAD = ["torch", "torch._dynamo", "curate.verify.worker.main", "?triton"]
OUTPUT_FILE_LIMIT_GB = 256.0   # a worker may write files this large (KernelBench outputs)
PROBE_S = 180.0
# uids under the sandbox, offsets in this process's block: the compile pool, then a candidate
# and a judge pool of up to 32 workers for each of up to 8 devices, then the probes
UID_COMPILE, UID_DEVICES, UID_PER_DEVICE, UID_PROBE = 0, 256, 64, 768   # probes: 768-772


@dataclass
class Placement:
    """What start() decided; recorded on every row (`sandbox`) and in the stage's stats."""

    env: dict
    scratch: str
    wrap: list[str] | None = None
    confined: bool = False
    sandbox: str = "none"
    sandbox_probe: str | None = None
    confine_probe: str | None = None
    transport: str = "memfd"
    total_gb: float | None = None
    limits: Limits = field(default_factory=Limits)
    probe_s: dict = field(default_factory=dict)   # seconds each start-up probe took
    server: WorkerPool | None = None   # the probes' fork server, kept for the run's pools

    def pool(self, cfg: VerifyConfig, workers: int, uid_offset: int, freezer: Freezer,
             env: dict | None = None) -> WorkerPool:
        """Fresh workers (no process that ran a row's code serves another row), forked from a
        server that imported torch and the worker once."""
        return WorkerPool(HANDLER, setup=SETUP, workers=workers, timeout=cfg.timeout,
                          env={**self.env, **(env or {})}, limits=self.limits,
                          scratch_root=self.scratch, fresh=True, fork_server=PRELOAD,
                          freezer=freezer, sandbox=self.wrap,
                          uid_base=uid_block() + uid_offset if self.wrap else None)


def worker_env(cfg: VerifyConfig) -> dict:
    env = {"CURATE_VERIFY_DEVICE": cfg.device, "MAX_JOBS": "2"}
    if cfg.device == "cpu":
        threads = str(cfg.cpu_threads)
        env.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "",
                    "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
    return env


def limits(cfg: VerifyConfig, confine: bool) -> Limits:
    return Limits(memory_gb=cfg.memory_gb, output_bytes=cfg.output_bytes,
                  file_size_gb=OUTPUT_FILE_LIMIT_GB, confine=confine)


def decide(cfg: VerifyConfig, scratch: str, first_gpu: int | None) -> Placement:
    """Sandbox, then Landlock and the transport side by side, each probed where the device
    needs it; every probe worker forks from one server per sandbox command line (one import of
    torch, not one per probe)."""
    env = worker_env(cfg)
    if first_gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(first_gpu)
    p = Placement(env=env, scratch=scratch, limits=limits(cfg, False))
    probes = Probes(cfg, p)
    try:
        t0 = time.monotonic()
        check = (lambda wrap: probes.run(wrap, limits(cfg, False), 0)) \
            if cfg.device == "cuda" else None
        p.wrap, p.sandbox_probe = choose_sandbox(cfg.sandbox, cfg.device,
                                                 [scratch, str(cfg.cache_dir)], "verify", check)
        p.probe_s["sandbox"] = round(time.monotonic() - t0, 2)
        with ThreadPoolExecutor(2, thread_name_prefix="verify-probe") as ex:
            confined = ex.submit(_timed, p, "confine", _decide_confine, cfg, p, probes)
            transport = ex.submit(_timed, p, "transport", _decide_transport, cfg, p, probes,
                                  limits(cfg, False))
            p.confined, p.transport = confined.result(), transport.result()
        if p.confined and p.transport.startswith("cuda"):
            # the transport was tried unconfined: try it once more the way workers will run
            p.transport = _decide_transport(cfg, p, probes, limits(cfg, True))
        p.server = probes.keep(p.wrap)
    finally:
        probes.close()
    p.limits = limits(cfg, p.confined)
    p.sandbox = sandbox_label(p.wrap, p.confined)
    for k in ("CUDA_VISIBLE_DEVICES",):   # each device's pools set their own
        if cfg.device == "cuda":
            p.env.pop(k, None)
    log.info("verify: workers run under %s; outputs reach the judge by %s (probes %s s)",
             p.sandbox, p.transport, p.probe_s)
    return p


def _timed(p: Placement, name: str, fn, *args):
    t0 = time.monotonic()
    try:
        return fn(*args)
    finally:
        p.probe_s[name] = round(time.monotonic() - t0, 2)


def _decide_transport(cfg: VerifyConfig, p: Placement, probes: "Probes", lim: Limits) -> str:
    if cfg.transport != "auto":
        return cfg.transport
    if cfg.device != "cuda":
        return "memfd"
    return next((t for t in ("cuda_ipc", "cuda_fd") if _probe_transport(cfg, p, probes, t, lim)),
                "memfd")


def _decide_confine(cfg: VerifyConfig, p: Placement, probes: "Probes") -> bool:
    if cfg.sandbox == "off":
        return False
    if cfg.confine is not None:
        return cfg.confine
    from ..isolation import confine as landlock
    if not landlock.supported():
        p.confine_probe = "no Landlock"
        return False
    if cfg.device == "cpu":
        return True
    ok, why = probes.run(p.wrap, limits(cfg, True), 1)
    p.confine_probe = "ok" if ok else why
    if not ok:
        log.warning("verify: workers run without Landlock on this GPU machine (a confined "
                    "worker could not run CUDA: %s)", (why or "").strip()[-200:])
    return ok


class Probes:
    """The start-up probes' workers. Each probe gets fresh workers, forked from one server per
    sandbox command line that stays up until every probe is done."""

    def __init__(self, cfg: VerifyConfig, p: Placement):
        self.cfg, self.p = cfg, p
        self._servers: dict[tuple, WorkerPool] = {}
        self._lock = threading.Lock()

    def pool(self, wrap, lim: Limits, slot: int) -> WorkerPool:
        pool = _probe_pool(self.cfg, self.p, wrap, lim, slot)
        with self._lock:
            server = self._servers.get(tuple(wrap or ()))
            if server is None:   # a pool that runs no worker, only the server
                server = self._servers[tuple(wrap or ())] = _probe_pool(
                    self.cfg, self.p, wrap, limits(self.cfg, False), 4)
        pool.share_server(server)
        return pool

    def run(self, wrap, lim: Limits, slot: int) -> tuple[bool, str | None]:
        return probe_worker(self.cfg, self.p, wrap, lim, slot, pool=self.pool(wrap, lim, slot))

    def keep(self, wrap) -> WorkerPool | None:
        """The server for `wrap`, handed over (close() leaves it up)."""
        return self._servers.pop(tuple(wrap or ()), None)

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers = {}


def _probe_pool(cfg: VerifyConfig, p: Placement, wrap, lim: Limits, slot: int) -> WorkerPool:
    return WorkerPool(HANDLER, setup=SETUP, workers=1, timeout=PROBE_S, env=p.env, limits=lim,
                      scratch_root=p.scratch, setup_timeout=PROBE_S, fresh=True,
                      fork_server=PRELOAD, sandbox=wrap,
                      uid_base=uid_block() + UID_PROBE + slot if wrap else None)


def probe_worker(cfg: VerifyConfig, p: Placement, wrap, lim: Limits, slot: int,
                 pool: WorkerPool | None = None) -> tuple[bool, str | None]:
    """A worker under `wrap` and `lim` initializes CUDA and launches a Triton kernel."""
    pool = pool or _probe_pool(cfg, p, wrap, lim, slot)
    try:
        res = pool.call(msg.encode(msg.ProbeCuda(device=cfg.device)), PROBE_S)
    finally:
        pool.close()
    reply = _decoded(res, (msg.Probed, msg.Failed))
    ok = isinstance(reply, msg.Probed) and reply.status == "ok"
    if ok and reply.total_gb:
        p.total_gb = reply.total_gb   # the device's memory, for its memory gate
    return ok, None if ok else (res.error or res.output or getattr(reply, "error", None)
                                or res.status)[-300:]


def _probe_transport(cfg: VerifyConfig, p: Placement, probes: Probes, transport: str,
                     lim: Limits) -> bool:
    """One tensor from a worker to another by `transport`: where that fails (CUDA IPC between
    two sandboxes, each with a uid and PID namespace of its own), outputs take the next way."""
    send_pool = probes.pool(p.wrap, lim, 2)
    recv_pool = probes.pool(p.wrap, lim, 3)
    try:
        with send_pool.hold() as sender:
            sent = sender.call(msg.encode(msg.ProbeSend(device=cfg.device, transport=transport)),
                               PROBE_S, accept_fds=True)
            try:
                reply = _decoded(sent, (msg.Probed, msg.Failed))
                if not (isinstance(reply, msg.Probed) and reply.export):
                    log.info("%s probe: the sender failed: %s", transport,
                             (sent.error or getattr(reply, "error", None) or sent.status)[-300:])
                    return False
                p.total_gb = reply.total_gb or p.total_gb
                got = recv_pool.call(msg.encode(msg.ProbeReceive(
                    device=cfg.device, transport=transport, export=reply.export)), PROBE_S,
                    fds=sent.fds)
            finally:
                for fd in sent.fds:
                    os.close(fd)
        back = _decoded(got, (msg.Probed, msg.Failed))
        ok = isinstance(back, msg.Probed) and back.status == "ok"
        if not ok:
            log.info("%s probe failed (%s)", transport,
                     (got.error or getattr(back, "error", None) or got.status)[-300:])
        return ok
    finally:
        send_pool.close()
        recv_pool.close()


def _decoded(res, expect):
    if not res.ok:
        return None
    try:
        return msg.decode(res.value, expect)
    except msg.ProtocolError:
        return None
