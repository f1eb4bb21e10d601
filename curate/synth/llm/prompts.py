"""Prompt templates (Jinja) for synth-llm: the bundled ones in pipelines/prompts/, or a file.

A template extends base.j2 and has three blocks: `system`, `user` (the first user message) and
`feedback` (the next turn's user message, given the verdict on the last
candidate), rendered one at a time (`part`), and sets `reply` to "program" (the reply is a whole ModelNew program) or "core"
(the missing middle of a program split by split-infill, DICE's infilling layout).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BadInput
from ...datadirs import data_dir

REPLY = re.compile(r"""{%-?\s*set\s+reply\s*=\s*["'](\w+)["']\s*-?%}""")
BUNDLED = {"cuda": "kernelbench_cuda.j2", "triton": "kernelbench_triton.j2"}


@dataclass
class Verdict:
    """What the next turn's prompt says about a candidate (see refine.py)."""

    kind: str                     # no_code, unchecked, compile_error, runtime_error, incorrect,
    status: str | None = None     # rejected, correct
    error: str | None = None
    max_abs_err: float | None = None
    speedup: float | None = None
    device: str | None = None
    checked: bool = True
    note: str = ""
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict) -> "Verdict":
        return cls(**d)


def prompts_dir() -> Path:
    return data_dir("pipelines") / "prompts"


class Prompt:
    """One template, loaded once: renders the first messages and the feedback of each turn."""

    def __init__(self, spec: str | None, backend: str):
        import jinja2
        path = self._resolve(spec, backend)
        loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(path.parent)),
                                      jinja2.FileSystemLoader(str(prompts_dir()))])
        env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                                 keep_trailing_newline=False, autoescape=False)
        try:
            self.template = env.get_template(path.name)
        except jinja2.TemplateError as exc:
            raise BadInput(f"not a usable Jinja template ({exc})", path=str(path),
                           fix="see pipelines/prompts/base.j2 for the blocks a prompt has") \
                from None
        self.reply = _reply_kind(path.read_text())
        if self.reply not in ("program", "core") or "part" not in path.read_text() \
                and "extends" not in path.read_text():
            raise BadInput("a prompt template needs a `user` block and reply 'program' or "
                           "'core'", path=str(path), fix="{% extends \"base.j2\" %} and "
                           "override {% block user %}")
        self.path, self.backend = path, backend
        self.digest = _digest(path, env)

    @staticmethod
    def _resolve(spec: str | None, backend: str) -> Path:
        if not spec:
            return prompts_dir() / BUNDLED[backend]
        p = Path(spec)
        if p.is_file():
            return p.resolve()
        for name in (spec, f"{spec}.j2"):
            if (prompts_dir() / name).is_file():
                return prompts_dir() / name
        raise BadInput("no such prompt template", path=spec,
                       fix="give a .j2 file, or one of "
                       + ", ".join(p.stem for p in sorted(prompts_dir().glob("*.j2"))))

    def _block(self, name: str, **variables) -> str:
        import jinja2
        variables.setdefault("verdict", None)
        try:
            return self.template.render(part=name, backend=self.backend, **variables).strip()
        except jinja2.UndefinedError as exc:
            raise BadInput(f"the prompt template needs a value the row lacks ({exc})",
                           path=str(self.path), fix="feed rows that have it (infill prompts "
                           "need `curate split-infill` rows), or change the template") from None

    def first(self, row: dict) -> list[dict]:
        """The opening messages for a reference row."""
        variables = {"pytorch_code": row.get("pytorch_code") or "", "row": _Row(row)}
        messages = []
        system = self._block("system", **variables)
        if system:
            messages.append({"role": "system", "content": system})
        user = self._block("user", **variables)
        if not user:
            raise BadInput("the prompt template renders an empty user message",
                           path=str(self.path), fix="override {% block user %}")
        messages.append({"role": "user", "content": user})
        return messages

    def feedback(self, row: dict, verdict: Verdict) -> str:
        return self._block("feedback", pytorch_code=row.get("pytorch_code") or "",
                           row=_Row(row), verdict=verdict)


class _Row(dict):
    """Row columns as attributes in templates (`row.prefix`); absent ones are None."""

    def __getattr__(self, name):
        return self.get(name)


def _reply_kind(source: str) -> str:
    """The template's `{% set reply = "..." %}` (base.j2's "program" when it sets none)."""
    m = REPLY.search(source)
    return m.group(1) if m else "program"


def _digest(path: Path, env) -> str:
    """Hash of the template and every bundled template it may extend (part of the cache key)."""
    h = hashlib.sha256(path.read_bytes())
    for p in sorted(prompts_dir().glob("*.j2")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]
