"""`Workspace`: one agent's own folder, with every path confined to it."""

from __future__ import annotations

import re
from pathlib import Path

from clearance._agents.files import confined_path
from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.spec import AgentLimits

__all__ = ["Workspace", "check_agent_id"]

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_agent_id(agent_id: str) -> str:
    """Return ``agent_id`` if it is a safe folder name (letters, digits, ``_.-``).

    Raises:
        ConfigError: It is empty, too long, or could name another folder (``..``, ``/``).
    """
    if not _AGENT_ID.match(agent_id) or agent_id in (".", ".."):
        raise ConfigError(
            f"agent id {agent_id!r} must be 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
            field="agent_id",
        )
    return agent_id


class Workspace:
    """An agent's folder: ``history/`` (one JSON file per step) and ``outputs/``.

    Every path a tool touches goes through `resolve`, which refuses anything outside the
    workspace; writes to ``outputs/`` are counted against the agent's limits.

    Args:
        root: The workspace folder; created with its subfolders if missing.
        limits: ``max_output_files`` and ``max_output_size_bytes`` are enforced on writes.
        subject: Names the agent in errors (``"agent:<id>"``).
    """

    def __init__(self, root: Path, *, limits: AgentLimits | None = None, subject: str = ""):
        self.root = root.resolve()
        self.history_dir = self.root / "history"
        self.outputs_dir = self.root / "outputs"
        self.history_dir.mkdir(parents=True, exist_ok=True)
        self.outputs_dir.mkdir(exist_ok=True)
        self.limits = limits or AgentLimits()
        self.subject = subject or f"workspace:{self.root.name}"

    def resolve(self, path: str) -> Path:
        """The absolute path of ``path`` (relative to the workspace root).

        Raises:
            PathEscapeError: ``path`` is absolute, has a ``..`` component, or resolves
                (through a symlink) outside the workspace.
        """
        return confined_path(self.root, path)

    def read_text(self, path: str) -> str:
        """Read a UTF-8 file of the workspace.

        Raises:
            PathEscapeError: The path leaves the workspace.
            ConfigError: The file does not exist.
        """
        target = self.resolve(path)
        if not target.is_file():
            raise ConfigError(f"no file {path!r} in the workspace", field="path")
        return target.read_text(encoding="utf-8")

    def outputs(self) -> tuple[str, ...]:
        """Paths of the files in ``outputs/`` (relative to it), sorted."""
        return tuple(
            sorted(
                p.relative_to(self.outputs_dir).as_posix()
                for p in self.outputs_dir.rglob("*")
                if p.is_file()
            )
        )

    def outputs_size(self) -> int:
        """Bytes held by the files in ``outputs/``."""
        return sum(p.stat().st_size for p in self.outputs_dir.rglob("*") if p.is_file())

    def write_output(self, name: str, data: str | bytes) -> Path:
        """Write (or overwrite) ``outputs/<name>``, within the agent's limits.

        Args:
            name: A file name inside ``outputs/`` (subfolders allowed, confined).
            data: Text (written as UTF-8) or bytes.

        Returns:
            The file's absolute path.

        Raises:
            PathEscapeError: ``name`` leaves ``outputs/``.
            LimitExceeded: The write would make more than ``max_output_files`` files
                (``limit="max_output_files"``) or more than ``max_output_size_bytes`` bytes
                (``limit="max_output_size_bytes"``) in ``outputs/``.
        """
        payload = data.encode("utf-8") if isinstance(data, str) else data
        target = confined_path(self.outputs_dir, name)
        existing = target.stat().st_size if target.is_file() else None
        files = len(self.outputs()) + (0 if existing is not None else 1)
        size = self.outputs_size() - (existing or 0) + len(payload)
        if self.limits.max_output_files is not None and files > self.limits.max_output_files:
            raise LimitExceeded("max_output_files", value=files,
                                maximum=self.limits.max_output_files,
                                subject=self.subject)  # fmt: skip
        maximum = self.limits.max_output_size_bytes
        if maximum is not None and size > maximum:
            raise LimitExceeded("max_output_size_bytes", value=size, maximum=maximum,
                                subject=self.subject)  # fmt: skip
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(payload)
        return target
