"""`curate push`: a build's shards and dataset card to a Hub dataset repo, in one commit.

One `create_commit` carries every file, so a push that fails at any point (an upload cut off, the
commit refused) leaves the remote exactly as it was; running it again uploads only what the Hub
does not already hold (LFS objects that made it are not sent twice) and skips files whose content
is already in the repo. Old shards that the build no longer has are deleted in the same commit, so
`data/train-*` never mixes two builds.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import BadInput
from .shards import list_shards

log = logging.getLogger("curate")

# Folders this command owns in the repo: remote files there that the build lacks are deleted.
OWNED = ("data/", "infill/", "assets/")
EXTRA_FILES = ("pipeline.yaml", "stats.json", "splits.json", "infill/config.json")
TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


class PushFailed(Exception):
    """The push did not complete; the remote is unchanged (exit code 1)."""


@dataclass
class FileOp:
    path_in_repo: str
    local: Path | None       # None for deletions
    size: int
    action: str              # "upload", "skip" (same content already there), "delete"


@dataclass
class Plan:
    repo_id: str
    revision: str
    ops: list[FileOp]
    remote_checked: bool
    remote_exists: bool
    parent_commit: str | None = None
    notes: list[str] = field(default_factory=list)

    def of(self, action: str) -> list[FileOp]:
        return [o for o in self.ops if o.action == action]

    @property
    def upload_bytes(self) -> int:
        return sum(o.size for o in self.of("upload"))


@dataclass
class PushResult:
    plan: Plan
    commit_url: str | None = None
    pr_url: str | None = None
    attempts: int = 1
    card_rendered: bool = False
    messages: list[str] = field(default_factory=list)


# -- local side -------------------------------------------------------------------------------

def publish_files(build_dir: str | Path) -> dict[str, Path]:
    """path in repo -> local file: the card, its plots, every shard, and the recipe."""
    build = Path(build_dir)
    files: dict[str, Path] = {}
    for folder in ("data", "infill"):
        shards = [p for paths in list_shards(build / folder).values() for p in paths]
        if folder == "infill" and not _rows(shards):
            continue  # no infill rows: no infill config (the card says so too)
        for p in shards:
            files[f"{folder}/{p.name}"] = p
    if (build / "README.md").is_file():
        files["README.md"] = build / "README.md"
    assets = build / "assets"
    if assets.is_dir():
        for p in sorted(assets.glob("*.png")):
            files[f"assets/{p.name}"] = p
    for name in EXTRA_FILES:
        if (build / name).is_file() and (not name.startswith("infill/") or
                                         any(k.startswith("infill/") for k in files)):
            files[name] = build / name
    return files


def _rows(paths: list[Path]) -> int:
    import pyarrow.parquet as pq
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def git_blob_oid(path: Path) -> str:
    h = hashlib.sha1()
    h.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def same_content(local: Path, remote) -> bool:
    """Whether a remote RepoFile holds exactly `local` (LFS: sha256; regular: git blob id)."""
    if getattr(remote, "size", None) != local.stat().st_size:
        return False
    lfs = getattr(remote, "lfs", None)
    if lfs is not None:
        sha = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
        return sha == sha256_file(local)
    return getattr(remote, "blob_id", None) == git_blob_oid(local)


# -- errors and retries -----------------------------------------------------------------------

def _transport_errors() -> tuple[type[BaseException], ...]:
    errs: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for mod, names in (("httpx2", ["TransportError"]), ("httpx", ["TransportError"]),
                       ("requests", ["ConnectionError", "Timeout"])):
        try:
            m = importlib.import_module(mod)
        except Exception:
            continue
        errs += [getattr(m, n) for n in names if hasattr(m, n)]
    return tuple(errs)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _status(exc: BaseException) -> int | None:
    for e in _chain(exc):
        resp = getattr(e, "response", None)
        code = getattr(resp, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def classify(exc: BaseException) -> str:
    """'auth' (token rejected), 'forbidden', 'not_found', 'transient' (retry) or 'fatal'."""
    status = _status(exc)
    if status == 401:
        return "auth"
    if status == 403:
        return "forbidden"
    if status == 404:
        return "not_found"
    if status in TRANSIENT_STATUS or status == 412:  # 412: the branch moved; plan again
        return "transient"
    if status is None and any(isinstance(e, _transport_errors()) for e in _chain(exc)):
        return "transient"
    return "fatal"


def _explain(exc: BaseException, repo_id: str, endpoint: str) -> Exception:
    kind = classify(exc)
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if kind == "auth":
        return BadInput(f"the Hub rejected the token ({detail})",
                        fix="create a token with write access at "
                            "https://huggingface.co/settings/tokens and set HF_TOKEN "
                            "(or run `hf auth login`)")
    if kind in ("forbidden", "not_found"):
        ns = repo_id.split("/")[0]
        return BadInput(f"this token may not write to {repo_id} ({detail})",
                        fix=f"use a token with write access to the namespace {ns!r} "
                            "(a fine-grained token needs 'write' on that org or user), or pick a "
                            "repo in a namespace you own")
    return PushFailed(f"push to {repo_id} at {endpoint} failed: {type(exc).__name__}: {detail}. "
                      "Nothing was committed; the remote is unchanged. Run the same command again "
                      "to resume (uploaded files are not sent twice).")


def with_retries(fn: Callable, what: str, *, retries: int, backoff: float,
                 say: Callable[[str], None]):
    """Call `fn`, retrying transient failures (network, 429, 5xx) with exponential backoff."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except Exception as exc:
            if classify(exc) != "transient" or attempt == retries:
                raise
            wait = min(backoff * (2 ** attempt), 60.0)
            say(f"{what} failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                f"retry {attempt + 1}/{retries} in {wait:.1f}s")
            time.sleep(wait)


# -- the push -----------------------------------------------------------------------------------

def resolve_token(token: str | None) -> str | None:
    """HF_TOKEN, else the stored login (`hf auth login`)."""
    if token:
        return token
    from huggingface_hub import get_token
    return get_token()


def endpoint_url(endpoint: str | None = None) -> str:
    if endpoint:
        return endpoint.rstrip("/")
    if os.environ.get("HF_ENDPOINT"):
        return os.environ["HF_ENDPOINT"].rstrip("/")
    from huggingface_hub import constants
    return constants.ENDPOINT.rstrip("/")


def plan_push(api, repo_id: str, build_dir: str | Path, *, revision: str = "main",
              token: str | bool | None = None) -> Plan:
    """Compare the build's files with the repo at `revision`: what to upload, skip, delete."""
    from huggingface_hub.utils import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    local = publish_files(build_dir)
    remote: dict[str, object] = {}
    exists, parent = True, None
    try:
        info = api.repo_info(repo_id, repo_type="dataset", revision=revision, token=token)
        parent = info.sha
        for entry in api.list_repo_tree(repo_id, repo_type="dataset", revision=parent,
                                        recursive=True, token=token):
            if hasattr(entry, "blob_id"):
                remote[entry.path] = entry
    except RepositoryNotFoundError:
        exists = False
    except RevisionNotFoundError:
        pass  # a new branch: everything is uploaded
    except HfHubHTTPError as exc:
        if _status(exc) == 404:
            exists = False
        else:
            raise
    ops = []
    for path, p in sorted(local.items()):
        have = remote.get(path)
        action = "skip" if have is not None and same_content(p, have) else "upload"
        ops.append(FileOp(path, p, p.stat().st_size, action))
    for path in sorted(remote):
        if path not in local and path.startswith(OWNED):
            ops.append(FileOp(path, None, getattr(remote[path], "size", 0) or 0, "delete"))
    return Plan(repo_id, revision, ops, remote_checked=True, remote_exists=exists,
                parent_commit=parent)


def _local_plan(repo_id: str, build_dir: Path, revision: str, note: str) -> Plan:
    ops = [FileOp(k, p, p.stat().st_size, "upload")
           for k, p in sorted(publish_files(build_dir).items())]
    return Plan(repo_id, revision, ops, remote_checked=False, remote_exists=False, notes=[note])


def check_repo_id(repo_id: str) -> None:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts) or any(c.isspace() for c in repo_id):
        raise BadInput(f"--repo {repo_id!r} is not ORG/NAME", fix="pass e.g. --repo org/cuke")


