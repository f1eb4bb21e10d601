"""Every request the parent sends a verify worker and every reply it may get, as dataclasses.

Both sides speak only through `encode` and `decode`: a message is a JSON object whose `kind`
names its class and whose other keys are exactly that class's fields. `decode` refuses an
unknown kind, an unknown or missing key, and a value of the wrong type, so a renamed field
fails loudly instead of silently doing nothing, and the parent can tell a reply that is not the
protocol's (`ProtocolError`) from one that is.

Shared by both sides of verify: imports only the finding type.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field

from .findings import Finding

Call = list  # [input set index, scale]: one call of a model on one prepared input set


class ProtocolError(ValueError):
    """A message that is not one of this module's, or not well formed."""


@dataclass
class Message:
    kind: typing.ClassVar[str] = ""


# -- requests: parent -> worker ------------------------------------------------------------------
@dataclass
class ProbeCuda(Message):
    """Initialize CUDA and launch a Triton kernel (does this sandbox allow the GPU?)."""
    kind = "probe_cuda"
    device: str = "cuda"


@dataclass
class ProbeSend(Message):
    """Export one known tensor by `transport` (does this way of passing outputs work here?)."""
    kind = "probe_send"
    device: str = "cuda"
    transport: str = "cuda_ipc"


@dataclass
class ProbeReceive(Message):
    kind = "probe_receive"
    device: str = "cuda"
    transport: str = "cuda_ipc"
    export: dict = field(default_factory=dict)


@dataclass
class Compile(Message):
    """Import the candidate ahead of its row (builds CUDA extensions and inductor C++ into the
    row's cache); with `size`, also the reference's sizes from meta tensors. Runs no forward."""
    kind = "compile"
    device: str = "cpu"
    pytorch_code: str = ""
    kernel_code: str = ""
    tag: str = "x"
    extensions_dir: str = ""
    size: bool = False


@dataclass
class Load(Message):
    """Start a row's session: `role` candidate (reference module for inputs and parameters,
    then the candidate) or judge (the reference alone). `keep_candidate`: the candidate module
    this worker's last session imported is kept and only the reference is loaded again (a
    second shape of the same row, in the same worker). Input sets of more than `keep_bytes`
    each are made again from their seed at every call instead of being kept. `digest`: how
    timed batches commit to their outputs (the parent's choice, the same for both sides)."""
    kind = "load"
    role: str = "candidate"
    device: str = "cpu"
    backend: str = ""
    pytorch_code: str = ""
    kernel_code: typing.Optional[str] = None
    seed_init: int = 0
    seeds: list = field(default_factory=list)
    poke: int = 0
    tag: str = "x"
    gates: bool = True
    extensions_dir: str = ""
    keep_candidate: bool = False
    keep_bytes: typing.Optional[int] = None
    digest: str = "sums"   # what timed batches commit to their outputs with (treehash.commit)


# how timed batches commit to their outputs (worker/treehash.commit): `sums` is cheap and not
# binding, `tree` binding; `sums` stays the default until the tree's cost on the GPU is known
DIGESTS = ("sums", "tree")


def kept_together(out_bytes: int, calls: int, keep_bytes: int) -> bool:
    """Whether the outputs of `calls` calls of `out_bytes` each are kept together: one rule for
    the judge (keep the reference's, or compute each again) and the parent (send the
    candidate's correctness calls in one batch, or one at a time)."""
    return out_bytes * calls <= keep_bytes


# on the GPU the judge's float64 reading only warns (TF32): it is skipped where its float64
# copies of the inputs and outputs would pass this many times `keep_bytes` (most of a large
# row's memory); the parent reserves no memory for it then
FLOAT64_KEEP_FACTOR = 4


def float64_runs(copy_bytes: float, keep_bytes: float | None) -> bool:
    """Whether the judge's float64 run of the reference takes place (`keep_bytes` None: no
    limit, as on the CPU): one rule for the judge and the parent's memory estimate."""
    return keep_bytes is None or copy_bytes <= FLOAT64_KEEP_FACTOR * keep_bytes


@dataclass
class Reference(Message):
    """Judge: the reference's outputs of `calls`, kept for comparison while they take at most
    `keep_bytes` together (larger ones are computed again when compared)."""
    kind = "reference"
    calls: list = field(default_factory=list)
    keep_bytes: int = 2**30


@dataclass
class Calls(Message):
    """Run the loaded model on `calls`; the first `check` are watched by the worker's gates
    (which number them from `first`: a row's correctness calls sent one at a time).
    Outputs are kept for `digest` and `fetch` until the next batch; a `timed` batch that keeps
    them replies with their digests."""
    kind = "calls"
    calls: list = field(default_factory=list)
    check: int = 0
    first: int = 0
    timed: bool = False
    keep: bool = True


@dataclass
class Fetch(Message):
    """One kept output of the last batch, passed by `transport` for the judge."""
    kind = "fetch"
    index: int = 0
    transport: str = "memfd"


@dataclass
class Compare(Message):
    """Judge: compare an output passed by the parent with the reference's of the same call."""
    kind = "compare"
    call: list = field(default_factory=list)
    outputs: typing.Optional[dict] = None
    structure: typing.Optional[str] = None
    precision: bool = False
    transport: str = "memfd"
    digest: typing.Optional[int] = None


