"""The node's board of background workers: a timed batch in one process stops the workers
another process published (a Ray build's verify actor and synth actor), and gives their owner
the seconds back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from curate.isolation.board import Board
from curate.isolation.freeze import Freezer

OWNER = textwrap.dedent("""
    import subprocess, sys
    from curate.isolation.board import Board
    from curate.isolation.freeze import Freezer
    f = Freezer()
    f.use_board(Board(sys.argv[1]))
    child = subprocess.Popen(["sleep", "120"], start_new_session=True)
    f.add(child.pid)
    print(child.pid, flush=True)
    for line in sys.stdin:
        print(f.frozen_s(child.pid), flush=True)
    f.discard(child.pid)
    child.kill()
""")


def _state(pid: int, want: str, wait_s: float = 5.0) -> str:
    """The process's state letter, waiting up to `wait_s` for it to become `want`."""
    end = time.monotonic() + wait_s
    while True:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        if state == want or time.monotonic() > end:
            return state
        time.sleep(0.01)


@pytest.fixture
def owner(tmp_path):
    """Another process that owns a background worker and published it on the board."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "board")], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    yield proc, pid
    proc.stdin.close()
    proc.wait(10)


def test_a_timed_batch_stops_the_workers_another_process_published(tmp_path, owner):
    proc, pid = owner
    mine = Freezer()
    mine.use_board(Board(tmp_path / "board"))
    with mine.quiet(keep=()) as stopped:
        assert stopped == 1
        assert _state(pid, "T") == "T"
        time.sleep(0.3)
    assert _state(pid, "S") != "T"
    proc.stdin.write("frozen?\n")
    proc.stdin.flush()
    assert float(proc.stdout.readline()) >= 0.3   # the owner's time limits give it back


def test_the_last_of_two_holders_continues_the_group(tmp_path):
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        first, second = Board(tmp_path / "b"), Board(tmp_path / "b")
        with first.hold([child.pid]):
            with second.hold([child.pid]):
                assert _state(child.pid, "T") == "T"
            time.sleep(0.2)
            assert _state(child.pid, "T", wait_s=0) == "T"   # the first still holds it
        assert _state(child.pid, "S") != "T"
        assert first.frozen_s(child.pid) >= 0.2
    finally:
        child.kill()
        child.wait()


def test_entries_of_ended_processes_are_dropped_and_a_shared_folder_is_refused(tmp_path):
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    board = Board(tmp_path / "b")
    board.publish(child.pid)
    (tmp_path / "b" / str(child.pid)).write_text(f"999999999 {0}\n")  # an owner long gone
    assert board.others() == []
    assert not (tmp_path / "b" / str(child.pid)).exists()
    child.kill()
    child.wait()
    (tmp_path / "open").mkdir(mode=0o755)
    os.chmod(tmp_path / "open", 0o777)
    with pytest.raises(PermissionError):
        Board(tmp_path / "open")


def test_a_ray_actor_joins_the_build_board(tmp_path):
    """What the Ray executor hands its actors (ray_actor._as_driver) puts the process's
    BACKGROUND freezer on the build's board: a verify actor stops the synth actor's workers."""
    pytest.importorskip("ray", reason="needs Ray (the ray extra)")
    code = textwrap.dedent("""
        from curate.isolation.board import ENV, board_dir
        from curate.isolation.freeze import BACKGROUND
        from curate.pipeline.executor.ray_actor import _as_driver
        _as_driver({ENV: "t-1"})
        print(BACKGROUND.board.root == board_dir("t-1"))
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_a_killed_build_board_is_swept_and_live_or_foreign_ones_stay(tmp_path, monkeypatch):
    """A driver killed with SIGKILL leaves its board: the next build on the host removes it,
    never a live build's, nor one another host's driver named."""
    import socket
    import tempfile
    from curate.isolation import board as board_mod
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    names = {"dead": f"{host}.{dead.pid}.1", "live": board_mod.new_name(),
             "foreign": f"elsewhere.{dead.pid}.1"}
    for name in names.values():
        Board(board_mod.board_dir(name))
    gone = board_mod.sweep_dead()
    assert gone == [board_mod.board_dir(names["dead"])]
    assert not board_mod.board_dir(names["dead"]).exists()
    assert board_mod.board_dir(names["live"]).exists()
    assert board_mod.board_dir(names["foreign"]).exists()
