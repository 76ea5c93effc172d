"""`HeldConnections`: one SQLAlchemy connection per thread, kept between operations."""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from contextlib import suppress
from typing import Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, ResourceClosedError, SQLAlchemyError

__all__ = ["HeldConnections"]


_INHERITED: list[Any] = []
"""Connections and pools a forked child inherited: kept referenced and never closed there,
since closing a copy of an SQLite connection in the child can disturb the parent's."""

_holders: weakref.WeakSet[HeldConnections] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for holder in list(_holders):
        holder._abandon()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class HeldConnections:
    """One SQLAlchemy connection per thread, checked out once and kept between operations.

    Checking a connection out of the pool and back in for every operation costs more than
    running a short statement on SQLite, so each thread keeps its own. The engine's
    connections send no ``BEGIN`` when SQLAlchemy begins: a statement alone runs in
    autocommit (one ``SELECT`` is one consistent snapshot, seeing every write committed
    before it), and a write transaction starts with `begin_immediate` and ends with the
    connection's ``commit``.

    The connections of threads that have ended go back to the pool when another thread
    takes its first one, and all of them on `close`. In a child made by ``os.fork`` the
    parent's connections and pool are abandoned, neither used nor closed, and the child
    opens its own.

    Args:
        engine: An SQLite file engine configured without the ``begin`` event, whose pool
            does not limit its overflow (each thread holds one connection).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._local = threading.local()
        self._lock = threading.Lock()
        self._held: list[tuple[threading.Thread, Connection]] = []
        self._closed = False
        _holders.add(self)

    def connection(self) -> Connection:
        """This thread's connection (checked out on its first use)."""
        conn: Connection | None = getattr(self._local, "conn", None)
        return conn if conn is not None else self._hold()

    def driver_connection(self) -> sqlite3.Connection:
        """The ``sqlite3`` connection under this thread's `connection`."""
        dbapi: sqlite3.Connection | None = getattr(self._local, "dbapi", None)
        if dbapi is None:
            dbapi = self.connection().connection.dbapi_connection  # type: ignore[assignment]
            assert dbapi is not None
            self._local.dbapi = dbapi
        return dbapi

    def _hold(self) -> Connection:
        with self._lock:
            if self._closed:
                raise ResourceClosedError("the connections were closed")
            ended = [(t, c) for t, c in self._held if not t.is_alive()]
            self._held = [(t, c) for t, c in self._held if t.is_alive()]
            conn = self._engine.connect()
            self._held.append((threading.current_thread(), conn))
        self._local.conn = conn
        for _, old in ended:
            _close_quietly(old)
        return conn

    @staticmethod
    def begin_immediate(conn: Connection) -> None:
        """Start a write transaction on ``conn``, taking SQLite's write lock now.

        The statement goes to the DB-API connection directly, as the dialect's own commit
        and rollback do: through SQLAlchemy's statement execution it would cost more than a
        short write. A failure is wrapped the way SQLAlchemy wraps its own.

        Raises:
            SQLAlchemyError: The lock was not had within the busy timeout, or the database
                failed.
        """
        dialect = conn.dialect
        cursor = conn.connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except dialect.loaded_dbapi.Error as exc:
            raise DBAPIError.instance(
                "BEGIN IMMEDIATE", (), exc, dialect.loaded_dbapi.Error, dialect=dialect
            ) from exc
        finally:
            cursor.close()

    def release(self) -> None:
        """Give up this thread's connection (after a failure), rolling back what it holds."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = self._local.dbapi = None
        with self._lock:
            self._held = [(t, c) for t, c in self._held if c is not conn]
        _close_quietly(conn)

    def close(self) -> None:
        """Return every thread's connection to the pool.

        A thread still in an operation on its connection may see that operation fail.
        """
        with self._lock:
            held, self._held = self._held, []
            self._closed = True
        self._local = threading.local()
        for _, conn in held:
            _close_quietly(conn)

    def _abandon(self) -> None:
        """In a forked child: forget the parent's connections and pool without closing them."""
        _INHERITED.extend(c for _, c in self._held)
        _INHERITED.append(self._engine.pool)
        self._held = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._engine.dispose(close=False)


def _close_quietly(conn: Connection) -> None:
    """Close ``conn`` (rolling back any transaction), ignoring a failure to do so."""
    with suppress(SQLAlchemyError):
        conn.close()
