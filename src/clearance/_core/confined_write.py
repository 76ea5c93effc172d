"""Confined writes: files and folders created beneath a root, never through a link.

An existing file is overwritten only if it is a regular file with a single link, so a hard
link planted in a workspace cannot make a write land in a file elsewhere. Part of the confined
file access (`clearance._core.confined`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from clearance._core.confined_path import WRITE_FLAGS, Walker, root_fd, split_relative
from clearance._core.errors import ConfigError, PathEscapeError

__all__ = ["make_dir_confined", "make_dir_exclusive", "write_confined"]


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
        PathEscapeError: ``rel`` is absolute, has ``..``, NUL or another control character,
            or crosses a link.
        ConfigError: A folder on the way is missing (without ``make_parents``) or cannot be
            made, the name exists under ``exclusive``, it names something other than a
            regular file with one link, or the system refuses the name or the write (a name
            too long, a full disk); the message gives the system's reason.
    """
    parts = split_relative(rel, root)
    if not parts:
        raise ConfigError(f"{rel!r} names the folder {os.fspath(root)!r}, not a file")
    with root_fd(root) as top:
        walker = Walker(root, top, rel, follow=False)
        try:
            for name in parts[:-1]:
                if make_parents:
                    _make_folder(walker, name)
                walker.step(name, [])
            fd = _open_for_write(walker, parts[-1], exclusive=exclusive)
        finally:
            walker.close()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise ConfigError(f"cannot write {rel!r} under {os.fspath(root)!r}: "
                          f"{exc.strerror or exc}") from None  # fmt: skip
    finally:
        os.close(fd)


def _make_folder(walker: Walker, name: str) -> None:
    """Create the folder ``name`` in the walker's current folder, unless it exists."""
    try:
        os.mkdir(name, 0o777, dir_fd=walker.stack[-1])
    except FileExistsError:
        pass  # a folder (entered next) or something else (refused when entered)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder {name!r} of {walker.rel!r} under "
                          f"{walker.root!r}: {exc.strerror or exc}") from None  # fmt: skip


def _open_for_write(walker: Walker, name: str, *, exclusive: bool) -> int:
    parent = walker.stack[-1]
    try:
        return os.open(name, WRITE_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=parent)
    except FileExistsError:
        if exclusive:
            raise ConfigError(f"{walker.rel!r} already exists under {walker.root!r}") from None
    except OSError as exc:
        walker.fail(name, exc, want="file")
    try:
        fd = os.open(name, WRITE_FLAGS, dir_fd=parent)
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
    with root_fd(root) as top:
        walker = Walker(root, top, rel, follow=False)
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
        ConfigError: ``path`` already exists (a folder, a file or a link), or the system
            refuses to make it or a folder above it (the system's reason).
    """
    target = Path(path)
    parent = target.parent.resolve()
    split_relative(target.name, parent)
    if not target.name:
        raise PathEscapeError(os.fspath(path), str(parent), reason="it names no folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file at its name or above it, a read-only disk
        raise ConfigError(f"cannot make the folder {str(parent)!r}: "
                          f"{exc.strerror or type(exc).__name__}") from None  # fmt: skip
    with root_fd(parent) as fd:
        try:
            os.mkdir(target.name, 0o777, dir_fd=fd)
        except FileExistsError:
            raise ConfigError(f"folder {str(parent / target.name)!r} already exists; it is "
                              "created fresh, never reused") from None  # fmt: skip
        except OSError as exc:
            raise ConfigError(f"cannot make the folder {str(parent / target.name)!r}: "
                              f"{exc.strerror or type(exc).__name__}") from None  # fmt: skip
    return parent / target.name
