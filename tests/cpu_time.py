"""The CPU time of one call, for the tests that guard against a super-linear blow-up.

``from cpu_time import cpu_seconds`` works from every test folder (``tests/`` is on the path,
as the folder of the root ``conftest.py``).

The calling thread's CPU clock, not the wall clock: the other processes of a loaded machine,
and this process's other threads, do not count. A bound can then stay as tight about the
blow-up it guards (seconds of CPU for a quadratic walk or a backtracking expression) without
failing when the machine is busy. Only for work done in the calling thread: a wait (a socket,
a sleep, a subprocess) costs no CPU, so a deadline is checked on the wall clock instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class CpuTimer:
    """The CPU seconds the calling thread spent in a ``with cpu_timer()`` block."""

    seconds: float = 0.0


@contextmanager
def cpu_timer() -> Iterator[CpuTimer]:
    """Measure the calling thread's CPU time in the block, even when the block raises."""
    timer = CpuTimer()
    started = time.thread_time()
    try:
        yield timer
    finally:
        timer.seconds = time.thread_time() - started


def cpu_seconds(function: Callable[..., Any], *args: Any) -> float:
    """The CPU seconds the calling thread spent in ``function(*args)``."""
    with cpu_timer() as timer:
        function(*args)
    return timer.seconds
