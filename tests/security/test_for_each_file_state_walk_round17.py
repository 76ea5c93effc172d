"""A ``for_each_file`` walk never enters Clearance's state or the run's workspace root: round 17.

Files under ``.clearance/`` and under the workspace root were never matched, but the walk still
read them and counted them toward the input folder's caps on entries and files: a project
whose earlier runs left many agents' outputs behind was refused ("holds more than N files
and folders") though none of them could ever be a task. The walk now leaves those folders
unread (they are not listed, not counted, not entered), wherever they lie in the input folder.

Through the real product path: a team file, ``clearance run``, a scripted model on a real
OpenAI-compatible server on 127.0.0.1, a real SQLite ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._core import for_each_file
from clearance.cli._app import app

pytestmark = pytest.mark.network

TEAM = """\
name: each
input: {default: "%(input)s"}
workspace: %(workspace)s
agents:
  - {name: writer, instructions: "You write.", tools: [write_output]}
tasks:
  - {id: "doc-{slug}", title: "Doc {name}", description: "Read {path}.", assignee: writer,
     for_each_file: "**/*.md", files: ["{path}"]}
"""


def fill(folder: Path, count: int) -> None:
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"out{i}.md").write_text("an agent's output\n")


@pytest.mark.parametrize("cap", ["max_entries", "max_files"])
def test_the_state_and_workspace_folders_count_toward_no_cap(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, cap: str
) -> None:
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    for name in ("a", "b"):
        (project / "docs" / f"{name}.md").write_text(f"# {name}\n")
    fill(project / ".clearance" / "workspaces" / "old" / "writer" / "outputs", 80)
    fill(project / "work" / "old" / "writer" / "outputs", 80)
    fill(project / "docs" / ".Clearance" / "stores", 80)  # a state folder deeper down, any case
    monkeypatch.setattr(for_each_file, "MAX_ENTRIES_SCANNED" if cap == "max_entries"
                        else "MAX_FILES_SCANNED", 30)  # fmt: skip
    monkeypatch.chdir(project)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(lambda messages: "read it"))
    (tmp_path / "team.yaml").write_text(TEAM % {"input": ".", "workspace": "work"})
    db = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", f"sqlite:///{db}"]
    )
    assert result.exit_code == 0, result.output
    with RunLedger(f"sqlite:///{db}") as ledger:
        (run_id,) = [r.run_id for r in ledger.list_runs()]
        tasks = sorted(t.task_id for t in ledger.tasks(run_id))
    assert tasks == ["doc-docs.a", "doc-docs.b"], tasks


def test_the_caps_still_hold_for_the_input_folder_itself(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    fill(project / "docs", 40)
    monkeypatch.setattr(for_each_file, "MAX_ENTRIES_SCANNED", 30)
    monkeypatch.chdir(project)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(lambda messages: "read it"))
    (tmp_path / "team.yaml").write_text(TEAM % {"input": ".", "workspace": "work"})
    result = CliRunner().invoke(app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m",
                                      "--db", f"sqlite:///{tmp_path / 'runs.db'}"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "holds more than 30 files and folders" in result.output
