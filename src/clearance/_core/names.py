"""Checks on the names and text that specs hold."""

from __future__ import annotations

import re

from clearance._core.errors import ConfigError

__all__ = ["check_name", "check_utf8"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def check_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(
            f"{kind} {value!r} is not valid: use 1-128 letters, digits, '_', '.', ':' "
            "or '-', starting with a letter or digit"
        )


def check_utf8(field: str, *values: str) -> None:
    """Refuse text no later step could encode (lone surrogates, as in a non-UTF-8 file name)."""
    for value in values:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"{value!r} is not valid UTF-8 (it holds a lone surrogate)", field=field
            ) from None
