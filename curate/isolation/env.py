"""What a worker may see of the parent's environment: no credentials, in its variables, in the
parent's /proc environ block, or in anything a worker sends back."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

# Environment variables a candidate must never see: anything named like a credential, and the
# variables of services that hold one.
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDS|AUTH|"
                         r"COOKIE|SESSION|BEARER|PRIVATE|WEBHOOK|_DSN$", re.IGNORECASE)
SECRET_PREFIXES = ("HF_", "HUGGING", "OPENAI", "ANTHROPIC", "AWS_", "AZURE_", "GOOGLE_", "GH_",
                   "GITHUB_", "WANDB_", "SSH_", "GIT_")
# compile caches a worker always gets named (its own, never a path the parent or a server cached)
CACHE_DIR_VARS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR")
PKG_ROOT = str(Path(__file__).resolve().parents[2])


def _is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) or name.upper().startswith(SECRET_PREFIXES)


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without credentials, plus `extra` (caller's settings win)."""
    env = {k: v for k, v in os.environ.items() if not _is_secret(k)}
    env.update(extra or {})
    return env


def with_package_root(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout's package root first on PYTHONPATH: a worker imports the same
    `curate` as its parent."""
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PKG_ROOT, env.get("PYTHONPATH")]))
    return env


def secret_values() -> list[str]:
    """Credentials this process could leak to a worker that reads them from disk (token files)
    or that the parent holds (environment): what `redact` removes from everything a worker
    sends back, so that a candidate cannot publish them through an error message."""
    vals = {v for k, v in os.environ.items() if _is_secret(k) and len(v) >= 8}
    home = os.path.expanduser("~")
    for f in (os.environ.get("HF_TOKEN_PATH"), os.path.join(home, ".cache/huggingface/token"),
              os.path.join(home, ".huggingface/token")):
        try:
            if f and os.path.isfile(f):
                tok = Path(f).read_text().strip()
                if len(tok) >= 8:
                    vals.add(tok)
        except OSError:
            pass
    return sorted(vals, key=len, reverse=True)


def hide_from_proc(values: list[str]) -> bool:
    """Overwrite `values` in this process's initial environment block, which other processes of
    the same user read as /proc/<pid>/environ (a worker can read its parent's: on kernels where
    Landlock does not scope ptrace-style access, root candidates can). `os.environ` is a copy
    and keeps them. Best effort: False where /proc/self/mem is not writable."""
    if not values or not sys.platform.startswith("linux"):
        return False
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = mem.read(end - start)
            new = block
            for v in values:
                b = v.encode()
                new = new.replace(b, b"*" * len(b)) if b else new
            if new == block:
                return False
            mem.seek(start)
            mem.write(new)
        return True
    except (OSError, ValueError, IndexError):
        return False


def redact(obj: Any, secrets: list[str]) -> Any:
    """`obj` (str, or JSON-like containers of them) with every secret replaced."""
    if not secrets:
        return obj
    if isinstance(obj, str):
        for sec in secrets:
            if sec in obj:
                obj = obj.replace(sec, "[redacted]")
        return obj
    if isinstance(obj, list):
        return [redact(v, secrets) for v in obj]
    if isinstance(obj, dict):
        return {k: redact(v, secrets) for k, v in obj.items()}
    return obj
