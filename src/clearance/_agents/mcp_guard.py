"""A stdio MCP server's guard: the server's process group ends when Clearance does (Linux).

Clearance starts a stdio server as ``python -I -S mcp_guard.py PARENT STATUS_FD LC_CTYPE --
PROGRAM ARG...``; the guard asks the kernel for SIGTERM when the thread that started it
ends (``prctl(PR_SET_PDEATHSIG)``), checks that its parent (``PARENT``) has not already
died, then starts the server with the same argv, environment, working directory and
standard streams (the descriptors themselves: the guard never reads or writes a byte of
them) and waits for it. The server runs in the guard's own process group, so stopping the
group as before (SIGTERM, then SIGKILL) stops the guard, the server and what it started.

* **Its parent dies** (even by SIGKILL), or the guard gets SIGTERM: the whole group gets
  SIGTERM, then SIGKILL once the server has exited or ``GRACE_S`` seconds have passed
  (that SIGKILL ends the guard too).
* **The server exits**: the guard exits with the server's status (128 + N if signal N
  killed it).
* SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to the guard are passed to the server
  (a signal the guard started with ignored stays ignored, for the server too).

``STATUS_FD`` is a pipe's writing end: closed unwritten once the server has started, or
given ``errno`` if it could not be (Clearance raises that as `OSError`, as without a guard).
``LC_CTYPE`` is ``-`` if the server's environment had no ``LC_CTYPE``, else ``=`` and its
value: the interpreter sets ``LC_CTYPE`` itself in a C locale (PEP 538), and the server
must see its environment as given. Standard library only, so it starts in tens of
milliseconds.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys
import time

GRACE_S = 2.0
"""Seconds the server is given to exit after SIGTERM before its whole group gets SIGKILL."""

_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _stop_group(server: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM to the group (this process's), then SIGKILL, which ends this process too."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM reaches the guard too
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while server is not None and time.monotonic() < deadline:
        try:  # not server.poll(): it answers None while the interrupted wait() holds its lock
            if os.waitpid(server.pid, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
        time.sleep(0.02)
    os.killpg(0, signal.SIGKILL)
    os._exit(128 + signal.SIGKILL)  # not reached


def main(argv: list[str]) -> int:
    """Run the server of ``argv`` (``PARENT STATUS_FD LC_CTYPE -- PROGRAM ARG...``) guarded."""
    if len(argv) < 5 or argv[3] != "--" or not (argv[2] == "-" or argv[2].startswith("=")):
        print("usage: mcp_guard.py PARENT STATUS_FD LC_CTYPE -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    parent, status_fd, command = int(argv[0]), int(argv[1]), argv[4:]
    if argv[2] == "-":
        os.environ.pop("LC_CTYPE", None)
    else:
        os.environ["LC_CTYPE"] = argv[2][1:]
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)  # killing "the group" must never reach whoever started the guard
    server: subprocess.Popen[bytes] | None = None
    signal.signal(signal.SIGTERM, lambda *_: _stop_group(server))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0 or os.getppid() != parent:
        _stop_group(None)  # no guard possible, or the parent is already gone
    try:
        server = subprocess.Popen(command)  # inherits the descriptors 0, 1 and 2 as they are
    except OSError as exc:
        os.write(status_fd, str(exc.errno or errno.ENOEXEC).encode())
        return 127
    finally:
        os.close(status_fd)
    for number in _FORWARDED:
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, lambda got, _: server.send_signal(got))
    status = server.wait()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
