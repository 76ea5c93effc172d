"""Confined file access: every file read or written on a user's behalf goes through here.

A path is always relative to a root directory (an input folder, a project, a workspace) and
is resolved one component at a time, each opened relative to its parent's file descriptor
with ``O_NOFOLLOW``. Nothing is checked first and opened later by name, so swapping a folder
for a symbolic link between a check and an open cannot lead outside the root: the open that
would cross the link refuses it.

Symbolic links are handled by this module, not by the kernel:

- with ``follow_symlinks=True`` a link is read (``readlinkat``) and its target walked the same
  way, component by component from the directory that holds it (or from the root, for an
  absolute target under the root's path); a target that leaves the root, ``..`` above the
  root, or more than `MAX_SYMLINKS` links raise `PathEscapeError`;
- with ``follow_symlinks=False`` any link on the way raises `PathEscapeError`.

Only regular files are read or overwritten: FIFOs, devices and sockets are refused after
the open (which is non-blocking, so a FIFO cannot hang the caller) and before any byte is
read. Reads stop at a cap: at most ``max_bytes + 1`` bytes are ever read, whatever the size.
An existing file is overwritten only if it is a regular file with a single link, so a hard
link planted in a workspace cannot make a write land in a file elsewhere.

The same technique as ``openat2(RESOLVE_BENEATH)`` on Linux and libpathrs, written with the
portable ``*at`` calls Python exposes (``dir_fd``), so it works on Linux and macOS.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, NoReturn

from clearance._core.errors import ConfigError, LimitExceeded, PathEscapeError

__all__ = [
    "MAX_SYMLINKS",
    "ConfinedRead",
    "EntryKind",
    "TreeEntry",
    "list_confined",
    "make_dir_confined",
    "make_dir_exclusive",
    "read_bytes_confined",
    "read_text_confined",
    "split_relative",
    "walk_confined",
    "write_confined",
]

MAX_SYMLINKS = 40
"""Most symbolic links resolved for one path (the kernel's own limit on Linux)."""

EntryKind = Literal["file", "dir", "symlink", "other"]
"""What a directory entry is, without following it: ``other`` is a FIFO, device or socket."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# Errors an O_NOFOLLOW open gives on a symbolic link (Linux: ELOOP; BSDs: EMLINK; with
# O_DIRECTORY some systems say ENOTDIR).
_LINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})
_CHUNK = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfinedRead:
    """The bytes read from a confined file.

    Attributes:
        data: The file's first bytes, at most the ``max_bytes`` asked for.
        size: The file's size in bytes: its ``st_size`` at open, or more if more was read.
        truncated: Whether the file holds more than ``data`` (``size > len(data)``).
    """

    data: bytes
    size: int
    truncated: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class TreeEntry:
    """One entry of a confined directory listing; links are reported, never followed.

    Attributes:
        path: ``/``-separated path relative to the root of the listing.
        name: The entry's own name.
        kind: ``file``, ``dir``, ``symlink`` or ``other``.
        size: Bytes of a regular file, else 0.
        depth: 1 for the entries of the listed directory itself, 2 below, and so on.
    """

    path: str
    name: str
    kind: EntryKind
    size: int
    depth: int


def split_relative(rel: str, root: str | os.PathLike[str] = "") -> tuple[str, ...]:
    r"""Check a relative path given from outside and split it into components.

    ``.`` and empty components are dropped; ``\`` counts as a separator too, so a path
    written for Windows cannot hide a ``..``.

    Args:
        rel: The path, ``/``-separated, relative to ``root``.
        root: Named in errors.

    Returns:
        The components, possibly empty (``""`` and ``"."`` name the root itself).

    Raises:
        PathEscapeError: ``rel`` is absolute, holds a ``..`` component or a NUL byte, or
            is not valid Unicode (a name with lone surrogates).
    """
    where = os.fspath(root)
    if "\x00" in rel:
        raise PathEscapeError(rel, where, reason="it contains a NUL byte")
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise PathEscapeError(rel, where, reason="it is not valid UTF-8") from None
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
def _root_fd(root: str | os.PathLike[str]) -> Iterator[int]:
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


class _Walker:
    """Resolves components beneath a root file descriptor, holding one fd per level."""

    def __init__(self, root: str | os.PathLike[str], root_fd: int, rel: str, follow: bool):
        self.root = os.fspath(root)
        self.rel = rel
        self.follow = follow
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
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.stack[-1])
        except OSError as exc:
            self.refuse(name, exc, pending, want="folder")
            return False
        self.stack.append(fd)
        return True

    def refuse(self, name: str, exc: OSError, pending: list[str], *, want: str) -> None:
        """Turn a failed open into a redirect (a link) or a one-line error."""
        if exc.errno in _LINK_ERRNOS:
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


def _open_file(root: str | os.PathLike[str], rel: str, *, follow_symlinks: bool) -> int:
    """An fd of the regular file ``rel`` names beneath ``root``, opened for reading."""
    parts = split_relative(rel, root)
    if not parts:
        raise ConfigError(f"{rel!r} names the folder {os.fspath(root)!r}, not a file")
    with _root_fd(root) as top:
        walker = _Walker(root, top, rel, follow_symlinks)
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
                    fd = os.open(name, _READ_FLAGS, dir_fd=walker.stack[-1])
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
                              f"({_kind_name(mode)}); only regular files are read")  # fmt: skip
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind_name(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes_confined(
    root: str | os.PathLike[str], rel: str, *, max_bytes: int, follow_symlinks: bool = True
) -> ConfinedRead:
    """Read at most ``max_bytes`` bytes of a regular file beneath ``root``.

    At most ``max_bytes + 1`` bytes are read whatever the file's size, so a huge or growing
    file costs no more memory than the cap.

    Args:
        root: The folder the path is confined to (trusted: given by the person running
            Clearance; links in it are followed by the system).
        rel: The file, relative to ``root``, ``/``-separated.
        max_bytes: Most bytes returned (at least 0).
        follow_symlinks: Follow links that stay beneath ``root`` (``True``), or refuse any
            link on the way (``False``).

    Returns:
        The data, the file's size and whether the data is cut.

    Raises:
        PathEscapeError: ``rel`` is absolute, has ``..`` or NUL, or leads outside ``root``
            (through a link, or any link when ``follow_symlinks`` is false).
        ConfigError: ``root`` or the file does not exist, or the file is not a regular file
            (a folder, FIFO, device or socket).
    """
    if max_bytes < 0:
        raise ConfigError(f"max_bytes must be at least 0, got {max_bytes}", field="max_bytes")
    fd = _open_file(root, rel, follow_symlinks=follow_symlinks)
    try:
        size = os.fstat(fd).st_size
        chunks: list[bytes] = []
        wanted = max_bytes + 1
        while wanted > 0:
            chunk = os.read(fd, min(wanted, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    truncated = len(data) > max_bytes
    return ConfinedRead(data=data[:max_bytes], size=max(size, len(data)), truncated=truncated)


def read_text_confined(
    root: str | os.PathLike[str],
    rel: str,
    *,
    max_bytes: int,
    errors: Literal["strict", "replace"] = "strict",
    follow_symlinks: bool = True,
) -> str:
    """Read a whole UTF-8 text file beneath ``root``, refusing one over ``max_bytes``.

    Args:
        root: See `read_bytes_confined`.
        rel: See `read_bytes_confined`.
        max_bytes: Largest file accepted, in bytes.
        errors: ``"strict"`` refuses text that is not UTF-8; ``"replace"`` replaces bad bytes.
        follow_symlinks: See `read_bytes_confined`.

    Raises:
        PathEscapeError: See `read_bytes_confined`.
        ConfigError: See `read_bytes_confined`; also text that is not UTF-8 under ``strict``.
        LimitExceeded: The file is over ``max_bytes`` (``limit="max_file_bytes"``).
    """
    read = read_bytes_confined(root, rel, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    if read.truncated:
        raise LimitExceeded("max_file_bytes", value=read.size, maximum=max_bytes, subject=rel)
    try:
        return read.data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{rel!r} is not UTF-8 text ({exc.reason})") from None


def write_confined(
    root: str | os.PathLike[str],
    rel: str,
    data: bytes,
    *,
    exclusive: bool = True,
    make_parents: bool = False,
) -> None:
    """Write ``data`` to a file beneath ``root``; no link is ever followed.

    Args:
        root: The folder the path is confined to (a workspace).
        rel: The file, relative to ``root``.
        data: The bytes to write.
        exclusive: Create a new file and fail if the name exists (``O_EXCL``); ``False``
            also overwrites an existing regular file with a single link.
        make_parents: Create missing folders on the way (each with ``mkdirat``).

    Raises:
        PathEscapeError: ``rel`` is absolute, has ``..`` or NUL, or crosses a link.
        ConfigError: A folder on the way is missing (without ``make_parents``), the name
            exists under ``exclusive``, or it names something other than a regular file
            with one link.
    """
    parts = split_relative(rel, root)
    if not parts:
        raise ConfigError(f"{rel!r} names the folder {os.fspath(root)!r}, not a file")
    with _root_fd(root) as top:
        walker = _Walker(root, top, rel, follow=False)
        try:
            for name in parts[:-1]:
                if make_parents:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=walker.stack[-1])
                walker.step(name, [])
            fd = _open_for_write(walker, parts[-1], exclusive=exclusive)
        finally:
            walker.close()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _open_for_write(walker: _Walker, name: str, *, exclusive: bool) -> int:
    parent = walker.stack[-1]
    try:
        return os.open(name, _WRITE_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=parent)
    except FileExistsError:
        if exclusive:
            raise ConfigError(f"{walker.rel!r} already exists under {walker.root!r}") from None
    except OSError as exc:
        walker.fail(name, exc, want="file")
    try:
        fd = os.open(name, _WRITE_FLAGS, dir_fd=parent)
    except OSError as exc:
        walker.fail(name, exc, want="file")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise ConfigError(f"{walker.rel!r} under {walker.root!r} is not a regular file with a "
                          "single link; it is not overwritten")  # fmt: skip
    os.ftruncate(fd, 0)
    return fd


def make_dir_confined(root: str | os.PathLike[str], rel: str, *, exist_ok: bool = False) -> None:
    """Create the folder ``rel`` beneath ``root`` (its parent must exist); links not followed.

    Raises:
        PathEscapeError: ``rel`` is absolute, has ``..`` or NUL, or crosses a link.
        ConfigError: The name exists (and is not a folder, or ``exist_ok`` is false), or a
            folder on the way is missing.
    """
    parts = split_relative(rel, root)
    if not parts:
        raise ConfigError(f"{rel!r} names the folder {os.fspath(root)!r} itself")
    with _root_fd(root) as top:
        walker = _Walker(root, top, rel, follow=False)
        try:
            parent, name = walker.parent(parts)
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
            except FileExistsError:
                if not exist_ok:
                    message = f"{rel!r} already exists under {walker.root!r}"
                    raise ConfigError(message) from None
                walker.step(name, [])  # refuses a link or a file in its place
        finally:
            walker.close()


def make_dir_exclusive(path: str | os.PathLike[str]) -> Path:
    """Create the folder ``path``, failing if anything exists there, even an empty folder.

    The parent folders (trusted: chosen by the person running Clearance) are created if
    missing; the last component is created with one ``mkdir``, which never follows a link,
    so two callers can never both believe they created the same folder.

    Returns:
        ``path`` with its parent resolved (the last component is the new folder itself).

    Raises:
        PathEscapeError: The last component is not a plain name (``..``, empty).
        ConfigError: ``path`` already exists (a folder, a file or a link).
    """
    target = Path(path)
    parent = target.parent.resolve()
    split_relative(target.name, parent)
    if not target.name:
        raise PathEscapeError(os.fspath(path), str(parent), reason="it names no folder")
    parent.mkdir(parents=True, exist_ok=True)
    with _root_fd(parent) as fd:
        try:
            os.mkdir(target.name, 0o777, dir_fd=fd)
        except FileExistsError:
            raise ConfigError(f"folder {str(parent / target.name)!r} already exists; it is "
                              "created fresh, never reused") from None  # fmt: skip
    return parent / target.name


def list_confined(
    root: str | os.PathLike[str], rel: str = "", *, follow_symlinks: bool = False
) -> tuple[TreeEntry, ...]:
    """The entries of one folder beneath ``root``, sorted by name, links not followed.

    Args:
        root: The folder paths are confined to.
        rel: The folder to list, relative to ``root`` (``""``: the root itself).
        follow_symlinks: Whether links on the way to ``rel`` are followed (when they stay
            beneath ``root``); the entries themselves are never followed.

    Raises:
        PathEscapeError: See `read_bytes_confined`.
        ConfigError: ``rel`` does not exist or is not a folder.
    """
    return tuple(walk_confined(root, rel, max_depth=1, follow_symlinks=follow_symlinks))


def walk_confined(
    root: str | os.PathLike[str],
    rel: str = "",
    *,
    max_depth: int,
    follow_symlinks: bool = False,
) -> Iterator[TreeEntry]:
    """Walk a folder beneath ``root`` depth-first, entries sorted by name; no link followed.

    Each folder is opened relative to its parent's descriptor with ``O_NOFOLLOW``, so a
    folder swapped for a link during the walk is not entered.

    Args:
        root: The folder paths are confined to.
        rel: The folder to walk, relative to ``root``.
        max_depth: Deepest level yielded (1: the folder's own entries).
        follow_symlinks: Whether links on the way to ``rel`` itself are followed (when they
            stay beneath ``root``); links met during the walk never are.

    Yields:
        One `TreeEntry` per entry; a folder comes before its own entries. ``path`` is
        relative to ``root``.

    Raises:
        PathEscapeError: See `read_bytes_confined`.
        ConfigError: ``rel`` does not exist or is not a folder.
    """
    parts = split_relative(rel, root)
    with _root_fd(root) as top:
        walker = _Walker(root, top, rel, follow_symlinks)
        try:
            start = walker.directory(parts)
        finally:
            walker.close()
    prefix = "/".join(parts)
    try:
        yield from _walk_fd(start, prefix, 1, max_depth)
    finally:
        os.close(start)


def _walk_fd(fd: int, prefix: str, depth: int, max_depth: int) -> Iterator[TreeEntry]:
    try:
        with os.scandir(fd) as scan:
            found = sorted((e.name, _entry_kind(e), _entry_size(e)) for e in scan)
    except OSError:
        return
    for name, kind, size in found:
        path = f"{prefix}/{name}" if prefix else name
        yield TreeEntry(path=path, name=name, kind=kind, size=size, depth=depth)
        if kind != "dir" or depth >= max_depth:
            continue
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue  # gone, or swapped for a link since the listing
        try:
            yield from _walk_fd(child, path, depth + 1, max_depth)
        finally:
            os.close(child)


def _entry_kind(entry: os.DirEntry[str]) -> EntryKind:
    try:
        if entry.is_symlink():
            return "symlink"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


def _entry_size(entry: os.DirEntry[str]) -> int:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0
