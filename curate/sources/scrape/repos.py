"""Where scraped code comes from: git repositories cloned at a recorded commit, local folders,
and list files (`url [commit] [stars]` per line). Cloning uses the git command (present
everywhere, nothing to install); `file://` and plain paths of git repositories work too.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...errors import BadInput

GIT_URL = re.compile(r"^(https?://|git@|ssh://|git://|file://)|\.git$")
SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
LIST_FIX = "write one repository per line: URL_OR_PATH [COMMIT] [STARS] (# starts a comment)"


@dataclass(frozen=True)
class RepoSpec:
    location: str               # a git URL or a local folder
    commit: str | None = None   # wanted commit (None: the default branch's head)
    stars: int | None = None


@dataclass
class Checkout:
    spec: RepoSpec
    root: Path
    url: str | None             # the repository's URL for provenance (None: a plain folder)
    commit: str | None          # the commit actually read
    top: Path | None = None     # the work tree's top folder (paths are given from there)

    @property
    def base(self) -> Path:
        return self.top or (self.root if self.root.is_dir() else self.root.parent)


def is_git_url(s: str) -> bool:
    return bool(GIT_URL.search(s))


def parse_list(path: str | Path) -> list[RepoSpec]:
    """The repositories of a list file; a bad line is bad input naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise BadInput("no such list file", path=str(path), fix="check --from-list")
    out = []
    for n, raw in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) > 3:
            raise BadInput(f"{len(parts)} fields, at most 3 expected", path=str(path), line=n,
                           fix=LIST_FIX)
        commit, stars = None, None
        if len(parts) == 3:
            commit, stars = parts[1], parts[2]
            if not SHA.match(commit) or not stars.isdigit():
                raise BadInput(f"expected a commit (7-40 hex digits) and a star count, got "
                               f"{commit!r} {stars!r}", path=str(path), line=n, fix=LIST_FIX)
            stars = int(stars)
        elif len(parts) == 2:
            extra = parts[1]
            if extra.isdigit() and len(extra) < 7:
                stars = int(extra)
            elif SHA.match(extra):
                commit = extra
            else:
                raise BadInput(f"{extra!r} is neither a commit (7-40 hex digits) nor a star "
                               "count", path=str(path), line=n, fix=LIST_FIX)
        out.append(RepoSpec(parts[0], commit, stars))
    if not out:
        raise BadInput("the list names no repository", path=str(path), fix=LIST_FIX)
    return out


def _git(args: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true")
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env=env, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])}: {p.stderr.strip()[-500:]}")
    return p.stdout.strip()


def _cache_name(url: str) -> str:
    tail = re.sub(r"[^A-Za-z0-9_.-]+", "-", url.rstrip("/").split("/")[-1])[:40]
    return f"{tail}-{hashlib.sha256(url.encode()).hexdigest()[:10]}"


def clone(spec: RepoSpec, cache: Path) -> Checkout:
    """Clone (or reuse a clone of) `spec` and check out its commit; records the commit read."""
    dest = cache / _cache_name(spec.location)
    if not (dest / ".git").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".partial")
        if tmp.exists():
            import shutil
            shutil.rmtree(tmp)
        _git(["clone", "--quiet", "--no-tags", spec.location, str(tmp)])
        tmp.rename(dest)
    if spec.commit:
        try:
            _git(["checkout", "--quiet", "--detach", spec.commit], dest)
        except RuntimeError:
            _git(["fetch", "--quiet", "origin", spec.commit], dest)
            _git(["checkout", "--quiet", "--detach", spec.commit], dest)
    commit = _git(["rev-parse", "HEAD"], dest)
    return Checkout(spec, dest, spec.location, commit, dest)


def local(spec: RepoSpec) -> Checkout:
    """A folder as it is: its git commit and remote where it is a git work tree."""
    root = Path(spec.location).expanduser()
    if not root.exists():
        raise BadInput("no such file or folder", path=str(root),
                       fix="name a folder, a .py file or a git URL")
    url, commit, top = None, None, None
    base = root if root.is_dir() else root.parent
    try:
        if subprocess.run(["git", "check-ignore", "-q", str(base)], cwd=base,
                          capture_output=True, timeout=30).returncode == 0:
            raise RuntimeError("an ignored folder inside a work tree (a venv): not its code")
        top = _git(["rev-parse", "--show-toplevel"], base, timeout=30)
        commit = _git(["rev-parse", "HEAD"], base, timeout=30)
        try:
            url = _git(["config", "--get", "remote.origin.url"], base, timeout=30) or None
        except RuntimeError:
            url = None
        url = url or Path(top).as_uri()
        top = Path(top)
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        top = None
    return Checkout(spec, root, url, commit, top)


def materialize(spec: RepoSpec, cache: Path) -> Checkout:
    if is_git_url(spec.location) and not Path(spec.location).exists():
        return clone(spec, cache)
    if spec.commit:  # a local git repository at another commit: clone it, leave it alone
        return clone(RepoSpec(Path(spec.location).resolve().as_uri(), spec.commit, spec.stars),
                     cache)
    return local(spec)
