"""What each reason in a row's `reasons` means, for the card's readers (from docs/verify.md and
curate/verify/gates). A reason on a kept row is a warning by definition: the row verified.

Severity is what the gate does by default: "fail" drops the row, "warn" records the reason and
lets it verify. A reason with a `*` matches every reason that starts with what precedes it.
"""

from __future__ import annotations

FAIL, WARN = "fail", "warn"

# reason -> (severity, one line that says what it means)
REASONS: dict[str, tuple[str, str]] = {
    # static gates (the candidate's source, never run)
    "no_kernel_code": (FAIL, "the row has no candidate program"),
    "no_model_new": (FAIL, "the candidate defines no `ModelNew` with a forward"),
    "no_custom_kernel": (FAIL, "the candidate defines no custom kernel (Triton, CUDA or C++)"),
    "kernel_not_called": (FAIL, "a kernel is defined but forward never launches it"),
    "torch_in_forward": (FAIL, "forward computes its result with PyTorch, not with its kernel"),
    "extension_without_kernel": (FAIL, "a C++/CUDA extension that holds no kernel of its own"),
    "try_except_fallback": (FAIL, "a try/except falls back to PyTorch when the kernel fails"),
    "harness_access:*": (FAIL, "the candidate reaches into the harness or the process around it "
                               "(frames, sys, ctypes, mocks, processes, network)"),
    "torch_compile_in_candidate": (FAIL, "the candidate calls torch.compile itself: its kernel "
                                         "is generated at run time, not shipped"),
    "half_precision": (FAIL, "the candidate computes in half precision inside a float32 program"),
    "side_stream_unsynced": (FAIL, "work on a side stream is never joined back, so it escapes "
                                   "the timing"),
    "syntax_error:*": (FAIL, "the candidate does not parse"),
    "synth:*": (FAIL, "synthesis could not write a standalone candidate (no kernel of its own, "
                      "code it does not support)"),
    "scrape:*": (FAIL, "a scraped class did not become a runnable, deterministic, input-dependent "
                       "KernelBench program (the reason names what failed)"),
    # dynamic gates (launch hooks, ghost runs, repeated calls)
    "no_custom_kernel_ran": (FAIL, "no custom kernel ran during forward"),
    "cuda_kernel_not_launched": (FAIL, "the CUDA kernel was never launched during forward"),
    "kernel_output_unused": (FAIL, "a kernel ran, but the output does not depend on what it "
                                   "computed"),
    "input_mutated": (FAIL, "the candidate rewrote its inputs"),
    "output_aliases_input": (FAIL, "an output is one of the inputs"),
    "output_aliases_parameter": (FAIL, "an output is one of the module's weights"),
    "stale_output": (FAIL, "outputs are stale: a call returns what an earlier call computed"),
    "output_reuses_earlier_output": (FAIL, "a call returns an earlier call's output"),
    "reference_ignores_inputs": (FAIL, "the reference output does not depend on its inputs "
                                       "(status `degenerate_reference`)"),
    "reference_zero_passes_tolerance": (FAIL, "an all-zero output would pass the comparison "
                                              "(status `degenerate_reference`)"),
    "reference_unstable": (FAIL, "the float32 reference disagrees with its own float64 run "
                                 "(status `degenerate_reference`)"),
    "shape_specialized": (FAIL, "right at the problem's own sizes, wrong at a second size of "
                                "the same problem (status `shape_specialized`)"),
    "second_shape:*": (FAIL, "what went wrong at the second size (the reason after the colon)"),
    # the harness (correctness calls, timed calls, the parent's checks from outside)
    "output_reused": (FAIL, "a call returned the storage of an earlier call"),
    "output_not_plain_tensor": (FAIL, "an output is not a plain, materialized tensor"),
    "timed_output_mismatch": (FAIL, "a timed call's output differs from the reference's"),
    "timing_disagrees": (FAIL, "the parent's clock shows the candidate's calls take several "
                               "times what its process reported"),
    "digest_mismatch": (FAIL, "a checked output is not the one the candidate committed to "
                              "after its batch"),
    "protocol_violation": (FAIL, "the candidate's worker answered outside the protocol (its "
                                 "replies were taken over or rewritten)"),
    "gate_call_mismatch": (FAIL, "the candidate answered the gates' own calls differently from "
                                 "the compared calls on the same inputs"),
    "outputs_unreadable": (FAIL, "the outputs handed to the judge were not readable as the "
                                 "transport the parent chose"),
    "work_outside_call": (FAIL, "the candidate used CPU time while the reference was timed"),
    "library_patched": (FAIL, "the candidate replaced torch functions"),
    "harness_tampered": (FAIL, "the candidate changed the harness's own functions"),
    "reduced_precision": (FAIL, "outputs are exactly half-precision numbers"),
    "precision_below_reference": (FAIL, "the error against a float64 run is above 5e-5 and 20x "
                                        "the float32 reference's (fails on the CPU, warns on "
                                        "the GPU, where TF32 use may differ)"),
    # warnings: recorded, the row may still verify
    "builds_with_subprocess": (WARN, "the program compiles its C++ kernels with the system "
                                     "compiler, in a subprocess, when first used"),
    "ctypes_loader": (WARN, "the compiled kernels are loaded with ctypes and called on the "
                            "tensors' data pointers"),
    "extern_kernels": (WARN, "besides its own kernels the program calls library kernels "
                             "(inductor's `extern_kernels`, e.g. a BLAS matmul or a convolution)"),
    "torch_ops_in_forward": (WARN, "forward also calls PyTorch ops (allocation, views, small "
                                   "steps) besides its kernels; the dynamic gates check that the "
                                   "kernels compute the result"),
    "extern_kernels:*": (WARN, "inductor's program calls this library kernel (a BLAS matmul, "
                               "a convolution) besides its own kernels"),
    "fallback:aten.*": (WARN, "inductor left this op to PyTorch's own (ATen) kernel inside the "
                              "generated program"),
    "torch_ops_in_extension": (WARN, "the extension's C++ calls ATen ops beside its own kernel"),
    "kernel_unused:*": (WARN, "a kernel is defined but never launched (dead code)"),
    "license_unknown:*": (WARN, "no license was recognized for the reference's repository (no "
                                "license file, or a text that matches no SPDX license)"),
    "tf32": (WARN, "the candidate enables TF32 matmuls"),
    "side_stream": (WARN, "work on a side stream, joined back before forward returns"),
    "output_depends_on_history": (WARN, "outputs depend on earlier calls (state kept between "
                                        "calls), yet every call matched the reference"),
    "reference_mostly_below_tolerance": (WARN, "over 99% of the reference's output elements are "
                                               "within the tolerance of zero: a weak comparison"),
}


def lookup(reason: str) -> tuple[str, str] | None:
    """(severity, meaning) of a reason, exact names before `prefix:*` families."""
    if reason in REASONS:
        return REASONS[reason]
    for name, entry in REASONS.items():
        if name.endswith("*") and reason.startswith(name[:-1]):
            return entry
    return None


def meaning(reason: str) -> str:
    entry = lookup(reason)
    return entry[1] if entry else "not described by this version of curate"


def of(severity: str) -> list[tuple[str, str]]:
    """(reason, meaning) of every gate with this default severity, in the table's order."""
    return [(r, m) for r, (s, m) in REASONS.items() if s == severity]
