"""`curate push` against a Hub on loopback (tests/support/hubserver.py): commit, resume, errors, load."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from curate.errors import BadInput
from curate.hub.cli import push as push_cmd
from curate.hub.push import PushFailed, plan_push, push
from curate.hub.shards import list_shards
from curate.tableio import read_rows

sys.path.insert(0, str(Path(__file__).parent))
from tests.support.hubserver import HubServer, Token  # noqa: E402
from test_card import make_build  # noqa: E402

WRITE, READ = "hf_write_token", "hf_read_token"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    import huggingface_hub.constants as c
    server = HubServer({WRITE: Token("alice", orgs=["org"]),
                        READ: Token("bob", orgs=["org"], role="read")}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", WRITE)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # no stored login leaks in
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # huggingface_hub reads these once, at import
    monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(c, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf_home" / "stored_tokens"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One synthetic build with its card rendered for org/cuke (rendering takes seconds)."""
    from curate.card import render_card
    b = make_build(tmp_path_factory.mktemp("template"))
    render_card(b, repo_id="org/cuke")
    return b


@pytest.fixture
def build(tmp_path, template):
    import shutil
    return Path(shutil.copytree(template, tmp_path / "b" / "build"))  # copy2 keeps mtimes


def _push(build, repo="org/cuke", *args):
    return CliRunner().invoke(push_cmd, [str(build), "--repo", repo, "--backoff", "0.01", *args])


def _files(hub, repo="org/cuke", rev="main"):
    return {p: d for p, d in hub.state.files(repo, rev=rev).items() if p != ".gitattributes"}


def _local(build):
    from curate.hub.push import publish_files
    return {k: p.read_bytes() for k, p in publish_files(build).items()}


