"""What every command shares: the consoles and the one-line error handling."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from clearance._core.errors import ClearanceError

__all__ = ["err", "one_line_errors", "out"]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(func: F) -> F:
    """Turn a `ClearanceError` into one line on stderr and exit code 2, no traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ClearanceError as exc:
            # One line even when the message quotes input holding line breaks.
            message = "\\n".join(str(exc).splitlines())
            err.print(Text(f"error: {message}"), soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
