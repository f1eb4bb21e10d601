"""What a new user runs from a fresh clone: @kernelbench without a local copy, the card reviewed
last is the card pushed, progress output, and the README's commands."""

from __future__ import annotations

import io
import logging
import re
import shlex
import socket
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from curate.cli import main
from curate.dedup.step import Dedup
from curate.pipeline.single import run_single
from curate.tableio import read_rows, write_rows

sys.path.insert(0, str(Path(__file__).parent))
from tests.support.hubserver import HubServer, Token  # noqa: E402
from test_card import _pairs, make_build  # noqa: E402
from test_dedup import EVALSET, PROGRAM, _evalset_rows, row  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KB = "ScalingIntelligence/KernelBench"
WRITE = "hf_write"


# -- @kernelbench on a fresh clone --------------------------------------------------------------

@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """No CURATE_KERNELBENCH, no shared/data/kernelbench beside the repository or the cwd, an
    empty huggingface_hub cache."""
    import curate.sources.locate as locate
    import huggingface_hub.constants as c
    monkeypatch.delenv("CURATE_KERNELBENCH", raising=False)
    monkeypatch.setattr(locate, "repo_root", lambda: tmp_path / "clone")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    cache = str(tmp_path / "hf_home" / "hub")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    monkeypatch.setattr(c, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    return tmp_path


def _point_at(monkeypatch, url: str) -> None:
    import huggingface_hub.constants as c
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setattr(c, "ENDPOINT", url)
    monkeypatch.setattr(c, "HUGGINGFACE_CO_URL_TEMPLATE",
                        url + "/{repo_id}/resolve/{revision}/{filename}")


@pytest.fixture
def kb_hub(fresh_clone, monkeypatch):
    """A Hub on loopback holding ScalingIntelligence/KernelBench in the Hub's layout (parquet
    with `code`, `level`, `name`), made from the three problems of tests/fixtures/dedup."""
    server = HubServer({WRITE: Token("si", orgs=["ScalingIntelligence"])}).start()
    _point_at(monkeypatch, server.url)
    rows = _evalset_rows(EVALSET)
    table = pa.table({"code": [r["pytorch_code"] for r in rows],
                      "level": [int(r["path"][5]) for r in rows],
                      "name": [r["path"].split("/")[1] for r in rows]})
    pq.write_table(table, fresh_clone / "level_1.parquet")
    from huggingface_hub import HfApi
    api = HfApi(endpoint=server.url, token=WRITE)
    api.create_repo(KB, repo_type="dataset")
    api.upload_file(path_or_fileobj=str(fresh_clone / "level_1.parquet"),
                    path_in_repo="data/level_1-00000-of-00001.parquet", repo_id=KB,
                    repo_type="dataset")
    server.state.requests.clear()
    yield server
    server.stop()


def _contaminated_input(tmp_path: Path) -> Path:
    relu = next(r for r in _evalset_rows(EVALSET) if r["path"] == "level1/19_ReLU.py")
    inp = tmp_path / "in.jsonl"
    write_rows(inp, [row(relu["pytorch_code"]), row(PROGRAM)])
    return inp


def test_kernelbench_falls_back_to_the_hub_then_to_its_cache(fresh_clone, kb_hub):
    inp = _contaminated_input(fresh_clone)
    step = Dedup(against=["@kernelbench"])
    st = run_single(step, inp, fresh_clone / "out.jsonl", progress=False)
    assert st.extra["decontaminated"] is True and st.extra["evalset_problems"] == 3
    assert "datasets--ScalingIntelligence--KernelBench" in st.extra["decontaminated_against"][
        "@kernelbench"]
    assert [r["reasons"] for r in read_rows(fresh_clone / "out.rejected.jsonl")] == [
        ["contaminated:level1/19_ReLU.py"]]
    kb_hub.stop()  # read once: the cache answers from now on, with no network
    st = run_single(Dedup(against=["@kernelbench"]), inp, fresh_clone / "again.jsonl",
                    progress=False)
    assert st.extra["decontaminated"] is True and st.rows_out == 1


def test_a_named_local_copy_comes_before_the_hub(fresh_clone, kb_hub, monkeypatch, caplog):
    local = fresh_clone / "kb"
    (local / "level1").mkdir(parents=True)
    (local / "level1" / "99_LocalReLU.py").write_text(
        (EVALSET / "level1" / "19_ReLU.py").read_text())
    monkeypatch.setenv("CURATE_KERNELBENCH", str(local))
    st = run_single(Dedup(against=["@kernelbench"]), _contaminated_input(fresh_clone),
                    fresh_clone / "out.jsonl", progress=False)
    assert st.extra["decontaminated_against"] == {"@kernelbench": str(local)}
    assert st.extra["evalset_problems"] == 1
    assert [r["reasons"] for r in read_rows(fresh_clone / "out.rejected.jsonl")] == [
        ["contaminated:level1/99_LocalReLU.py"]]  # the local copy's name, not the Hub's
    assert not kb_hub.state.requests  # the Hub was not asked
    # a named copy that does not exist is not silently replaced by the Hub's
    monkeypatch.setenv("CURATE_KERNELBENCH", str(fresh_clone / "typo"))
    with caplog.at_level(logging.WARNING, logger="curate"):
        st = run_single(Dedup(against=["@kernelbench"]), _contaminated_input(fresh_clone),
                        fresh_clone / "out2.jsonl", progress=False)
    assert st.extra["decontaminated"] is False and "NO DECONTAMINATION" in caplog.text
    assert "typo does not exist" in caplog.text and not kb_hub.state.requests


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_hub_is_a_loud_warning_and_the_card_says_so(fresh_clone, monkeypatch,
                                                                    caplog):
    _point_at(monkeypatch, f"http://127.0.0.1:{_closed_port()}")
    write_rows(fresh_clone / "work" / "pairs.parquet", _pairs(6))
    (fresh_clone / "work" / "p.yaml").write_text(
        "name: verified-table\ndevice: cuda\nthreshold: 2.0\n"
        "source:\n  ingest: {paths: [pairs.parquet], format: table}\n"
        "steps:\n  - dedup: {against: ['@kernelbench']}\n  - keep: {}\n")
    with caplog.at_level(logging.WARNING, logger="curate"):
        res = CliRunner().invoke(main, ["build", "--pipeline", "p.yaml", "--quiet"])
    assert res.exit_code == 0, res.output
    assert "could not be read from the Hub" in caplog.text
    assert "!!! dedup: evaluation set @kernelbench was not found" in caplog.text
    assert "NO DECONTAMINATION" in caplog.text
    card = (fresh_clone / "work" / "build" / "README.md").read_text()
    assert "**No decontamination was done for this build.**" in card
    assert "evaluation set(s) @kernelbench not found" in card
    assert "the Hub dataset ScalingIntelligence/KernelBench; the build could read neither" in card


# -- the card reviewed last is the card pushed ----------------------------------------------------

@pytest.fixture
def hub(monkeypatch, tmp_path):
    import huggingface_hub.constants as c
    server = HubServer({WRITE: Token("alice", orgs=["org"])}).start()
    _point_at(monkeypatch, server.url)
    monkeypatch.setenv("HF_TOKEN", WRITE)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(c, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf_home" / "stored_tokens"))
    yield server
    server.stop()


def _dry_run(build: Path, repo: str = "org/cuke") -> str:
    res = CliRunner().invoke(main, ["push", str(build), "--repo", repo, "--dry-run"])
    assert res.exit_code == 0, res.output
    return res.output


def test_split_infill_renders_the_card_again_and_push_publishes_it(hub, tmp_path):
    from curate.card import render_card
    build = make_build(tmp_path, infill=False)
    render_card(build, repo_id="org/cuke")  # what `curate build` leaves, reviewed for the repo
    res = CliRunner().invoke(main, ["split-infill", str(build), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "card: rendered again with the infill config" in res.output
    card = (build / "README.md").read_text()
    assert 'load_dataset("org/cuke", "infill")' in card  # the infill config, and the repo stuck
    assert "unchanged since it was rendered" in _dry_run(build)
    res = CliRunner().invoke(main, ["push", str(build), "--repo", "org/cuke"])
    assert res.exit_code == 0, res.output
    assert "rendered" not in res.output  # nothing was rendered behind the reviewer's back
    assert hub.state.files("org/cuke")["README.md"] == card.encode()


def test_dry_run_says_whether_the_card_changed_since_it_was_rendered(hub, tmp_path):
    from curate.card import render_card
    build = make_build(tmp_path)
    render_card(build, repo_id="org/cuke")
    assert "card: unchanged since it was rendered" in _dry_run(build)
    # edited by hand: what is pushed is the edited file
    readme = build / "README.md"
    readme.write_text(readme.read_text().replace("## Loading", "## Loading it"))
    out = _dry_run(build)
    assert "card: changed since it was rendered" in out and "README.md" in out
    # rendered for another repo: the push would render (and publish) a different card
    render_card(build, repo_id="org/cuke")
    out = _dry_run(build, "org/other")
    assert "a push renders it again and the pushed card would differ from the one on disk in " \
           "README.md" in out
    assert 'load_dataset("org/cuke")' in readme.read_text()  # the dry run rendered nothing here
    # the build changed (a re-split) without a render: the plots and README would change
    pairs = read_rows(next(iter((build / "data").glob("*.parquet"))))
    from curate.hub.shards import write_shards
    write_shards(None, build / "data", rows=pairs[:-3])
    assert "would differ from the one on disk in README.md, assets/speedup_histogram.png" in \
        _dry_run(build)


# -- progress ------------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _screen(raw: str) -> list[str]:
    """What a terminal shows after `raw`: \\r returns, \\n and ESC[A move, later text overwrites."""
    lines, row, col = [""], 0, 0
    for tok in re.findall(r"\x1b\[A|\x1b\[[0-9;]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", raw):
        if tok == "\r":
            col = 0
        elif tok == "\n":
            row, col = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        elif tok == "\x1b[A":
            row = max(0, row - 1)
        elif not tok.startswith("\x1b"):
            line = lines[row].ljust(col)
            lines[row] = line[:col] + tok + line[col + len(tok):]
            col += len(tok)
    return [ln.rstrip() for ln in lines]


def test_log_lines_do_not_break_progress_bars_or_leave_them_behind(monkeypatch):
    from curate.pipeline.progress import Progress
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    root = logging.getLogger()
    handler = logging.StreamHandler(term)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    try:
        bar = Progress("[02] dedup", 4)
        logging.getLogger("curate").warning("!!! dedup: evaluation set missing")  # at 0%
        bar.update(2)
        logging.getLogger("curate").info("dedup: 4 rows")
        bar.update(2)
        bar.close()
        logging.getLogger("curate").info("after the bar")
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    screen = [ln for ln in _screen(term.getvalue()) if ln]
    assert screen == ["WARNING !!! dedup: evaluation set missing", "INFO dedup: 4 rows",
                      "INFO after the bar"], screen
    assert root.handlers.count(handler) == 0 and handler not in root.handlers


def test_off_a_terminal_progress_lines_carry_rate_and_eta(monkeypatch, caplog):
    import curate.pipeline.progress as progress
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    with caplog.at_level(logging.INFO, logger="curate"):
        bar = progress.Progress("[03] verify", 30)
        for _ in range(3):
            clock[0] += 10
            bar.update(5)
        bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "[03] verify: started (30 rows)"
    assert lines[1:] == ["[03] verify: 5/30 rows (17%), 0.50 rows/s, ETA 50s",
                         "[03] verify: 10/30 rows (33%), 0.50 rows/s, ETA 40s",
                         "[03] verify: 15/30 rows (50%), 0.50 rows/s, ETA 30s"]


# -- the README ------------------------------------------------------------------------------------

def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _commands(section: str) -> list[list[str]]:
    joined = section.replace("\\\n", " ")  # a command continued on the next line
    return [shlex.split(ln.split("#", 1)[0]) for ln in joined.splitlines()
            if ln.startswith("    curate ")]


def test_readme_workflow_reviews_the_card_last():
    names = [c[1] for c in _commands(_readme_section("Workflow"))[:4]]
    assert names == ["build", "split-infill", "card", "push"]


def test_readme_per_stage_example_works_from_a_clone():
    """Every input of the per-stage example is in the clone or written by an earlier command,
    and it does not decontaminate KernelBench against itself."""
    cmds = _commands(_readme_section("Workflow"))[4:]
    assert [c[1] for c in cmds][:1] == ["ingest"] and len(cmds) >= 4
    written: set[str] = set()
    for c in cmds:
        args = c[3:] if c[1] == "synth" else c[2:]
        out = args[args.index("-o") + 1] if "-o" in args else None
        inputs = [a for i, a in enumerate(args) if not a.startswith("-") and
                  args[i - 1] not in ("-o", "--device", "--model", "--threshold") and a != out
                  and args[i - 1] != "--against"]
        for a in inputs:
            assert a in written or (ROOT / a).exists(), f"{' '.join(c)}: {a} is not in a clone"
        if out:
            written.add(out)
        if c[1] == "ingest":
            assert not any("kernelbench" in a.lower() for a in args)
    assert any("--against" in c and "@kernelbench" in c for c in cmds)


def test_readme_says_what_the_skipped_tests_and_cpu_kernels_need():
    setup = _readme_section("Set up")
    for needed in ("CURATE_KERNELBENCH", "redis-server", "CURATE_SLOW_TESTS", "C++ compiler",
                   KB):
        assert needed in setup, needed
    assert re.search(r"about \d+ minutes", setup)  # how long the set-up commands take
