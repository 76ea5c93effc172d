"""A function tool is the user's code: each call has a deadline, and a blocking one runs off
the event loop, so it holds up neither the other tasks nor the end of the run."""

from __future__ import annotations

import asyncio
import math
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import Agent, ConfigError, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._agents.tools import TOOL_TIMEOUT_S, Tool, mark_tool, marked_tool
from clearance.cli._app import app
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="editor", instructions="You edit.")


def subject(request: Any) -> str:
    return request.prompt.manifest.subject


def tool_results(request: Any) -> str:
    return "\n".join(m.content or "" for m in request.prompt.messages)


async def run(tmp_path: Path, tools: dict[str, Any], tasks: list[Task], answer: Any) -> Any:
    team = Team(agents=(Agent(name="a", instructions="x", tools=tuple(tools)),
                        Agent(name="b", instructions="y")), coordinator=COORD)  # fmt: skip
    model = FunctionModel(answer)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=model, ledger=ledger, tools=tools,
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        result = await orchestrator.run_tasks(tasks)
        calls = ledger.tool_calls(result.run_id)
    return result, calls, model


def calling(name: str, **arguments: Any) -> Any:
    """Task t's first answer calls the tool; every other answer is final."""
    asked: list[str] = []

    def answer(request: Any) -> Any:
        if subject(request) == "task:t" and not asked:
            asked.append(name)
            return ToolCall(id="c1", name=name, arguments=arguments)
        return "done"

    return answer


def test_a_function_tool_has_the_default_deadline_and_mark_tool_changes_it() -> None:
    def plain(x: int) -> str:
        """A tool."""
        return str(x)

    assert Tool.from_function(plain).timeout_s == TOOL_TIMEOUT_S == 60.0
    mark_tool(plain, timeout_s=2.5)
    assert Tool.from_function(plain).timeout_s == 2.5


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, "5", 86_401])
def test_a_deadline_that_is_not_seconds_is_refused(bad: Any) -> None:
    def plain(x: int) -> str:
        """A tool."""
        return str(x)

    with pytest.raises(ConfigError, match="timeout_s must be seconds in"):
        mark_tool(plain, timeout_s=bad)


async def test_a_blocking_tool_past_its_deadline_is_abandoned_and_the_model_told(tmp_path):
    def stall(seconds: float) -> str:
        """Sleep."""
        time.sleep(seconds)
        return "woke"

    mark_tool(stall, timeout_s=0.3)
    tasks = [Task(id="t", title="T", description="d", assignee="a")]
    started = time.monotonic()
    result, calls, model = await run(tmp_path, {"stall": stall}, tasks,
                                     calling("stall", seconds=30))  # fmt: skip
    assert time.monotonic() - started < 10  # not the 30 s the tool asked for
    assert result.tasks["t"].status == "completed"
    (call,) = calls
    assert call.is_error
    assert call.result == ("error: the tool 'stall' did not return within 0.3 s (its timeout_s); "
                           "it was abandoned")  # fmt: skip
    second = [r for r in model.requests if subject(r) == "task:t"][1]
    assert "did not return within 0.3 s" in tool_results(second)  # what the model received


async def test_a_blocking_tool_does_not_hold_up_the_other_tasks(tmp_path):
    """Task t's tool blocks until task u answers, and u answers only after an await on the loop
    (its own async tool's sleep): possible only while t's tool runs off the event loop."""
    released = threading.Event()

    def wait_for_u() -> str:
        """Wait."""
        return "released" if released.wait(10) else "never released"

    async def pause() -> str:
        """Pause."""
        await asyncio.sleep(0.3)
        return "paused"

    asked: set[str] = set()

    def answer(request: Any) -> Any:
        s = subject(request)
        if s in ("task:t", "task:u") and s not in asked:
            asked.add(s)
            name = "wait_for_u" if s == "task:t" else "pause"
            return ToolCall(id=f"c-{s}", name=name, arguments={})
        if s == "task:u":
            released.set()
        return "done"

    team = Team(agents=(Agent(name="a", instructions="x", tools=("wait_for_u",)),
                        Agent(name="b", instructions="y", tools=("pause",))),
                coordinator=COORD)  # fmt: skip
    tasks = [Task(id="t", title="T", description="d", assignee="a"),
             Task(id="u", title="U", description="e", assignee="b")]  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                    tools={"wait_for_u": wait_for_u, "pause": pause},
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        result = await orchestrator.run_tasks(tasks)
        results = {c.name: c.result for c in ledger.tool_calls(result.run_id)}
    assert results == {"wait_for_u": "released", "pause": "paused"}
    assert result.tasks["u"].status == "completed"


async def test_an_async_tool_that_never_returns_meets_its_deadline(tmp_path):
    async def hang() -> str:
        """Hang."""
        await asyncio.Event().wait()
        return "never"

    mark_tool(hang, timeout_s=0.2)
    tasks = [Task(id="t", title="T", description="d", assignee="a")]
    result, calls, _ = await run(tmp_path, {"hang": hang}, tasks, calling("hang"))
    (call,) = calls
    assert call.is_error and "did not return within 0.2 s" in call.result
    assert result.tasks["t"].status == "completed"


