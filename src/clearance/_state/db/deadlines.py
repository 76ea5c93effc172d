"""Deadlines for a PostgreSQL server's answers, beyond the one to connect.

A server that accepted the connection and then stops answering (a frozen backend, a
network path that drops every packet from then on) leaves the client's kernel seeing an
open connection: a statement would wait for ever, and with it a run's ledger writer.
Two bounds, from one setting (`QUERY_TIMEOUT_S`, or the URL's ``?query_timeout=N``):

* the server's ``statement_timeout``: a statement running longer is cancelled by the
  server itself (an error; the connection stays usable);
* the client's own (`answer_deadline_s`: a little longer, so a healthy server always
  answers first): on psycopg, each wait for the server's answer (a statement, a commit, a
  rollback) that outlasts it shuts the connection's socket down, which ends the wait with
  an error naming the deadline; the connection is then discarded.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import URL

__all__ = [
    "MAX_QUERY_TIMEOUT_S",
    "QUERY_TIMEOUT_S",
    "answer_deadline_s",
    "answering_connect",
    "is_unanswered",
    "query_timeout_s",
]

QUERY_TIMEOUT_S = 120
"""Seconds a PostgreSQL statement may run before the server cancels it, unless the URL sets
its own (``?query_timeout=600``); the client gives up on an answer a little later
(`answer_deadline_s`). Far beyond any statement Clearance sends (a group of ledger writes or
a read of one run takes milliseconds to seconds), yet a bound."""

MAX_QUERY_TIMEOUT_S = 86_400
"""Longest ``query_timeout`` a PostgreSQL URL may set, in seconds (a day)."""


def query_timeout_s(url: URL) -> int:
    """The ``query_timeout`` of a PostgreSQL URL (whole seconds), or `QUERY_TIMEOUT_S`.

    Raises:
        ValueError: It is not whole seconds from 1 to `MAX_QUERY_TIMEOUT_S` (0 would be
            no deadline at all), or it is given twice.
    """
    given = url.query.get("query_timeout")
    if given is None:
        return QUERY_TIMEOUT_S
    text = given if isinstance(given, str) else ",".join(given)
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_QUERY_TIMEOUT_S):
        raise ValueError(
            f"query_timeout must be whole seconds from 1 to {MAX_QUERY_TIMEOUT_S}, got {text!r}"
        )
    return int(text)


def answer_deadline_s(query_timeout: int) -> float:
    """How long the client waits for one answer: ``query_timeout`` and up to 10 s more."""
    return float(query_timeout + min(10, query_timeout))


class _Armed:
    __slots__ = ("deadline", "fired", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.fired = False


class _Watchdog:
    """One daemon thread that shuts down the sockets whose wait outlasted its deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, _Armed] = {}
        self._thread: threading.Thread | None = None

    def arm(self, fileno: int, seconds: float) -> _Armed:
        # A duplicate of the descriptor: should another thread close the connection
        # meanwhile, its number may be reused, but this one still names the same socket.
        armed = _Armed(socket.socket(fileno=os.dup(fileno)), time.monotonic() + seconds)
        with self._cond:
            earliest = min((a.deadline for a in self._armed.values()), default=None)
            self._armed[id(armed)] = armed
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="clearance-db-deadlines", daemon=True
                )
                self._thread.start()
            elif earliest is None or armed.deadline < earliest:
                self._cond.notify()
        return armed

    def disarm(self, armed: _Armed) -> bool:
        """Stop watching ``armed``; whether its deadline had passed (its socket shut down)."""
        with self._cond:
            self._armed.pop(id(armed), None)
            fired = armed.fired
        armed.sock.close()
        return fired

    def _watch(self) -> None:
        with self._cond:
            while True:
                if not self._armed:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                earliest = min(a.deadline for a in self._armed.values())
                if earliest > now:
                    self._cond.wait(earliest - now)
                    continue
                for key, armed in list(self._armed.items()):
                    if armed.deadline <= now:
                        del self._armed[key]
                        armed.fired = True
                        # The wait ends at once (OSError: closed already, so it has ended).
                        with contextlib.suppress(OSError):
                            armed.sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()


class _Unanswered(Exception):
    """Marks the error of a wait that outlasted its deadline (see `is_unanswered`)."""


def is_unanswered(exc: BaseException) -> bool:
    """Whether ``exc`` is a wait for the server that outlasted `answering_connect`'s deadline."""
    return isinstance(exc, _Unanswered)


def answering_connect(seconds: float) -> Callable[..., Any]:
    """A ``do_connect`` handler making psycopg connections that wait ``seconds`` per answer.

    Each wait of the connection for the server (`psycopg.Connection.wait`, through which
    every statement, commit and rollback goes) that lasts longer ends with
    ``psycopg.OperationalError`` naming the deadline, and the connection is broken (the
    pool discards it).
    """
    import psycopg

    class _NoAnswer(psycopg.OperationalError, _Unanswered):
        pass

    class _AnsweringConnection(psycopg.Connection):
        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            armed = _WATCHDOG.arm(self.pgconn.socket, seconds)
            try:
                result = super().wait(gen, *args, **kwargs)
            except psycopg.OperationalError as exc:
                if _WATCHDOG.disarm(armed):
                    raise _NoAnswer(
                        f"the server did not answer within {seconds:g} s "
                        "(the URL's query_timeout sets this deadline)"
                    ) from exc
                raise
            except BaseException:
                _WATCHDOG.disarm(armed)
                raise
            _WATCHDOG.disarm(armed)
            return result

    def do_connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        return _AnsweringConnection.connect(*cargs, **cparams)

    return do_connect
