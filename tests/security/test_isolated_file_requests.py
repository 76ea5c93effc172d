"""An isolated subagent's ``FILE:`` requests: what a refusal tells the model.

A file the subagent asks for and may not have (missing, outside the project through a link
or ``..``, a FIFO, a device) is refused with a reason the model reads in its next prompt
and the ledger records. The reason names the path asked for, never where the project lies
on this machine: the model and its provider need the path inside the project only (as a
workspace refusal names ``<workspace>``, never the run's folder).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest
from clearance.testing import FunctionModel


def subject(request: ModelRequest) -> str:
    return request.prompt.manifest.subject


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "private-host-folder" / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (tmp_path / "secret.txt").write_text("OUTSIDE-SECRET-CANARY")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    os.mkfifo(root / "pipe")
    return root


async def test_a_refused_file_request_never_names_the_host_folder(
    project: Path, tmp_path: Path
) -> None:
    asked = iter(["missing.txt", "link.txt", "../secret.txt", "pipe", "src", "src/app.py"])

    def answer(request: ModelRequest) -> str:
        if subject(request) != "isolated:t":
            return "S"
        path = next(asked, None)
        return f"STATUS: needs_context\nFILE: {path}" if path else "fine\nSTATUS: done"

    model = FunctionModel(answer)
    team = Team(agents=(Agent(name="worker", instructions="You review code."),),
                coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(
            team, model=model, ledger=ledger,
            options=RunOptions(input_root=project, clarification_rounds=6,
                               workspace_root=tmp_path / "ws"),
        )  # fmt: skip
        result = await orchestrator.run_tasks([
            Task(id="t", title="T", description="Review.", assignee="worker", mode="isolated"),
        ])  # fmt: skip
        assert result.tasks["t"].result == "fine", result.error
        rounds = [e.data for e in ledger.events(result.run_id) if e.kind == "clarification"]
        assert [r["served"] for r in rounds] == [False, False, False, False, False, True]
        refusals = [r["answer"] for r in rounds[:-1]]
        # Each refusal still says what is wrong with the path asked for...
        assert "does not exist" in refusals[0]
        assert "outside" in refusals[1] and "'..'" in refusals[2]
        assert "FIFO" in refusals[3] and "folder" in refusals[4]
        assert all("the project folder" in r for r in refusals), refusals
        # ...and no prompt, and no record, names where the project is on this host.
        for request in model.requests:
            assert "private-host-folder" not in request.prompt.text
            assert "OUTSIDE-SECRET-CANARY" not in request.prompt.text
        assert not any("private-host-folder" in r for r in refusals), refusals
        assert verify_run(ledger, result.run_id).ok


@pytest.mark.parametrize("own_project", [False, True])
async def test_a_file_request_is_held_to_input_include_when_the_project_is_the_input_folder(
    project: Path, tmp_path: Path, own_project: bool
) -> None:
    """``input.include`` bounds the files tasks read from the input folder: a ``FILE:``
    request too, when the project folder is the input folder. A project of its own
    (``project:``) is not the input folder, and its files are the subagent's to ask for."""
    (project / "notes.env").write_text("TOKEN-CANARY-4471")
    other = tmp_path / "copy"  # a project folder of its own, holding the same files
    (other / "src").mkdir(parents=True)
    (other / "src" / "app.py").write_text("print('hi')\n")
    (other / "notes.env").write_text("TOKEN-CANARY-4471")
    asked = iter(["notes.env", "src/app.py"])

    def answer(request: ModelRequest) -> str:
        if subject(request) != "isolated:t":
            return "S"
        path = next(asked, None)
        return f"STATUS: needs_context\nFILE: {path}" if path else "fine\nSTATUS: done"

    model = FunctionModel(answer)
    team = Team(agents=(Agent(name="worker", instructions="You review code."),),
                coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip
    options = RunOptions(input_root=project, project_root=other if own_project else None,
                         input_include=("*.py",), clarification_rounds=3,
                         workspace_root=tmp_path / "ws")  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=model, ledger=ledger, options=options)
        result = await orchestrator.run_tasks([
            Task(id="t", title="T", description="Review.", assignee="worker", mode="isolated"),
        ])  # fmt: skip
        assert result.tasks["t"].result == "fine", result.error
        rounds = [e.data for e in ledger.events(result.run_id) if e.kind == "clarification"]
        assert [r["served"] for r in rounds] == [own_project, True]
        last = [r for r in model.requests if subject(r) == "isolated:t"][-1]
        assert ("TOKEN-CANARY-4471" in last.prompt.text) is own_project
        if not own_project:
            assert rounds[0]["answer"].endswith("matches none of the run's input.include (*.py)")
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
