"""A ``run: python:`` step's side effects on the process never move what the run works on.

A step runs in a thread of the run's own process, so it can change the working directory
(``os.chdir``) for everyone. The run's folders (the input, the project, the workspaces of
the children it spawns) are fixed when the run starts: a later task reads its files from
the input folder the run was given, and a child's workspace is made under the workspace
folder the run was given, not under wherever the step moved to.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.spec import Agent
from clearance.cli import app
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

MOVER = """\
import os


def move(step):
    os.chdir({elsewhere!r})
    return "moved"
"""


def _mover(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A step module ``name`` in ``tmp_path`` (the working directory) that moves elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"{name}.py").write_text(MOVER.format(elsewhere=str(elsewhere)))
    monkeypatch.chdir(tmp_path)  # restored after the test, wherever the step went
    monkeypatch.delitem(sys.modules, name, raising=False)
    return elsewhere


def test_a_step_that_changes_directory_does_not_move_a_later_childs_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = _mover(tmp_path, "mover_steps_ws", monkeypatch)
    (tmp_path / "team.yaml").write_text("""\
name: moved
agents:
  - {name: lead, instructions: "You lead.", can_spawn: [helper]}
  - {name: helper, instructions: "You help."}
tasks:
  - {id: a, title: A, description: Move., assignee: lead, run: "python:mover_steps_ws:move"}
  - {id: b, title: B, description: Sum up., assignee: lead, depends_on: [a],
     fan_out: {agent: helper, goals: [Look]}}
""")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        assert {t.task_id: t.status for t in ledger.tasks(run_id)} == {
            "a": "completed", "b": "completed",
        }  # fmt: skip
        assert verify_run(ledger, run_id).ok
    assert (tmp_path / ".clearance" / "workspaces" / run_id / "b.1").is_dir()
    assert not (elsewhere / ".clearance").exists()


async def test_a_step_that_changes_directory_does_not_move_a_later_tasks_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = _mover(tmp_path, "mover_steps_files", monkeypatch)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("RIGHT-NOTES")
    (elsewhere / "in").mkdir()
    (elsewhere / "in" / "notes.txt").write_text("WRONG-NOTES")
    prompts: dict[str, str] = {}

    def answer(request: ModelRequest) -> str:
        prompts[request.prompt.manifest.subject] = request.prompt.text
        return "done"

    team = Team(agents=(Agent(name="lead", instructions="You lead."),))
    tasks = [
        Task(id="a", title="A", description="Move.", assignee="lead",
             run="python:mover_steps_files:move"),
        Task(id="b", title="B", description="Read.", assignee="lead", depends_on=("a",),
             files=("notes.txt",)),
    ]  # fmt: skip
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    options = RunOptions(input_root=Path("in"), workspace_root=tmp_path / "ws")
    result = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                options=options).run_tasks(tasks)  # fmt: skip
    assert result.tasks["b"].status == "completed", result.tasks["b"].error
    assert "RIGHT-NOTES" in prompts["task:b"]
    assert "WRONG-NOTES" not in prompts["task:b"]
    assert verify_run(ledger, result.run_id).ok


def test_the_files_one_step_is_given_are_capped_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clearance._orchestration import steps

    monkeypatch.setattr(steps, "STEP_MAX_TOTAL_BYTES", 10)
    (tmp_path / "in").mkdir()
    for name in ("one.txt", "two.txt"):
        (tmp_path / "in" / name).write_text("sixsix")  # 6 bytes each: 12 together
    (tmp_path / "team.yaml").write_text(f"""\
name: capped
input: {{default: {tmp_path / "in"}}}
agents:
  - {{name: lead, instructions: "You lead."}}
tasks:
  - {{id: many, title: Many, description: Facts., assignee: lead, run: "step:module_facts",
     files: [one.txt, two.txt]}}
  - {{id: one, title: One, description: Facts., assignee: lead, run: "step:module_facts",
     files: [one.txt, one.txt]}}
""")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "fake:m", "--db", db]
    )
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        assert verify_run(ledger, run_id).ok
    assert tasks["many"].status == "failed"
    assert "step_max_total_bytes" in (tasks["many"].error or "")
    assert "12" in (tasks["many"].error or "")
    assert tasks["one"].status == "completed", tasks["one"].error  # a path twice is read once
