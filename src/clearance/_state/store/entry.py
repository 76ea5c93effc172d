"""`StoreEntry`, one entry of the context store, and the checks of what is written."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clearance._core.errors import ConfigError

__all__ = [
    "DEFAULT_EXTENSION_TTL_S",
    "MAX_TTL_S",
    "StoreEntry",
    "check_names",
    "check_text",
    "check_ttl",
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
    """

    namespace: str
    key: str
    value: str
    agent: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None

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
        }


MAX_TTL_S = 100 * 365 * 24 * 3600.0
"""Longest TTL accepted, in seconds (100 years); use ``None`` for an entry that never expires.
A larger or infinite TTL would overflow the expiry timestamp."""


def check_ttl(ttl_s: float | None, field: str = "ttl_s") -> None:
    if ttl_s is not None and not 0 < ttl_s <= MAX_TTL_S:  # NaN and infinity too
        raise ConfigError(
            f"must be a positive number of seconds up to {MAX_TTL_S:.0f} (100 years; "
            f"none for never), got {ttl_s!r}",
            field=field,
        )


def check_text(**fields: str) -> None:
    """Refuse text no database driver can encode (lone surrogates), naming the field."""
    for name, value in fields.items():
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(
                    f"{value!r} is not valid UTF-8 (it holds a lone surrogate)", field=name
                ) from None


def check_names(**fields: str) -> None:
    """Refuse an empty namespace or key (an entry nobody could name), naming the field."""
    for name, value in fields.items():
        if value == "":
            raise ConfigError("must not be empty", field=name)
