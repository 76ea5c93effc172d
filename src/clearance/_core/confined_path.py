"""Resolving a path beneath a root one component at a time, each opened with ``O_NOFOLLOW``.

The part of the confined file access (`clearance._core.confined`) that every read, write and
listing shares: `split_relative` checks a path given from outside, `Walker` opens its folders
relative to their parent's file descriptor and resolves symbolic links itself (within the
root, at most `MAX_SYMLINKS`), and `open_regular_file` opens the file at the end for reading
and refuses anything but a regular file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import PurePosixPath
from typing import NoReturn

from clearance._core.errors import ConfigError, PathEscapeError

__all__ = [
    "CONTROL_CHARACTER",
    "DIR_FLAGS",
    "FencedFolderError",
    "MAX_SYMLINKS",
    "READ_FLAGS",
    "WRITE_FLAGS",
    "Walker",
    "escape_controls",
    "folder_identities",
    "kind_name",
    "open_regular_file",
    "root_fd",
    "split_relative",
]

MAX_SYMLINKS = 40
"""Most symbolic links resolved for one path (the kernel's own limit on Linux)."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""Flags opening one folder on the way: never through a link."""
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""Flags opening a file to read: never through a link, never blocking on a FIFO."""
WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""Flags opening a file to write: never through a link, never blocking on a FIFO."""
# Errors an O_NOFOLLOW open gives on a symbolic link (Linux: ELOOP; BSDs: EMLINK; with
# O_DIRECTORY some systems say ENOTDIR).
LINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})

CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""A character that breaks a line or drives a terminal: C0 and C1 controls, DEL, line and
paragraph separators. No confined path may hold one (`split_relative`)."""


Identity = tuple[int, int]
"""A folder's ``(st_dev, st_ino)``: the same folder however a path spells it."""


class FencedFolderError(PathEscapeError):
    """A path leads into a fenced folder (`folder_identities`); ``reason`` says which."""


def folder_identities(
    folders: Iterable[tuple[str | os.PathLike[str], str]],
) -> dict[Identity, str]:
    """The identity of each ``(folder, reason)`` that exists (links followed), to its reason.

    What a confined read is given as ``fenced``: it refuses to open any folder whose identity
    is one of these, whichever path or link leads there (`FencedFolderError` with the
    folder's reason), so no check of a path name stands between the decision and the read.
    A folder that does not exist (yet) is left out.
    """
    found: dict[Identity, str] = {}
    for folder, reason in folders:
        try:
            st = os.stat(folder)
        except (OSError, ValueError):
            continue
        if stat.S_ISDIR(st.st_mode):
            found.setdefault((st.st_dev, st.st_ino), reason)
    return found


_SURROGATE = re.compile(r"[\ud800-\udfff]")
"""A lone surrogate: a byte of a name that is not UTF-8, as the system's listing gives it."""


def escape_controls(text: str) -> str:
    r"""``text`` with each `CONTROL_CHARACTER` as its visible escape (``\n``, ``\x1b``).

    For names read from a folder (never checked by `split_relative`) shown on one line of a
    prompt: a name holding a newline cannot add a line of its own. A byte of a name that is
    not UTF-8 (a lone surrogate, ``\udcff``, in the name listed) is shown as that byte,
    ``\xff``, so the text can be encoded: a prompt, its digest and the ledger can hold it.
    """
    if _SURROGATE.search(text) is not None:
        text = _SURROGATE.sub(_escape_surrogate, text)
    if CONTROL_CHARACTER.search(text) is None:
        return text
    return CONTROL_CHARACTER.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def _escape_surrogate(match: re.Match[str]) -> str:
    point = ord(match[0])
    return f"\\x{point - 0xDC00:02x}" if 0xDC80 <= point <= 0xDCFF else f"\\u{point:04x}"


