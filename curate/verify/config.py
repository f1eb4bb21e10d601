"""What a verify run is asked to do: one validated, typed configuration read by every part of
the parent (nothing reads options with `.get(key, default)`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..isolation.sandbox import MODES as SANDBOX_MODES
from .messages import DIGESTS

DEVICES = ("cpu", "cuda")
TRANSPORTS = ("auto", "memfd", "inline", "cuda_ipc", "cuda_fd")
# CPU: the threads every worker's OpenMP runs on. With one a core, speedups moved several times
# more between identical runs than on one: a thread that waits for a busy core stalls the loop
CPU_TIMING_THREADS = 1
# CPU: a row whose interval low lies within RETIME_BAND of the build's threshold is timed in
# RETIME_PAIRS more fresh process pairs and takes the median pair's figures (the speed factor
# of one process pair no longer decides it)
RETIME_BAND, RETIME_PAIRS = 0.2, 2
# the second shape (resized.py): auto checks every row but those compiled for static shapes
SECOND_SHAPE_MODES = ("auto", "all", "off")


def default_cache_dir() -> Path:
    root = os.environ.get("CURATE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "curate")
    return Path(root) / "compile"


def visible_gpus() -> list[int]:
    """Indices of the GPUs this process may use, without initializing CUDA here."""
    try:
        import torch
        return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    except Exception:  # noqa: BLE001 - no usable torch.cuda
        return []


def parse_devices(spec: str | None) -> list[int] | None:
    """`--devices 0,1,3` -> [0, 1, 3]; None or "" -> None (every visible GPU)."""
    if not spec:
        return None
    try:
        out = [int(x) for x in str(spec).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--devices takes GPU indices like 0,1,2, not {spec!r}") from None
    if not out or len(set(out)) != len(out) or min(out) < 0:
        raise ValueError(f"--devices takes distinct GPU indices like 0,1,2, not {spec!r}")
    return out


@dataclass
class VerifyConfig:
    """Options of one verify run. `timeout` bounds every phase of a row (budget.py derives
    them); `compile_timeout` is the longest a C++/CUDA compiler may add to it."""

    device: str = "cpu"
    devices: list[int] | None = None      # GPU indices (cuda): None = every visible GPU
    workers: int | None = None            # rows in flight per device
    compile_workers: int | None = None
    timeout: float = 120.0
    compile_timeout: float = 300.0
    trials: int = 3
    seed: int = 0
    time_budget: float | None = None      # seconds of timed calls per side and row
    min_timed: int = 20
    max_timed: int = 1000
    cache_dir: Path = field(default_factory=default_cache_dir)
    memory_gb: float | None = None        # per worker, CPU only
    compile_ahead: bool = True
    output_bytes: int = 8 * 2**20
    gates: bool = True
    static_gates: bool = True
    confine: bool | None = None
    transport: str = "auto"
    keep_idle_gb: float | None = 1.0
    sandbox: str = "auto"
    threshold: float | None = None
    second_shape: str = "auto"            # auto (not for static compiles), all, off
    # the most a worker keeps of one input set, and of the correctness calls' outputs
    # together: larger sets are made again from their seed at each call, larger outputs go
    # one call at a time (on the device, kept copies were most of a large row's memory)
    keep_bytes: int = 2**30
    digest: str = "sums"

    def __post_init__(self):
        if self.device not in DEVICES:
            raise ValueError(f"device must be cpu or cuda, not {self.device!r}")
        if self.transport == "files":   # the old spelling: the judge reads no file
            self.transport = "inline"
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, "
                             f"not {self.transport!r}")
        if self.transport.startswith("cuda") and self.device != "cuda":
            raise ValueError(f"transport {self.transport} needs device cuda")
        if self.digest not in DIGESTS:
            raise ValueError(f"digest must be sums or tree, not {self.digest!r}")
        if self.second_shape not in SECOND_SHAPE_MODES:
            raise ValueError(f"second_shape must be auto, all or off, not {self.second_shape!r}")
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox must be auto, strict or off, not {self.sandbox!r}")
        if self.timeout <= 0 or self.compile_timeout < 0 or self.trials < 1:
            raise ValueError("timeout must be > 0, compile_timeout >= 0 and trials >= 1")
        if self.device == "cpu":
            self.devices = None
        elif self.devices is not None and not self.devices:
            raise ValueError("devices: name at least one GPU index")
        self.cache_dir = Path(self.cache_dir) if self.cache_dir else default_cache_dir()
        cpus = os.cpu_count() or 2
        ndev = len(self.devices) if self.devices else 1
        if self.device == "cuda":
            self.workers = self.workers or max(2, min(8, cpus // 2 // ndev))
            default_comp = max(2, cpus - ndev * self.workers)
        else:
            self.workers = self.workers or max(1, min(4, cpus))
            default_comp = max(1, cpus // 2)
        if self.compile_workers is None:
            self.compile_workers = default_comp
        self.compile_ahead = self.compile_ahead and self.compile_workers > 0
        if self.time_budget is None:
            self.time_budget = 0.5 if self.device == "cuda" else 1.0
        if self.memory_gb is None and self.device == "cpu":
            self.memory_gb = 8.0
        self.threshold = float(self.threshold) if self.threshold else None

    @property
    def cpu_threads(self) -> int | None:
        return CPU_TIMING_THREADS if self.device == "cpu" else None

    @property
    def retime_pairs(self) -> int:
        return RETIME_PAIRS if self.device == "cpu" and self.threshold else 0

    def key(self) -> dict:
        """What keys the ledger: the settings that change a verdict (not how outputs travel,
        not which GPU: a row's verdict must not depend on either)."""
        out = {"device": self.device, "trials": self.trials, "seed": self.seed,
               "time_budget": self.time_budget, "min_timed": self.min_timed, "gates": self.gates,
               "second_shape": self.second_shape}
        if self.cpu_threads:
            out["cpu_threads"] = self.cpu_threads
        if self.digest != "sums":   # ledgers of runs before the option keep resuming
            out["digest"] = self.digest
        if self.retime_pairs:
            out["retime"] = {"threshold": self.threshold, "band": RETIME_BAND,
                             "pairs": self.retime_pairs}
        return out
