"""A row's models and inputs, built alike in the judge and the candidate's worker: the same seed
gives the same parameters and the same input sets in both processes."""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
import random

import torch

from ...isolation.program import to_device
from .calls import poked
from .into import IntoBuffers, distinct, settle


# the generators' own seeding, bound before any candidate code runs. `torch.manual_seed` also
# seeds every other backend it knows (CUDA where there is no context yet, XPU, MTIA), each of
# which queues its seed with a formatted copy of the stack when it is not initialized:
# milliseconds a call, more under the candidate's audit hook, which a set made again at every
# timed call paid on the candidate's side of the parent's clock (on the CPU and on the GPU alike)
_SEED_CPU = torch.default_generator.manual_seed
_CUDA = torch.cuda


def seed_all(seed: int, device: str = "cuda") -> None:
    """Seed the generators `device`'s inputs come from (the CPU's always)."""
    _SEED_CPU(seed)
    if device != "cpu":
        if _CUDA.is_initialized():
            for gen in _CUDA.default_generators:
                gen.manual_seed(seed)
        else:   # no context yet: CUDA applies the seed when it makes one
            _CUDA.manual_seed_all(seed)
    random.seed(seed)
    try:
        import numpy as np
        np.random.seed(seed % 2**32)
    except Exception:  # noqa: BLE001 - no numpy, or a program that broke it
        pass


def _device_ctx(device: str):
    return torch.device(device) if device != "cpu" else contextlib.nullcontext()


def make_inputs(mod, seed: int, device: str) -> list:
    """One trial's inputs: `get_inputs()` under the seed, created directly on the device."""
    seed_all(seed, device)
    with _device_ctx(device):
        inputs = list(mod.get_inputs())
    return [to_device(x, device) for x in inputs]


def make_inputs_into(mod, seed: int, device: str, bufs: list) -> list | None:
    """`make_inputs`, with the set written into `bufs` (into.py): the same bits, and no second
    set beside the buffers. None where it cannot be (the caller makes the set as usual)."""
    if not distinct(bufs):
        return None
    seed_all(seed, device)
    with _device_ctx(device), IntoBuffers(bufs):
        got = list(mod.get_inputs())
    return settle([to_device(x, device) for x in got], bufs)


def init_args(mod, seed: int, device: str) -> list:
    seed_all(seed, device)
    with _device_ctx(device):
        args = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
    return args


def build_model(cls, args: list, seed: int, device: str):
    """Both models in eval mode: inference semantics (batch norm uses running statistics, no
    dropout), the same mode `curate synth inductor` compiles in."""
    seed_all(seed, device)
    with _device_ctx(device):
        model = cls(*args)
    model = model.to(device) if hasattr(model, "to") else model
    return model.eval() if hasattr(model, "eval") else model


def share_parameters(ref_model, new_model) -> str:
    """Give ModelNew the reference's parameters: by name when the state dicts match, by order
    when only shapes match; otherwise both keep their seeded initialization."""
    try:
        rs, ns = ref_model.state_dict(), new_model.state_dict()
    except Exception:  # noqa: BLE001 - not an nn.Module
        return "seed"
    if not rs or not ns:
        return "seed"
    if rs.keys() == ns.keys() and all(rs[k].shape == ns[k].shape for k in rs):
        new_model.load_state_dict(rs)
        return "by_name"
    rl, nl = list(rs.values()), list(ns.values())
    if len(rl) == len(nl) and all(a.shape == b.shape and a.dtype == b.dtype
                                  for a, b in zip(rl, nl)):
        with torch.no_grad():
            for a, b in zip(rl, nl):
                b.copy_(a)
        return "by_order"
    return "seed"


