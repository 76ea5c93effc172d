"""A run's lease owner is told apart from a later process that reuses its process id.

A killed run's process id may be reused (ids wrap at 32,768 on many hosts), even by the
process that resumes it: an owner id records its process's start time, so that process is
seen dead, and the resume does not wait out the lease.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from clearance._state.lease import new_owner, owner_is_dead, start_ticks

HOST = socket.gethostname()

pytestmark = pytest.mark.skipif(start_ticks(os.getpid()) is None, reason="no /proc")


def test_this_process_is_alive_and_an_earlier_one_of_its_id_is_dead() -> None:
    mine = new_owner()
    assert not owner_is_dead(mine)
    started = start_ticks(os.getpid())
    assert started is not None
    earlier = f"{HOST}:{os.getpid()}:{int(started) - 1}.abcd1234"  # same id, started before
    assert owner_is_dead(earlier)


def test_a_live_process_started_at_another_time_is_not_the_owner() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = start_ticks(child.pid)
        assert started is not None
        assert not owner_is_dead(f"{HOST}:{child.pid}:{started}.abcd1234")
        assert owner_is_dead(f"{HOST}:{child.pid}:{int(started) + 7}.abcd1234")
    finally:
        child.kill()
        child.wait()
    assert owner_is_dead(f"{HOST}:{child.pid}:{started}.abcd1234")


def test_owner_ids_of_earlier_versions_read_as_before() -> None:
    assert not owner_is_dead(f"{HOST}:{os.getpid()}:abcd1234")  # this process: alive
    assert not owner_is_dead(f"other-host:{os.getpid()}:abcd1234")
    assert not owner_is_dead(f"{HOST}:{os.getppid()}:abcd1234")  # a live process
