"""Run leases: one run is run by one process at a time.

A running run's row names its owner (``host:pid:token``, the token telling apart two ledgers
of one process; on Linux it starts with the process's start time, ``<ticks>.<random>``, so a
process id reused by a later process is told apart from the one that took the lease) and the
time its lease expires. The owner renews the lease while it runs
(`LEASE_S`, renewed every third of it); another process may take the run over only once the
lease has expired or its owner is a dead process on this host (`RunLedger.reopen_run`, an
atomic compare-and-set on the run's row).
"""

from __future__ import annotations

import os
import secrets
import socket
from datetime import datetime
from pathlib import Path

__all__ = ["LEASE_S", "describe_owner", "new_owner", "owner_is_dead", "pid_alive", "start_ticks"]

LEASE_S = 30.0
"""Seconds a run's lease lasts without renewal (renewed every ``LEASE_S / 3`` seconds)."""


def new_owner() -> str:
    """A fresh owner id for this process: ``host:pid:token``.

    The token is ``<start ticks>.<random hex>`` where the process's start time can be read
    (`start_ticks`), else random hex.
    """
    pid, token = os.getpid(), secrets.token_hex(4)
    started = start_ticks(pid)
    return f"{socket.gethostname()}:{pid}:{f'{started}.{token}' if started else token}"


def start_ticks(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc``), or ``None``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 and fields[19].isdigit() else None


def _parts(owner: str) -> tuple[str, int | None]:
    host = owner.rpartition(":")[0]  # without the token
    host, _, pid = host.rpartition(":")
    return host, int(pid) if pid.isdigit() else None


def _started(owner: str) -> str | None:
    """The start ticks an owner id recorded (``None`` for one without: earlier versions)."""
    started, dot, _ = owner.rpartition(":")[2].partition(".")
    return started if dot and started.isdigit() else None


def describe_owner(owner: str, expires_at: datetime | None) -> str:
    """``process <pid> on host '<host>' (lease until <time>Z)``, for error messages."""
    host, pid = _parts(owner)
    until = f" (lease until {expires_at:%Y-%m-%d %H:%M:%S}Z)" if expires_at else ""
    return f"process {pid} on host {host!r}{until}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    try:  # a killed child not yet reaped still answers signal 0
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def owner_is_dead(owner: str) -> bool:
    """Whether ``owner`` is a process of this host that no longer runs.

    A process id now held by a process that started at another time than the owner did
    (the id reused, by this process too) is the owner's death; an owner id without its
    start time (written by earlier versions) that names this process is taken as alive.
    """
    host, pid = _parts(owner)
    if host != socket.gethostname() or pid is None:
        return False
    started = _started(owner)
    if pid == os.getpid():
        return started is not None and started != start_ticks(pid)
    if not pid_alive(pid):
        return True
    now = start_ticks(pid)
    return started is not None and now is not None and now != started