def split_relative(rel: str, root: str | os.PathLike[str] = "") -> tuple[str, ...]:
    r"""Check a relative path given from outside and split it into components.

    ``.`` and empty components are dropped; ``\`` counts as a separator too, so a path
    written for Windows cannot hide a ``..``. A name holding a control character (a newline,
    an escape: `CONTROL_CHARACTER`) is refused too: it would forge a line wherever it is
    shown (a prompt's heading, the ledger, a terminal).

    Args:
        rel: The path, ``/``-separated, relative to ``root``.
        root: Named in errors.

    Returns:
        The components, possibly empty (``""`` and ``"."`` name the root itself).

    Raises:
        PathEscapeError: ``rel`` is absolute, holds a ``..`` component, a NUL byte or
            another control character, or is not valid Unicode (a name with lone
            surrogates).
    """
    where = os.fspath(root)
    if "\x00" in rel:
        raise PathEscapeError(rel, where, reason="it contains a NUL byte")
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise PathEscapeError(rel, where, reason="it is not valid UTF-8") from None
    if (found := CONTROL_CHARACTER.search(rel)) is not None:
        raise PathEscapeError(rel, where, reason=f"it holds the control character {found[0]!r}")
    normalized = rel.replace("\\", "/")
    if normalized.startswith("/") or PurePosixPath(normalized).is_absolute():
        raise PathEscapeError(rel, where, reason="it is absolute")
    if normalized[:1].isalpha() and normalized[1:2] == ":" and normalized[2:3] in ("", "/"):
        raise PathEscapeError(rel, where, reason="it is absolute")
    parts = tuple(p for p in normalized.split("/") if p not in ("", "."))
    if ".." in parts:
        raise PathEscapeError(rel, where, reason="it has a '..' component")
    return parts


@contextlib.contextmanager
def root_fd(root: str | os.PathLike[str]) -> Iterator[int]:
    """An fd of the folder ``root`` (trusted), closed on exit; `ConfigError` if it cannot open."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"folder {os.fspath(root)!r} does not exist") from None
    except NotADirectoryError:
        raise ConfigError(f"{os.fspath(root)!r} is not a folder") from None
    except OSError as exc:
        raise ConfigError(f"cannot open folder {os.fspath(root)!r}: {exc.strerror}") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _is_link(name: str, dir_fd: int) -> str | None:
    """The link's target, or ``None`` if ``name`` is not a symbolic link (any longer)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


