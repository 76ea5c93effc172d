"""The rules of the context store that a team file is checked against before a run.

`MIN_TTL_S` and `MAX_TTL_S`, the shortest and longest an entry may live (`check_ttl`), and
`check_grant_pattern`, the form of a store grant's namespace pattern: the store
(`clearance._state.store`, `clearance._state.grants`) and the agent spec (``store_grants``,
``store_read_extends_ttl_s``) apply the same ones.
"""

from __future__ import annotations

from clearance._core.errors import ConfigError
from clearance._core.names import shown_number

__all__ = ["MAX_NAMESPACE_CHARS", "MAX_TTL_S", "MIN_TTL_S", "check_grant_pattern", "check_ttl"]

MAX_NAMESPACE_CHARS = 255
"""Longest namespace written, in characters (the column's size on PostgreSQL)."""

MAX_TTL_S = 100 * 365 * 24 * 3600.0
"""Longest TTL accepted, in seconds (100 years); use ``None`` for an entry that never expires.
A larger or infinite TTL would overflow the expiry timestamp."""

MIN_TTL_S = 1e-6
"""Shortest TTL accepted, in seconds: one microsecond, the resolution of expiry times (a
shorter one would round to an entry written already expired)."""


def check_grant_pattern(pattern: object, *, field: str) -> None:
    """Refuse a store grant pattern that is not a namespace or a prefix followed by ``*``.

    ``"facts"`` grants the namespace ``facts`` only; ``"team/*"`` every namespace starting
    with ``team/``; ``"*"`` every namespace. A ``*`` anywhere but at the end would be
    taken literally, so it is refused.

    A grant no namespace can match is refused too: one holding a NUL character or a lone
    surrogate (no namespace holds one, and a search over it would fail), or longer than
    `MAX_NAMESPACE_CHARS` before its ``*``.

    Raises:
        ConfigError: ``pattern`` is empty, not text, or holds a ``*`` before its end, or
            no namespace can match it (``field`` names it).
    """
    if not isinstance(pattern, str) or not pattern or "*" in pattern[:-1]:
        raise ConfigError(
            "a grant is a namespace, or a namespace prefix followed by '*'", field=field
        )
    name = pattern.removesuffix("*")
    if "\x00" in name or len(name) > MAX_NAMESPACE_CHARS or not _utf8(name):
        raise ConfigError(
            f"no namespace can match this grant: a namespace holds no NUL character or lone "
            f"surrogate and is at most {MAX_NAMESPACE_CHARS} characters long",
            field=_shown_field(field),
        )


def _utf8(text: str) -> bool:
    """Whether ``text`` is valid UTF-8 (holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown_field(field: str) -> str:
    """``field`` cut to about 120 characters (a grant may be long), its NULs escaped."""
    shown = field if len(field) <= 120 else field[:117] + "..."
    return shown.replace("\x00", "\\x00")


def check_ttl(ttl_s: float | None, field: str = "ttl_s") -> None:
    """Refuse a TTL that is not a number of seconds from `MIN_TTL_S` to `MAX_TTL_S`.

    ``None`` (never expires) is accepted.

    Raises:
        ConfigError: Not a number (text, a bool), NaN, infinite, under `MIN_TTL_S` (an entry
            written already expired) or past `MAX_TTL_S` (``field`` names it).
    """
    if ttl_s is None:
        return
    number = isinstance(ttl_s, (int, float)) and not isinstance(ttl_s, bool)
    if not number or not MIN_TTL_S <= ttl_s <= MAX_TTL_S:  # NaN and infinity too
        shown = shown_number(ttl_s) if number else f"{ttl_s!r:.80}"
        raise ConfigError(
            f"must be a positive number of seconds from {MIN_TTL_S:g} up to {MAX_TTL_S:.0f} "
            f"(100 years; none for never), got {shown}",
            field=field,
        )
