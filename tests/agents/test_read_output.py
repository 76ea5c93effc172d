"""``read_output``: an agent reads its own offloaded outputs back, a page at a time.

A long tool output reaches the model as a preview and a reference (``outputs/<sha>.txt``);
before ``read_output`` no tool could read that file, so the reference pointed nowhere. Each
test checks what the model received, and that the run verifies.
"""

from __future__ import annotations

import os

import pytest

from clearance import Agent, ConfigError, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._agents.workspace import Workspace
from clearance._agents.workspace_tools import (
    READ_OUTPUT_LINES,
    READ_OUTPUT_MAX_CHARS,
    WorkspaceSlot,
    read_output,
)
from clearance._context.verify import verify_run
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

LONG = "".join(f"line {n} of the long output\n" for n in range(1, 3001))


def fetch(topic: str) -> str:
    """Fetch a long report."""
    return LONG


def results_text(request) -> str:
    return request.prompt.messages[-1].content


def team(*tools: str) -> Team:
    return Team(agents=(Agent(name="reader", instructions="You read.", tools=tools),))


async def run(tmp_path, team: Team, reads: list[dict]):
    """The agent fetches, then reads each of ``reads``, then answers; the model's requests."""
    model_calls = []

    def answer(request):
        model_calls.append(request)
        step = len(model_calls)
        if step == 1:
            return ToolCall(id="f", name="fetch", arguments={"topic": "x"})
        if step - 2 < len(reads):
            return ToolCall(id=f"r{step}", name="read_output", arguments=reads[step - 2])
        return "done"

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(team, model=FunctionModel(answer), ledger=ledger, tools=[fetch],
                            options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        task = Task(id="t", title="Read", description="Read the report.", assignee="reader")
        result = await orch.run_tasks([task])
        assert result.status == "completed", result.error
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
        tool_calls = ledger.tool_calls(result.run_id)
    return model_calls, tool_calls


async def test_the_model_reads_the_offloaded_text_it_was_pointed_to(tmp_path):
    calls, _ = await run(tmp_path, team("fetch", "read_output"), [])
    preview = results_text(calls[1])
    assert "line 3000" not in preview
    reference = preview.split("full text in ")[1].split(";")[0]
    assert reference.startswith("outputs/") and "; read it with read_output]" in preview

    calls, records = await run(
        tmp_path / "again",
        team("fetch", "read_output"),
        [{"name": reference, "start_line": 2999}, {"name": reference.removeprefix("outputs/"),
                                                   "start_line": 10, "max_lines": 3}],
    )  # fmt: skip
    last_page = results_text(calls[2])
    assert f"{reference}: lines 2999-3000 of 3000\nline 2999 of the long output\n" in last_page
    assert "line 3000 of the long output" in last_page
    page = results_text(calls[3])
    expected = "".join(f"line {n} of the long output\n" for n in (10, 11, 12))
    assert f"{reference}: lines 10-12 of 3000; the next page starts at start_line=13\n" in page
    assert expected in page
    # What the model got is what the ledger holds, byte for byte.
    reads = [r for r in records if r.name == "read_output"]
    assert [r.result for r in reads][-1].endswith(expected)


async def test_without_read_output_the_reference_does_not_promise_a_reader(tmp_path):
    calls, _ = await run(tmp_path, team("fetch"), [])
    preview = results_text(calls[1])
    assert "read it with" not in preview
    reference = preview.split("full text in ")[1].split("]")[0]
    assert reference.startswith("outputs/") and reference.endswith(".txt")


def workspace_with(tmp_path, text: str) -> WorkspaceSlot:
    space = Workspace(tmp_path / "ws")
    space.write_output("out.txt", text)
    return WorkspaceSlot(space)


@pytest.mark.parametrize(
    "name",
    ["../history/x", "/etc/passwd", "outputs/../../secret.txt", "missing.txt", "a\x1b[2Jb"],
)
def test_a_name_outside_the_outputs_folder_or_missing_is_a_tool_error(tmp_path, name):
    (tmp_path / "secret.txt").write_text("SECRET-CANARY")
    slot = workspace_with(tmp_path, "inside\n")
    output = read_output(slot, {"name": name})
    assert output.is_error
    assert "SECRET-CANARY" not in output.content


def test_a_link_planted_in_the_outputs_folder_is_not_followed(tmp_path):
    (tmp_path / "secret.txt").write_text("SECRET-CANARY")
    slot = workspace_with(tmp_path, "inside\n")
    os.symlink(tmp_path / "secret.txt", tmp_path / "ws" / "outputs" / "link.txt")
    output = read_output(slot, {"name": "link.txt"})
    assert output.is_error and "SECRET-CANARY" not in output.content


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"name": 3},
        {"name": "out.txt", "start_line": 0},
        {"name": "out.txt", "start_line": True},
        {"name": "out.txt", "start_line": 1.5},
        {"name": "out.txt", "max_lines": READ_OUTPUT_LINES + 1},
        {"name": "out.txt", "max_lines": -1},
        {"name": "out.txt", "start_line": 5},
    ],
)
def test_bad_arguments_are_a_tool_error_naming_what_is_wrong(tmp_path, arguments):
    output = read_output(workspace_with(tmp_path, "one\ntwo\n"), arguments)
    assert output.is_error and output.content.startswith("error: ")


def test_a_page_never_exceeds_its_size_and_a_huge_line_is_cut_and_said_so(tmp_path):
    huge = "x" * (READ_OUTPUT_MAX_CHARS * 3) + "\nafter\n"
    slot = workspace_with(tmp_path, huge)
    first = read_output(slot, {"name": "out.txt"})
    head, _, body = first.content.partition("\n")
    assert len(body) == READ_OUTPUT_MAX_CHARS
    assert f"(line 1 cut at {READ_OUTPUT_MAX_CHARS} characters)" in head
    assert "start_line=2" in head
    assert read_output(slot, {"name": "out.txt", "start_line": 2}).content.endswith("after\n")
    many = "".join(f"{'y' * 199}\n" for _ in range(150))  # 30,000 characters in 150 lines
    page = read_output(workspace_with(tmp_path / "b", many), {"name": "out.txt"})
    assert len(page.content) <= READ_OUTPUT_MAX_CHARS + 200
    assert "the next page starts at" in page.content


def test_reading_before_anything_was_written_makes_no_folder(tmp_path):
    made: list[Workspace] = []
    slot = WorkspaceSlot(make=lambda: made.append(Workspace(tmp_path / "ws")) or made[-1])
    output = read_output(slot, {"name": "x.txt"})
    assert output.is_error and "outputs folder is empty" in output.content
    assert made == [] and not (tmp_path / "ws").exists()


def test_read_output_is_a_reserved_name_in_a_team_file(tmp_path):
    from clearance import load_team_file

    path = tmp_path / "team.yaml"
    path.write_text(
        "name: t\nagents:\n  - {name: a, instructions: A., tools: [read_output]}\n"
        "tools:\n  read_output: {function: 'os:getcwd'}\n"
        "tasks:\n  - {id: t, title: T, description: D., assignee: a}\n"
    )
    with pytest.raises(ConfigError, match="read_output"):
        load_team_file(path)
