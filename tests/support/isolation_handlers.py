"""Task handlers for the isolation tests: each does one hostile or honest thing."""

import os
import subprocess
import sys
import time

SETUP_ENV: dict[str, str] = {}

# template recursion g++ takes seconds over (SIZE=300: a few seconds on one core)
HEAVY_CPP = """
#include <cstddef>
template <std::size_t N, std::size_t M> struct Grid {
  static constexpr std::size_t value = Grid<N - 1, M>::value + Grid<N, M - 1>::value % 1000003;
};
template <std::size_t M> struct Grid<0, M> { static constexpr std::size_t value = M; };
template <std::size_t N> struct Grid<N, 0> { static constexpr std::size_t value = N; };
template <> struct Grid<0, 0> { static constexpr std::size_t value = 1; };
std::size_t answer() { return Grid<SIZE, SIZE>::value; }
"""


def setup():
    """What the worker's environment held when its setup ran (verify pins the GPU there)."""
    SETUP_ENV.update(os.environ)


def handle(task):
    kind = task["kind"]
    if kind == "setup_env":
        return {"env": dict(SETUP_ENV)}
    if kind == "sleep":
        time.sleep(task["seconds"])
        return {"slept": task["seconds"]}
    if kind == "compile":  # a C++ build, as a CUDA/C++ candidate's load runs one
        with open("heavy.cpp", "w") as fh:
            fh.write(HEAVY_CPP)
        subprocess.run(["g++", "-std=c++17", "-ftemplate-depth=4000", f"-DSIZE={task['size']}",
                        "-c", "heavy.cpp", "-o", "heavy.o"], check=True)
        return {"compiled": True}
    if kind == "memfd_out":  # bytes back in a sealed memory file (or, hostile, an open one)
        from curate.isolation import protocol, worker
        data = task["value"].encode()
        if task.get("unsealed"):
            fd = os.memfd_create("open", os.MFD_ALLOW_SEALING)
            os.write(fd, data)
        else:
            fd = protocol.sealed_memfd("out", len(data), lambda m: m.write(data))
        worker.reply_fds([fd])
        return {"size": len(data)}
    if kind == "memfd_in":  # what the memory files that came with the task hold
        from curate.isolation import protocol, worker
        out = []
        for fd in worker.task_fds():
            n = protocol.sealed_size(fd)
            out.append(os.pread(fd, n, 0).decode())
        return {"read": out}
    if kind == "echo":
        return {"echo": task["value"], "cwd": os.getcwd()}
    if kind == "pid":
        return {"pid": os.getpid(), "_recycle": bool(task.get("recycle"))}
    if kind == "getuser":  # what torch._inductor's import asks (it raised for a bare uid)
        import getpass
        return {"user": getpass.getuser(), "uid": os.getuid()}
    if kind == "env":
        return {"env": dict(os.environ)}
    if kind == "raise":
        raise ValueError("candidate failed")
    if kind == "exit":
        os._exit(3)
    if kind == "segv":
        import ctypes
        ctypes.string_at(0)
    if kind == "hang":
        time.sleep(3600)
    if kind == "flood":
        while True:
            sys.stdout.write("x" * 65536)
    if kind == "garbage":
        os.write(int(sys.argv[2]), b"\xff" * 64)
        time.sleep(3600)
    if kind == "fork_hang":
        child = os.fork()
        if child == 0:
            time.sleep(3600)
        with open(task["pidfile"], "w") as fh:
            fh.write(str(child))
        time.sleep(3600)
    if kind == "write_file":
        with open("scratch.txt", "w") as fh:
            fh.write("ok")
        return {"path": os.path.abspath("scratch.txt")}
    raise KeyError(kind)