async def test_a_tool_raising_timeout_error_itself_is_its_own_failure(tmp_path):
    def gives_up() -> str:
        """Give up."""
        raise TimeoutError("the upstream API timed out")

    tasks = [Task(id="t", title="T", description="d", assignee="a")]
    _, calls, _ = await run(tmp_path, {"gives_up": gives_up}, tasks, calling("gives_up"))
    (call,) = calls
    assert call.is_error and call.result == "error: the upstream API timed out"


def test_marked_tool_keeps_an_async_function_async() -> None:
    async def fetch(url: str) -> str:
        """Fetch."""
        return url

    wrapped = marked_tool(fetch, timeout_s=3)
    assert asyncio.iscoroutinefunction(wrapped)
    assert Tool.from_function(wrapped).timeout_s == 3


TOOL_MODULE = '''\
import time

def slow(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "slept"
'''

TEAM = """\
name: deadlines
agents:
  - {name: a, instructions: "You work.", tools: [slow]}
tools:
  slow: {function: "deadline_tools_mod:slow", timeout_s: %s}
tasks:
  - {id: t, title: T, description: Do it., assignee: a}
"""


@pytest.fixture
def team_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "deadline_tools_mod.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "deadline_tools_mod", raising=False)
    return tmp_path


@pytest.mark.parametrize("bad", ["0", "-1", "true", '"5"', "100000", ".nan"])
def test_a_team_file_deadline_out_of_range_is_one_line_exit_2(team_dir: Path, bad: str) -> None:
    (team_dir / "team.yaml").write_text(TEAM % bad)
    db = f"sqlite:///{team_dir / 'runs.db'}"
    out = CliRunner().invoke(app, ["run", str(team_dir / "team.yaml"), "--model", "fake:x",
                                   "--db", db])  # fmt: skip
    assert out.exit_code == 2, out.output
    assert len(out.output.strip().splitlines()) == 1
    assert "tools.slow.timeout_s" in out.output


@pytest.mark.network
def test_a_team_file_deadline_reaches_the_tool(team_dir: Path, openai_server, monkeypatch) -> None:
    """End to end: a real model server asks for a 120 s call; the run goes on after 0.25 s."""

    def reply(messages: list[dict[str, Any]]) -> Any:
        text = "\n".join(m["content"] or "" for m in messages)
        if "did not return within 0.25 s" in text:  # what the model received
            return "the tool was too slow"
        if "You work." in text:  # agent a's task, not the synthesis
            return [("slow", {"seconds": 120})]
        return "summary"

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    (team_dir / "team.yaml").write_text(TEAM % "0.25")
    db = f"sqlite:///{team_dir / 'runs.db'}"
    started = time.monotonic()
    out = CliRunner().invoke(app, ["run", str(team_dir / "team.yaml"), "--model", "openai:m",
                                   "--db", db])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert time.monotonic() - started < 60  # far from the 120 s the call asked for
    run_id = re.search(r"run id: (\S+)", out.output).group(1)
    with RunLedger(db) as ledger:
        (call,) = ledger.tool_calls(run_id)
        assert call.is_error and "did not return within 0.25 s" in call.result
    inspect = CliRunner().invoke(app, ["inspect", run_id, "--task", "t", "--no-pager",
                                       "--db", db])  # fmt: skip
    assert "did not return within 0.25 s" in inspect.output


GIVEN_TEAM = """\
name: given
agents:
  - {name: a, instructions: "You work.", tools: [probe]}
tools:
  probe: {timeout_s: 0.5, idempotent: true}
tasks:
  - {id: t, title: T, description: Do it., assignee: a}
"""


def probe(x: int) -> str:
    """Probe."""
    return str(x)


@pytest.mark.parametrize("as_tool", [False, True])
def test_a_long_form_entry_without_function_sets_the_given_tools_options(tmp_path, as_tool):
    """A tool given in code gets its entry's options: the keys are not accepted for nothing."""
    from clearance import RunSpec
    from clearance.runs import spec_tools

    (tmp_path / "team.yaml").write_text(GIVEN_TEAM)
    spec = RunSpec.from_file(tmp_path / "team.yaml")
    given = Tool.from_function(probe) if as_tool else probe
    for each in (spec, RunSpec.from_record(spec.to_record(), run_id="r")):  # run and resume
        (tool,) = spec_tools(each, {"probe": given}).values()
        tool = tool if isinstance(tool, Tool) else Tool.from_function(tool)
        assert (tool.timeout_s, tool.idempotent, tool.replay) == (0.5, True, True)
    assert Tool.from_function(probe).timeout_s == TOOL_TIMEOUT_S  # the function is unchanged


def test_an_entry_changes_only_the_options_it_sets(tmp_path):
    """``approval: required`` alone leaves the function's own marks as they are."""
    from clearance import RunSpec
    from clearance.runs import spec_tools

    def marked(x: int) -> str:
        """Marked."""
        return str(x)

    mark_tool(marked, idempotent=True, timeout_s=7)
    (tmp_path / "team.yaml").write_text(GIVEN_TEAM.replace("{timeout_s: 0.5, idempotent: true}",
                                                           "{approval: required}"))  # fmt: skip
    spec = RunSpec.from_file(tmp_path / "team.yaml")
    (function,) = spec_tools(spec, {"probe": marked}).values()
    tool = Tool.from_function(function)
    assert (tool.timeout_s, tool.idempotent) == (7, True)
