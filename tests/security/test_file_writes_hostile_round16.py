"""Files read and written on a user's behalf, against a hostile model: round 16.

- Clearance's own state folder (``.clearance/``: the ledger, the store, and every agent's
  workspace, an earlier run's included) sits in the project folder when a run starts there.
  An isolated subagent's ``FILE:`` request for another agent's workspace file was served (a
  need-to-know breach), and the project's listing showed the folder. Now it is never listed
  and never given, however the path is spelled, even when ``input.include`` matches it.
- A workspace root that cannot hold a folder (a file planted at its name) failed the task
  with the system's raw error (``FileExistsError: [Errno 17] ...``, the host's path in the
  synthesis prompt), and the tool call went unrecorded. Now ``write_output`` and an offloaded
  output are each a tool error the model hears (no host path) and the ledger records.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_isolated_file_requests_hidden import run_asking

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

CANARY = "WORKSPACE-SECRET-CANARY"
SECRET = ".clearance/workspaces/earlier/task_b/outputs/secret.txt"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder that holds an earlier run's workspace in its ``.clearance/``."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    secret = root / SECRET
    secret.parent.mkdir(parents=True)
    secret.write_text(f"{CANARY}\n")
    return root


def ask_files(project: Path, tmp_path: Path, asked: list[str], **options: Any):
    """`run_asking` with the project as the input folder, workspaces in its `.clearance/`."""
    model, rounds, report, _, _ = run_asking(
        project, tmp_path, asked, project_root=None, input_root=project,
        workspace_root=project / ".clearance" / "workspaces", **options,
    )  # fmt: skip
    return model, rounds, report


@pytest.mark.parametrize("include", [None, (".clearance/**", "*")])
def test_another_agents_workspace_in_the_project_is_never_given(
    project: Path, tmp_path: Path, include: tuple[str, ...] | None
) -> None:
    asked = [SECRET, "./" + SECRET, SECRET.replace(".clearance", ".CLEARANCE"),
             "src/../" + SECRET, "src/app.py"]  # fmt: skip
    options = {} if include is None else {"input_include": include}
    model, rounds, report = ask_files(project, tmp_path, asked, **options)
    assert [r["served"] for r in rounds] == [False] * 4 + [True]
    for data in rounds[:3]:
        assert data["answer"].endswith("it is Clearance's own state (runs, stores and agents' "
                                       "workspaces), which no subagent is given"), data  # fmt: skip
    for request in model.requests:  # no prompt ever held the secret
        assert CANARY not in request.prompt.text
    first = next(r for r in model.requests if r.prompt.manifest.subject == "isolated:t")
    assert "src/" in first.prompt.text and ".clearance" not in first.prompt.text  # not listed
    assert "print('hi')" in model.requests[-2].prompt.text  # the ordinary file was given
    assert report.ok, [str(f) for f in report.findings]


LONG = "".join(f"line {n} of the long output\n" for n in range(1, 301))


def fetch(topic: str) -> str:
    """Fetch a long report."""
    return LONG


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("write_output", {"name": "a.txt", "content": "hi"}), ("fetch", {"topic": "x"})],
)
def test_a_workspace_root_that_cannot_hold_a_folder_is_a_tool_error(
    tmp_path: Path, name: str, arguments: dict[str, Any]
) -> None:
    planted = tmp_path / "ws"
    planted.write_text("not a folder\n")
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> Any:
        requests.append(request)
        return ToolCall(id="c1", name=name, arguments=arguments) if len(requests) == 1 else "ok"

    team = Team(agents=(Agent(name="a", instructions="You work.",
                              tools=("fetch", "write_output")),))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        options = RunOptions(workspace_root=planted)
        orchestrator = Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                    tools=[fetch], options=options)  # fmt: skip
        task = Task(id="t", title="Work", description="Do the work.", assignee="a")
        result = asyncio.run(orchestrator.run_tasks([task]))
        assert result.tasks["t"].status == "completed", result.tasks["t"].error
        (record,) = ledger.tool_calls(result.run_id)
        assert verify_run(ledger, result.run_id).ok
    assert record.is_error
    assert record.result.startswith("error: ") and "\n" not in record.result
    assert "workspace" in record.result and "is not a folder" in record.result
    told = requests[1].prompt.text
    assert record.result in told  # the model heard what the ledger records
    for text in (record.result, told):
        assert str(tmp_path) not in text and "Errno" not in text
    assert planted.read_text() == "not a folder\n"


def test_a_workspace_under_a_file_is_one_config_error_not_an_os_error(tmp_path: Path) -> None:
    from clearance._agents.workspace import Workspace
    from clearance._core.errors import ConfigError

    planted = tmp_path / "file"
    planted.write_text("kept\n")
    with pytest.raises(ConfigError, match=r"^cannot make the folder '.*file': ") as caught:
        Workspace(planted / "agent")
    assert "\n" not in str(caught.value)
    assert planted.read_text() == "kept\n"
