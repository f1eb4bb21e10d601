"""The replay folder (tests/fixtures/llm_replay/) that the loopback model server serves: every
reply keeps to the folder contract, holds a complete candidate program, and two honest Triton
replies really compute their example (run under the Triton interpreter in a subprocess, never
in the test process: a reply is untrusted code)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPLAY = ROOT / "tests" / "fixtures" / "llm_replay"
EXAMPLES = ROOT / "examples"
REPLY_NAME = re.compile(r"^(cuda|triton)-s(\d+)-t(\d+)\.md$")
SIDECAR_NAME = re.compile(r"^((cuda|triton)-s\d+-t\d+)\.reasoning\.txt$")
FENCE = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.S)
THINK = re.compile(r"^\s*<think>.*?</think>", re.S)
# the elementwise examples whose honest Triton replies are run for real
RUN_TRITON = ["01_gelu_bias_residual", "03_clamp_scale_chain"]


def _folders() -> list[Path]:
    return sorted(p for p in REPLAY.iterdir() if p.is_dir())


def _replies() -> list[Path]:
    return sorted(f for d in _folders() for f in d.iterdir() if REPLY_NAME.match(f.name))


def program_of(text: str) -> str:
    """The candidate a reply holds: its largest ```python block, else the text after any
    <think> section (the rare unfenced reply)."""
    blocks = FENCE.findall(text)
    if blocks:
        return max(blocks, key=len)
    return THINK.sub("", text, count=1).strip()


def test_replay_folder_has_replies():
    assert REPLAY.is_dir(), f"{REPLAY} is missing"
    assert len(_folders()) >= 2 and len(_replies()) >= 4


def test_folders_are_bundled_examples():
    stems = {p.stem for p in EXAMPLES.glob("[0-9][0-9]_*.py")}
    strays = [d.name for d in _folders() if d.name not in stems]
    assert not strays, f"folders that name no examples/<stem>.py: {strays}"


def test_file_names_follow_the_contract():
    bad = []
    for d in _folders():
        names = {f.name for f in d.iterdir()}
        for name in sorted(names):
            side = SIDECAR_NAME.match(name)
            if side:
                if f"{side.group(1)}.md" not in names:
                    bad.append(f"{d.name}/{name}: no {side.group(1)}.md beside it")
            elif not REPLY_NAME.match(name):
                bad.append(f"{d.name}/{name}: not <backend>-s<N>-t<N>.md")
    assert not bad, bad


def test_turns_answer_a_turn_zero():
    """A turn-k reply answers turn k-1 of the same sample, so turn k-1 must be there."""
    missing = []
    for f in _replies():
        backend, sample, turn = REPLY_NAME.match(f.name).groups()
        if int(turn) > 0 and not (f.parent / f"{backend}-s{sample}-t{int(turn) - 1}.md").exists():
            missing.append(f"{f.parent.name}/{f.name}")
    assert not missing, f"turns with no earlier turn: {missing}"


def _defines_model_new(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return any(isinstance(i, ast.FunctionDef) and i.name == "forward" for i in node.body)
    return False


def _load_inline_calls(tree: ast.Module) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and
            (getattr(n.func, "id", None) == "load_inline" or
             getattr(n.func, "attr", None) == "load_inline")]


def _jit_functions(tree: ast.Module) -> list[str]:
    def is_jit(dec):
        target = dec.func if isinstance(dec, ast.Call) else dec
        return (getattr(target, "attr", None) or getattr(target, "id", None)) == "jit"
    return [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
            and any(is_jit(d) for d in n.decorator_list)]


@pytest.mark.parametrize("reply", _replies(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reply_holds_a_complete_program(reply):
    text = reply.read_text()
    assert text.strip(), "empty reply"
    code = program_of(text)
    tree = ast.parse(code)  # a SyntaxError here names the line
    assert _defines_model_new(tree), "no class ModelNew with a forward"
    assert any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body), "no imports"
    if reply.name.startswith("cuda"):
        calls = _load_inline_calls(tree)
        assert calls, "a cuda reply must call load_inline"
        kwargs = {k.arg for c in calls for k in c.keywords}
        assert "cuda_sources" in kwargs, "load_inline without cuda_sources"
        strings = [n.value for n in ast.walk(tree)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        assert any("__global__" in s for s in strings), "no __global__ kernel in any string"
    else:
        assert _jit_functions(tree), "a triton reply must define a @triton.jit function"


RUNNER = r"""
import importlib.util, sys, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
ref, cand = load(sys.argv[1], "reference"), load(sys.argv[2], "candidate")
torch.manual_seed(0)
model = ref.Model(*ref.get_init_inputs())
torch.manual_seed(0)
new = cand.ModelNew(*ref.get_init_inputs())
new.load_state_dict(model.state_dict())
worst = 0.0
for seed in (1, 2):
    torch.manual_seed(seed)
    inputs = ref.get_inputs()
    with torch.no_grad():
        want = model(*[t.clone() for t in inputs])
        got = new(*[t.clone() for t in inputs])
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max().item()
    worst = max(worst, (got - want).abs().max().item())
print("max_abs_err", worst)
"""


@pytest.mark.parametrize("stem", RUN_TRITON)
def test_honest_triton_reply_matches_its_reference(stem, tmp_path):
    reply = REPLAY / stem / "triton-s0-t0.md"
    assert reply.exists(), f"{reply} is missing"
    candidate = tmp_path / "candidate.py"
    candidate.write_text(program_of(reply.read_text()))
    env = {k: v for k, v in os.environ.items() if not re.search(r"TOKEN|KEY|SECRET", k)}
    env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(EXAMPLES / f"{stem}.py"),
                           str(candidate)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "max_abs_err" in proc.stdout