def _load_in_subprocess(hub, tmp_path, repo: str, configs: list[str]) -> dict:
    """load_dataset through the server in a fresh interpreter (the endpoint is read at import)."""
    code = (
        "import json, sys, datasets\n"
        "out = {}\n"
        f"for name in {configs!r}:\n"
        f"    ds = datasets.load_dataset({repo!r}, name)\n"
        "    out[name or 'default'] = {s: sorted(ds[s]['id']) for s in ds}\n"
        "print('RESULT' + json.dumps(out))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_TOKEN=WRITE, HF_HUB_DISABLE_XET="1",
               HF_HOME=str(tmp_path / "load_home"), HF_DATASETS_CACHE=str(tmp_path / "ds_cache"),
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def _ids(folder: Path) -> dict[str, list[str]]:
    return {s: sorted(r["id"] for p in ps for r in read_rows(p))
            for s, ps in list_shards(folder).items()}


def test_push_then_load_dataset_returns_every_row_of_both_configs(hub, build, tmp_path):
    res = _push(build)
    assert res.exit_code == 0, res.output
    assert "pushed" in res.output and "/datasets/org/cuke/commit/" in res.output
    remote = _files(hub)
    assert remote == _local(build)  # byte for byte, card and plots included
    assert {"README.md", "pipeline.yaml", "stats.json", "infill/config.json",
            "assets/speedup_histogram.png", "data/train-00000-of-00001.parquet",
            "infill/train-00000-of-00001.parquet"} <= set(remote)
    assert hub.state.commit_count("org/cuke") == 2  # the repo's first commit + exactly one push
    loaded = _load_in_subprocess(hub, tmp_path, "org/cuke", [None, "infill"])
    assert loaded["default"] == _ids(build / "data")
    assert loaded["infill"] == _ids(build / "infill")
    assert len(loaded["default"]["train"]) == 30


def test_pushed_card_loads_and_validates(hub, build, tmp_path, monkeypatch):
    import huggingface_hub.constants as c
    from huggingface_hub import DatasetCard, HfApi
    assert _push(build).exit_code == 0
    path = HfApi(endpoint=hub.url, token=WRITE).hf_hub_download(
        "org/cuke", "README.md", repo_type="dataset", cache_dir=tmp_path / "c")
    card = DatasetCard.load(path)
    assert card.data.pretty_name == "cuke"
    assert [c["config_name"] for c in card.data.configs] == ["default", "infill"]
    monkeypatch.setattr(c, "ENDPOINT", hub.url)  # validate() posts to constants.ENDPOINT
    card.validate(repo_type="dataset")  # the Hub's /api/validate-yaml (the local one)
    assert ("POST", "/api/validate-yaml", 200) in hub.state.requests


def test_validation_split_round_trips(hub, build, tmp_path):
    from curate.card.cli import card as card_cmd
    r = CliRunner().invoke(card_cmd, [str(build), "--val-fraction", "0.2", "--repo", "org/cuke"])
    assert r.exit_code == 0, r.output
    assert _push(build).exit_code == 0
    loaded = _load_in_subprocess(hub, tmp_path, "org/cuke", [None])
    assert set(loaded["default"]) == {"train", "validation"}
    assert loaded["default"] == _ids(build / "data")


def test_second_push_skips_what_is_there_and_replaces_stale_shards(hub, build):
    assert _push(build).exit_code == 0
    again = _push(build)
    assert again.exit_code == 0 and "already up to date" in again.output
    assert hub.state.commit_count("org/cuke") == 2
    # the build changes: the pairs now come as two shards; infill is untouched
    pairs = read_rows(list_shards(build / "data")["train"][0])
    from curate.hub.shards import write_splits
    write_splits({"train": [pairs[:15], pairs[15:]]}, build / "data", max_bytes=1)
    puts_before = sum(1 for m, p, _ in hub.state.requests if m == "PUT")
    res = _push(build)
    assert res.exit_code == 0, res.output
    assert "deleted 1" in res.output
    remote = _files(hub)
    assert "data/train-00000-of-00001.parquet" not in remote
    assert {"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"} <= set(remote)
    assert remote == _local(build)
    # only the new shards (and the re-rendered card's plots, if they changed) were uploaded
    put_paths = [p for m, p, _ in hub.state.requests if m == "PUT"][puts_before:]
    import hashlib
    infill_oid = hashlib.sha256((build / "infill/train-00000-of-00001.parquet").read_bytes()).hexdigest()
    assert f"/_lfs/{infill_oid}" not in put_paths
    assert 2 <= len(put_paths) <= 5


def test_interrupted_push_leaves_remote_unchanged_and_resumes(hub, build, tmp_path, monkeypatch):
    # the reference: the same build pushed without trouble to another Hub
    with HubServer({WRITE: Token("alice", orgs=["org"])}) as clean:
        monkeypatch.setenv("HF_ENDPOINT", clean.url)
        assert _push(build).exit_code == 0
        expected = _files(clean)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert _push(make_build(tmp_path / "old", n=12)).exit_code == 0  # an older build is there
    before = _files(hub)
    commits = hub.state.commit_count("org/cuke")
    hub.state.faults.fail_commits = 3  # the commit fails on the first try and on both retries
    res = _push(build, "org/cuke", "--retries", "2")
    assert res.exit_code != 0
    assert isinstance(res.exception, PushFailed)
    assert "Nothing was committed" in str(res.exception)
    assert "retry 2/2" in res.output
    assert _files(hub) == before and hub.state.commit_count("org/cuke") == commits
    uploaded = {p for m, p, s in hub.state.requests if m == "PUT" and s == 200}
    assert uploaded  # the shards made it to LFS before the commit failed
    # run again: the LFS objects that made it are not sent again, and the result is identical
    n = len(hub.state.requests)
    res = _push(build)
    assert res.exit_code == 0, res.output
    second = [p for m, p, s in hub.state.requests[n:] if m == "PUT"]
    assert not set(second) & uploaded
    assert _files(hub) == expected
    assert hub.state.commit_count("org/cuke") == commits + 1


def test_upload_cut_off_once_is_retried(hub, build, tmp_path):
    hub.state.faults.lfs_uploads_before_drop = 1
    hub.state.faults.drop_lfs_uploads = 1
    res = _push(build)
    assert res.exit_code == 0, res.output
    assert any(m == "PUT" and s == 0 for m, _, s in hub.state.requests)  # one was cut off
    assert _files(hub) == _local(build)


def test_dry_run_changes_nothing_and_needs_no_token(hub, build, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    (build / "README.md").unlink()
    res = _push(build, "org/new", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "org/new does not exist yet" in res.output
    assert "upload" in res.output and "data/train-00000-of-00001.parquet" in res.output
    assert "dry run: nothing was uploaded" in res.output
    assert ("dataset", "org/new") not in hub.state.repos
    assert not (build / "README.md").exists()  # the dry run renders nothing
    assert "README.md is missing or out of date" in res.output
    monkeypatch.setenv("HF_TOKEN", WRITE)
    assert _push(build, "org/new").exit_code == 0
    res = _push(build, "org/new", "--dry-run")
    assert "0 to upload" in res.output and "already there" in res.output


def test_missing_token_is_a_usage_error(hub, build, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    res = _push(build)
    assert isinstance(res.exception, BadInput)
    assert "HF_TOKEN" in str(res.exception) and "hf auth login" in str(res.exception)
    assert hub.state.repos == {}


def test_missing_token_exits_2_from_the_command_line(hub, build, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    r = subprocess.run(["curate", "push", str(build), "--repo", "org/x"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "no Hugging Face token" in r.stderr


def test_rejected_token(hub, build, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    res = _push(build)
    assert isinstance(res.exception, BadInput)
    assert "rejected the token" in str(res.exception)


@pytest.mark.parametrize("token,repo", [(READ, "org/cuke"), (WRITE, "someone-else/cuke")])
def test_missing_permission(hub, build, monkeypatch, token, repo):
    monkeypatch.setenv("HF_TOKEN", token)
    res = _push(build, repo)
    assert isinstance(res.exception, BadInput), res.output
    assert f"may not write to {repo}" in str(res.exception)
    assert repo.split("/")[0] in str(res.exception)


def test_network_failure_retries_then_says_so(hub, build, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")  # nothing listens there
    dry = _push(build, "org/cuke", "--retries", "0", "--dry-run")  # lists local files anyway
    assert dry.exit_code == 0 and "note: remote not checked" in dry.output
    assert "upload" in dry.output and "stats.json" in dry.output
    res = _push(build, "org/cuke", "--retries", "2")
    assert isinstance(res.exception, PushFailed)
    msg = str(res.exception)
    assert f"127.0.0.1:{port}" in msg and "Nothing was committed" in msg
    assert "retry 1/2" in res.output and "retry 2/2" in res.output


def test_create_pr_leaves_main_alone(hub, build):
    assert _push(build).exit_code == 0
    main_before = _files(hub)
    (build / "stats.json").write_text((build / "stats.json").read_text().replace(
        '"seconds": 363.0', '"seconds": 364.0'))
    res = _push(build, "org/cuke", "--create-pr")
    assert res.exit_code == 0, res.output
    assert "/datasets/org/cuke/discussions/1" in res.output
    assert _files(hub) == main_before
    pr = _files(hub, rev="refs/pr/1")
    assert pr["stats.json"] == (build / "stats.json").read_bytes()


def test_push_to_a_new_branch(hub, build):
    res = _push(build, "org/cuke", "--revision", "v2")
    assert res.exit_code == 0, res.output
    assert _files(hub, rev="v2") == _local(build)
    assert _files(hub, rev="main") == {}


def test_plan_compares_content_not_names(hub, build):
    from huggingface_hub import HfApi
    assert _push(build).exit_code == 0
    api = HfApi(endpoint=hub.url, token=WRITE)
    plan = plan_push(api, "org/cuke", build)
    assert plan.of("upload") == [] and len(plan.of("skip")) == len(_local(build))
    (build / "pipeline.yaml").write_text((build / "pipeline.yaml").read_text() + "# edited\n")
    plan = plan_push(api, "org/cuke", build)
    assert [o.path_in_repo for o in plan.of("upload")] == ["pipeline.yaml"]


def test_bad_repo_id_and_empty_build(hub, tmp_path, build):
    with pytest.raises(BadInput, match="ORG/NAME"):
        push(build, "cuke")
    with pytest.raises(BadInput, match="curate build"):
        push(tmp_path / "empty", "org/cuke")


def test_an_empty_build_is_not_pushed_by_accident(hub, tmp_path):
    b = make_build(tmp_path / "e", n=0, infill=False)
    res = _push(b)
    assert isinstance(res.exception, BadInput) and "kept no pairs" in str(res.exception)
    assert hub.state.repos == {}
    res = _push(b, "org/cuke", "--allow-empty")
    assert res.exit_code == 0, res.output
    assert "This build kept no pairs." in _files(hub)["README.md"].decode()


def test_push_help_has_an_example():
    res = CliRunner().invoke(push_cmd, ["--help"])
    assert res.exit_code == 0 and "Example:" in res.output and "--repo org/cuke" in res.output


def test_build_split_infill_push_end_to_end(hub, tmp_path, monkeypatch):
    """`curate build && curate split-infill && curate push` with the real commands.

    The source is a table of already verified pairs (the GPU part of a build is not run here),
    kept by the real `keep` step at --threshold 2.0."""
    from curate.cli import main
    from test_card import _pairs
    from curate.tableio import write_rows
    monkeypatch.chdir(tmp_path)
    rows = _pairs(24)
    rows[0]["speedup_ci_low"] = 1.5  # below the threshold: dropped by keep
    rows[1]["status"] = "incorrect"
    write_rows(tmp_path / "pairs.parquet", rows)
    (tmp_path / "p.yaml").write_text(
        "name: verified-table\ndevice: cuda\nthreshold: 2.0\n"
        "source:\n  ingest: {paths: [pairs.parquet], format: table}\nsteps:\n  - keep: {}\n")
    cli = CliRunner()
    r = cli.invoke(main, ["build", "--pipeline", "p.yaml", "--threshold", "2.0", "--quiet"])
    assert r.exit_code == 0, r.output
    r = cli.invoke(main, ["split-infill"])
    assert r.exit_code == 0, r.output
    r = cli.invoke(main, ["push", "--repo", "org/cuke", "--backoff", "0.01"])
    assert r.exit_code == 0, r.output
    build = tmp_path / "build"
    assert _files(hub) == _local(build)
    body = (build / "README.md").read_text()
    assert "**22 pairs**" in body and "| keep | `below_threshold:2` | 1 |" in body
    loaded = _load_in_subprocess(hub, tmp_path, "org/cuke", [None, "infill"])
    assert loaded["default"] == _ids(build / "data") and len(loaded["default"]["train"]) == 22
    assert loaded["infill"] == _ids(build / "infill") and loaded["infill"]["train"]