class InputSets:
    """A row's input sets by index: one per trial seed, then (with `poke`) set 0 with one
    element poked. Sets of more than `keep_bytes` each are made again from their seed whenever
    one is asked for instead of being kept: three sets and a poked copy of a multi-GiB problem
    are most of a worker's device memory, and making a set again on the device takes
    milliseconds (the same seed gives the same bits, in this process and in the other)."""

    def __init__(self, mod, seeds: list[int], device: str, poke: int | None = None,
                 keep_bytes: int | None = None):
        self.mod, self.seeds, self.device, self.poke = mod, list(seeds), device, poke
        first = make_inputs(mod, self.seeds[0], device) if self.seeds else []
        self.remade = keep_bytes is not None and set_bytes(first) > keep_bytes
        self._kept: list[list] | None = None
        # made to learn its size: handed out by the first request for set 0 (the runner's
        # buffers, at once) instead of being made again
        self._first: list | None = first if self.remade else None
        if not self.remade:
            self._kept = [first] + [make_inputs(mod, seed, device) for seed in self.seeds[1:]]
            if poke is not None and self.seeds:
                self._kept.append(poked(first, int(poke)))

    def __len__(self) -> int:
        return len(self.seeds) + (self.poke is not None and bool(self.seeds))

    def __getitem__(self, k: int) -> list:
        """Set `k`; when sets are made again, a new list of new tensors the caller owns."""
        if self._kept is not None:
            return self._kept[k]
        k = k + len(self) if k < 0 else k
        if not 0 <= k < len(self):
            raise IndexError(f"input set {k} of {len(self)}")
        if k == 0 and self._first is not None:
            first, self._first = self._first, None
            return first
        if k < len(self.seeds):
            return make_inputs(self.mod, self.seeds[k], self.device)
        return poked(make_inputs(self.mod, self.seeds[0], self.device), int(self.poke),
                     in_place=True)

    def write(self, k: int, bufs: list) -> list | None:
        """Set `k` made again straight into `bufs` (sets made again only): the buffers, now
        holding it. None for kept sets, or where it cannot be done (make it with `self[k]`)."""
        if self._kept is not None or self._first is not None:
            return None
        k = k + len(self) if k < 0 else k
        if not 0 <= k < len(self):
            raise IndexError(f"input set {k} of {len(self)}")
        seed = self.seeds[k] if k < len(self.seeds) else self.seeds[0]   # the poked set: 0's
        got = make_inputs_into(self.mod, seed, self.device, bufs)
        if got is not None and k >= len(self.seeds):
            got = poked(got, int(self.poke), in_place=True)
        return got


def base_sets(mod, seeds: list[int], device: str, poke: int | None = None,
              keep_bytes: int | None = None) -> InputSets:
    """One input set per trial seed, then (with `poke`) set 0 with one element poked."""
    return InputSets(mod, seeds, device, poke, keep_bytes)


def set_bytes(inputs: list) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def describe_sets(sets, n: int, runner=None) -> list[list]:
    """The first `n` input sets as the verification record shows them: per argument its shape,
    dtype and value range (a plain value as itself); one set at a time. Sets made again are
    made into `runner`'s buffers (every call writes them again before it runs): a set made
    beside them was a whole set more at the judge's load."""
    remade = runner is not None and getattr(sets, "remade", False)
    get = (lambda k: runner.inputs(k, 1.0)) if remade else sets.__getitem__
    return [[_describe(x) for x in get(k)] for k in range(n)]


def _describe(x) -> dict:
    if isinstance(x, torch.Tensor):
        out = {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
        if x.numel() and (x.is_floating_point() or x.dtype == torch.bool or
                          not (x.is_complex() or x.is_quantized)):
            v = x.detach()
            v = v.float() if v.dtype == torch.bool else v
            out.update(min=_plain(v.min()), max=_plain(v.max()))
        return out
    if isinstance(x, (bool, int, float, str)) or x is None:
        return {"value": x}
    return {"type": type(x).__name__}


def _plain(t: torch.Tensor):
    v = t.item()
    return v if not isinstance(v, float) or math.isfinite(v) else str(v)


def env_info(device: str) -> dict:
    gpu = capability = None
    if device == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
        capability = "%d.%d" % torch.cuda.get_device_capability()
    try:
        triton_version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton_version = None
    return {"gpu": gpu, "torch_version": torch.__version__, "triton_version": triton_version,
            "cuda_version": torch.version.cuda, "capability": capability}
