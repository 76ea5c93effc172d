"""What every command shares: the consoles, the one-line error handling and output files."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
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
        ConfigError: A file's folder does not exist; the file is a folder, a symbolic link,
            something other than a regular file (a FIFO would block the write), or a file
            with another hard link (see `write_output_file`); or two options name the same
            file (one would overwrite the other); ``field`` is the option.
    """
    seen: dict[Path, str] = {}
    for flag, target in targets.items():
        if target is None:
            continue
        if not target.parent.is_dir():
            raise ConfigError(f"folder {str(target.parent)!r} does not exist", field=flag)
        if target.is_symlink():
            raise ConfigError(f"{str(target)!r} {_LINKED}", field=flag)
        if target.is_dir():
            raise ConfigError(f"{str(target)!r} is a folder; give a file name", field=flag)
        if target.exists() and (problem := _not_writable(target.stat())) is not None:
            raise ConfigError(f"{str(target)!r}: {problem}", field=flag)
        same = seen.setdefault(target.resolve(), flag)
        if same != flag:
            raise ConfigError(f"{same} and {flag} both name {str(target)!r}", field=flag)


_LINKED = "is a symbolic link, which is not followed: give another name or remove the link"
_NOT_REGULAR = "it is not a regular file (a FIFO, socket or device)"
# Open to write without following a link at the name, without waiting for a FIFO's reader,
# and without cutting the file before it is known to be a regular file with one link.
_OPEN_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _not_writable(info: os.stat_result) -> str | None:
    """Why `write_output_file` would not overwrite this file, or ``None``."""
    if stat.S_ISFIFO(info.st_mode):
        return "it is a FIFO, not a regular file"
    if not stat.S_ISREG(info.st_mode):
        return _NOT_REGULAR
    if info.st_nlink != 1:
        return "it has another hard link: writing it would change that file too"
    return None


def write_output_file(target: Path, text: str, *, flag: str, after: str = "") -> None:
    """Write ``text`` (UTF-8) to the file an option names; never through a link.

    The name is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK`` and checked before anything is
    cut or written: a symbolic link planted at the name (even after `check_output_files`)
    is not followed, a FIFO does not block, and a file with a second hard link (another
    file under another name) is not overwritten. A file this call created is removed again
    if the write fails. The folders on the way are the user's and are followed.

    Args:
        target: The file.
        text: Its new content.
        flag: The option that named it, for the error.
        after: Appended to the error (what is kept all the same, say).

    Raises:
        ConfigError: The file cannot be written: the system's reason, or what is at the name
            (a link, a FIFO, a file with another link); ``field`` is ``flag``.
    """

    def refused(reason: str) -> ConfigError:
        return ConfigError(f"cannot write {str(target)!r}: {reason}{after}", field=flag)

    created = True
    try:
        try:
            fd = os.open(target, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            created = False
            fd = os.open(target, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refused(f"it {_LINKED}") from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader, a socket, a missing device
            raise refused(_NOT_REGULAR) from None
        raise refused(exc.strerror or type(exc).__name__) from None
    try:
        if (problem := _not_writable(os.fstat(fd))) is not None:
            raise refused(problem)
        os.ftruncate(fd, 0)
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data) :]
    except OSError as exc:
        if created:
            _remove_own(target, fd)
        raise refused(exc.strerror or type(exc).__name__) from None
    finally:
        os.close(fd)


def _remove_own(target: Path, fd: int) -> None:
    """Remove ``target`` if it is still the file open as ``fd`` (the one this run created)."""
    with contextlib.suppress(OSError):
        if os.path.samestat(os.fstat(fd), os.stat(target, follow_symlinks=False)):
            os.unlink(target)
