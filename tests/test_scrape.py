"""`curate scrape` and the scrape source, on fake repositories written for these tests
(tests/fixtures/scrape) and a git repository made here with the git command. The deduction runs
for real in the sandboxed worker pool, and kept programs in fresh interpreters."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from curate.cli import main
from curate.pipeline.ledger import Ledger
from curate.pipeline.runner import Runner
from curate.sources.scrape import ScrapeSource
from curate.sources.scrape import repair
from curate.sources.scrape.closure import build_closure
from curate.sources.scrape.license import detect_license
from curate.sources.scrape.modules import ClassRef, Repository, find_module_classes
from curate.sources.scrape.repos import parse_list
from curate.tableio import read_rows

FIXTURES = Path(__file__).parent / "fixtures" / "scrape"
KEPT = {"ConvBlock", "Mlp", "DeepBlock", "ArgsNet", "ConfigNet", "Embedder", "Sequence",
        "Flatten", "EvalDropout", "Resizer", "Factories", "Windowed"}
REASONS = {"NeedsKwargs": "scrape:forward_kwargs", "Noisy": "scrape:nondeterministic",
           "IgnoresInput": "scrape:output_ignores_input", "Pretrained": "scrape:needs_weights",
           "Identity": "scrape:no_compute", "Huge": "scrape:too_large",
           "GivesUp": "scrape:gave_up", "Base": "scrape:no_forward",
           "Dropping": "scrape:nondeterministic"}


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory) -> tuple[Path, str]:
    """The toy repository as a git repository of its own, and its first commit."""
    root = tmp_path_factory.mktemp("gitrepo") / "toyrepo"
    shutil.copytree(FIXTURES / "toyrepo", root)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    first = _git(root, "rev-parse", "HEAD")
    (root / "toy" / "later.py").write_text("import torch.nn as nn\n\n\nclass Later(nn.Module):\n"
                                           "    def forward(self, x):\n        return x * 3\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "second")
    return root, first


@pytest.fixture(scope="module")
def scraped(git_repo, tmp_path_factory):
    """One scrape of the toy repository cloned through a list file at its first commit."""
    root, first = git_repo
    work = tmp_path_factory.mktemp("scrape")
    lst = work / "repos.txt"
    lst.write_text(f"# url commit stars\n{root.as_uri()} {first} 42\n")
    out = work / "toy.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(work / "cache"))  # clones go here, not to ~/.cache
        res = CliRunner().invoke(main, ["scrape", "--from-list", str(lst), "-o", str(out),
                                        "--jobs", "2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    kept = {r["entry_point"]: r for r in read_rows(out)}
    dropped = {r["entry_point"]: r for r in read_rows(work / "toy.rejected.jsonl")}
    return kept, dropped, work, first


def test_classes_found_with_bases_across_files():
    repo = Repository.scan(FIXTURES / "toyrepo")
    names = {r.name for r in find_module_classes(repo)}
    assert {"Base", "ConvBlock", "DeepBlock", "Mlp", "ArgsNet"} <= names
    assert repo.files_scanned == 6
    # DeepBlock -> ConvBlock (blocks.py) -> Base (base.py) -> nn.Module
    assert ClassRef("toy.blocks", "DeepBlock") in find_module_classes(repo)


def test_closure_follows_free_names_across_files():
    repo = Repository.scan(FIXTURES / "toyrepo")
    cl = build_closure(repo, ClassRef("toy.blocks", "DeepBlock"))
    src = cl.source
    for needed in ("class Base(", "class ConvBlock(Base)", "def scale(", "FACTOR = 2.0",
                   "def squash(", "HIDDEN = 8"):
        assert needed in src, needed
    assert "utils.scale" not in src and "squash(scale(" in src  # module attribute -> name
    assert src.index("class Base(") < src.index("class ConvBlock(") < src.index("class DeepBlock(")
    assert "class Mlp" not in src  # only what DeepBlock reads
    compile(src, "closure", "exec")


def test_closure_follows_a_submodule_its_package_imports(tmp_path):
    """`from pkg import functional as F` where pkg/__init__ says `from . import functional`:
    F is the submodule (as torchvision.transforms.v2 is), not a name bound nowhere."""
    pkg = tmp_path / "pkg"
    (pkg / "functional").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import functional\nfrom .layers import Scaled\n")
    (pkg / "functional" / "__init__.py").write_text("from ._ops import double\n")
    (pkg / "functional" / "_ops.py").write_text("def double(x):\n    return x * 2\n")
    (pkg / "layers.py").write_text(
        "import torch.nn as nn\nfrom pkg import functional as F\n\n\n"
        "class Scaled(nn.Module):\n    def forward(self, x):\n        return F.double(x)\n")
    cl = build_closure(Repository.scan(tmp_path), ClassRef("pkg.layers", "Scaled"))
    assert "def double(" in cl.source and "F.double" not in cl.source, cl.source
    assert not cl.unresolved
    compile(cl.source, "closure", "exec")


def test_closure_mocks_parsed_arguments():
    repo = Repository.scan(FIXTURES / "toyrepo")
    cl = build_closure(repo, ClassRef("toy.configured", "ArgsNet"))
    assert cl.uses_mock and "args = _Mock('args')" in cl.source
    assert "parse_args" not in cl.source and "argparse" not in cl.source


def test_kept_and_reasons(scraped):
    kept, dropped, _, _ = scraped
    assert set(kept) == KEPT
    for name, reason in REASONS.items():
        assert reason in dropped[name]["reasons"], (name, dropped[name]["reasons"])
        assert dropped[name]["stage"] == "scrape"
    assert "this module never runs" in dropped["GivesUp"]["error"]  # the last error is kept
    assert "random number generator" in dropped["Dropping"]["error"]


def test_provenance_on_every_row(scraped, git_repo):
    kept, dropped, work, first = scraped
    root, _ = git_repo
    assert "Later" not in kept and "Later" not in dropped  # read at the listed commit
    for row in [*kept.values(), *dropped.values()]:
        assert row["source"] == "scrape"
        assert row["repo"] == root.as_uri() and row["commit"] == first
        assert row["stars"] == 42 and row["license"] == "MIT"
    assert kept["DeepBlock"]["path"] == "toy/blocks.py"
    assert kept["ConvBlock"]["sandbox"]
    assert (work / "cache" / "curate" / "scrape-clones").is_dir()


def _run_fresh(code: str, tmp: Path, seed: int = 0) -> str:
    """Run a program in a new interpreter the way a harness does; the output's digest."""
    (tmp / "prog.py").write_text(code)
    runner = ("import hashlib, sys, torch\nsys.path.insert(0, sys.argv[1])\nimport prog\n"
              f"torch.manual_seed({seed})\nm = prog.Model(*prog.get_init_inputs())\n"
              f"torch.manual_seed({seed})\nx = prog.get_inputs()\n"
              "with torch.no_grad():\n    y = m(*x)\n"
              "print(hashlib.sha256(y.detach().numpy().tobytes()).hexdigest())\n")
    p = subprocess.run([sys.executable, "-c", runner, str(tmp)], capture_output=True, text=True,
                       timeout=120, cwd=tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip()


def test_kept_program_runs_alone_and_is_deterministic(scraped, tmp_path):
    kept, _, _, _ = scraped
    for name in ("DeepBlock", "ConfigNet", "Embedder"):
        code = kept[name]["pytorch_code"]
        assert "class Model(" in code and "def get_inputs" in code and "def get_init_inputs" in code
        a = _run_fresh(code, tmp_path, seed=0)
        assert a == _run_fresh(code, tmp_path, seed=0), name
        assert a != _run_fresh(code, tmp_path, seed=3), name
    assert "torch.randint(" in kept["Embedder"]["pytorch_code"]  # dtype repaired from the error
    assert "hidden_size" in kept["ConfigNet"]["pytorch_code"]  # the mock states what was asked


def test_inputs_repaired_from_messages(scraped):
    kept, _, _, _ = scraped
    seq = kept["Sequence"]["pytorch_code"].split("def get_inputs")[1]
    assert "6]" in seq and seq.count(",") >= 2  # rank 3 (unpacking) and 6 features
    assert "48" in kept["Flatten"]["pytorch_code"].split("def get_inputs")[1] or \
        "3, 4, 4" in kept["Flatten"]["pytorch_code"].split("def get_inputs")[1]


def _init_inputs(code: str) -> str:
    return code.split("def get_init_inputs")[1]


def test_programs_judged_in_eval_mode(scraped):
    """Dropout off, as verify runs every program: kept; randomness in eval mode is not."""
    kept, dropped, _, _ = scraped
    assert "EvalDropout" in kept
    assert "scrape:nondeterministic" in dropped["Dropping"]["reasons"]


def test_inputs_grow_when_forward_gives_its_input_back(scraped):
    kept, _, _, _ = scraped
    inputs = kept["Resizer"]["pytorch_code"].split("def get_inputs")[1]
    assert "16, 16]" in inputs, inputs  # 4x4 resized to 4x4 was no compute


def test_constructor_gets_layer_factories(scraped):
    kept, _, _, _ = scraped
    init = _init_inputs(kept["Factories"]["pytorch_code"])
    assert "torch.nn.BatchNorm2d" in init and "torch.nn.ReLU" in init, init


def test_constructor_gets_lists_the_annotations_ask_for(scraped):
    kept, dropped, _, _ = scraped
    assert "Windowed" in kept, dropped.get("Windowed", {}).get("error")
    assert _init_inputs(kept["Windowed"]["pytorch_code"]).count("[4, 4]") == 3


def test_resume_reads_finished_classes_back(scraped, tmp_path, monkeypatch):
    _, _, work, _ = scraped
    ledger = work / "toy.ledger.sqlite"
    assert ledger.is_file()
    counts = Ledger(ledger).computes()
    assert counts and set(counts.values()) == {1}
    from curate.sources.scrape import deduce

    def refuse(self):
        raise AssertionError("a finished class was computed again")
    monkeypatch.setattr(deduce.Deducer, "start", refuse)
    monkeypatch.setenv("XDG_CACHE_HOME", str(work / "cache"))
    runner = Runner(tmp_path, ledger_path=ledger, progress=False)
    try:
        runner.ledger.forget_stage(0, "scrape")  # as if the run had been cut short
        src = ScrapeSource([], from_list=str(work / "repos.txt"), jobs=2)
        st = runner.run_source(0, src, tmp_path / "again.jsonl", tmp_path / "again.rej.jsonl")
    finally:
        runner.close()
    assert st.rows_out == len(read_rows(work / "toy.jsonl"))
    assert set(Ledger(ledger).computes().values()) == {1}


def test_graph_break_reason(tmp_path):
    shutil.copytree(FIXTURES / "breaks", tmp_path / "breaks")
    out = tmp_path / "b.jsonl"
    res = CliRunner().invoke(main, ["scrape", str(tmp_path / "breaks"), "-o", str(out),
                                    "--graph-breaks", "--jobs", "2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    dropped = {r["entry_point"]: r for r in read_rows(tmp_path / "b.rejected.jsonl")}
    kept = {r["entry_point"] for r in read_rows(out)}
    assert "scrape:graph_break" in dropped["Branchy"]["reasons"], dropped["Branchy"].get("error")
    assert "scrape:import_error" in dropped["NeedsExtension"]["reasons"]
    assert "an extension this machine does not have" in dropped["NeedsExtension"]["error"]
    assert kept == {"Smooth", "AvoidsBrokenImport"}
    # an import that fails while loading, of a name the class never uses: a stand-in
    code = {r["entry_point"]: r["pytorch_code"] for r in read_rows(out)}["AvoidsBrokenImport"]
    assert "no_such_name = _unavailable('json.no_such_name'" in code
    assert "scrape:import_error" in dropped["UsesBrokenImport"]["reasons"]
    assert "json.no_such_name does not import here" in dropped["UsesBrokenImport"]["error"]
    # a compiled op that does not load here: an import failure, not a search that gave up
    assert "scrape:import_error" in dropped["CallsExtension"]["reasons"]
    assert "custom C++ ops" in dropped["CallsExtension"]["error"]
    assert "license_unknown:no_license_file" in dropped["Branchy"]["reasons"]


def test_missing_path_is_bad_input(tmp_path):
    res = CliRunner().invoke(main, ["scrape", str(tmp_path / "nope"), "-o",
                                    str(tmp_path / "o.jsonl")])
    assert res.exit_code != 0
    proc = subprocess.run([sys.executable, "-m", "curate", "scrape", str(tmp_path / "nope"),
                           "-o", str(tmp_path / "o.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert str(tmp_path / "nope") in proc.stderr and "fix:" in proc.stderr


def test_bad_list_line_names_file_and_line(tmp_path):
    lst = tmp_path / "repos.txt"
    lst.write_text("https://example.invalid/a.git\nhttps://example.invalid/b.git notacommit!\n")
    proc = subprocess.run([sys.executable, "-m", "curate", "scrape", "--from-list", str(lst),
                           "-o", str(tmp_path / "o.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{lst}, line 2" in proc.stderr and "fix:" in proc.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_list_file_fields(tmp_path):
    lst = tmp_path / "r.txt"
    lst.write_text("a.git\n\nb.git 1234abcd\nc.git 0123456789abcdef0123456789abcdef01234567 7\n"
                   "d 15  # stars only\n")
    specs = parse_list(lst)
    assert [(s.location, s.commit, s.stars) for s in specs] == [
        ("a.git", None, None), ("b.git", "1234abcd", None),
        ("c.git", "0123456789abcdef0123456789abcdef01234567", 7), ("d", None, 15)]


def test_license_detection(tmp_path):
    assert detect_license(FIXTURES / "toyrepo") == ("MIT", None)
    (tmp_path / "a").mkdir()
    assert detect_license(tmp_path / "a") == (None, "license_unknown:no_license_file")
    (tmp_path / "a" / "LICENSE").write_text("You may do as you wish, mostly.\n")
    assert detect_license(tmp_path / "a") == (None, "license_unknown:unrecognized_text")


def test_repairs_read_messages():
    st = (("f", (4, 4, 4, 4)),)
    assert (("f", (4, 3, 4, 4)),) in repair.repairs(
        st, "RuntimeError: Given groups=1, weight of size [8, 3, 3, 3], expected input[4, 4, 4, 4] "
            "to have 3 channels, but got 4 channels instead")
    assert (("f", (4, 4, 4, 16)),) in repair.repairs(
        st, "mat1 and mat2 shapes cannot be multiplied (64x4 and 16x8)")
    assert (("f", (4, 4, 4)),) in repair.repairs(
        st, "ValueError: not enough values to unpack (expected 3, got 4)")
    assert repair.repairs(st, "IndexError: tensors used as indices must be long")[0][0][0] == "l"
    assert repair.repairs(st, "an error no rule knows") == []


def test_larger_inputs_and_annotation_kinds():
    from collections.abc import Callable
    from typing import List, Optional
    from curate.sources.scrape.deduce_worker import _annotation_kind
    assert repair.larger((("f", (4, 4, 4, 4)),)) == [(("f", (4, 4, 16, 16)),)]
    assert repair.larger((("f", (4, 4, 64, 64)),)) == []
    for ann, kind in ((List[int], list), ("list[int]", list), ("Optional[Tuple[int, int]]", list),
                      (Optional[List[int]], list), ("Callable[..., nn.Module]", Callable),
                      (Callable[..., int], Callable), (bool, bool), ("int", None), (int, None)):
        assert _annotation_kind(ann) == kind, ann


def test_source_config_and_limit(tmp_path):
    with pytest.raises(Exception) as exc:
        ScrapeSource([str(FIXTURES / "toyrepo")], limit=0)
    assert "limit" in str(exc.value)
    src = ScrapeSource([str(FIXTURES / "toyrepo")], limit=3)
    assert src.config()["limit"] == 3
    assert ScrapeSource(["@torch-nn"]).specs[0].location.endswith("nn/modules")


def test_help_has_example():
    res = CliRunner().invoke(main, ["scrape", "--help"])
    assert res.exit_code == 0 and "Example:" in res.output and "curate scrape" in res.output
    assert "--from-list" in res.output and "--jobs" in res.output and "--limit" in res.output


def test_card_summarizes_scraped_provenance(tmp_path):
    from curate.card import render_card
    from tests.test_card import make_build
    build = make_build(tmp_path)  # 5 of its 30 kept pairs are scraped, 2 with no license
    body = render_card(build, repo_id="org/cuke").path.read_text()
    assert "5 reference programs were scraped from 4 repositories" in body
    assert "for 2 of them no license file was found" in body


def test_example_pipeline_builds_its_stages():
    from curate.pipeline import config as pconfig
    spec = pconfig.load_pipeline(Path(__file__).parents[1] / "pipelines" / "scrape-example.yaml",
                                 device="cpu")
    source = pconfig.build_source(spec)
    assert isinstance(source, ScrapeSource) and source.limit == 40
    assert Path(source.specs[0].location).is_dir()  # @torch-nn found from the installed torch
    assert [s.name for s in pconfig.build_steps(spec)] == ["synth-inductor", "dedup", "verify",
                                                          "keep"]


def test_card_explains_scrape_reasons():
    from curate.card.reasons import meaning
    for reason in ["scrape:gave_up", *REASONS.values(), "license_unknown:no_license_file"]:
        assert "not described" not in meaning(reason), reason
