"""Solvability of infill rows: the row's own core makes a working program, an empty core does not.

A row is solvable when reassembling prefix + core + suffix gives back the candidate and it still
verifies, while prefix + suffix (the hole left empty) fails to compile or fails correctness. The
second half is what makes the core worth training on: a row whose scaffold alone passes would
teach a model that the kernel does not matter.

`check_solvable` takes any verify callable (a row with `kernel_code` set -> a verdict), so it
works with curate's verify harness (`harness_verify`) or with the
small CPU check here (`subprocess_verify`), which imports reference and candidate in a separate
process (never this one) and compares Model against ModelNew on CPU, Triton under its interpreter.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

Verdict = Any  # bool, a status string, a dict with "status"/"correct", or an object with .status


@dataclass
class Solvability:
    id: str | None
    core_name: str | None
    reassembles: bool          # prefix + core + suffix == kernel_code
    full: str                  # verdict of the reassembled program
    empty: str                 # verdict with the core left empty
    solvable: bool

    def to_json(self) -> dict:
        return asdict(self)


def passed(verdict: Verdict) -> bool:
    """Whether a verify verdict means the program is correct."""
    if isinstance(verdict, bool):
        return verdict
    if isinstance(verdict, str):
        return verdict == "verified"
    if isinstance(verdict, dict):
        if verdict.get("status") is not None:
            return verdict["status"] == "verified"
        return bool(verdict.get("correct"))
    status = getattr(verdict, "status", None)
    if status is not None:
        return status == "verified"
    return bool(getattr(verdict, "correct", False))


def _label(verdict: Verdict) -> str:
    if isinstance(verdict, bool):
        return "verified" if verdict else "failed"
    if isinstance(verdict, str):
        return verdict
    if isinstance(verdict, dict):
        return str(verdict.get("status") or ("verified" if verdict.get("correct") else "failed"))
    return str(getattr(verdict, "status", None) or verdict)


def check_solvable(rows: Iterable[dict], verify: Callable[[dict], Verdict], *,
                   sample: int | None = None, seed: int = 0) -> list[Solvability]:
    """Check (a random sample of) infill rows: own core verifies, empty core fails."""
    rows = list(rows)
    if sample is not None and sample < len(rows):
        rows = random.Random(seed).sample(rows, sample)
    out = []
    for row in rows:
        prefix, core, suffix = row.get("prefix") or "", row.get("core") or "", row.get("suffix") or ""
        whole = prefix + core + suffix
        same = whole == (row.get("kernel_code") or "")
        full = verify({**row, "kernel_code": whole})
        empty = verify({**row, "kernel_code": prefix + suffix})
        out.append(Solvability(row.get("id"), row.get("core_name"), same, _label(full),
                               _label(empty), same and passed(full) and not passed(empty)))
    return out


# ---------------------------------------------------------------------------------------------
# A verify callable: curate's own harness

@contextmanager
def harness_verify(device: str = "cpu", **options) -> Iterator[Callable[[dict], Verdict]]:
    """curate.verify's harness (sandboxed workers, gates) as a verify callable.

        with harness_verify("cpu") as verify:
            results = check_solvable(rows, verify, sample=20)
    """
    from ..verify import Verifier
    with Verifier(device=device, **options) as verifier:
        yield verifier.verify_one


# ---------------------------------------------------------------------------------------------
# A verify callable of its own: a separate CPU process compares Model and ModelNew

_CHECK = textwrap.dedent(r'''
    import json, os, sys, traceback

    from curate.isolation.program import load_program

    def say(status, detail=""):
        sys.stdout.write("\n@@VERDICT@@" + json.dumps({"status": status, "detail": detail[-2000:]}) + "\n")
        sys.stdout.flush()
        os._exit(0)  # no atexit handler of the candidate gets to speak after the verdict

    def load(path, name):
        with open(path, encoding="utf-8") as f:
            return load_program(f.read(), name)

    import torch
    try:
        ref = load("reference.py", "reference")
    except BaseException:
        say("reference_error", traceback.format_exc())
    try:
        cand = load("candidate.py", "candidate")
        cls = getattr(cand, "ModelNew")
    except BaseException:
        say("compile_error", traceback.format_exc())
    try:
        torch.manual_seed(0)
        init = ref.get_init_inputs()
        torch.manual_seed(0)
        model = ref.Model(*init).eval()
        torch.manual_seed(0)
        new = cls(*init).eval()
    except BaseException:
        say("runtime_error", traceback.format_exc())

    def clone(v):
        return v.clone() if isinstance(v, torch.Tensor) else v

    def same(a, b):
        if isinstance(a, (tuple, list)):
            return isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(same, a, b))
        if isinstance(a, torch.Tensor):
            return (isinstance(b, torch.Tensor) and a.shape == b.shape and
                    torch.allclose(a.float(), b.float(), atol=1e-4, rtol=1e-4, equal_nan=False))
        return a == b

    for trial in range(3):
        torch.manual_seed(1000 + trial)
        inputs = ref.get_inputs()
        with torch.no_grad():
            want = model(*[clone(v) for v in inputs])
            try:
                got = new(*[clone(v) for v in inputs])
            except BaseException:
                say("runtime_error", traceback.format_exc())
        if not same(want, got):
            say("incorrect", "trial %d: outputs differ" % trial)
    say("verified")
''')


def subprocess_verify(row: dict, *, timeout: float = 300.0) -> dict:
    """Verdict of one pair from a separate CPU process: {"status": ..., "detail": ...}.

    The candidate runs with TRITON_INTERPRET=1 and no GPU visible, in a scratch directory, with a
    scrubbed environment, and its whole process group is killed on timeout.
    """
    try:
        from ..isolation import scrubbed_env
    except ImportError:  # the pool is optional here; the scrub is what matters
        def scrubbed_env(extra=None):
            return {**{k: v for k, v in os.environ.items() if "TOKEN" not in k.upper()
                       and "KEY" not in k.upper()}, **(extra or {})}
    with tempfile.TemporaryDirectory(prefix="curate-solvable-") as tmp:
        d = Path(tmp)
        (d / "reference.py").write_text(row.get("pytorch_code") or "", encoding="utf-8")
        (d / "candidate.py").write_text(row.get("kernel_code") or "", encoding="utf-8")
        (d / "check.py").write_text(_CHECK, encoding="utf-8")
        pkg_root = str(Path(__file__).resolve().parents[2])  # the check imports curate's loader
        env = scrubbed_env({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "HOME": tmp,
                            "PYTHONDONTWRITEBYTECODE": "1",
                            "PYTHONPATH": os.pathsep.join(filter(None, [
                                pkg_root, os.environ.get("PYTHONPATH")])),
                            "TORCHINDUCTOR_CACHE_DIR": os.environ.get(
                                "TORCHINDUCTOR_CACHE_DIR",
                                str(Path(tempfile.gettempdir()) / "curate-solvable-inductor"))})
        proc = subprocess.Popen([sys.executable, "check.py"], cwd=tmp, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"status": "timeout", "detail": f"no verdict in {timeout:g}s"}
    text = out.decode("utf-8", "replace")
    marker = text.rfind("@@VERDICT@@")
    if marker == -1:
        return {"status": "crashed", "detail": text[-2000:]}
    try:
        return json.loads(text[marker + len("@@VERDICT@@"):].splitlines()[0])
    except (json.JSONDecodeError, IndexError):
        return {"status": "crashed", "detail": text[-2000:]}
