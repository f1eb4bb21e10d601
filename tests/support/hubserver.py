"""A small Hugging Face Hub on loopback, for the push tests.

It speaks the part of the Hub's HTTP protocol that huggingface_hub (create_repo, preupload, LFS
batch + basic upload, create_commit, repo info, tree, paths-info, whoami, validate-yaml) and
`datasets.load_dataset` (resolve downloads with ranges) use, with the Hub's error headers
(X-Error-Code), so that the client raises the same exceptions it raises against the real Hub.
Xet is not spoken: set HF_HUB_DISABLE_XET=1 for the client.

Commits are atomic: a repo's files change only when a whole commit call succeeds. Faults can be
switched on (`state.faults`) to cut a push short: fail the commit call, or drop LFS uploads.

    server = HubServer(tokens={"hf_w": Token("alice", orgs=["org"])}).start()
    server.url  # -> http://127.0.0.1:PORT (use as HF_ENDPOINT)
    server.stop()
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

LFS_PATTERNS = ["*.parquet", "*.arrow", "*.bin", "*.png", "*.jpg", "*.jpeg", "*.gz", "*.zst",
                "*.safetensors", "*.pt", "*.npy"]
GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS)
TYPE_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\n"
            f"size {size}\n").encode()


@dataclass
class Token:
    user: str
    orgs: list[str] = field(default_factory=list)
    role: str = "write"  # "read" or "write"


@dataclass
class Blob:
    size: int
    oid: str                     # git oid: of the content (regular) or of the pointer (lfs)
    data: bytes | None = None    # regular files
    sha256: str | None = None    # lfs files: key into HubState.lfs

    def to_json(self, path: str) -> dict:
        d = {"type": "file", "oid": self.oid, "size": self.size, "path": path}
        if self.sha256:
            d["lfs"] = {"oid": self.sha256, "size": self.size,
                        "pointerSize": len(lfs_pointer(self.sha256, self.size))}
        return d


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    files: dict[str, Blob]
    date: str


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    refs: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    prs: int = 0

    def resolve(self, rev: str) -> Commit | None:
        oid = self.refs.get(rev, rev)
        return self.commits.get(oid)


@dataclass
class Faults:
    fail_commits: int = 0        # the next N commit calls answer 500 and change nothing
    drop_lfs_uploads: int = 0    # the next N LFS uploads are cut off (connection closed)
    lfs_uploads_before_drop: int = 0  # let this many uploads through before dropping


class HubState:
    def __init__(self, tokens: dict[str, Token]):
        self.tokens = tokens
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.faults = Faults()
        self.requests: list[tuple[str, str, int]] = []
        self.lock = threading.RLock()

    def files(self, repo_id: str, repo_type: str = "dataset", rev: str = "main") -> dict[str, bytes]:
        """The remote files of a revision, path -> content (for assertions)."""
        repo = self.repos[(repo_type, repo_id)]
        commit = repo.resolve(rev)
        return {p: (b.data if b.sha256 is None else self.lfs[b.sha256])
                for p, b in commit.files.items()}

    def commit_count(self, repo_id: str, repo_type: str = "dataset") -> int:
        return len(self.repos[(repo_type, repo_id)].commits)


class HttpError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, fmt, *args):  # keep pytest output clean
        pass

    # -- plumbing --------------------------------------------------------------------------
    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                line = self.rfile.readline()
                n = int(line.strip().split(b";")[0] or b"0", 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json",
              headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body and not head:
            self.wfile.write(body)
        st = self.server.state
        with st.lock:
            st.requests.append((self.command, self.path, status))

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers=headers,
                   head=self.command == "HEAD")

    def _dispatch(self):
        try:
            self.route()
        except HttpError as e:
            h = {"X-Error-Message": e.message}
            if e.code:
                h["X-Error-Code"] = e.code
            self._json(e.status, {"error": e.message}, headers=h)
        except ConnectionError:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _dispatch

    # -- auth ------------------------------------------------------------------------------
    def _token(self) -> Token | None:
        auth = self.headers.get("Authorization") or ""
        if not auth:
            return None
        tok = auth.removeprefix("Bearer ").strip()
        t = self.server.state.tokens.get(tok)
        if t is None:
            raise HttpError(401, "Invalid credentials in Authorization header")
        return t

    def _can_write(self, repo_id: str) -> Token:
        t = self._token()
        if t is None:
            raise HttpError(401, "You must be authenticated to write to this repo")
        ns = repo_id.split("/")[0]
        if t.role != "write" or ns not in [t.user, *t.orgs]:
            raise HttpError(403, f"You don't have the rights to write to {repo_id}")
        return t

    def _repo(self, repo_type: str, repo_id: str, write: bool = False) -> Repo:
        st = self.server.state
        tok = self._can_write(repo_id) if write else self._token()
        repo = st.repos.get((repo_type, repo_id))
        visible = repo is not None and (not repo.private or (
            tok is not None and repo_id.split("/")[0] in [tok.user, *tok.orgs]))
        if not visible:
            raise HttpError(404, "Repository not found", "RepoNotFound")
        return repo

    def _commit(self, repo: Repo, rev: str) -> Commit:
        c = repo.resolve(rev)
        if c is None:
            raise HttpError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return c

    # -- routes ----------------------------------------------------------------------------
    def route(self):
        raw, _, query = self.path.partition("?")
        self.query = parse_qs(query)
        parts = raw.strip("/").split("/")
        m = self.command
        if raw == "/api/whoami-v2" and m == "GET":
            return self.whoami()
        if raw == "/api/repos/create" and m == "POST":
            return self.create_repo()
        if raw == "/api/validate-yaml" and m == "POST":
            self._body()
            return self._json(200, {"errors": [], "warnings": []})
        if parts[0] == "_lfs":
            return self.lfs_object(parts[1], verify=len(parts) > 2)
        if parts[0] == "api" and len(parts) >= 4 and parts[1] in ("models", "datasets", "spaces"):
            repo_type = parts[1][:-1]
            repo_id = f"{parts[2]}/{parts[3]}"
            rest = parts[4:]
            if not rest and m == "GET":
                return self.info(repo_type, repo_id, "main")
            action, rev = rest[0], unquote(rest[1]) if len(rest) > 1 else "main"
            sub = unquote("/".join(rest[2:]))
            if action == "revision" and m == "GET":
                return self.info(repo_type, repo_id, rev)
            if action == "preupload" and m == "POST":
                return self.preupload(repo_type, repo_id, rev)
            if action == "commit" and m == "POST":
                return self.commit(repo_type, repo_id, rev)
            if action == "tree" and m == "GET":
                return self.tree(repo_type, repo_id, rev, sub)
            if action == "paths-info" and m == "POST":
                return self.paths_info(repo_type, repo_id, rev)
            if action == "branch" and m == "POST":
                return self.create_branch(repo_type, repo_id, rev)
            raise HttpError(404, f"no route {m} {raw}")
        # /{prefix}{ns}/{name}.git/info/lfs/objects/batch and /{prefix}{ns}/{name}/resolve/{rev}/{path}
        repo_type = "model"
        if parts[0] in ("datasets", "spaces"):
            repo_type, parts = parts[0][:-1], parts[1:]
        if len(parts) >= 3 and parts[1].endswith(".git") and parts[2:] == ["info", "lfs", "objects", "batch"]:
            return self.lfs_batch(repo_type, f"{parts[0]}/{parts[1][:-4]}")
        if len(parts) >= 5 and parts[2] == "resolve" and m in ("GET", "HEAD"):
            return self.resolve(repo_type, f"{parts[0]}/{parts[1]}", unquote(parts[3]),
                                unquote("/".join(parts[4:])))
        raise HttpError(404, f"no route {m} {raw}")

    def whoami(self):
        t = self._token()
        if t is None:
            raise HttpError(401, "Invalid credentials in Authorization header")
        self._json(200, {"type": "user", "name": t.user,
                         "orgs": [{"name": o, "type": "org"} for o in t.orgs],
                         "auth": {"type": "access_token",
                                  "accessToken": {"displayName": "test", "role": t.role}}})

    def create_repo(self):
        payload = json.loads(self._body() or b"{}")
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload.get('organization') or (self._token() or Token('?')).user}/{payload['name']}"
        url = f"{self.server.url}/{TYPE_PREFIX[repo_type]}{repo_id}"
        st = self.server.state
        with st.lock:
            self._can_write(repo_id)
            if (repo_type, repo_id) in st.repos:
                return self._json(409, {"error": "You already created this repo", "url": url})
            private = payload.get("visibility") == "private" or bool(payload.get("private"))
            repo = Repo(repo_type, repo_id, private)
            data = GITATTRIBUTES.encode()
            files = {".gitattributes": Blob(len(data), git_blob_oid(data), data=data)}
            self._new_commit(repo, "main", None, "initial commit", files)
            st.repos[(repo_type, repo_id)] = repo
        self._json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _new_commit(self, repo: Repo, ref: str, parent: str | None, title: str,
                    files: dict[str, Blob]) -> Commit:
        digest = hashlib.sha1(json.dumps([parent, title, time.time_ns(), sorted(
            (p, b.oid) for p, b in files.items())]).encode()).hexdigest()
        c = Commit(digest, parent, title, files, time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))
        repo.commits[digest] = c
        repo.refs[ref] = digest
        return c

    def info(self, repo_type: str, repo_id: str, rev: str):
        repo = self._repo(repo_type, repo_id)
        c = self._commit(repo, rev)
        self._json(200, {
            "_id": repo_id, "id": repo_id, "author": repo_id.split("/")[0], "sha": c.oid,
            "private": repo.private, "gated": False, "disabled": False, "downloads": 0,
            "likes": 0, "tags": [], "lastModified": c.date, "createdAt": c.date,
            "siblings": [{"rfilename": p} for p in sorted(c.files)],
            "cardData": {}})

    def _upload_mode(self, repo: Repo, commit: Commit, path: str, size: int, sample: bytes) -> str:
        ga = commit.files.get(".gitattributes")
        patterns = LFS_PATTERNS
        if ga is not None and ga.data is not None:
            patterns = [ln.split()[0] for ln in ga.data.decode().splitlines()
                        if "filter=lfs" in ln]
        name = path.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns):
            return "lfs"
        if size > 10 * 1024 * 1024 or b"\0" in sample:
            return "lfs"
        return "regular"

    def preupload(self, repo_type: str, repo_id: str, rev: str):
        repo = self._repo(repo_type, repo_id, write=True)
        payload = json.loads(self._body())
        base = self._commit(repo, rev) if "create_pr" not in self.query else self._commit(repo, rev)
        out = []
        for f in payload["files"]:
            sample = base64.b64decode(f["sample"])
            mode = self._upload_mode(repo, base, f["path"], f["size"], sample)
            have = base.files.get(f["path"])
            oid = None
            if have is not None:
                oid = have.sha256 if have.sha256 else have.oid
            out.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        self._json(200, {"files": out, "commitOid": base.oid})

    def lfs_batch(self, repo_type: str, repo_id: str):
        self._repo(repo_type, repo_id, write=True)
        payload = json.loads(self._body())
        st = self.server.state
        objects = []
        for o in payload["objects"]:
            d = {"oid": o["oid"], "size": o["size"]}
            if o["oid"] not in st.lfs:
                d["authenticated"] = True
                d["actions"] = {"upload": {"href": f"{self.server.url}/_lfs/{o['oid']}"},
                                "verify": {"href": f"{self.server.url}/_lfs/{o['oid']}/verify"}}
            objects.append(d)
        self._send(200, json.dumps({"transfer": "basic", "objects": objects}).encode(),
                   ctype="application/vnd.git-lfs+json")

    def lfs_object(self, oid: str, verify: bool):
        st = self.server.state
        if verify:
            body = json.loads(self._body())
            if body.get("oid") not in st.lfs:
                raise HttpError(404, "object not uploaded")
            return self._json(200, {})
        if self.command != "PUT":
            raise HttpError(405, "PUT only")
        f = st.faults
        with st.lock:
            drop = False
            if f.drop_lfs_uploads > 0:
                if f.lfs_uploads_before_drop > 0:
                    f.lfs_uploads_before_drop -= 1
                else:
                    f.drop_lfs_uploads -= 1
                    drop = True
        if drop:  # read a little, then hang up like a broken connection
            self.rfile.read(min(16, int(self.headers.get("Content-Length") or 16)))
            self.close_connection = True
            with st.lock:
                st.requests.append((self.command, self.path, 0))
            raise ConnectionError("dropped on purpose")
        data = self._body()
        if hashlib.sha256(data).hexdigest() != oid:
            raise HttpError(400, "content does not match its oid")
        with st.lock:
            st.lfs[oid] = data
        self._send(200, b"", headers={"ETag": '"' + oid + '"'})

    def commit(self, repo_type: str, repo_id: str, rev: str):
        st = self.server.state
        repo = self._repo(repo_type, repo_id, write=True)
        lines = [json.loads(ln) for ln in self._body().splitlines() if ln.strip()]
        with st.lock:
            if st.faults.fail_commits > 0:
                st.faults.fail_commits -= 1
                raise HttpError(500, "Internal Error - we're working hard to fix this")
            base = self._commit(repo, rev)
            header = next((ln["value"] for ln in lines if ln["key"] == "header"), {})
            parent = header.get("parentCommit")
            if parent and parent != base.oid:
                raise HttpError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(base.files)
            for ln in lines:
                key, v = ln["key"], ln["value"]
                if key == "file":
                    data = base64.b64decode(v["content"])
                    files[v["path"]] = Blob(len(data), git_blob_oid(data), data=data)
                elif key == "lfsFile":
                    if v["oid"] not in st.lfs:
                        raise HttpError(422, f"LFS object {v['oid']} of {v['path']} was never uploaded")
                    size = len(st.lfs[v["oid"]])
                    files[v["path"]] = Blob(size, git_blob_oid(lfs_pointer(v["oid"], size)),
                                            sha256=v["oid"])
                elif key == "deletedFile":
                    if v["path"] not in files:
                        raise HttpError(404, "A file with this name doesn't exist", "EntryNotFound")
                    del files[v["path"]]
                elif key == "deletedFolder":
                    prefix = v["path"].rstrip("/") + "/"
                    for p in [p for p in files if p.startswith(prefix)]:
                        del files[p]
            ref = rev
            pr_url = None
            if "create_pr" in self.query:
                repo.prs += 1
                ref = f"refs/pr/{repo.prs}"
                pr_url = f"{self.server.url}/{TYPE_PREFIX[repo_type]}{repo_id}/discussions/{repo.prs}"
            elif rev not in repo.refs:
                raise HttpError(400, f"Revision {rev} is not a branch", "RevisionNotFound")
            c = self._new_commit(repo, ref, base.oid, header.get("summary") or "", files)
        url = f"{self.server.url}/{TYPE_PREFIX[repo_type]}{repo_id}/commit/{c.oid}"
        self._json(200, {"success": True, "commitOid": c.oid, "commitUrl": url,
                         "pullRequestUrl": pr_url})

    def create_branch(self, repo_type: str, repo_id: str, branch: str):
        st = self.server.state
        repo = self._repo(repo_type, repo_id, write=True)
        body = json.loads(self._body() or b"{}")
        with st.lock:
            if branch in repo.refs:
                raise HttpError(409, f"Branch {branch} already exists")
            start = self._commit(repo, body.get("startingPoint") or "main")
            repo.refs[branch] = start.oid
        self._json(200, {})

    def _entries(self, commit: Commit, prefix: str, recursive: bool) -> list[dict]:
        prefix = prefix.strip("/")
        base = prefix + "/" if prefix else ""
        out, dirs = [], set()
        for p in sorted(commit.files):
            if not p.startswith(base):
                continue
            rest = p[len(base):]
            if "/" in rest:
                parts = rest.split("/")
                for i in range(1, len(parts) if recursive else 2):
                    dirs.add(base + "/".join(parts[:i]))
                if not recursive:
                    continue
            out.append(commit.files[p].to_json(p))
        for d in sorted(dirs):
            out.append({"type": "directory", "path": d, "size": 0,
                        "oid": hashlib.sha1(d.encode() + commit.oid.encode()).hexdigest()})
        return out

    def tree(self, repo_type: str, repo_id: str, rev: str, path: str):
        repo = self._repo(repo_type, repo_id)
        c = self._commit(repo, rev)
        recursive = (self.query.get("recursive") or ["false"])[0].lower() in ("1", "true")
        if path and path in c.files:
            raise HttpError(400, f"{path} is a file, not a folder")
        entries = self._entries(c, path, recursive)
        if path and not entries:
            raise HttpError(404, f"{path} does not exist on {rev}", "EntryNotFound")
        self._json(200, entries)

    def paths_info(self, repo_type: str, repo_id: str, rev: str):
        repo = self._repo(repo_type, repo_id)
        c = self._commit(repo, rev)
        body = self._body()
        ctype = self.headers.get("Content-Type") or ""
        if "json" in ctype:
            paths = json.loads(body).get("paths", [])
        else:
            paths = parse_qs(body.decode()).get("paths", [])
        out = []
        for p in paths:
            p = p.strip("/")
            if p in c.files:
                out.append(c.files[p].to_json(p))
            elif any(f.startswith(p + "/") for f in c.files):
                out.append({"type": "directory", "path": p, "size": 0,
                            "oid": hashlib.sha1(p.encode() + c.oid.encode()).hexdigest()})
        self._json(200, out)

    def resolve(self, repo_type: str, repo_id: str, rev: str, path: str):
        repo = self._repo(repo_type, repo_id)
        c = self._commit(repo, rev)
        blob = c.files.get(path)
        if blob is None:
            raise HttpError(404, "Entry not found", "EntryNotFound")
        data = blob.data if blob.sha256 is None else self.server.state.lfs[blob.sha256]
        etag = blob.sha256 or blob.oid
        headers = {"ETag": f'"{etag}"', "X-Repo-Commit": c.oid, "Accept-Ranges": "bytes"}
        if blob.sha256:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(blob.size)})
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes="):
            start_s, _, end_s = rng[6:].split(",")[0].partition("-")
            if start_s:
                start = int(start_s)
                end = min(int(end_s), len(data) - 1) if end_s else len(data) - 1
            else:
                start, end = max(0, len(data) - int(end_s)), len(data) - 1
            if start >= len(data):
                headers["Content-Range"] = f"bytes */{len(data)}"
                return self._send(416, b"", ctype="application/octet-stream", headers=headers)
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start:end + 1], 206
        self._send(status, data, ctype="application/octet-stream", headers=headers,
                   head=self.command == "HEAD")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState
    url: str


class HubServer:
    """The server in a background thread; `state` holds the repos for assertions."""

    def __init__(self, tokens: dict[str, Token] | None = None):
        self.state = HubState(tokens or {})
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.state = self.state
        host, port = self._httpd.server_address[:2]
        self.url = self._httpd.url = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> "HubServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":  # manual use: python tests/support/hubserver.py  (token: hf_local, user: me, org: org)
    import sys
    srv = HubServer({"hf_local": Token("me", orgs=["org"])}).start()
    print(f"HF_ENDPOINT={srv.url} HF_TOKEN=hf_local HF_HUB_DISABLE_XET=1", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
        sys.exit(0)
