"""Refinement turns (as Kevin does): each candidate is verified on the build's device and the
verdict becomes the next turn's prompt: the compiler error, the mismatch or the speedup.

The verdict comes from the same Verifier as the verify stage (isolated workers, gates); what a
device cannot check is said plainly (a CUDA candidate on the CPU is `unsupported`: the static
gates ran, nothing was compiled), so that the model is never told a guess.
"""

from __future__ import annotations

from ...pipeline.progress import Progress
from ...verify.engine import VerifyResult
from .cache import ResponseCache, verdict_key
from .prompts import Verdict

KIND = {"compile_error": "compile_error", "runtime_error": "runtime_error",
        "timeout": "runtime_error", "crashed": "runtime_error", "incorrect": "incorrect",
        "deceptive": "rejected", "verified": "correct"}
ERROR_CHARS = 3000  # the end of a long compiler log is where the error is; keep prompts bounded


def verdict_of(res: VerifyResult, device: str, backend: str | None) -> Verdict:
    kind = KIND.get(res.status, "unchecked")
    v = Verdict(kind=kind, status=res.status, error=_tail(res.error),
                max_abs_err=res.max_abs_err, speedup=res.speedup, device=res.gpu or device,
                checked=kind != "unchecked", reasons=list(res.reasons))
    if res.status == "unsupported" and "cuda_needs_gpu" in res.reasons:
        v.note = ("this build runs on the CPU, where CUDA candidates are neither compiled nor "
                  "run (status unsupported); only the static checks ran, and they passed.")
    elif res.status == "unsupported":
        v.note = f"the candidate is unsupported here ({', '.join(res.reasons) or 'no reason'})."
    elif kind == "unchecked":
        v.note = f"the reference program could not be measured ({res.status})."
    elif kind == "rejected":
        v.note = "The checks found that the custom kernel is not what computes the result."
    elif kind == "correct" and res.speedup is None:
        v.note = ("checked under the Triton interpreter on the CPU, where speed is not measured"
                  if backend == "triton" and device == "cpu" else "speed not measured")
    return v


def _tail(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= ERROR_CHARS else "...\n" + text[-ERROR_CHARS:]


class Refiner:
    """Verdicts for candidate rows, from a Verifier started on first use; cached by candidate."""

    def __init__(self, device: str, cache: ResponseCache | None = None, workers: int | None = None,
                 timeout: float = 120.0, sandbox: str = "auto"):
        self.device, self.cache = device, cache
        self._args = dict(device=device, workers=workers, timeout=timeout, sandbox=sandbox)
        self._verifier = None
        self.checked = 0

    def _config(self) -> dict:
        from ...verify.engine import Verifier
        if self._verifier is None:
            self._verifier = Verifier(**self._args)
        return self._verifier.config()

    def verdicts(self, rows: list[dict]) -> list[Verdict]:
        """One Verdict per row (rows without code get `no_code` without running anything)."""
        out: list[Verdict | None] = [None] * len(rows)
        todo: dict[str, list[int]] = {}  # samples that wrote the same program are checked once
        for i, row in enumerate(rows):
            if not row.get("kernel_code"):
                out[i] = Verdict(kind="no_code", checked=False)
                continue
            key = verdict_key(row["pytorch_code"], row["kernel_code"], self.device,
                              self._config())
            got = self.cache.verdict(key) if self.cache else None
            if got is not None:
                out[i] = Verdict.from_json(got)
            else:
                todo.setdefault(key, []).append(i)
        if todo:
            self._verifier.start()
            keys = list(todo)
            bar = Progress(f"synth-llm: verifying for feedback on {self.device}", len(keys))
            for j, res in self._verifier.verify([rows[todo[k][0]] for k in keys]):
                bar.update(1)
                same = todo[keys[j]]
                verdict = verdict_of(res, self.device, rows[same[0]].get("backend"))
                for i in same:
                    out[i] = verdict
                self.checked += 1
                if self.cache:
                    self.cache.put_verdict(keys[j], verdict.to_json())
            bar.close()
        return out  # type: ignore[return-value]

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None
