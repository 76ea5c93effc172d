"""`Workspace`: one agent's own folder, with every path confined to it."""

from __future__ import annotations

import re
from pathlib import Path

from clearance._agents.files import confined_path
from clearance._core.confined import (
    EntryKind,
    make_dir_confined,
    make_dir_exclusive,
    read_text_confined,
    split_relative,
    walk_confined,
    write_confined,
)
from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.spec import AgentLimits

__all__ = [
    "DEFAULT_MAX_READ_BYTES",
    "MAX_NAME_BYTES",
    "MAX_OUTPUT_DEPTH",
    "Workspace",
    "check_agent_id",
]

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

MAX_OUTPUT_DEPTH = 32
"""Most parts of a name in ``outputs/`` (``a/b/c.txt`` has 3): the depth its caps count."""

MAX_NAME_BYTES = 255
"""Longest part of a name in ``outputs/``, in UTF-8 bytes (``NAME_MAX`` on Linux and macOS)."""

DEFAULT_MAX_READ_BYTES = 64 * 1024 * 1024
"""Largest workspace file `Workspace.read_text` reads by default, in bytes."""


def check_agent_id(agent_id: str) -> str:
    """Return ``agent_id`` if it is a safe folder name (letters, digits, ``_.-``).

    Raises:
        ConfigError: It is empty, too long, or could name another folder (``..``, ``/``).
    """
    if not _AGENT_ID.fullmatch(agent_id) or agent_id in (".", ".."):
        raise ConfigError(
            f"agent id {agent_id!r} must be 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
            field="agent_id",
        )
    return agent_id


