"""What every command shares: the consoles, the one-line error handling and output files."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from clearance import ClearanceError, ConfigError

__all__ = [
    "check_output_files",
    "err",
    "one_line_errors",
    "out",
    "safe",
    "safe_text",
    "write_output_file",
]

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


def check_output_files(targets: dict[str, Path | None]) -> None:
    """Refuse, before any work, output files that cannot be written as asked.

    Args:
        targets: The file each option names (``{"--output": path}``), ``None`` when not given.

    Raises:
        ConfigError: A file's folder does not exist, the file is a folder, or two options
            name the same file (one would overwrite the other); ``field`` is the option.
    """
    seen: dict[Path, str] = {}
    for flag, target in targets.items():
        if target is None:
            continue
        if not target.parent.is_dir():
            raise ConfigError(f"folder {str(target.parent)!r} does not exist", field=flag)
        if target.is_dir():
            raise ConfigError(f"{str(target)!r} is a folder; give a file name", field=flag)
        same = seen.setdefault(target.resolve(), flag)
        if same != flag:
            raise ConfigError(f"{same} and {flag} both name {str(target)!r}", field=flag)


def write_output_file(target: Path, text: str, *, flag: str, after: str = "") -> None:
    """Write ``text`` (UTF-8) to the file an option names.

    Args:
        target: The file.
        text: Its new content.
        flag: The option that named it, for the error.
        after: Appended to the error (what is kept all the same, say).

    Raises:
        ConfigError: The file cannot be written (the system's reason; ``field`` is ``flag``).
    """
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"cannot write {str(target)!r}: {reason}{after}", field=flag) from None
