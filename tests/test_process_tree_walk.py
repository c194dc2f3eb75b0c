"""The descendants-only walk finds what the whole process table finds, and a session's exit
is seen when it happens (``wait_for_exit``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.system import proctree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_walk_finds_every_descendant_the_whole_table_finds() -> None:
    # a child with two grandchildren (one in a subshell): three levels
    tree = subprocess.Popen(["sh", "-c", "sleep 60 & (sleep 60 & wait) & echo started; wait"],
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert tree.stdout is not None and tree.stdout.readline() == b"started\n"
        ours: set[int] = set()
        for _ in range(10_000):  # until the subshell has forked its sleep (polled: other processes)
            ours = proctree._descendants(tree.pid, proctree._process_table()) | {tree.pid}
            if len(ours) >= 4:  # sh, sleep, the subshell and its sleep
                break
        assert len(ours) >= 4, ours
        me = os.getpid()
        everything = proctree._descendants(me, proctree._process_table())
        walked = set(proctree._descendant_table())
        assert ours <= walked
        assert walked == everything
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()


def test_wait_for_exit_returns_at_the_exit_and_times_out_on_a_live_process() -> None:
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    proctree.wait_for_exit(quick, timeout=60)
    assert quick.returncode == 0

    lasting = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proctree.wait_for_exit(lasting, timeout=0.01)
        assert lasting.poll() is None
    finally:
        lasting.kill()
        lasting.wait()
