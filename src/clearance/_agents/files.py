"""Loading project files for an isolated context: confined, text only, size-capped."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from pathlib import Path

from clearance._core.confined import read_bytes_confined, split_relative
from clearance._core.errors import ConfigError, LimitExceeded, PathEscapeError
from clearance._core.file_text import decoded, file_encoding
from clearance._core.spec import FileCaps, OversizePolicy

__all__ = ["FileCaps", "OversizePolicy", "confined_path", "load_text_file", "truncation_marker"]

_SNIFF_BYTES = 8192


def truncation_marker(path: str, kept: int, size: int) -> str:
    """The line appended to a truncated file: ``[clearance: truncated <path>: ...]``."""
    return f"\n[clearance: truncated {path}: showing the first {kept} of {size} bytes]"


def confined_path(root: Path, rel: str) -> Path:
    """The absolute path ``rel`` names inside ``root``, for display and reference only.

    Never open the returned path: a folder on the way may be swapped for a link after this
    check. Read and write through `clearance._core.confined`, which checks as it opens.

    Args:
        root: The directory paths are confined to (resolved by the caller).
        rel: A relative path, ``/``-separated.

    Raises:
        PathEscapeError: ``rel`` is absolute, contains a ``..`` component, a NUL byte or
            another control character, or resolves (through symlinks) outside ``root`` or
            into a loop of links.
    """
    parts = split_relative(rel, root)
    if not parts:
        raise PathEscapeError(rel, str(root), reason="it names no file")
    try:
        target = root.joinpath(*parts).resolve()
    except (OSError, RuntimeError):  # RuntimeError: a loop of links, before Python 3.13
        raise PathEscapeError(rel, str(root), reason="its symbolic links form a loop") from None
    if not target.is_relative_to(root):
        raise PathEscapeError(rel, str(root), reason="it resolves outside through a link")
    return target


def load_text_file(
    root: Path,
    rel: str,
    *,
    caps: FileCaps,
    budget: int,
    fenced: Mapping[tuple[int, int], str] | None = None,
) -> str:
    """Read one text file confined to ``root``, within its caps.

    UTF-8, or for a Python module the encoding it declares, as a task's ``files:`` are read
    (`clearance._core.file_text`); caps and truncation count the file's bytes. The file is
    opened with `read_bytes_confined` (no link leads outside ``root``, no check-then-open
    race, regular files only) and at most ``max_file_bytes + 1`` bytes are read, whatever
    its size.

    Args:
        root: The project root (resolved).
        rel: The file's path relative to ``root``.
        caps: The size caps and oversize policy.
        budget: Bytes still allowed for this context (``max_total_bytes`` minus what its
            other files already hold).
        fenced: Folders the path may not pass through (`folder_identities`).

    Returns:
        The text, possibly truncated with `truncation_marker` under ``"truncate"``.

    Raises:
        PathEscapeError: ``rel`` is absolute, has a ``..`` component, or leads outside
            ``root`` through a link; `FencedFolderError` into a ``fenced`` folder.
        ConfigError: The file does not exist, is not a regular file (a folder, FIFO or
            device), or is binary (a NUL byte, or not UTF-8), or declares an encoding that
            `text_of` refuses, or is not text in it.
        LimitExceeded: Under ``"error"``: the file is over ``max_file_bytes``
            (``limit="max_file_bytes"``) or over the remaining total budget
            (``limit="max_total_bytes"``); under ``"truncate"``: no budget is left at all.
    """
    try:
        read = read_bytes_confined(root, rel, max_bytes=caps.max_file_bytes, fenced=fenced)
    except ConfigError as exc:
        raise ConfigError(str(exc), field="files") from None
    data, size = read.data, read.size
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise ConfigError(f"file {rel!r} is binary; only text files are given to agents",
                          field="files")  # fmt: skip
    encoding = file_encoding(rel, data)  # UTF-8, or what a Python module declares
    if encoding != "utf-8":
        text = decoded(rel, data, encoding, final=not read.truncated)[0]
    else:
        try:
            # A cut file may end inside a character: only a complete file must end cleanly.
            text = codecs.getincrementaldecoder("utf-8")().decode(data, final=not read.truncated)
        except UnicodeDecodeError as exc:
            raise ConfigError(f"file {rel!r} is not UTF-8 text ({exc.reason}); binary files "
                              "are refused", field="files") from exc  # fmt: skip
    allowed = min(caps.max_file_bytes, budget)
    if size <= allowed:
        return text
    if caps.on_oversize == "error" or allowed <= 0:
        if caps.on_oversize == "error" and size > caps.max_file_bytes:
            raise LimitExceeded("max_file_bytes", value=size, maximum=caps.max_file_bytes,
                                subject=rel)  # fmt: skip
        # Nothing of the total budget is left (truncating cannot help), or the file fits its
        # own cap but not what the earlier files left.
        raise LimitExceeded("max_total_bytes", value=caps.max_total_bytes - budget + size,
                            maximum=caps.max_total_bytes, subject=rel)  # fmt: skip
    marker = truncation_marker(rel, 0, size)
    keep = max(0, allowed - len(marker.encode("utf-8")) - 8)
    if encoding != "utf-8":  # a prefix of the checked text, and the bytes it holds
        kept_text, kept = decoded(rel, data[:keep], encoding, final=False)
        return kept_text + truncation_marker(rel, kept, size)
    kept_text = data[:keep].decode("utf-8", errors="ignore")
    kept = len(kept_text.encode("utf-8"))
    return kept_text + truncation_marker(rel, kept, size)
