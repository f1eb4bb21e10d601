"""A row's models and inputs, built alike in the judge and the candidate's worker: the same seed
gives the same parameters and the same input sets in both processes."""

from __future__ import annotations

import contextlib
import importlib.metadata
import random

import torch

from ...isolation.program import to_device
from .calls import poked


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
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
    seed_all(seed)
    with _device_ctx(device):
        inputs = list(mod.get_inputs())
    return [to_device(x, device) for x in inputs]


def init_args(mod, seed: int, device: str) -> list:
    seed_all(seed)
    with _device_ctx(device):
        args = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
    return args


def build_model(cls, args: list, seed: int, device: str):
    """Both models in eval mode: inference semantics (batch norm uses running statistics, no
    dropout), the same mode `curate synth inductor` compiles in."""
    seed_all(seed)
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


def base_sets(mod, seeds: list[int], device: str, poke: int | None = None) -> list[list]:
    """One input set per trial seed, then (with `poke`) set 0 with one element poked."""
    sets = [make_inputs(mod, seed, device) for seed in seeds]
    if poke is not None and sets:
        sets.append(poked(sets[0], int(poke)))
    return sets


def inputs_equal(a: list, b: list) -> bool:
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not torch.equal(x, y):
                if not (x.is_floating_point() and torch.equal(torch.nan_to_num(x),
                                                              torch.nan_to_num(y))):
                    return False
    return True


def env_info(device: str) -> dict:
    gpu = None
    if device == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    try:
        triton_version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton_version = None
    return {"gpu": gpu, "torch_version": torch.__version__, "triton_version": triton_version,
            "cuda_version": torch.version.cuda}
