"""Candidates written by language models (`curate synth llm`, the `synth-llm` step).

client (AsyncOpenAI, retries), prompts (Jinja templates), extract (code and reasoning out of a
reply), cache (replies and verdicts in the build), refine (verdicts as next-turn feedback),
step (the pipeline step).
"""

from .step import LLMSynth

__all__ = ["LLMSynth"]
