"""Files and folders of the input folder that may not be read: said in one line, never dropped.

A ``for_each_file`` task stands for every matching file. A folder under the input folder
that the run may not read (permission denied) once was skipped without a word, so the files
in it silently got no task. It is now one line naming the folder and the field (exit 2),
before anything runs. A matched file that may not be read is one line too, and so is a
matched link the system cannot follow (its target's name too long), which once crashed the
command with a traceback. The project scan (an overview of the project) still skips what it
may not read.

Root reads everything, so the permission tests proper are skipped when run as root; the
same refusal is then shown by making the system deny the open (``PermissionError``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import ConfigError, RunLedger
from clearance._core import for_each_file
from clearance._core.teamfile import load_team_file
from clearance.cli import app
from clearance.subagents import ArchitecturalContext

runner = CliRunner()
AS_ROOT = os.geteuid() == 0
NEEDS_NON_ROOT = pytest.mark.skipif(
    AS_ROOT, reason="root reads files and folders whatever their permissions"
)


def team_file(tmp_path: Path) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents: [{name: a, instructions: x}]\n"
        "tasks:\n"
        "  - {id: 'r-{slug}', title: 'Review {path}', description: d, assignee: a,\n"
        "     for_each_file: '**/*.txt', files: ['{path}']}\n"
    )
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "in"
    (root / "open").mkdir(parents=True)
    (root / "closed").mkdir()
    (root / "open" / "a.txt").write_text("a\n")
    (root / "closed" / "b.txt").write_text("b\n")
    return root


@pytest.fixture
def denied(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The system refuses to open a folder named ``closed`` (as it would a user's 000 folder)."""
    real_open = os.open
    refused: list[str] = []

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if os.fspath(path) == "closed" and dir_fd is not None:
            refused.append("closed")
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), "closed")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_)
    yield refused


def one_line_exit_2(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_an_unreadable_folder_is_refused_not_silently_skipped(
    folder: Path, denied: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        for_each_file.matching_files(folder, "**/*.txt", ["*"], "tasks.0.for_each_file")
    assert denied == ["closed"]
    message = str(info.value)
    assert message.startswith("tasks.0.for_each_file: cannot read the folder 'closed'"), message
    assert "Permission denied" in message and "\n" not in message


def test_the_command_line_names_the_unreadable_folder_in_one_line(
    folder: Path, denied: list[str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    result = runner.invoke(app, ["run", str(team_file(tmp_path)), "--model", "fake:x",
                                 "--db", f"sqlite:///{db}", "--input", str(folder)])  # fmt: skip
    line = one_line_exit_2(result)
    assert "tasks.0.for_each_file" in line and "'closed'" in line, line
    if db.exists():
        with RunLedger(f"sqlite:///{db}") as ledger:
            assert ledger.list_runs() == []  # refused before any run is recorded


def test_the_project_scan_still_skips_an_unreadable_folder(folder: Path, denied: list[str]) -> None:
    context = ArchitecturalContext.from_project(folder)
    assert "closed/" in context.structure and "  a.txt" in context.structure
    assert "  b.txt" not in context.structure


def test_a_readable_input_folder_still_matches_every_file(folder: Path, tmp_path: Path) -> None:
    loaded = load_team_file(team_file(tmp_path), input_dir=folder)
    assert [t.id for t in loaded.tasks] == ["r-closed.b", "r-open.a"]


@NEEDS_NON_ROOT
def test_a_folder_without_read_permission_is_one_line(folder: Path, tmp_path: Path) -> None:
    (folder / "closed").chmod(0)
    try:
        result = runner.invoke(app, ["graph", str(team_file(tmp_path)), "--input", str(folder)])
        line = one_line_exit_2(result)
        assert "'closed'" in line and "Permission denied" in line, line
        assert "closed/" in ArchitecturalContext.from_project(folder).structure
    finally:
        (folder / "closed").chmod(0o755)


@NEEDS_NON_ROOT
def test_a_matched_file_without_read_permission_is_one_line(folder: Path, tmp_path: Path) -> None:
    (folder / "open" / "a.txt").chmod(0)
    try:
        result = runner.invoke(app, ["graph", str(team_file(tmp_path)), "--input", str(folder)])
        line = one_line_exit_2(result)
        assert "a.txt" in line and "Permission denied" in line, line
    finally:
        (folder / "open" / "a.txt").chmod(0o644)


def test_a_matched_link_that_cannot_be_followed_is_one_line(folder: Path, tmp_path: Path) -> None:
    (folder / "open" / "odd.txt").symlink_to("a" * 300)  # stat() of it fails: ENAMETOOLONG
    result = runner.invoke(app, ["graph", str(team_file(tmp_path)), "--input", str(folder)])
    line = one_line_exit_2(result)
    assert "open/odd.txt" in line, line
