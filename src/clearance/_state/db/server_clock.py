"""The database's clock, for times that several hosts compare: leases and store expiries.

A run's lease and a store entry's expiry are written by one process and judged by another,
perhaps on another host. On PostgreSQL each host's own clock would be compared with
another's: a host 40 s behind writes leases that look lapsed to everyone else (and a
resume elsewhere takes over a live run), and a host an hour behind writes entries that
expire an hour early. So every process reads these times on the database server's clock.

`ServerClock` is this host's clock plus the offset to the server's, measured when the
database is opened (with its schema version) and again at each lease renewal (`refresh`),
to within half a round trip (the estimate NTP's client-server mode makes, RFC 5905 §8,
from one sample). On SQLite, one file on one host, the host's clock is the database's.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.engine import Connection

from clearance._core.clock import utc_now
from clearance._core.errors import StoreError

__all__ = ["MAX_OFFSET", "ServerClock"]

MAX_OFFSET = timedelta(days=366)
"""Largest offset between this host's clock and the server's that is believed: beyond it,
one of the two clocks is wrong, and opening the database fails naming both times."""

_QUERY = text("SELECT clock_timestamp()")


class ServerClock:
    """This host's time moved onto a PostgreSQL server's clock (a `clearance._core.clock.Clock`).

    Call it for the current time on the server's clock (aware UTC `datetime`). The offset
    is kept between measurements; a measurement that fails keeps the last one.

    Args:
        label: What the database is (``"run ledger"``, ``"store"``), for errors.
        url: The database URL, password masked, for errors.
    """

    def __init__(self, *, label: str, url: str) -> None:
        self._label = label
        self._url = url
        self._offset = timedelta(0)

    @property
    def offset(self) -> timedelta:
        """The server's clock less this host's, as last measured."""
        return self._offset

    def __call__(self) -> datetime:
        return utc_now() + self._offset

    def refresh(self, conn: Connection) -> None:
        """Measure the offset again on ``conn`` (one ``SELECT clock_timestamp()``).

        Raises:
            StoreError: The server's time is not a time, or is more than `MAX_OFFSET` from
                this host's (the message gives both); the last offset is kept.
            sqlalchemy.exc.SQLAlchemyError: The query failed (the caller's transaction
                reports it).
        """
        sent, sent_wall = time.monotonic(), utc_now()
        server = conn.execute(_QUERY).scalar()
        half_trip = timedelta(seconds=(time.monotonic() - sent) / 2)
        if not isinstance(server, datetime) or server.tzinfo is None:
            raise StoreError(
                f"cannot read the {self._label}'s clock at {self._url}: the server "
                f"answered {server!r} for clock_timestamp()"
            )
        local = sent_wall + half_trip
        offset = server.astimezone(UTC) - local
        if abs(offset) > MAX_OFFSET:
            raise StoreError(
                f"the {self._label} at {self._url} says the time is "
                f"{server.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z "
                f"and this host says {local:%Y-%m-%d %H:%M:%S}Z; set one of the two clocks right"
            )
        self._offset = offset
