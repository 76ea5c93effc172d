"""Reading the files a task is cleared to see, confined to the run's input root."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clearance._core.confined import read_bytes_confined
from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.file_text import text_of

__all__ = ["DEFAULT_MAX_FILE_BYTES", "read_task_files", "text_of"]  # text_of: from _core

DEFAULT_MAX_FILE_BYTES = 256 * 1024


def read_task_files(
    root: Path, paths: Iterable[str], *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> dict[str, str]:
    """Read the text of each path, relative to ``root`` (see `text_of`).

    Each file is opened with `read_bytes_confined`: component by component beneath
    ``root``, so neither a link nor a folder swapped for a link during the read leads
    outside it; only regular files are read, and at most ``max_file_bytes + 1`` bytes.

    Args:
        root: The input root; every path must stay inside it (links included).
        paths: Relative paths, as listed in a task's ``files``.
        max_file_bytes: Largest file accepted, in bytes.

    Returns:
        Path (as given) → file contents, in the given order.

    Raises:
        PathEscapeError: A path is absolute, has a ``..`` component, or leads outside
            ``root`` through a link.
        ConfigError: A path does not exist, is not a regular file, or is not text (see
            `text_of`).
        LimitExceeded: A file is larger than ``max_file_bytes`` (``max_file_bytes``).
    """
    contents: dict[str, str] = {}
    for rel in paths:
        try:
            read = read_bytes_confined(root, rel, max_bytes=max_file_bytes)
        except ConfigError as exc:
            raise ConfigError(str(exc), field="files") from None
        if read.truncated:
            raise LimitExceeded("max_file_bytes", value=read.size, maximum=max_file_bytes,
                                subject=rel)  # fmt: skip
        contents[rel] = text_of(rel, read.data)
    return contents
