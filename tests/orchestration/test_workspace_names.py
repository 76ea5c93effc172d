"""Every folder of a run's workspaces gets a name no other folder of the run has.

A task's later attempt is named ``task_<id>.2``; a child of task ``<id>`` is ``<id>.<n>``.
A run with a task ``b`` (two attempts: ``task_b``, ``task_b.2``) and a task ``task_b`` (two
children: ``task_b.1``, ``task_b.2``) asks for ``task_b.2`` twice. The child used to fail
("needs a fresh workspace"); it now gets ``task_b.2.2``, its own, and the run verifies.
"""

from __future__ import annotations

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.spec import FanOut
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def test_a_child_and_a_later_attempt_asking_for_one_folder_get_one_each(tmp_path):
    team = Team(
        agents=(
            Agent(name="dev", instructions="You count.", tools=("write_output",)),
            Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
            Agent(name="helper", instructions="You help.", tools=("write_output",)),
        ),
        coordinator=Agent(name="editor", instructions="You edit."),
    )
    tasks = [
        Task(id="b", title="B", description="Count.", assignee="dev", output_schema=SCHEMA),
        Task(id="task_b", title="Task B", description="Lead.", assignee="lead",
             depends_on=("b",), fan_out=FanOut(agent="helper", goals=("one", "two"))),
    ]  # fmt: skip
    attempts: list[str] = []

    def answer(request):
        subject = request.prompt.manifest.subject
        text = request.prompt.messages[-1].content
        used = "## Results of your tool calls" in text
        if subject == "task:b" and not used:  # each attempt writes to its own workspace
            attempts.append(text)
            return ToolCall(
                id="w", name="write_output", arguments={"name": "a.txt", "content": subject}
            )
        if subject == "task:b":
            return "not json" if len(attempts) == 1 else '{"n": 1}'
        if subject.startswith("child:") and not used:
            return ToolCall(
                id="w", name="write_output", arguments={"name": "a.txt", "content": subject}
            )
        return "done"

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks(tasks)  # fmt: skip
        assert result.status == "completed", result.error
        assert len(attempts) == 2  # the repair attempt had a workspace of its own
        run_dir = tmp_path / "ws" / result.run_id
        assert {p.name for p in run_dir.iterdir()} == {
            "task_b", "task_b.2", "task_b.1", "task_b.2.2",
        }  # fmt: skip
        written = {p.parent.parent.name: p.read_text() for p in run_dir.glob("*/outputs/a.txt")}
        assert written == {
            "task_b": "task:b", "task_b.2": "task:b",
            "task_b.1": "child:task_b.1", "task_b.2.2": "child:task_b.2",
        }  # fmt: skip
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
