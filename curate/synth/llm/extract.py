"""The candidate program out of a model's reply, and its reasoning apart.

Real replies carry `<think>` sections (closed or cut off by the token limit), reasoning in a
field of its own, prose, several fenced blocks (excerpts beside the full program) and now and
then the program unfenced. The program is the last fenced block that defines `ModelNew` and
parses; failing that, the longest stretch of the unfenced text that does.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.S)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[^\n]*\n(.*?)"
                   r"(?:(?P<close>^[ \t]*\1[ \t]*$)|\Z)", re.S | re.M)
CODE_START = re.compile(r"^(import |from \S+ import |@triton|class |def |[A-Za-z_]\w* = )")
TARGET = "ModelNew"


@dataclass
class Extracted:
    code: str | None
    reasoning: str | None
    reason: str | None  # why there is no code: synth:no_code, synth:syntax_error, synth:truncated


def split_reasoning(content: str, reasoning_field: str | None = None) -> tuple[str, str | None]:
    """(the answer without its <think> sections, all reasoning joined)."""
    parts = [reasoning_field.strip()] if reasoning_field and reasoning_field.strip() else []
    parts += [m.group(1).strip() for m in THINK.finditer(content) if m.group(1).strip()]
    answer = THINK.sub("", content)
    if "</think>" in answer:  # servers that strip the opening tag leave only the closing one
        head, _, answer = answer.rpartition("</think>")
        if head.strip():
            parts.append(head.strip())
    return answer.strip(), "\n\n".join(parts) or None


def fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language, body, closed) for every fenced block, in order; a block the token limit cut
    off runs to the end of the text, unclosed."""
    return [(m.group(2).lower(), m.group(3), m.group("close") is not None)
            for m in FENCE.finditer(text)]


def defines(code: str, name: str = TARGET) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in ast.walk(tree))


def longest_program(text: str, name: str = TARGET) -> str | None:
    """The unfenced program: from the first line that starts code, to the last line after which
    the text still parses and defines `name` (prose after the program is cut off)."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if CODE_START.match(ln)]
    for start in starts[:5]:
        for end in range(len(lines), start, -1):
            chunk = "\n".join(lines[start:end])
            if f"class {name}" in chunk and defines(chunk, name):
                return chunk.strip("\n") + "\n"
    return None


def extract_program(content: str, reasoning_field: str | None = None,
                    finish_reason: str | None = None, name: str = TARGET) -> Extracted:
    answer, reasoning = split_reasoning(content or "", reasoning_field)
    blocks = fenced_blocks(answer)
    cut = finish_reason == "length"  # the last lines may be missing yet still parse
    for lang, body, closed in reversed(blocks):
        if lang in ("", "python", "py", "python3") and defines(body, name) and (closed or not cut):
            return Extracted(body.strip("\n") + "\n", reasoning, None)
    unfenced = None if cut else longest_program(FENCE.sub("", answer) if blocks else answer,
                                                name)
    if unfenced:
        return Extracted(unfenced, reasoning, None)
    if cut:
        return Extracted(None, reasoning, "synth:truncated")
    if any(f"class {name}" in body for _, body, _ in blocks) or f"class {name}" in answer:
        return Extracted(None, reasoning, "synth:syntax_error")
    return Extracted(None, reasoning, "synth:no_code")


def extract_core(content: str, reasoning_field: str | None = None,
                 finish_reason: str | None = None) -> Extracted:
    """Infilling replies: the core is the reply's last fenced block (any language)."""
    answer, reasoning = split_reasoning(content or "", reasoning_field)
    blocks = [b for b in fenced_blocks(answer) if b[1].strip()]
    if blocks and (blocks[-1][2] or finish_reason != "length"):
        return Extracted(blocks[-1][1], reasoning, None)
    return Extracted(None, reasoning, "synth:truncated" if finish_reason == "length"
                     else "synth:no_code")
