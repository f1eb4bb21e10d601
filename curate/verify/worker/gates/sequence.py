"""The gates' calls of one candidate, in order: (1) call a, counting custom launches, with the
mutation and alias checks; the profiler's kernel names (CUDA); (2) the ghost run of call a;
(3) call b (new values in the same buffers: a cache keyed by pointer answers with a's result),
then call b again (an answer that depends on the call before); (4) side streams (CUDA).

Every call goes through `GateCalls` (the worker's own input preparation). Where the worker
gives the output of the compared call on call a's inputs (`expected_a`), every gate call of a
but the ghost run (garbage by design) must answer like it (`gate_call_mismatch`): a candidate
that computes one way when the gates call and another way otherwise fails here, while one that
is merely wrong is left to the judge's comparison (`incorrect`, not `deceptive`).
"""

from __future__ import annotations

from ..calls import overlaps
from ..compare import compare
from ..digest import digest
from .candidate import (
    GateCalls,
    alias_findings,
    mutation_findings,
    profiled_kernels,
    side_stream_findings,
)
from .ghost import phase, register_ghost_tensors, watch
from .integrity import candidate_violations, integrity_findings
from .poison import poison_free_memory
from .state import FAIL, STATE, WARN, close, flat, same, sync, tensors_in


class GateRun:
    """One pass of the gates over a candidate; `findings` as (reason, severity)."""

    def __init__(self, model, calls: GateCalls, device, reference=None, params=None,
                 ref_aliases_input=None, ref_mutates_input=None, ref_outputs_differ=None,
                 expected_a: list | None = None):
        self.expected_a = expected_a
        self.model, self.calls, self.device, self.reference = model, calls, device, reference
        self.answers = {"aliases": ref_aliases_input, "mutates": ref_mutates_input,
                        "differ": ref_outputs_differ}
        self.params = list(params) if params is not None else (
            list(model.parameters()) + list(model.buffers()) if hasattr(model, "parameters")
            else [])
        self.findings: list[tuple[str, str]] = []
        self._ref: dict = {}
        self._digests: dict = {}   # call -> its inputs' digest as written (before the call)

    def add(self, items) -> None:
        for it in items:
            if it not in self.findings:
                self.findings.append(it)

    # -- the reference, on separate copies of the same calls' inputs --------------------------
    def ref(self, which: str):
        """(inputs after the reference's call, flat outputs), or None without a reference."""
        if self.reference is None or not self.calls.has(which):
            return None
        if which not in self._ref:
            import torch
            x = self.calls.pristine(which)
            with torch.no_grad(), phase("reference"):
                out = self.reference(*x)
            self._ref[which] = (x, [t.detach() for t in flat(out)])
        return self._ref[which]

    def ref_mutates(self) -> bool:
        if self.answers["mutates"] is None:
            r = self.ref("a")
            self.answers["mutates"] = bool(r and mutation_findings(self.calls.pristine("a"), r[0]))
        return self.answers["mutates"]

    def ref_aliases(self) -> bool:
        if self.answers["aliases"] is None:
            r = self.ref("a")
            self.answers["aliases"] = bool(r and alias_findings(r[1], r[0]))
        return self.answers["aliases"]

    def refs_differ(self) -> bool:
        if self.answers["differ"] is None:
            ra, rb = self.ref("a"), self.ref("b")
            if ra is None or rb is None:
                return True
            fa, fb = ra[1], rb[1]
            self.answers["differ"] = not (len(fa) == len(fb) and all(
                same(p, q) for p, q in zip(fa, fb)))
        return self.answers["differ"]

    def _inputs_digest(self, which: str) -> int:
        """Call `which`'s inputs as one exact digest, taken by `call` as they were written,
        before the call (two calls' inputs compared without a copy of either)."""
        return self._digests[which]

    def compared(self, out) -> None:
        """A gate's call of a answers like the compared call on the same inputs (else the
        candidate told the two apart)."""
        if self.expected_a is None:
            return
        got = flat(out)
        if len(got) != len(self.expected_a) or not compare(self.expected_a, got).ok:
            self.add([("gate_call_mismatch", FAIL)])

    # -- the calls ------------------------------------------------------------------------------
    def call(self, which: str, ghost: bool = False, args: list | None = None):
        """One call of the model through the worker's input preparation (or on `args`, written
        by it just before): (args, out, launches)."""
        args = self.calls.args(which) if args is None else args
        if which not in self._digests:
            self._digests[which] = digest(list(tensors_in(args)))
        with watch(ghost=ghost) as launches:
            out = self.model(*args)
        sync(self.device)
        return args, out, launches

    def run(self, cuda_kernel_names=()) -> None:
        import torch
        with torch.no_grad(), phase("candidate"):
            poison_free_memory(self.device, like=lambda: self.calls.pristine("a"))
            args, out_a, launches = self.call("a")
            STATE.last_launches = list(dict.fromkeys(launches))
            self.first_call(args, out_a, launches)
            del args   # the runner's buffers: each gate call writes its own values there
            flat_a = self.kept_a(out_a)
            self.profile(cuda_kernel_names)
            if launches:
                self.ghost(flat_a)
            if self.calls.has("b"):
                held = [out_a]
                del out_a   # stale() lets it go once call b was checked against it
                self.stale(held, flat_a)
            self.add(side_stream_findings(self.model, lambda: self.calls.args("a"),
                                          self.device, seen=self.compared))

    def kept_a(self, out_a) -> list:
        """Call a's outputs as the ghost and stale checks compare with them: the compared
        call's copy where it is bitwise the same (the worker holds it anyway: no second copy of
        every output), else a copy of their own."""
        got, exp = flat(out_a), self.expected_a
        if exp is not None and len(exp) == len(got) and all(
                same(e, g) for e, g in zip(exp, got)):
            return list(exp)
        return [t.detach().clone() for t in got]

    def first_call(self, args, out_a, launches) -> None:
        if not launches:
            self.add([("no_custom_kernel_ran", FAIL)])
        if self.calls.mutated("a", args, keep=flat(out_a)) and not self.ref_mutates():
            self.add([("input_mutated", FAIL)])
        for f in alias_findings(out_a, args, self.params, ()):
            if f[0] != "output_aliases_input" or not self.ref_aliases():
                self.add([f])
        self.compared(out_a)

    def profile(self, cuda_kernel_names) -> None:
        if not (str(self.device).startswith("cuda") and cuda_kernel_names):
            return
        try:
            names = profiled_kernels(self.model, lambda: self.calls.args("a"), self.device) or []
        except Exception:  # noqa: BLE001 - no profiler here (CUPTI missing): no verdict
            names = []
        # an empty list means the profiler saw no device work at all: it is not working
        if names and not any(k in n for n in names for k in cuda_kernel_names):
            self.add([("cuda_kernel_not_launched", FAIL)])

    def ghost(self, flat_a) -> None:
        """Custom launches write garbage; the output must change. flat_a stays alive through
        it, so the allocator cannot hand its blocks (which hold the right values) to the ghost
        run's outputs; free blocks of their sizes are poisoned, and so is every uninitialized
        allocation made during the run."""
        poison_free_memory(self.device, like=lambda: self.calls.pristine("a") + flat_a)
        STATE.ghost_tensors = {}
        try:
            args = self.calls.args("a")
            register_ghost_tensors(list(args) + list(self.params))
            _, out_g, _ = self.call("a", ghost=True, args=args)
            flat_g = flat(out_g)
            if flat_a and len(flat_g) == len(flat_a) and all(
                    same(g, a) for g, a in zip(flat_g, flat_a)):
                self.add([("kernel_output_unused", FAIL)])
        finally:
            STATE.ghost_tensors = {}

    def stale(self, held_a: list, flat_a) -> None:
        """Call b writes new values into the same buffers as call a: an answer equal to a's is
        stale; then b once more: an answer that is a's again is stale, another one depends on
        the call before. `held_a` holds call a's own outputs (alive, so that b cannot be handed
        their memory honestly) until b was checked against them; then they go, and b's outputs
        stay alive through call c likewise (no copies: a copy would be one output more on the
        device at the worker's peak)."""
        poison_free_memory(self.device, like=lambda: self.calls.pristine("b"))
        args_b, out_b, _ = self.call("b")
        for f in alias_findings(out_b, args_b, self.params, held_a):
            if f[0] != "output_aliases_input" or not self.ref_aliases():
                self.add([f])
        held_a.clear()
        # an output in the inputs' memory is copied: call c writes new values there
        flat_b = [t.detach().clone() if any(overlaps(t, x) for x in tensors_in(args_b))
                  else t.detach() for t in flat(out_b)]
        del args_b
        inputs_differ = self._inputs_digest("a") != self._inputs_digest("b")
        if inputs_differ and flat_a and flat_b and all(
                same(p, q) for p, q in zip(flat_a, flat_b)) and self.refs_differ():
            self.add([("stale_output", FAIL)])
        if not (inputs_differ and flat_b):
            return
        args_c, out_c, _ = self.call("b")
        for f in alias_findings(out_c, args_c, self.params, [out_b]):
            if f[0] == "output_reuses_earlier_output":
                self.add([f])
        del args_c
        flat_c = flat(out_c)
        if len(flat_c) == len(flat_b) and not all(
                close(c, b) for c, b in zip(flat_c, flat_b)) and self.refs_differ():
            if all(close(c, a) for c, a in zip(flat_c, flat_a)):
                self.add([("stale_output", FAIL)])
            else:
                self.add([("output_depends_on_history", WARN)])


def check_candidate(model, inputs_a=None, inputs_b=None, *, device="cpu", params=None,
                    reference=None, ref_aliases_input=None, ref_mutates_input=None,
                    ref_outputs_differ=None, cuda_kernel_names=(), calls: GateCalls | None = None,
                    expected_a: list | None = None) -> list[tuple[str, str]]:
    """All worker-side gates on one instantiated candidate, on the calls `calls` names (or, for
    a worker without a runner, `inputs_a`/`inputs_b`, copied into one set of buffers, never
    consumed). `expected_a`: the compared call's outputs on call a's inputs. `reference` (the
    reference model) is run, on separate copies, only to excuse a finding (the reference also
    mutates or aliases its inputs, or ignores them); `ref_*` give those answers directly."""
    run = GateRun(model, calls or GateCalls.of_lists(inputs_a, inputs_b), device, reference,
                  params, ref_aliases_input, ref_mutates_input, ref_outputs_differ, expected_a)
    since = len(STATE.violations)
    run.run(cuda_kernel_names)
    run.add(integrity_findings())
    run.add(candidate_violations(since))
    return run.findings
