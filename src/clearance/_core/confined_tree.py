"""Confined listings: the entries of a folder beneath a root, links reported, never followed.

Part of the confined file access (`clearance._core.confined`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from clearance._core.confined_path import DIR_FLAGS, Walker, root_fd, split_relative
from clearance._core.errors import ConfigError, LimitExceeded

__all__ = ["EntryKind", "TreeEntry", "list_confined", "walk_confined"]


class EntryKind(StrEnum):
    """What a directory entry is, without following it: ``other`` is a FIFO, device or socket."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"


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


def list_confined(
    root: str | os.PathLike[str],
    rel: str = "",
    *,
    follow_symlinks: bool = False,
    max_entries: int | None = None,
) -> tuple[TreeEntry, ...]:
    """The entries of one folder beneath ``root``, sorted by name, links not followed.

    Args:
        root: The folder paths are confined to.
        rel: The folder to list, relative to ``root`` (``""``: the root itself).
        follow_symlinks: Whether links on the way to ``rel`` are followed (when they stay
            beneath ``root``); the entries themselves are never followed.
        max_entries: Most entries read (``None``: no cap); see `walk_confined`.

    Raises:
        PathEscapeError: See `read_bytes_confined`.
        ConfigError: ``rel`` does not exist or is not a folder.
        LimitExceeded: The folder holds more than ``max_entries`` entries
            (``limit="max_entries"``).
    """
    return tuple(walk_confined(root, rel, max_depth=1, follow_symlinks=follow_symlinks,
                               max_entries=max_entries))  # fmt: skip


def walk_confined(
    root: str | os.PathLike[str],
    rel: str = "",
    *,
    max_depth: int,
    follow_symlinks: bool = False,
    max_entries: int | None = None,
    unreadable: bool = True,
    prune: Callable[[str], bool] | None = None,
) -> Iterator[TreeEntry]:
    """Walk a folder beneath ``root`` depth-first, entries sorted by name; no link followed.

    Each folder is opened relative to its parent's descriptor with ``O_NOFOLLOW``, so a
    folder swapped for a link during the walk is not entered. With ``max_entries`` the walk
    stops while it reads: at most ``max_entries + 1`` entries are ever read, however many a
    folder holds (a folder is read whole before its entries are sorted).

    Args:
        root: The folder paths are confined to.
        rel: The folder to walk, relative to ``root``.
        max_depth: Deepest level yielded (1: the folder's own entries).
        follow_symlinks: Whether links on the way to ``rel`` itself are followed (when they
            stay beneath ``root``); links met during the walk never are.
        max_entries: Most entries read in the whole walk (``None``: no cap).
        unreadable: Skip a folder beneath that may not be read (permission denied);
            ``False`` refuses it with `ConfigError` instead, so nothing in it is silently
            left out. A folder gone or swapped for a link during the walk is always skipped.
        prune: Called with the path of each folder met (relative to ``root``); ``True``
            leaves it out unread: not yielded, not entered, not counted in ``max_entries``.

    Yields:
        One `TreeEntry` per entry; a folder comes before its own entries. ``path`` is
        relative to ``root``.

    Raises:
        PathEscapeError: See `read_bytes_confined`.
        ConfigError: ``rel`` does not exist or is not a folder; or, with ``unreadable``
            false, a folder beneath may not be read (the message names it).
        LimitExceeded: More than ``max_entries`` entries were read (``limit="max_entries"``,
            ``value`` the entries read, ``subject`` the folder walked).
    """
    parts = split_relative(rel, root)
    with root_fd(root) as top:
        walker = Walker(root, top, rel, follow_symlinks)
        try:
            start = walker.directory(parts)
        finally:
            walker.close()
    prefix = "/".join(parts)
    budget = _Budget(max_entries, prefix or os.fspath(root), os.fspath(root), unreadable)
    budget.prune = prune
    try:
        yield from _walk_fd(start, prefix, 1, max_depth, budget)
    finally:
        os.close(start)


class _Budget:
    """The entries a walk may still read; `LimitExceeded` on the first one past the cap."""

    def __init__(self, most: int | None, subject: str, root: str, skip_unreadable: bool) -> None:
        self.most, self.subject, self.read = most, subject, 0
        self.root, self.skip_unreadable = root, skip_unreadable
        self.prune: Callable[[str], bool] | None = None  # folders left out unread

    def denied(self, path: str, exc: OSError) -> None:
        """Skip a folder that may not be read, or refuse it (``skip_unreadable`` false)."""
        if isinstance(exc, PermissionError) and not self.skip_unreadable:
            raise ConfigError(f"cannot read the folder {path or '.'!r} under {self.root!r}: "
                              f"{exc.strerror}")  # fmt: skip

    def left_out(self, prefix: str, name: str) -> bool:
        """Whether the folder ``name`` in ``prefix`` is pruned (left out unread)."""
        return self.prune is not None and self.prune(f"{prefix}/{name}" if prefix else name)

    def take(self) -> None:
        self.read += 1
        if self.most is not None and self.read > self.most:
            raise LimitExceeded("max_entries", value=self.read, maximum=self.most,
                                subject=self.subject)  # fmt: skip


def _walk_fd(
    fd: int, prefix: str, depth: int, max_depth: int, budget: _Budget
) -> Iterator[TreeEntry]:
    found: list[tuple[str, EntryKind, int]] = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                kind = _entry_kind(entry)
                if kind == EntryKind.DIR and budget.left_out(prefix, entry.name):
                    continue
                budget.take()
                found.append((entry.name, kind, _entry_size(entry)))
    except OSError as exc:
        budget.denied(prefix, exc)
        return
    found.sort()
    for name, kind, size in found:
        path = f"{prefix}/{name}" if prefix else name
        yield TreeEntry(path=path, name=name, kind=kind, size=size, depth=depth)
        if kind != EntryKind.DIR or depth >= max_depth:
            continue
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            budget.denied(path, exc)
            continue  # gone, or swapped for a link since the listing
        try:
            yield from _walk_fd(child, path, depth + 1, max_depth, budget)
        finally:
            os.close(child)


def _entry_kind(entry: os.DirEntry[str]) -> EntryKind:
    try:
        if entry.is_symlink():
            return EntryKind.SYMLINK
        if entry.is_dir(follow_symlinks=False):
            return EntryKind.DIR
        if entry.is_file(follow_symlinks=False):
            return EntryKind.FILE
    except OSError:
        pass
    return EntryKind.OTHER


def _entry_size(entry: os.DirEntry[str]) -> int:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0
