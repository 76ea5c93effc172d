"""What every command shares: the consoles and the one-line error handling."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from clearance import ClearanceError

__all__ = ["err", "one_line_errors", "out", "safe", "safe_text"]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and
# isolates that make text display in another order than it is stored.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def safe(text: object) -> str:
    r"""``text`` made harmless for a terminal: every control character is shown escaped.

    Model output, prompts, errors and results come from outside; printed raw, an escape
    sequence in them could set the terminal's title, clear the screen, plant a hyperlink or
    rewrite earlier lines. Each C0/C1 control character (tab and newline kept), DEL and each
    bidirectional override becomes its visible escape (ESC is printed as ``\x1b``), so the
    sequence is shown, not obeyed, and nothing is lost.

    Args:
        text: Anything; non-strings are turned into text with ``str``.

    Returns:
        The text with unsafe characters replaced by ``\xNN`` / ``\uNNNN`` escapes.
    """
    return _UNSAFE.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), str(text))


def safe_text(text: object) -> Text:
    """`safe` text as a rich `Text`, which rich prints as is (no markup is interpreted)."""
    return Text(safe(text))


def one_line_errors(func: F) -> F:
    """Turn a `ClearanceError` into one line on stderr and exit code 2, no traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ClearanceError as exc:
            # One line even when the message quotes input holding line breaks.
            message = "\\n".join(str(exc).splitlines())
            err.print(Text(f"error: {safe(message)}"), soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
