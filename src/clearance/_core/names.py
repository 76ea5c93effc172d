"""Checks on the values specs hold when callers build them in Python.

Names, text, lists of names and numbers. A team file is checked by its pydantic models
(`clearance._core.teamfile_models`); these checks give a spec built in Python the same
one-line `ConfigError`, instead of a spec that holds ``True`` for a count or a string spelled
out letter by letter as a list of ids.
"""

from __future__ import annotations

import math
import re
import sys
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from clearance._core.errors import ConfigError

__all__ = [
    "MAX_LABEL_CHARS",
    "check_count",
    "check_label",
    "check_name",
    "check_number",
    "check_text",
    "check_tool_name",
    "check_utf8",
    "reserved_tool_name",
    "shown_number",
    "text_tuple",
    "title_key",
]

_FLOAT_MAX = sys.float_info.max

MAX_LABEL_CHARS = 300
"""Most characters of a one-line label: a task's title, a team's name."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters that break a line or the terminal: C0 and C1 controls, line separators."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def check_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
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


def check_text(field: str, value: object, *, optional: bool = False) -> None:
    """Refuse a value that is not a string (``None`` too, unless ``optional``).

    Raises:
        ConfigError: Naming ``field`` and the type given.
    """
    if not (isinstance(value, str) or (optional and value is None)):
        raise ConfigError(f"must be text, got {_kind(value)}", field=field)


def text_tuple(field: str, value: object) -> tuple[str, ...]:
    """``value`` (a list, tuple or other iterable of strings) as a tuple.

    A string is refused, not read as its letters: ``depends_on="ab"`` is a mistake for
    ``("ab",)``, never ``("a", "b")``.

    Raises:
        ConfigError: ``value`` is a string, a mapping or not iterable, or holds a non-string.
    """
    if type(value) is tuple and all(type(v) is str for v in value):
        return value  # the common case, kept as it is
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"must be a list of strings, got {_kind(value)}", field=field)
    items = tuple(value)
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"must be a list of strings, it holds {_kind(item)}", field=field)
    return items


def check_label(field: str, value: object, *, most: int = MAX_LABEL_CHARS) -> None:
    """Refuse a label that is not one short line of text.

    A title or a name is shown on one line (the graph, ``clearance runs``, prompts' headings
    and labels): a newline in it would forge a line of its own there.

    Raises:
        ConfigError: ``value`` is not text, is empty or blank, holds a control character
            (newline, tab, NUL, escape...) or a line separator, or is over ``most``
            characters.
    """
    check_text(field, value)
    assert isinstance(value, str)
    if not value.strip():
        raise ConfigError("is empty", field=field)
    if (found := _CONTROL.search(value)) is not None:
        raise ConfigError(
            f"must be one line of text: it holds the control character {found.group()!r}",
            field=field,
        )
    if len(value) > most:
        raise ConfigError(f"is {len(value):,} characters, over {most}", field=field)


def title_key(title: str) -> str:
    """What a title reads as: NFKC, ignoring case and invisible format characters (``Cf``).

    Two tasks whose titles have one key are results no one can tell apart where they are
    labelled (dependents' prompts, the synthesis): another normalization form of one word,
    a zero-width character or full-width letters read alike. The one rule for team files
    and plans.
    """
    if title.isascii():  # NFKC leaves ASCII as it is, and no ASCII character is a format one
        return title.lower()  # casefold() of ASCII
    shown = unicodedata.normalize("NFKC", title)
    return "".join(c for c in shown if unicodedata.category(c) != "Cf").casefold()


def check_count(field: str, value: object, *, least: int, most: int | None = None) -> int:
    """Refuse anything but an integer from ``least`` to ``most`` (``bool`` is no integer here).

    Returns:
        ``value``, checked.

    Raises:
        ConfigError: Naming ``field``, the bounds and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, got {_kind(value)}", field=field)
    if value < least or (most is not None and value > most):
        bounds = f"at least {least}" if most is None else f"from {least} to {most}"
        raise ConfigError(f"must be an integer {bounds}, got {shown_number(value)}", field=field)
    return value


def check_number(field: str, value: object) -> None:
    """Refuse anything but a finite ``int`` or ``float`` (not ``bool``); bounds are the caller's.

    Raises:
        ConfigError: Naming ``field`` and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"must be a number, got {_kind(value)}", field=field)
    # An integer past a float's range is as good as infinite to every caller (and has no text
    # past 4,300 digits).
    if not (math.isfinite(value) if isinstance(value, float) else abs(value) <= _FLOAT_MAX):
        raise ConfigError(f"must be a finite number, got {shown_number(value)}", field=field)


def check_seconds(field: str, value: object, *, most: float) -> float:
    """``value`` as a duration in seconds, checked: a number above 0 and at most ``most``.

    Raises:
        ConfigError: Not a number (``True``, text and NaN included), not above 0, or above
            ``most``; the message names ``field`` and the value given.
    """
    check_number(field, value)
    assert isinstance(value, int | float)
    if not 0 < value <= most:
        raise ConfigError(
            f"must be a number of seconds above 0 and at most {most:g}, got {shown_number(value)}",
            field=field,
        )
    return float(value)


def shown_number(value: float) -> str:
    """A number as an error message shows it: an integer past 10**30 by its size in bits.

    Python gives no text for an integer of more than 4,300 digits (``ValueError``), and a
    one-line error has no room for one of thirty.
    """
    if isinstance(value, int) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    return f"{value!r:.80}"


def _kind(value: Any) -> str:
    """What was given, for a message: a bool or ``None`` as itself, else its type."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        return "a string"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
"""A function name every provider takes (OpenAI's and Anthropic's tool-name rules)."""


def reserved_tool_name(name: str) -> bool:
    """Whether ``name`` is a built-in tool's (``store_*``, ``write_output``, ``delegate``...)."""
    return name.startswith("store_") or name in ("write_output", "read_output", "delegate", "spawn")


def check_tool_name(name: object, *, field: str, builtin: bool = True) -> None:
    """Refuse a user tool's name as a team file's ``tools:`` refuses it.

    Args:
        name: The name a model would call the tool by.
        field: Where the name was given, for the error.
        builtin: Whether a built-in tool's name (`reserved_tool_name`) is refused too: an
            agent listing it gets the built-in tool, never this one.

    Raises:
        ConfigError: It is not 1-64 letters, digits, ``_`` or ``-`` starting with a letter
            or ``_`` (a function name every provider takes), or it is a built-in tool's.
    """
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise ConfigError(
            "a tool's name is what a model calls: 1-64 letters, digits, '_' or '-', "
            "starting with a letter or '_'",
            field=field,
        )
    if builtin and reserved_tool_name(name):
        raise ConfigError(
            "is the name of a built-in tool, which an agent listing it always gets: "
            "give the function another name",
            field=field,
        )
