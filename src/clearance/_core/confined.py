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
read. Reads stop at a cap: at most ``max_bytes + 1`` bytes are ever read, whatever the size;
listings too, given ``max_entries``. A path holding a control character (a newline, an
escape) is refused like one with ``..``: no name read or written here can forge a line of a
prompt, the ledger or a terminal (`escape_controls` shows a listed name on one line).
An existing file is overwritten only if it is a regular file with a single link, so a hard
link planted in a workspace cannot make a write land in a file elsewhere.

The same technique as ``openat2(RESOLVE_BENEATH)`` on Linux and libpathrs, written with the
portable ``*at`` calls Python exposes (``dir_fd``), so it works on Linux and macOS.

The parts: path resolution in `clearance._core.confined_path`, writes in
`clearance._core.confined_write`, listings in `clearance._core.confined_tree`; reads, and the
names every caller imports, here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from clearance._core.confined_path import (
    CONTROL_CHARACTER,
    MAX_SYMLINKS,
    FencedFolderError,
    Identity,
    escape_controls,
    folder_identities,
    open_regular_file,
    split_relative,
)
from clearance._core.confined_tree import EntryKind, TreeEntry, list_confined, walk_confined
from clearance._core.confined_write import make_dir_confined, make_dir_exclusive, write_confined
from clearance._core.errors import ConfigError, LimitExceeded

__all__ = [
    "CONTROL_CHARACTER",
    "MAX_SYMLINKS",
    "ConfinedRead",
    "EntryKind",
    "FencedFolderError",
    "TreeEntry",
    "escape_controls",
    "folder_identities",
    "list_confined",
    "make_dir_confined",
    "make_dir_exclusive",
    "read_bytes_confined",
    "read_text_confined",
    "split_relative",
    "walk_confined",
    "write_confined",
]

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


def read_bytes_confined(
    root: str | os.PathLike[str],
    rel: str,
    *,
    max_bytes: int,
    follow_symlinks: bool = True,
    fenced: Mapping[Identity, str] | None = None,
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
        fenced: Folders the path may not pass through, however spelled or linked
            (`folder_identities`: identity -> the reason given).

    Returns:
        The data, the file's size and whether the data is cut.

    Raises:
        PathEscapeError: ``rel`` is absolute, has ``..`` or NUL, or leads outside ``root``
            (through a link, or any link when ``follow_symlinks`` is false); a
            `FencedFolderError` when it passes through a ``fenced`` folder.
        ConfigError: ``root`` or the file does not exist, or the file is not a regular file
            (a folder, FIFO, device or socket).
    """
    if max_bytes < 0:
        raise ConfigError(f"max_bytes must be at least 0, got {max_bytes}", field="max_bytes")
    fd = open_regular_file(root, rel, follow_symlinks=follow_symlinks, fenced=fenced)
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
