"""What every command shares: the consoles, the one-line error handling and output files."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
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
    "safe_line",
    "safe_lines",
    "safe_text",
    "write_output_file",
]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and
# isolates that make text display in another order than it is stored.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What `safe` puts for each of them: its escape as Python writes it (ESC becomes \x1b).
_ESCAPES = {
    code: chr(code).encode("unicode_escape").decode("ascii")
    for code in (
        *range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0),
        *range(0x202A, 0x202F), *range(0x2066, 0x206A),
    )
}  # fmt: skip


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
    text = str(text)
    # One pass of str.translate: a substitution per match made a Python call and a string
    # for each, so 50 MB of escape characters (a hand-edited store value) took a minute and
    # gigabytes; this is linear and builds only the result.
    return text.translate(_ESCAPES) if _UNSAFE.search(text) else text


_SEPARATORS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029"})
"""The line and paragraph separators `safe` leaves, and their escapes."""


def safe_lines(text: object) -> str:
    r"""`safe`, and the line and paragraph separators (U+2028, U+2029) shown escaped too.

    For text from outside printed as lines (a model's answer in a box, behind a gutter or
    after a ``subject |`` label): a terminal draws the separators as nothing, but an editor,
    a log viewer or ``str.splitlines`` breaks the line there, and the rest would stand
    outside the box or the gutter, where it could pass for a line of Clearance's own. NEL
    (U+0085) is a C1 control, escaped by `safe`. A newline is the one line break left.
    """
    return safe(text).translate(_SEPARATORS)


def safe_text(text: object) -> Text:
    """`safe_lines` text as a rich `Text`, which rich prints as is (no markup is interpreted)."""
    return Text(safe_lines(text))


def safe_line(text: object) -> Text:
    r"""`safe_text` on one line: a newline shown as ``\n`` too.

    For a line that quotes text from outside (a verify finding naming a recorded origin, a
    server's error body): a line break in it would start a line of its own, which could pose
    as the command's own (``run ...: verified``). The line and paragraph separators (U+2028,
    U+2029) count too (`safe_lines`): an editor, a log viewer or ``str.splitlines`` breaks
    the line there.
    """
    return Text(safe_lines(text).replace("\n", "\\n"))


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
        try:
            _check_output_file(flag, target, seen)
        except OSError as exc:  # a name the system refuses: too long, a loop of links...
            reason = exc.strerror or type(exc).__name__
            raise ConfigError(f"cannot write {str(target)!r}: {reason}", field=flag) from None


def _check_output_file(flag: str, target: Path, seen: dict[Path, str]) -> None:
    """`check_output_files` for one file (``seen``: the files named so far)."""
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
# Create without following a link at the name, without waiting for a FIFO's reader, and
# without taking a name something else already holds.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK
_CREATE_FLAGS |= os.O_NOCTTY | os.O_CLOEXEC


def _not_writable(info: os.stat_result) -> str | None:
    """Why `write_output_file` would not overwrite this file, or ``None``."""
    if stat.S_ISFIFO(info.st_mode):
        return "it is a FIFO, not a regular file"
    if not stat.S_ISREG(info.st_mode):
        return _NOT_REGULAR
    if info.st_nlink != 1:
        return "it has another hard link: writing it would change that file too"
    return None


def write_output_file(
    target: Path, text: str, *, flag: str, after: str = "", exists: str | None = None
) -> None:
    """Write ``text`` (UTF-8) to the file an option names; never through a link or in part.

    A new file is created with ``O_EXCL`` (so nothing planted at the name is followed or
    taken over) and removed again if the write fails. An existing file is never cut: the
    text goes to a new file beside it, which then replaces it in one step (a rename, which
    does not follow a link either), keeping its permission bits; a full disk or a
    file-size limit leaves the earlier file as it was. What is at the name is checked just
    before: a symbolic link, a FIFO, a device, a file with a second hard link (another file
    under another name) or a file the user may not write are refused, even when planted
    after `check_output_files`. The folders on the way are the user's and are followed.

    Args:
        target: The file.
        text: Its new content.
        flag: The option that named it, for the error.
        after: Appended to the error (what is kept all the same, say).
        exists: ``None``: an existing regular file is replaced. Otherwise nothing at the
            name is replaced, even something that appears meanwhile; the error is this
            message.

    Raises:
        ConfigError: The file cannot be written: the system's reason, or what is at the name
            (a link, a FIFO, a file with another link, or anything when ``exists`` is given);
            ``field`` is ``flag``.
    """

    def refused(reason: str) -> ConfigError:
        return ConfigError(f"cannot write {str(target)!r}: {reason}{after}", field=flag)

    data = text.encode("utf-8")
    try:
        fd = os.open(target, _CREATE_FLAGS, 0o666)
    except FileExistsError:
        if exists is not None:
            raise ConfigError(exists, field=flag) from None
        _replace(target, data, refused)
        return
    except OSError as exc:
        raise refused(exc.strerror or type(exc).__name__) from None
    try:
        _write_all(fd, data)
    except OSError as exc:
        _remove_own(target, fd)
        raise refused(exc.strerror or type(exc).__name__) from None
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` and sync it to the disk."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _replace(target: Path, data: bytes, refused: Callable[[str], ConfigError]) -> None:
    """Replace the existing regular file ``target`` with ``data`` in one step."""
    try:
        info = os.stat(target, follow_symlinks=False)
    except OSError as exc:
        raise refused(exc.strerror or type(exc).__name__) from None
    if stat.S_ISLNK(info.st_mode):
        raise refused(f"it {_LINKED}")
    if (problem := _not_writable(info)) is not None:
        raise refused(problem)
    if not os.access(target, os.W_OK, follow_symlinks=False):  # read-only: kept so
        raise refused(os.strerror(errno.EACCES))
    temp = target.with_name(f".{secrets.token_hex(8)}.clearance-tmp")
    try:
        fd = os.open(temp, _CREATE_FLAGS, stat.S_IMODE(info.st_mode))
        try:
            os.fchmod(fd, stat.S_IMODE(info.st_mode))
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except OSError as exc:
        raise refused(exc.strerror or type(exc).__name__) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)  # gone already once renamed into place


def _remove_own(target: Path, fd: int) -> None:
    """Remove ``target`` if it is still the file open as ``fd`` (the one this run created)."""
    with contextlib.suppress(OSError):
        if os.path.samestat(os.fstat(fd), os.stat(target, follow_symlinks=False)):
            os.unlink(target)
