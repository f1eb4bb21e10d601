"""Trim a Ray wheel to what `curate build --executor ray` needs, as a valid wheel.

    python3 benchmarks/ray_trim.py ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl -o DIR

Ray's wheel (79 MB) is more than one call to the GPU machine carries (64 MiB in all). The
driver, the raylet, the GCS, the dashboard agent (the raylet starts it, dashboard or not) and
the runtime-env agent stay; the Java jars, the dashboard's web client and the libraries built
on Ray core (RLlib, Serve, Tune, Train, Data, LLM) go, and the native binaries lose their debug
symbols. RECORD is written again, so that pip installs the result as any wheel. Prints the
wheel's path and, one a line after `requires:`, the requirements pip will want (download them
with benchmarks/ray_wheel.sh). Works for any Python version's wheel.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DROP = ("ray/jars/", "ray/dashboard/client/", "ray/rllib/", "ray/serve/", "ray/tune/",
        "ray/train/", "ray/data/", "ray/llm/")
NATIVE = ("ray/_raylet.so", "ray/core/src/ray/raylet/raylet", "ray/core/src/ray/gcs/gcs_server")


def trim(wheel: Path, out_dir: Path) -> tuple[Path, list[str]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if not n.startswith(DROP)]
            for n in names:
                z.extract(n, root)
                info = z.getinfo(n)
                mode = info.external_attr >> 16
                if mode:
                    (root / n).chmod(mode & 0o7777)
        strip = shutil.which("strip")
        for n in NATIVE:
            if strip and (root / n).is_file():
                subprocess.run([strip, "--strip-unneeded", str(root / n)], check=True)
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        (root / record).write_text(_record(root, [n for n in names if n != record], record))
        dest = out_dir / wheel.name
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            for n in names:  # the dist-info last, as wheels have it
                if ".dist-info/" not in n:
                    z.write(root / n, n)
            for n in names:
                if ".dist-info/" in n:
                    z.write(root / n, n)
        requires = [line.split(":", 1)[1].strip() for line in (root / meta).read_text()
                    .splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    return dest, requires


def _record(root: Path, names: list[str], record: str) -> str:
    lines = []
    for n in names:
        data = (root / n).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{n},sha256={digest},{len(data)}")
    lines.append(f"{record},,")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args(argv)
    dest, requires = trim(args.wheel, args.out)
    print(f"{dest} {dest.stat().st_size / 2**20:.1f} MiB "
          f"(was {args.wheel.stat().st_size / 2**20:.1f} MiB)")
    for r in requires:
        print(f"requires: {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
