"""Reading the files a task is cleared to see, confined to the run's input root."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clearance._core.errors import ConfigError, LimitExceeded, PathEscapeError

__all__ = ["DEFAULT_MAX_FILE_BYTES", "read_task_files"]

DEFAULT_MAX_FILE_BYTES = 256 * 1024


def read_task_files(
    root: Path, paths: Iterable[str], *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> dict[str, str]:
    """Read the UTF-8 text of each path, relative to ``root``.

    Args:
        root: The input root; every path must resolve inside it (symlinks included).
        paths: Relative paths, as listed in a task's ``files``.
        max_file_bytes: Largest file accepted, in bytes.

    Returns:
        Path (as given) → file contents, in the given order.

    Raises:
        PathEscapeError: A path is absolute or resolves outside ``root``.
        ConfigError: A path does not exist, is not a file, or is not UTF-8 text.
        LimitExceeded: A file is larger than ``max_file_bytes`` (``max_file_bytes``).
    """
    base = root.resolve()
    contents: dict[str, str] = {}
    for rel in paths:
        if Path(rel).is_absolute():
            raise PathEscapeError(rel, str(root))
        target = (base / rel).resolve()
        if not target.is_relative_to(base):
            raise PathEscapeError(rel, str(root))
        if not target.is_file():
            raise ConfigError(f"file {rel!r} does not exist under {str(root)!r}", field="files")
        size = target.stat().st_size
        if size > max_file_bytes:
            raise LimitExceeded("max_file_bytes", value=size, maximum=max_file_bytes, subject=rel)
        data = target.read_bytes()
        if b"\x00" in data:
            raise ConfigError(f"file {rel!r} is binary, not text", field="files")
        try:
            contents[rel] = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"file {rel!r} is not UTF-8 text: {exc}", field="files") from exc
    return contents