class Walker:
    """Resolves components beneath a root file descriptor, holding one fd per level."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        root_fd: int,
        rel: str,
        follow: bool,
        fenced: Mapping[Identity, str] | None = None,
    ):
        self.root = os.fspath(root)
        self.rel = rel
        self.follow = follow
        self.fenced = fenced
        self.stack = [os.dup(root_fd)]
        self.hops = 0
        # An absolute link target may name the root by the path it was given or its real path.
        self.prefixes = {PurePosixPath(os.path.abspath(self.root)).parts,
                         PurePosixPath(os.path.realpath(self.root)).parts}  # fmt: skip

    def close(self) -> None:
        while self.stack:
            os.close(self.stack.pop())

    def escape(self, reason: str) -> PathEscapeError:
        return PathEscapeError(self.rel, self.root, reason=reason)

    def redirect(self, name: str, target: str, pending: list[str]) -> None:
        """Replace ``name`` (a link) by its target's components at the front of ``pending``."""
        if not self.follow:
            raise self.escape(f"{name!r} is a symbolic link, which is not followed here")
        self.hops += 1
        if self.hops > MAX_SYMLINKS:
            raise self.escape(f"more than {MAX_SYMLINKS} symbolic links")
        parts = PurePosixPath(target).parts
        if parts and parts[0] == "/":
            inside = next((p for p in self.prefixes if parts[: len(p)] == p), None)
            if inside is None:
                raise self.escape(f"{name!r} links outside it")
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            parts = parts[len(inside) :]
        pending[:0] = list(parts)

    def step(self, name: str, pending: list[str]) -> bool:
        """Handle one component that is not the last; ``False`` if it was a link."""
        if name in ("", "."):
            return True
        if name == "..":
            if len(self.stack) == 1:
                raise self.escape("a symbolic link leads above it")
            os.close(self.stack.pop())
            return True
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=self.stack[-1])
        except OSError as exc:
            self.refuse(name, exc, pending, want="folder")
            return False
        self.stack.append(fd)
        if self.fenced:
            st = os.fstat(fd)
            reason = self.fenced.get((st.st_dev, st.st_ino))
            if reason is not None:
                raise FencedFolderError(self.rel, self.root, reason=reason)
        return True

    def refuse(self, name: str, exc: OSError, pending: list[str], *, want: str) -> None:
        """Turn a failed open into a redirect (a link) or a one-line error."""
        if exc.errno in LINK_ERRNOS:
            target = _is_link(name, self.stack[-1])
            if target is not None:
                self.redirect(name, target, pending)
                return
        if isinstance(exc, FileNotFoundError):
            raise ConfigError(f"{self.rel!r} does not exist under {self.root!r}") from None
        if exc.errno == errno.ENOTDIR:
            raise ConfigError(f"{self.rel!r} under {self.root!r}: {name!r} is not a {want}")
        raise ConfigError(f"cannot open {self.rel!r} under {self.root!r}: {exc.strerror}")

    def fail(self, name: str, exc: OSError, *, want: str) -> NoReturn:
        """`refuse` without following links: always raises."""
        self.follow = False
        self.refuse(name, exc, [], want=want)
        raise self.escape(f"{name!r} could not be opened")  # pragma: no cover

    def directory(self, parts: tuple[str, ...]) -> int:
        """An fd of the directory ``parts`` names (the caller closes it)."""
        pending = list(parts)
        while pending:
            self.step(pending.pop(0), pending)
        return os.dup(self.stack[-1])

    def parent(self, parts: tuple[str, ...]) -> tuple[int, str]:
        """An fd of the directory holding the last component, and that component's name.

        Links in the last component are not resolved (the caller opens it with
        ``O_NOFOLLOW`` and calls `refuse` on failure).
        """
        pending = list(parts)
        while len(pending) > 1:
            self.step(pending.pop(0), pending)
        return self.stack[-1], pending[0]


def open_regular_file(
    root: str | os.PathLike[str],
    rel: str,
    *,
    follow_symlinks: bool,
    fenced: Mapping[Identity, str] | None = None,
) -> int:
    """An fd of the regular file ``rel`` names beneath ``root``, opened for reading.

    ``fenced``: folders the path may not pass through (`folder_identities`).

    Raises:
        FencedFolderError: The path passes through a ``fenced`` folder.
        PathEscapeError: ``rel`` is absolute, has ``..`` or NUL, or leads outside ``root``.
        ConfigError: ``root`` or the file does not exist, or it is not a regular file.
    """
    parts = split_relative(rel, root)
    if not parts:
        raise ConfigError(f"{rel!r} names the folder {os.fspath(root)!r}, not a file")
    with root_fd(root) as top:
        walker = Walker(root, top, rel, follow_symlinks, fenced)
        try:
            pending = list(parts)
            while True:
                if not pending:
                    raise ConfigError(f"{rel!r} under {os.fspath(root)!r} is not a file")
                while len(pending) > 1:
                    walker.step(pending.pop(0), pending)
                name = pending[0]
                if name in ("", ".", ".."):
                    walker.step(pending.pop(0), pending)
                    if not pending:
                        raise ConfigError(f"{rel!r} under {os.fspath(root)!r} is not a file")
                    continue
                try:
                    fd = os.open(name, READ_FLAGS, dir_fd=walker.stack[-1])
                except OSError as exc:
                    pending.pop(0)
                    walker.refuse(name, exc, pending, want="file")
                    continue
                break
        finally:
            walker.close()
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{rel!r} under {os.fspath(root)!r} is not a regular file "
                              f"({kind_name(mode)}); only regular files are read")  # fmt: skip
    except BaseException:
        os.close(fd)
        raise
    return fd


def kind_name(mode: int) -> str:
    """What a file that is not a regular file is, for an error message (``"a FIFO"``)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