def push(build_dir: str | Path = "build", repo_id: str = "", *, private: bool = False,
         revision: str | None = None, create_pr: bool = False, dry_run: bool = False,
         token: str | None = None, endpoint: str | None = None, retries: int = 4,
         backoff: float = 2.0, message: str | None = None, allow_empty: bool = False,
         say: Callable[[str], None] = lambda m: log.info(m)) -> PushResult:
    """Push a build directory to the dataset repo `repo_id` (see the module docstring)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    check_repo_id(repo_id)
    build = Path(build_dir)
    if not list_shards(build / "data"):
        raise BadInput("no shards to push (data/train-*.parquet is missing)", path=str(build),
                       fix="run `curate build` first, or pass the build directory")
    if not allow_empty and not _rows(list_shards(build / "data").get("train", [])):
        raise BadInput("the build kept no pairs: there is nothing worth publishing",
                       path=str(build / "data"),
                       fix="see the reasons in <build>/stats.json (or `curate card`), fix them or "
                           "lower --threshold and rebuild; --allow-empty pushes anyway")
    url = endpoint_url(endpoint)
    tok = resolve_token(token)
    if not tok and not dry_run:
        raise BadInput("no Hugging Face token: set HF_TOKEN or log in",
                       fix="export HF_TOKEN=hf_... (a token with write access), or run "
                           "`hf auth login`; `curate push --dry-run` needs none")
    rendered = False
    from ..card.render import is_current, render_card
    stale_card = not is_current(build, repo_id)
    if stale_card:
        if not dry_run:
            c = render_card(build, repo_id=repo_id)
            rendered = True
            say(f"card: rendered {c.path} again for {repo_id} before pushing it: the build or "
                f"the repo changed since it was rendered (kept hand-written sections: "
                f"{', '.join(c.kept_sections) or 'none'}; `--dry-run` shows this beforehand)")
    rev = revision or "main"
    api = HfApi(endpoint=url, token=tok or False)

    def call(fn, what):
        return with_retries(fn, what, retries=retries, backoff=backoff, say=say)

    if dry_run:
        try:
            plan = call(lambda: plan_push(api, repo_id, build, revision=rev, token=tok or False),
                        "reading the remote")
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            plan = _local_plan(repo_id, build, rev, f"remote not checked ({classify(exc)}: "
                                                    f"{first})")
        from ..card.review import review
        plan.notes.append(review(build, repo_id).message)
        return PushResult(plan, card_rendered=False)

    try:
        who = call(lambda: api.whoami(token=tok), "checking the token")
        say(f"hub: {url} as {who.get('name', '?')}")
        call(lambda: api.create_repo(repo_id, repo_type="dataset", private=private,
                                     exist_ok=True, token=tok), "creating the repo")
        if revision and revision != "main" and not create_pr:
            call(lambda: api.create_branch(repo_id, repo_type="dataset", branch=revision,
                                           exist_ok=True, token=tok), "creating the branch")
        attempts = 0

        def commit_once():
            nonlocal attempts
            attempts += 1
            plan = plan_push(api, repo_id, build, revision=rev, token=tok)
            changes = plan.of("upload") + plan.of("delete")
            if not changes:
                return plan, None
            ops = [CommitOperationAdd(path_in_repo=o.path_in_repo, path_or_fileobj=str(o.local))
                   for o in plan.of("upload")]
            ops += [CommitOperationDelete(path_in_repo=o.path_in_repo) for o in plan.of("delete")]
            info = api.create_commit(
                repo_id, ops, repo_type="dataset", revision=rev, create_pr=create_pr,
                commit_message=message or _message(build), token=tok,
                parent_commit=plan.parent_commit if not create_pr else None)
            return plan, info

        plan, info = call(commit_once, "the commit")
    except Exception as exc:
        if isinstance(exc, BadInput):
            raise
        raise _explain(exc, repo_id, url) from exc
    res = PushResult(plan, attempts=attempts, card_rendered=rendered)
    if info is not None:
        res.commit_url = getattr(info, "commit_url", None)
        res.pr_url = getattr(info, "pr_url", None)
    return res


def _message(build: Path) -> str:
    import pyarrow.parquet as pq
    counts = []
    for folder, what in (("data", "pairs"), ("infill", "infill rows")):
        n = sum(pq.ParquetFile(p).metadata.num_rows
                for paths in list_shards(build / folder).values() for p in paths)
        if n:
            counts.append(f"{n} {what}")
    return "curate push: " + ", ".join(counts)


def describe(plan: Plan) -> list[str]:
    """The lines `--dry-run` prints: one per file, then a total."""
    lines = [f"note: {n}" for n in plan.notes]
    if plan.remote_checked and not plan.remote_exists:
        lines.append(f"{plan.repo_id} does not exist yet: it would be created")
    for o in plan.ops:
        lines.append(f"  {o.action:<7} {_size(o.size):>9}  {o.path_in_repo}")
    lines.append(f"{len(plan.of('upload'))} to upload ({_size(plan.upload_bytes)}), "
                 f"{len(plan.of('skip'))} already there, {len(plan.of('delete'))} to delete "
                 f"-> {plan.repo_id}@{plan.revision}")
    return lines


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
