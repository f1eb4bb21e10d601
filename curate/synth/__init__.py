"""Candidate synthesis: reference programs -> standalone ModelNew programs.

- inductor.py: the `synth-inductor` step (InductorSynth): compiles each reference in sandboxed
  workers (inductor_worker.py) and rewrites inductor's output into standalone programs
  (rewrite_triton.py on cuda, rewrite_cpp.py on cpu; shared parts in rewrite.py).
- check.py: run a candidate on its own against its reference (tests, benchmarks).
- interpret.py: libdevice for the Triton interpreter (TRITON_INTERPRET=1 on CPU).
- cli.py: `curate synth inductor` / `curate synth llm` (not available yet).
"""
