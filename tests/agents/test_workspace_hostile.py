"""Hostile inputs to an agent's workspace: each is a tool error the model hears, never a crash.

A tool's text that is not valid UTF-8 (a lone surrogate, as a file name read with surrogate
escapes), content the model sends that is not valid UTF-8, and a name the model planted where
an offloaded output is kept: the run goes on, the ledger records what the model was shown,
and the run verifies.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._agents.workspace import Workspace
from clearance._agents.workspace_tools import WorkspaceSlot, write_output
from clearance._context.verify import verify_run
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

LONG = "".join(f"line {n} of the long output\n" for n in range(1, 301))
DIGEST = hashlib.sha256(LONG.encode("utf-8")).hexdigest()


def fetch(topic: str) -> str:
    """Fetch a long report."""
    return LONG


def listing(count: int) -> str:
    """List files whose names are not UTF-8 (read with surrogate escapes)."""
    return "".join(f"file_{n}_\udcff.txt\n" for n in range(count))


async def run(tmp_path, calls: list[tuple[str, dict[str, Any]]]):
    """The agent makes ``calls`` in turn, then answers; the model's requests and records."""
    requests: list[Any] = []

    def answer(request):
        requests.append(request)
        step = len(requests)
        if step <= len(calls):
            name, arguments = calls[step - 1]
            return ToolCall(id=f"c{step}", name=name, arguments=arguments)
        return "done"

    tools = ("fetch", "listing", "read_output", "write_output")
    team = Team(agents=(Agent(name="a", instructions="You work.", tools=tools),))
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                            tools=[fetch, listing],
                            options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        task = Task(id="t", title="Work", description="Do the work.", assignee="a")
        result = await orch.run_tasks([task])
        assert result.status == "completed", result.error
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
        records = ledger.tool_calls(result.run_id)
    return [r.prompt.messages[-1].content for r in requests], records


async def test_a_tools_text_that_is_not_utf8_reaches_the_model_replaced(tmp_path):
    seen, records = await run(tmp_path, [("listing", {"count": 3})])
    assert "file_0_?.txt" in seen[1]
    assert not records[0].is_error


async def test_a_long_tool_text_that_is_not_utf8_is_offloaded_and_read_back(tmp_path):
    requests: list[str] = []  # the reference is known only once offloaded

    def answer(request):
        text = request.prompt.messages[-1].content
        requests.append(text)
        if len(requests) == 1:
            return ToolCall(id="l", name="listing", arguments={"count": 300})
        if len(requests) == 2:
            reference = text.split("full text in ")[1].split(";")[0]
            return ToolCall(id="r", name="read_output",
                            arguments={"name": reference, "start_line": 300})  # fmt: skip
        return "done"

    team = Team(agents=(Agent(name="a", instructions="You work.",
                              tools=("listing", "read_output")),))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(team, model=FunctionModel(answer), ledger=ledger, tools=[listing],
                            options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        task = Task(id="t", title="Work", description="Do the work.", assignee="a")
        result = await orch.run_tasks([task])
        assert result.status == "completed", result.error
        assert verify_run(ledger, result.run_id).ok
    assert "file_299_?.txt" in requests[2]


def test_write_output_of_content_that_is_not_utf8_is_a_tool_error(tmp_path):
    slot = WorkspaceSlot(Workspace(tmp_path / "ws"))
    output, breach = write_output(slot, {"name": "x.txt", "content": "a\ud800b"})
    assert output.is_error and "UTF-8" in output.content and breach is None
    assert not (tmp_path / "ws" / "outputs" / "x.txt").exists()


async def test_write_output_of_content_that_is_not_utf8_is_heard_in_a_run(tmp_path):
    seen, records = await run(tmp_path, [("write_output", {"name": "x", "content": "\ud800"})])
    assert records[0].is_error and "not valid UTF-8" in seen[1]


async def test_a_folder_planted_at_the_offloaded_name_is_a_tool_error(tmp_path):
    seen, records = await run(tmp_path, [
        ("write_output", {"name": f"{DIGEST}.txt/x", "content": "planted"}),
        ("fetch", {"topic": "x"}),
    ])  # fmt: skip
    assert records[1].is_error and "error:" in seen[2]


async def test_a_file_forged_at_the_offloaded_name_is_replaced_by_the_real_text(tmp_path):
    seen, records = await run(tmp_path, [
        ("write_output", {"name": f"{DIGEST}.txt", "content": "FORGED\n"}),
        ("fetch", {"topic": "x"}),
        ("read_output", {"name": f"outputs/{DIGEST}.txt", "max_lines": 2}),
    ])  # fmt: skip
    assert f"full text in outputs/{DIGEST}.txt" in seen[2]
    page = records[2].result
    assert "FORGED" not in page and "line 2 of the long output" in page


def test_a_name_the_system_would_refuse_leaves_no_folder_behind(tmp_path):
    slot = WorkspaceSlot(Workspace(tmp_path / "ws"))
    for n in range(3):  # each call would leave 20 folders no cap counts
        name = f"d{n}/" * 20 + "y" * 300
        output, breach = write_output(slot, {"name": name, "content": "c"})
        assert output.is_error and breach is None
    assert list((tmp_path / "ws" / "outputs").iterdir()) == []


def test_a_refusal_never_names_where_the_workspace_is_on_this_host(tmp_path) -> None:
    """The model (and its provider) hears the path inside the workspace, not the host's."""
    from clearance._agents.workspace_tools import read_output

    workspace = Workspace(tmp_path / "run" / "agent")
    slot = WorkspaceSlot(workspace)
    (workspace.outputs_dir / "real.txt").write_text("secret\n")
    os.symlink(workspace.outputs_dir / "real.txt", workspace.outputs_dir / "link.txt")
    refusals = [
        write_output(slot, {"name": "link.txt", "content": "x"})[0],
        read_output(slot, {"name": "link.txt"}),
        read_output(slot, {"name": "missing.txt"}),
    ]
    for refusal in refusals:
        assert refusal.is_error, refusal.content
        assert str(tmp_path) not in refusal.content, refusal.content
