"""Files `clearance run` writes (--output, --json): refused up front, or one line after the run.

A name that cannot be written is refused before the run starts; a write that fails once the
run is done is one line naming the option and the file, and the run stays recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

runner = CliRunner()

TEAM = (
    "agents: [{name: a, instructions: x}]\n"
    "tasks:\n  - {id: t, title: T, description: d, assignee: a}\n"
)


def run(tmp_path: Path, *options: str) -> tuple[int, list[str], str]:
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    db = f"sqlite:///{tmp_path}/runs.db"
    result = runner.invoke(app, ["run", str(team), "--model", "fake:x", "--db", db, *options])
    assert "Traceback" not in result.output
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()], db


def runs_in(db: str) -> list[str]:
    with RunLedger(db) as ledger:
        return [r.status for r in ledger.list_runs()]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--output", "{tmp}"), "error: --output: '{tmp}' is a folder; give a file name"),
        (("--json", "{tmp}/no/r.json"), "error: --json: folder '{tmp}/no' does not exist"),
        (
            ("--output", "{tmp}/r.md", "--json", "{tmp}/./r.md"),
            "error: --json: --output and --json both name '{tmp}/r.md'",
        ),
    ],
)
def test_a_file_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, options: tuple[str, ...], message: str
) -> None:
    code, lines, db = run(tmp_path, *(o.format(tmp=tmp_path) for o in options))
    assert code == 2
    assert lines == [message.format(tmp=tmp_path)]
    assert not (tmp_path / "runs.db").exists() or runs_in(db) == []


def test_a_write_that_fails_after_the_run_keeps_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.json"
    write = os.write

    def full_disk(fd: int, data: bytes) -> int:  # the disk fills up on the file's first byte
        if target.exists() and os.path.samestat(os.fstat(fd), os.stat(target)):
            raise OSError(28, "No space left on device")
        return write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    code, lines, db = run(tmp_path, "--json", str(target))
    assert code == 2
    assert lines[-1].startswith(
        f"error: --json: cannot write '{target}': No space left on device; the run is "
        "recorded: clearance inspect run_"
    )
    assert runs_in(db) == ["completed"]
    assert not target.exists()


def test_the_files_are_written_when_they_can_be(tmp_path: Path) -> None:
    code, lines, _ = run(tmp_path, "--json", str(tmp_path / "r.json"))
    assert code == 0, lines
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert (task["task_id"], task["status"]) == ("t", "completed")