class Workspace:
    """An agent's folder: ``history/`` (one JSON file per step) and ``outputs/``.

    The folder is created fresh: if anything exists at ``root`` (even an empty folder), the
    workspace is refused, so an agent never lands in a folder another agent used. Every
    read and write goes through `clearance._core.confined`, opened beneath ``root`` one
    component at a time without following links, so neither a link nor a folder swapped
    for a link leads outside it. Writes to ``outputs/`` are counted against the agent's
    limits.

    Args:
        root: The workspace folder; must not exist (its parent is created if missing).
        limits: ``max_output_files`` and ``max_output_size_bytes`` are enforced on writes.
        subject: Names the agent in errors (``"agent:<id>"``).

    Raises:
        ConfigError: ``root`` already exists.
    """

    def __init__(self, root: Path, *, limits: AgentLimits | None = None, subject: str = ""):
        self.root = make_dir_exclusive(root)
        self.history_dir = self.root / "history"
        self.outputs_dir = self.root / "outputs"
        make_dir_confined(self.root, "history")
        make_dir_confined(self.root, "outputs")
        self.limits = limits or AgentLimits()
        self.subject = subject or f"workspace:{self.root.name}"

    def resolve(self, path: str) -> Path:
        """The absolute path of ``path`` (relative to the workspace root), for reference.

        Do not open the returned path; use `read_text` and `write_output`, which check as
        they open.

        Raises:
            PathEscapeError: ``path`` is absolute, has a ``..`` component, or resolves
                (through a symlink) outside the workspace.
        """
        return confined_path(self.root, path)

    def read_text(self, path: str, *, max_bytes: int = DEFAULT_MAX_READ_BYTES) -> str:
        """Read a UTF-8 file of the workspace; links are not followed.

        Args:
            path: Relative to the workspace root (``"outputs/notes.md"``).
            max_bytes: Largest file read; at most ``max_bytes + 1`` bytes are ever read.

        Raises:
            PathEscapeError: The path leaves the workspace or crosses a link.
            ConfigError: The file does not exist, is not a regular file, or is not UTF-8.
            LimitExceeded: The file is over ``max_bytes`` (``limit="max_file_bytes"``).
        """
        return read_text_confined(self.root, path, max_bytes=max_bytes, follow_symlinks=False)

    def _output_sizes(self) -> dict[str, int]:
        prefix = "outputs/"
        return {
            entry.path[len(prefix) :]: entry.size
            for entry in walk_confined(self.root, "outputs", max_depth=MAX_OUTPUT_DEPTH)
            if entry.kind == EntryKind.FILE
        }

    def outputs(self) -> tuple[str, ...]:
        """Paths of the regular files in ``outputs/`` (relative to it), sorted."""
        return tuple(sorted(self._output_sizes()))

    def outputs_size(self) -> int:
        """Bytes held by the regular files in ``outputs/``."""
        return sum(self._output_sizes().values())

    def write_output(self, name: str, data: str | bytes) -> Path:
        """Write (or overwrite) ``outputs/<name>``, within the agent's limits.

        Args:
            name: A file name inside ``outputs/`` (subfolders allowed, confined).
            data: Text (written as UTF-8) or bytes.

        Returns:
            The file's absolute path.

        Raises:
            PathEscapeError: ``name`` leaves ``outputs/``, crosses a link, or holds a
                control character.
            ConfigError: ``name`` names no file (empty, or ending in ``/`` or ``/.``), is
                nested more than `MAX_OUTPUT_DEPTH` deep, is held by something other than a
                regular file, or the system refuses it (a name too long, a full disk); or
                ``data`` is text that is not valid UTF-8 (a lone surrogate). A part of the
                name over `MAX_NAME_BYTES` is refused before any folder is made.
            LimitExceeded: The write would make more than ``max_output_files`` files
                (``limit="max_output_files"``) or more than ``max_output_size_bytes`` bytes
                (``limit="max_output_size_bytes"``) in ``outputs/``.
        """
        parts = split_relative(name, self.outputs_dir)
        try:
            payload = data.encode("utf-8") if isinstance(data, str) else data
        except UnicodeEncodeError:
            message = f"the content of {name!r} is not valid UTF-8 (a lone surrogate: \\ud800)"
            raise ConfigError(message, field="content") from None
        if not parts or name.replace("\\", "/").rsplit("/", 1)[-1] in ("", "."):
            raise ConfigError(f"{name!r} names a folder, not a file", field="name")
        if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in parts):
            # Refused before any folder on the way is made: none is left behind uncounted.
            raise ConfigError(f"{name!r} has a part longer than {MAX_NAME_BYTES} bytes, which "
                              "the system refuses", field="name")  # fmt: skip
        if len(parts) > MAX_OUTPUT_DEPTH:
            # The caps count the files `_output_sizes` lists: none may lie below it.
            raise ConfigError(f"{name!r} is nested {len(parts)} deep; outputs/ holds files at "
                              f"most {MAX_OUTPUT_DEPTH} deep", field="name")  # fmt: skip
        rel = "/".join(parts)
        sizes = self._output_sizes()
        existing = sizes.get(rel)
        files = len(sizes) + (0 if existing is not None else 1)
        size = sum(sizes.values()) - (existing or 0) + len(payload)
        if self.limits.max_output_files is not None and files > self.limits.max_output_files:
            raise LimitExceeded("max_output_files", value=files,
                                maximum=self.limits.max_output_files,
                                subject=self.subject)  # fmt: skip
        maximum = self.limits.max_output_size_bytes
        if maximum is not None and size > maximum:
            raise LimitExceeded("max_output_size_bytes", value=size, maximum=maximum,
                                subject=self.subject)  # fmt: skip
        write_confined(self.root, f"outputs/{rel}", payload, exclusive=False, make_parents=True)
        return self.outputs_dir.joinpath(*parts)

    def write_history(self, name: str, data: str) -> Path:
        """Create ``history/<name>`` holding ``data`` (UTF-8); an existing file is kept.

        Raises:
            PathEscapeError: ``name`` leaves ``history/`` or crosses a link.
            ConfigError: ``history/<name>`` already exists (steps are never rewritten).
        """
        parts = split_relative(name, self.history_dir)
        write_confined(self.root, "history/" + "/".join(parts), data.encode("utf-8"))
        return self.history_dir.joinpath(*parts)
