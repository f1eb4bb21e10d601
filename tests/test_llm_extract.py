"""What synth-llm takes out of a reply (the program, the reasoning) and the prompts it sends."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from curate.errors import BadInput
from curate.synth.llm.extract import extract_core, extract_program, split_reasoning
from curate.synth.llm.prompts import Prompt, Verdict

PROGRAM = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
           "    def forward(self, x):\n        return x * 2\n")


def fenced(code, lang="python"):
    return f"```{lang}\n{code.rstrip()}\n```"


@pytest.mark.parametrize("reply", [
    f"Here it is:\n\n{fenced(PROGRAM)}\n\nIt fuses the passes.",
    # excerpts beside the full program: the block that defines ModelNew wins, wherever it is
    f"The kernel:\n{fenced('__global__ void k() {}', 'cpp')}\nAll of it:\n{fenced(PROGRAM)}\n"
    f"and the call:\n{fenced('out = k(x)')}",
    # a draft inside <think> is not the answer
    f"<think>first try:\n{fenced(PROGRAM.replace('x * 2', 'x * 3'))}\n</think>\n{fenced(PROGRAM)}",
    # unfenced, prose before and after
    f"Sure. The program follows.\n\n{PROGRAM}\nThis runs one kernel instead of three.",
    f"{fenced(PROGRAM, '')}",
    f"~~~py\n{PROGRAM}~~~",
], ids=["fenced", "several-blocks", "think-draft", "unfenced", "no-language", "tildes"])
def test_the_program_is_found(reply):
    ex = extract_program(reply)
    assert ex.code == PROGRAM and ex.reason is None


def test_reasoning_from_think_sections_and_the_reasoning_field():
    answer, reasoning = split_reasoning("<think>a</think>text<think>b</think>", "field")
    assert answer == "text" and reasoning == "field\n\na\n\nb"
    answer, reasoning = split_reasoning("only the closing tag survived</think>\nanswer")
    assert answer == "answer" and reasoning == "only the closing tag survived"
    assert extract_program(fenced(PROGRAM), "from the field").reasoning == "from the field"


@pytest.mark.parametrize("reply,finish,reason", [
    ("I cannot help with that.", "stop", "synth:no_code"),
    (fenced("class ModelNew(nn.Module:\n    pass\n"), "stop", "synth:syntax_error"),
    (f"```python\n{PROGRAM[:70]}", "length", "synth:truncated"),
    (f"<think>long thoughts {fenced(PROGRAM)}", "length", "synth:truncated"),
    (fenced("class Model(nn.Module):\n    pass\n"), "stop", "synth:no_code"),
])
def test_replies_without_a_usable_program_say_why(reply, finish, reason):
    ex = extract_program(reply, finish_reason=finish)
    assert ex.code is None and ex.reason == reason


def test_infilling_replies_give_the_core():
    assert extract_core("Here:\n```cuda\n__global__ void k() {}\n```").code == \
        "__global__ void k() {}\n"
    assert extract_core("nothing", finish_reason="stop").reason == "synth:no_code"


# -- prompts -------------------------------------------------------------------------------
ROW = {"pytorch_code": "import torch\nclass Model: ...\n", "prefix": "PREFIX", "suffix": "SUFFIX"}


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_bundled_prompts_name_the_backend_and_hold_the_reference(backend):
    p = Prompt(None, backend)
    msgs = p.first(ROW)
    assert [m["role"] for m in msgs] == ["system", "user"] and p.reply == "program"
    assert f"Backend: {backend}" in msgs[1]["content"]
    assert ROW["pytorch_code"].strip() in msgs[1]["content"]
    assert ("load_inline" if backend == "cuda" else "@triton.jit") in msgs[1]["content"]


def test_feedback_carries_the_error_the_mismatch_or_the_speedup():
    p = Prompt(None, "cuda")
    said = p.feedback(ROW, Verdict("compile_error", status="compile_error",
                                   error="error: identifier \"blockDim\" is undefined"))
    assert "blockDim" in said and "compile" in said
    said = p.feedback(ROW, Verdict("incorrect", status="incorrect", max_abs_err=0.25))
    assert "do not match" in said and "0.25" in said
    said = p.feedback(ROW, Verdict("correct", status="verified", speedup=1.7, device="H200"))
    assert "1.70x" in said and "faster" in said


def test_infill_prompt_and_a_template_of_ones_own(tmp_path):
    p = Prompt("dice_infill", "cuda")
    assert p.reply == "core"
    user = p.first(ROW)[1]["content"]
    assert "PREFIX" in user and "SUFFIX" in user
    own = tmp_path / "mine.j2"
    own.write_text('{% extends "base.j2" %}\n{% block user %}Speed up:\n{{ pytorch_code }}'
                   '{% endblock %}\n')
    mine = Prompt(str(own), "triton")
    assert mine.first(ROW)[1]["content"].startswith("Speed up:\nimport torch")
    assert mine.digest != Prompt(None, "triton").digest


def test_bad_templates_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no such prompt template"):
        Prompt(str(tmp_path / "missing.j2"), "cuda")
    broken = tmp_path / "broken.j2"
    broken.write_text('{% extends "base.j2" %}{% block user %}{{ oops {% endblock %}')
    with pytest.raises(BadInput, match="not a usable Jinja template"):
        Prompt(str(broken), "cuda")
    needs = tmp_path / "needs.j2"  # infill-style template, row without a prefix
    needs.write_text('{% extends "base.j2" %}{% block user %}{{ row.prefix.strip() }}'
                     '{% endblock %}')
    with pytest.raises(BadInput, match="needs a value the row lacks"):
        Prompt(str(needs), "cuda").first({"pytorch_code": "x"})


def test_cli_refuses_a_missing_key_or_template_with_exit_2(tmp_path):
    from curate.tableio import write_rows
    inp = tmp_path / "refs.jsonl"
    write_rows(inp, [{"id": "r0", "pytorch_code": "x = 1\n"}])
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    base = [sys.executable, "-m", "curate", "synth", "llm", str(inp), "-o",
            str(tmp_path / "o.parquet")]
    run = subprocess.run(base + ["--model", "gpt-4o"], capture_output=True, text=True, env=env)
    assert run.returncode == 2 and "OPENAI_API_KEY is not set" in run.stderr
    assert not (tmp_path / "o.ledger.sqlite").exists()  # refused before any work
    run = subprocess.run(base + ["--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                                 "--prompt", "nope"], capture_output=True, text=True, env=env)
    assert run.returncode == 2 and "no such prompt template" in run.stderr


def test_every_bundled_replay_reply_yields_its_program():
    """The recorded replies (tests/fixtures/llm_replay) as the replay build will read them."""
    from pathlib import Path
    replies = sorted((Path(__file__).parent / "fixtures" / "llm_replay").glob("*/*.md"))
    if not replies:
        pytest.skip("needs the replay replies in tests/fixtures/llm_replay")
    for p in replies:
        side = p.with_name(p.name[:-3] + ".reasoning.txt")
        ex = extract_program(p.read_text(), side.read_text() if side.is_file() else None)
        assert ex.code is not None, f"{p}: {ex.reason}"
        marker = "load_inline" if p.name.startswith("cuda") else "triton.jit"
        assert marker in ex.code, p
