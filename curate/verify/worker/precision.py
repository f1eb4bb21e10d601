"""The judge's precision readings: does the candidate compute in lower precision than its
float32 reference, and is the float32 reference itself stable (does its float64 run agree)?
Both run the trusted reference program only, in the judge."""

from __future__ import annotations

import copy
import math

import torch

from ..messages import FLOAT64_KEEP_FACTOR, float64_runs
from .compare import chunk_of, compare, flatten_outputs


def _relnorm(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in float64, a chunk at a time: float64 copies of two multi-GiB outputs
    and their difference would be most of the judge's memory."""
    fa, fb, step = a.reshape(-1), b.reshape(-1), chunk_of(a)
    sums = torch.zeros(2, dtype=torch.float64, device=a.device)   # read back once, at the end
    for i in range(0, fa.numel(), step):
        x, y = fa[i:i + step].double(), fb[i:i + step].double()
        sums[0] += torch.sum((x - y) ** 2)
        sums[1] += torch.sum(y * y)
    num, den = sums.tolist()
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


SAMPLE = 1 << 20   # values read for the half-precision test


def _half_representable(x: torch.Tensor) -> float:
    """Share of the nonzero finite values that survive a round trip through float16 or bfloat16
    unchanged: about 1/8000 for float32 arithmetic, all of them for half-precision results.
    The first SAMPLE such values, gathered a chunk at a time."""
    flat, parts, n = x.reshape(-1), [], 0
    step = chunk_of(flat)
    for i in range(0, flat.numel(), step):
        c = flat[i:i + step]
        parts.append(c[torch.isfinite(c) & (c != 0)][:SAMPLE - n])
        n += parts[-1].numel()
        if n >= SAMPLE:
            break
    if n < 64:
        return 0.0
    v = torch.cat(parts).float()
    fp16 = (v.half().float() == v).double().mean()
    bf16 = (v.bfloat16().float() == v).double().mean()
    return float(max(fp16, bf16))


def _float64_outputs(model, inputs: list) -> list:
    """The reference program's outputs run in float64 on the same inputs. `inputs` is
    consumed (emptied as each tensor is converted): its float32 copies go before the float64
    run allocates."""
    model64 = copy.deepcopy(model).double()
    x64 = []
    while inputs:
        x = inputs.pop(0)
        x64.append(x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32
                   else x)
        del x
    with torch.no_grad():
        out, _ = flatten_outputs(model64(*x64))
    return out


def precision_profile(model, inputs, ref_out: list, cand_out: list,
                      float64_keep_bytes: int | None = None, input_bytes: int | None = None
                      ) -> dict:
    """Does the candidate compute in lower precision than its float32 reference? Two readings:
    its error against the same program run in float64 (flagged when above 5e-5 relative norm
    and 20 times the float32 reference's own error: half precision leaves far more than
    float32 arithmetic in another order), and whether its values are exactly half-precision
    numbers. A float32 tolerance alone cannot tell. `inputs` (a copy of the call's inputs) is
    consumed by the float64 run, which is skipped (and said so) where the float64 copies of the
    inputs and outputs would be too large for `float64_keep_bytes` (messages.float64_runs; None:
    never skipped). `inputs` may be a function that makes them, called only for that run, with
    `input_bytes` their size: a row whose float64 run is skipped then makes no copy at all."""
    pairs = [(r, c) for r, c in zip(ref_out, cand_out) if isinstance(r, torch.Tensor)
             and isinstance(c, torch.Tensor) and r.dtype == torch.float32 and r.numel()
             and r.shape == c.shape]
    if not pairs:
        return {}
    out: dict = {}
    half = max(_half_representable(c) for _, c in pairs)
    ref_half = max(_half_representable(r) for r, _ in pairs)
    out["half_representable"] = round(half, 4)
    if half > 0.9 and ref_half < 0.5:
        out["reduced_precision"] = "outputs are half-precision numbers"
    if input_bytes is None:
        input_bytes = _bytes(inputs)
    need = 2 * (input_bytes + _bytes(ref_out))
    if not float64_runs(need, float64_keep_bytes):
        out["float64_skipped"] = (f"float64 copies would take {need / 2**30:.1f} GiB, more than "
                                  f"{FLOAT64_KEEP_FACTOR * float64_keep_bytes / 2**30:.1f}")
        return out
    try:
        o64 = _float64_outputs(model, inputs() if callable(inputs) else inputs)
        err_ref = max(_relnorm(r, o) for (r, _), o in zip(pairs, o64))
        err_cand = max(_relnorm(c, o) for (_, c), o in zip(pairs, o64))
        out["err_vs_float64"] = {"reference": err_ref, "candidate": err_cand}
        if err_cand > 5e-5 and err_cand > 20 * max(err_ref, 1e-8):
            out["below_float32"] = (f"error against float64 {err_cand:.1e}, the float32 "
                                    f"reference's {err_ref:.1e}")
    except Exception as exc:  # noqa: BLE001 - float64-less ops, explicit dtypes, memory
        out["float64_skipped"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def _bytes(items) -> int:
    return sum(x.numel() * x.element_size() for x in items if isinstance(x, torch.Tensor))


def reference_instability(model, inputs: list, ref_out: list) -> str | None:
    """How the float32 reference differs from the same program run in float64 on the same
    inputs, when it does beyond the float32 tolerance; None when it agrees (or cannot run in
    float64: explicit dtypes, float64-less ops)."""
    if not any(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in ref_out):
        return None
    try:
        out64 = _float64_outputs(model, inputs)
        cast = [o.to(r.dtype) if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
                else o for o, r in zip(out64, ref_out)]
        if len(cast) != len(ref_out):
            return None
        c = compare(ref_out, cast)
        return None if c.ok else (c.detail or ", ".join(c.reasons))[:300]
    except Exception:  # noqa: BLE001
        return None
    finally:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