@dataclass
class Finish(Message):
    kind = "finish"
    keep_idle_gb: typing.Optional[float] = 1.0


@dataclass
class Release(Message):
    kind = "release"


# -- replies: worker -> parent ---------------------------------------------------------------------
@dataclass
class Reply(Message):
    """Fields every reply has: `recycle` asks the pool to replace the worker after the task."""
    status: str = "ok"
    reasons: list = field(default_factory=list)
    error: typing.Optional[str] = None
    notes: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)   # list[Finding]
    recycle: bool = False
    memory_kept_gb: typing.Optional[float] = None


@dataclass
class Failed(Reply):
    """The request failed in a way the worker could classify (compile_error, runtime_error, ...)."""
    kind = "failed"
    status: str = "runtime_error"


@dataclass
class Probed(Reply):
    kind = "probed"
    total_gb: typing.Optional[float] = None
    export: typing.Optional[dict] = None


@dataclass
class Compiled(Reply):
    kind = "compiled"
    seconds: float = 0.0
    import_s: typing.Optional[float] = None
    size_gb: typing.Optional[dict] = None


@dataclass
class Loaded(Reply):
    """`inputs`: the judge's description of its input sets (per set, per argument: shape,
    dtype, value range), for the row's verification record."""
    kind = "loaded"
    env: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)


@dataclass
class Batch(Reply):
    """What a batch of calls reports. `ms` is evidence only: the parent's clock decides. A timed
    batch that keeps its outputs also commits to them before it replies (`digests`, one per
    call), so that no work of the batch can be left for after the parent's clock stops.
    `harness_ms`: the harness's own milliseconds around the calls by part (before, after,
    digest), summed over the batch: where a batch's fixed cost goes, never read by a verdict."""
    kind = "batch"
    ms: list = field(default_factory=list)
    structure: typing.Optional[str] = None
    out_bytes: int = 0
    digests: list = field(default_factory=list)
    harness_ms: dict = field(default_factory=dict)


@dataclass
class Outputs(Reply):
    kind = "outputs"
    outputs: typing.Optional[dict] = None
    structure: typing.Optional[str] = None
    digest: typing.Optional[int] = None


@dataclass
class Compared(Reply):
    kind = "compared"
    ok: bool = False


@dataclass
class Finished(Reply):
    kind = "finished"
    env: dict = field(default_factory=dict)
    comparison: dict = field(default_factory=dict)


@dataclass
class Released(Reply):
    kind = "released"
    released: int = 0


REQUESTS = (ProbeCuda, ProbeSend, ProbeReceive, Compile, Load, Reference, Calls, Fetch, Compare,
            Finish, Release)
REPLIES = (Failed, Probed, Compiled, Loaded, Batch, Outputs, Compared, Finished, Released)
KINDS: dict[str, type] = {c.kind: c for c in REQUESTS + REPLIES}
assert len(KINDS) == len(REQUESTS) + len(REPLIES), "two messages share a kind"
# each kind's field types and names, read once here: `typing.get_type_hints` compiles every
# string annotation again at each call, and in the candidate's worker each compile is an audit
# event its hook walks the stack for, inside the parent's clock of every timed batch
HINTS: dict[type, dict] = {c: typing.get_type_hints(c) for c in KINDS.values()}
NAMES: dict[type, frozenset] = {c: frozenset(f.name for f in dataclasses.fields(c))
                                for c in KINDS.values()}


def encode(msg: Message) -> dict:
    """The JSON object for `msg` (findings as plain objects; `recycle` under the key the
    isolation pool reads)."""
    if type(msg).kind not in KINDS or KINDS[type(msg).kind] is not type(msg):
        raise ProtocolError(f"not a verify message: {type(msg).__name__}")
    out: dict = {"kind": msg.kind}
    for f in dataclasses.fields(msg):
        v = getattr(msg, f.name)
        if f.name == "findings":
            v = [x.to_wire() if isinstance(x, Finding) else Finding.from_wire(x).to_wire()
                 for x in v]
        if f.name == "recycle":
            if v:
                out["_recycle"] = True
            continue
        out[f.name] = v
    return out


def decode(data, expect: tuple[type, ...] | None = None) -> Message:
    """The message in `data`, which must be one of `expect` (any message when None)."""
    if not isinstance(data, dict):
        raise ProtocolError(f"a message is a JSON object, not {type(data).__name__}")
    data = dict(data)
    kind = data.pop("kind", None)
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind!r}"[:200])
    if expect is not None and cls not in expect:
        raise ProtocolError(f"{kind} where {'/'.join(c.kind for c in expect)} was expected")
    if data.pop("_recycle", False):
        data["recycle"] = True
    hints, names = HINTS[cls], NAMES[cls]
    unknown = set(data) - names
    if unknown:
        raise ProtocolError(f"{kind}: unknown keys {sorted(unknown)}"[:200])
    for name, value in data.items():
        if not _fits(value, hints[name]):
            raise ProtocolError(f"{kind}.{name}: {type(value).__name__} is not {hints[name]}")
    if "findings" in data:
        try:
            data["findings"] = [Finding.from_wire(x) for x in data["findings"]]
        except ValueError as exc:
            raise ProtocolError(f"{kind}.findings: {exc}") from None
    return cls(**data)


def _fits(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    base = origin or hint
    return isinstance(value, base) if isinstance(base, type) else True
