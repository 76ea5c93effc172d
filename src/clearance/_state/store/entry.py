"""`StoreEntry`, one entry of the context store, and the checks of what is written."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clearance._core.errors import ConfigError, MalformedRecord
from clearance._core.prompt import sha256_text
from clearance._core.store_rules import MAX_NAMESPACE_CHARS, MAX_TTL_S, MIN_TTL_S, check_ttl

__all__ = [
    "DEFAULT_EXTENSION_TTL_S",
    "MAX_AGENT_CHARS",
    "MAX_KEY_CHARS",
    "MAX_NAMESPACE_CHARS",
    "MAX_NAME_BYTES",
    "MAX_TTL_S",
    "MAX_VALUE_BYTES",
    "MIN_TTL_S",
    "StoreEntry",
    "check_name_bytes",
    "check_names",
    "check_store_entry",
    "check_text",
    "check_ttl",
    "entry_of_row",
    "malformed_entry",
    "read_record",
]

DEFAULT_EXTENSION_TTL_S = 90 * 24 * 3600
"""Expiry pushed forward by `ContextStore.set_with_extension` and `touch`: 90 days, in s."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreEntry:
    """One live entry of the store.

    Attributes:
        namespace: Its namespace.
        key: Its key within the namespace.
        value: The text stored.
        agent: The agent (or operator) that last wrote it.
        created_at: First write (aware UTC).
        updated_at: Last write (aware UTC).
        expires_at: When it stops being visible (aware UTC), ``None`` for never.
        version: How many times it was written: 1 when created (or written over an expired
            entry), one more at each write since (`ContextStore.touch` is no write). Unlike
            ``updated_at``, two writes never share it, even within one tick of the clock.
    """

    namespace: str
    key: str
    value: str
    agent: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    version: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (times in ISO 8601)."""
        return {
            "namespace": self.namespace,
            "key": self.key,
            "value": self.value,
            "agent": self.agent,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "version": self.version,
        }


def read_record(entry: StoreEntry) -> dict[str, Any]:
    """What the ledger records of a read of ``entry`` (a tool call's ``store_reads``).

    Its namespace, key, the digest of its value, ``updated_at``, version and writer: what
    ``clearance verify`` checks a prompt's ``store:`` item against, and with ``--store``
    whether the entry is still the version read.
    """
    return {
        "namespace": entry.namespace,
        "key": entry.key,
        "sha256": sha256_text(entry.value),
        "updated_at": entry.updated_at.isoformat(),
        "version": entry.version,
        "writer": entry.agent,
    }


MAX_KEY_CHARS = 1024
"""Longest key written, in characters (the column's size on PostgreSQL)."""

MAX_AGENT_CHARS = 255
"""Longest agent name recorded with an entry, in characters (the column's size)."""

MAX_NAME_BYTES = 2_600
"""Most bytes of UTF-8 a namespace and its key take together: PostgreSQL's index on them
(the primary key) holds at most 2,704 bytes a row, about 20 more than the two texts, and
refuses a longer name that does not compress (255 and 1,024 characters of 4 bytes each are
5,116 bytes). SQLite would keep it, so both refuse it."""

MAX_VALUE_BYTES = 1_000_000_000
"""Largest value written, in bytes of UTF-8: SQLite's default longest string, a little under
PostgreSQL's 1 GB for one text. A value over it is refused before it is sent (the driver
would fail on it, past 2 GiB with an error that is not the database's)."""

_MAX_CHARS = {"namespace": MAX_NAMESPACE_CHARS, "key": MAX_KEY_CHARS, "agent": MAX_AGENT_CHARS}


def check_text(**fields: str) -> None:
    """Refuse what no database driver stores as text, naming the field.

    Raises:
        ConfigError: A value is not a string, or holds a NUL character (PostgreSQL text
            cannot), or a lone surrogate (not valid UTF-8).
    """
    for name, value in fields.items():
        if not isinstance(value, str):
            raise ConfigError(f"must be text, got {type(value).__name__}", field=name)
        if "\x00" in value:
            raise ConfigError(
                "holds a NUL character, which a store cannot keep in text", field=name
            )
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(
                    f"{value!r:.80} is not valid UTF-8 (it holds a lone surrogate)", field=name
                ) from None


def check_store_entry(
    namespace: str, key: str, value: str, agent: str, ttl_s: float | None = None
) -> None:
    """Every check a write of this entry makes before it reaches the database.

    `ContextStore.set` makes them; ``clearance store set`` makes them before the store is
    opened (or created), so a write it refuses leaves no file behind.

    Raises:
        ConfigError: ``value`` is not text, an argument is not text a driver stores
            (`check_text`), a name is empty or too long or the value too large
            (`check_names`), the namespace and key are too large together
            (`check_name_bytes`), or ``ttl_s`` is out of range (`check_ttl`).
    """
    if not isinstance(value, str):
        raise ConfigError(
            f"a store value must be text, got {type(value).__name__} (encode JSON first)",
            field="value",
        )
    check_text(namespace=namespace, key=key, value=value, agent=agent)
    check_names(namespace=namespace, key=key, agent=agent, value=value)
    check_name_bytes(namespace, key)
    check_ttl(ttl_s)


def check_name_bytes(namespace: str, key: str) -> None:
    """Refuse a namespace and key over `MAX_NAME_BYTES` of UTF-8 together.

    Raises:
        ConfigError: Their size together is over the limit (``field`` is ``key``).
    """
    if len(namespace) + len(key) <= MAX_NAME_BYTES // 4:  # the common case: no encoding
        return
    size = len(namespace.encode("utf-8", "surrogatepass")) + len(
        key.encode("utf-8", "surrogatepass")
    )
    if size > MAX_NAME_BYTES:
        raise ConfigError(
            f"with its namespace is {size:,} bytes of UTF-8, over the limit of "
            f"{MAX_NAME_BYTES:,} for the two together",
            field="key",
        )


def check_names(**fields: str) -> None:
    """Refuse a name an entry cannot be written under, naming the field.

    An empty namespace or key (an entry nobody could name), or a namespace, key or agent
    longer than its column (`MAX_NAMESPACE_CHARS`, `MAX_KEY_CHARS`, `MAX_AGENT_CHARS`; the
    same limit on SQLite as on PostgreSQL, which enforces it), or a value over
    `MAX_VALUE_BYTES`.

    Raises:
        ConfigError: As above.
    """
    for name, value in fields.items():
        if name == "value" and isinstance(value, str) and len(value) > MAX_VALUE_BYTES // 4:
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_VALUE_BYTES:
                raise ConfigError(
                    f"is {size:,} bytes of UTF-8, over the limit of {MAX_VALUE_BYTES:,}",
                    field=name,
                )
            continue
        if value == "" and name != "agent":
            raise ConfigError("must not be empty", field=name)
        most = _MAX_CHARS.get(name)
        if most is not None and isinstance(value, str) and len(value) > most:
            raise ConfigError(
                f"is {len(value):,} characters long, over the limit of {most:,}", field=name
            )


def entry_of_row(row: Any, where: str) -> StoreEntry:
    """The entry of a row (`entry_columns` order), refusing one edited into what is never written.

    SQLite keeps whatever a row edited by hand holds: a ``BLOB`` comes back as bytes, which
    an agent's prompt, the ledger's digest of what it read and the CLI cannot take.

    Args:
        row: namespace, key, value, agent, created_at, updated_at, expires_at, version.
        where: The store, for the message (``"the store at <url>"``).

    Raises:
        MalformedRecord: A text column holds bytes (or ``NULL``), or the version is not a
            whole number from 1.
    """
    namespace, key, value, agent, created_at, updated_at, expires_at, version = row
    if not (
        namespace.__class__ is str
        and key.__class__ is str
        and value.__class__ is str
        and agent.__class__ is str
        and version.__class__ is int
        and version >= 1
    ):
        raise malformed_entry(row, where)
    return StoreEntry(
        namespace=namespace,
        key=key,
        value=value,
        agent=agent,
        created_at=created_at,
        updated_at=updated_at,
        expires_at=expires_at,
        version=version,
    )


def malformed_entry(row: Any, where: str) -> MalformedRecord:
    """The error for a row read whose namespace, key, value or agent is not text.

    SQLite keeps whatever a row edited by hand holds: a ``BLOB`` comes back as bytes.

    Args:
        row: The row's namespace, key, value and agent (more columns may follow; the eighth,
            when there is one, is the version, a whole number from 1).
        where: The store, for the message (``"the store at <url>"``).
    """
    names = ("namespace", "key", "value", "agent")
    bad = [n for n, v in zip(names, row, strict=False) if v.__class__ is not str]
    problem = f"its {' and '.join(bad)} is not text" if bad else ""
    if len(row) > 7 and not (row[7].__class__ is int and row[7] >= 1):
        shown = f"{row[7]!r:.40}"
        problem += f"{'; ' if problem else 'its '}version {shown} is not a whole number from 1"
    entry = "/".join(v if v.__class__ is str else "?" for v in row[:2])
    return MalformedRecord(
        f"the entry {entry!r:.120} in {where} is malformed: {problem} (edited by hand?)"
    )
