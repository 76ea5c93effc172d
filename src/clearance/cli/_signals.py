"""SIGTERM handled as Ctrl-C while a command runs its event loop.

A service manager, a container runtime (``docker stop``) or a CI runner stops a process with
SIGTERM. Python's default for it ends the process at once, running no ``finally``: a run
stayed recorded ``running``, its tasks mid-flight, and the processes its MCP servers started
were left behind. While `sigterm_as_interrupt` is active, SIGTERM raises SIGINT instead, so
``asyncio.run`` cancels the run as it does on Ctrl-C (the orchestrator records the run
``interrupted`` and resumable, sessions close), and the command exits with
`TERMINATED_EXIT_CODE`. A second SIGTERM stops at once, as a second Ctrl-C does. A process
started with SIGINT ignored (a script's background job) gets Python's SIGINT handler for
the block, so SIGTERM stops it too (and so does Ctrl-C, then).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["TERMINATED_EXIT_CODE", "Termination", "sigterm_as_interrupt"]

TERMINATED_EXIT_CODE = 128 + signal.SIGTERM
"""The exit code after SIGTERM (143), as a shell reports a process that SIGTERM ended."""


class Termination:
    """Whether SIGTERM arrived while `sigterm_as_interrupt` was active."""

    __slots__ = ("received",)

    def __init__(self) -> None:
        self.received = False


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[Termination]:
    """Within the block, SIGTERM raises SIGINT (on the main thread only; elsewhere nothing).

    Yields:
        A `Termination` whose ``received`` is true once SIGTERM arrived.
    """
    termination = Termination()
    if threading.current_thread() is not threading.main_thread():
        yield termination  # only the main thread may set signal handlers
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        termination.received = True
        signal.raise_signal(signal.SIGINT)

    # A shell without job control (a script, a CI step) starts its background jobs with
    # SIGINT ignored: the SIGINT raised for SIGTERM would be lost, and the run go on.
    # ``asyncio.run`` cancels the run on SIGINT only when it finds Python's own handler.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield termination
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
