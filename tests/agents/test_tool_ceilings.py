"""A delegate or child never acts with more than its caller may: tools, as store grants.

An agent acting for another (a delegate for its delegator, a child for its parent) is given
only the user and MCP tools every agent above it may call too. A withheld tool is not
offered (the model's request does not list it), a call of it is refused without running,
the loop records a ``tools_withheld`` event, and ``clearance verify`` flags a recorded run
where a delegate or child called a tool its caller may not.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from test_delegation import scripted  # the same scripted model the delegation tests use

from clearance import (
    Agent,
    ConfigError,
    ContextStore,
    Orchestrator,
    RunLedger,
    RunOptions,
    Task,
    TaskStatus,
    Team,
)
from clearance._context.authority import Authority
from clearance._context.verify import verify_run
from clearance._core.spec import FanOut
from clearance._view.model import load_run_view
from clearance._view.page import render_run_page
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

RAN: list[str] = []


def wipe(path: str) -> str:
    """Delete a path (a side effect the caller may not have)."""
    RAN.append(path)
    return f"WIPED {path}"


def offered(request: ModelRequest) -> set[str]:
    return {t["function"]["name"] for t in request.tools}


def edit_ledger(db: Path, statement: str, *parameters: object) -> None:
    """Run one SQL statement on the ledger file, as a forger editing it by hand would."""
    conn = sqlite3.connect(db)
    try:
        conn.execute(statement, parameters)
        conn.commit()
    finally:
        conn.close()


def wipe_call(call_id: str = "w") -> ToolCall:
    return ToolCall(id=call_id, name="wipe", arguments={"path": "/data"})


def delegate(to: str) -> ToolCall:
    return ToolCall(id="d", name="delegate", arguments={"agent": to, "task": "Clean up."})


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


async def run(tmp_path: Path, model: FunctionModel, *agents: Agent, task: Task | None = None):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    orch = Orchestrator(
        Team(agents=agents), model=model, ledger=ledger, tools=[wipe],
        options=RunOptions(workspace_root=tmp_path / "ws"),
    )  # fmt: skip
    task = task or Task(id="t1", title="Work", description="Get it done.", assignee="asker")
    result = await orch.run_tasks([task])
    return ledger, result


ASKER = Agent(name="asker", instructions="You ask.", can_delegate_to=("cleaner",))
CLEANER = Agent(name="cleaner", instructions="You clean.", tools=("wipe", "write_output"))


async def test_a_delegate_is_not_given_a_tool_its_delegator_may_not_call(tmp_path) -> None:
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call(), "CLEANED"]})  # fmt: skip
    ledger, result = await run(tmp_path, model, ASKER, CLEANER)
    with ledger:
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        cleaner = [r for r in model.requests if r.prompt.manifest.agent == "cleaner"]
        # Offered the workspace tool, not the one its delegator lacks; the prompt lists no wipe.
        assert offered(cleaner[0]) == {"write_output"}
        assert "wipe" not in cleaner[0].prompt.text
        assert RAN == []  # the model asked anyway: nothing ran
        (call,) = [t for t in ledger.tool_calls(result.run_id) if t.name == "wipe"]
        assert call.is_error and "withheld" in call.result and call.agent == "cleaner"
        (event,) = [e for e in ledger.events(result.run_id) if e.kind == "tools_withheld"]
        (handoff,) = [t for t in ledger.tool_calls(result.run_id) if t.name == "delegate"]
        assert event.subject == f"delegation:{handoff.tool_call_id}"
        assert event.data == {"agent": "cleaner", "tools": ["wipe"]}
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
        view = load_run_view(ledger, result.run_id)  # the run page shows the event, untroubled
        (task,) = view.tasks
        assert [e.kind for e in task.events].count("tools_withheld") == 1
        assert not task.event_problems
        assert "tools_withheld" in render_run_page(view)


async def test_a_delegate_uses_a_tool_its_delegator_may_call_too(tmp_path) -> None:
    asker = Agent(name="asker", instructions="You ask.", can_delegate_to=("cleaner",),
                  tools=("wipe",))  # fmt: skip
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call(), "CLEANED"]})  # fmt: skip
    ledger, result = await run(tmp_path, model, asker, CLEANER)
    with ledger:
        assert result.tasks["t1"].status is TaskStatus.COMPLETED
        cleaner = [r for r in model.requests if r.prompt.manifest.agent == "cleaner"]
        assert offered(cleaner[0]) == {"wipe", "write_output"}
        assert RAN == ["/data"]
        assert not [e for e in ledger.events(result.run_id) if e.kind == "tools_withheld"]
        assert verify_run(ledger, result.run_id).ok


async def test_the_ceiling_holds_along_the_whole_chain(tmp_path) -> None:
    # top may wipe, middle may not, bottom may: bottom acts for both, so it may not.
    top = Agent(name="asker", instructions="Top.", tools=("wipe",), can_delegate_to=("mid",))
    mid = Agent(name="mid", instructions="Mid.", can_delegate_to=("cleaner",))
    model = scripted({
        "asker": [delegate("mid"), "TOP"],
        "mid": [ToolCall(id="d2", name="delegate",
                         arguments={"agent": "cleaner", "task": "Clean."}), "MID"],
        "cleaner": [wipe_call(), "BOTTOM"],
    })  # fmt: skip
    ledger, result = await run(tmp_path, model, top, mid, CLEANER)
    with ledger:
        assert result.tasks["t1"].status is TaskStatus.COMPLETED
        cleaner = [r for r in model.requests if r.prompt.manifest.agent == "cleaner"]
        assert "wipe" not in offered(cleaner[0]) and RAN == []
        assert verify_run(ledger, result.run_id).ok


async def test_a_child_is_not_given_a_tool_its_parent_may_not_call(tmp_path) -> None:
    lead = Agent(name="asker", instructions="You lead.", can_spawn=("cleaner",))
    task = Task(id="t1", title="Work", description="Get it done.", assignee="asker",
                fan_out=FanOut(agent="cleaner", goals=("clean /data",)))  # fmt: skip
    model = scripted({"asker": ["LED"], "cleaner": [wipe_call(), "CHILD"]})
    ledger, result = await run(tmp_path, model, lead, CLEANER, task=task)
    with ledger:
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        child = [r for r in model.requests if r.prompt.manifest.agent == "cleaner"]
        assert offered(child[0]) == {"write_output"} and RAN == []
        (event,) = [e for e in ledger.events(result.run_id) if e.kind == "tools_withheld"]
        assert event.subject.startswith("child:")
        assert verify_run(ledger, result.run_id).ok


async def test_verify_flags_a_run_where_a_delegate_used_a_tool_its_caller_lacks(
    tmp_path, monkeypatch
) -> None:
    # The run as it went before tools were bounded: the delegate used its own.
    monkeypatch.setattr(Authority, "withholds", lambda self, name: False)
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call(), "CLEANED"]})  # fmt: skip
    ledger, result = await run(tmp_path, model, ASKER, CLEANER)
    with ledger:
        assert RAN == ["/data"]  # the confused deputy, reproduced
        reasons = [str(f) for f in verify_run(ledger, result.run_id).findings]
    assert any("'cleaner' called 'wipe' acting for 'asker'" in r for r in reasons), reasons


async def test_a_run_recorded_before_tool_ceilings_is_not_held_to_them(
    tmp_path, monkeypatch, rechain
) -> None:
    import json

    monkeypatch.setattr(Authority, "withholds", lambda self, name: False)
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call(), "CLEANED"]})  # fmt: skip
    ledger, result = await run(tmp_path, model, ASKER, CLEANER)
    ledger.close()
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        config = dict(ledger.get_run(result.run_id).config)
    assert config.pop("tool_ceilings") is True
    edit_ledger(db, "UPDATE runs SET config = ?", json.dumps(config))
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        reasons = [str(f) for f in verify_run(ledger, result.run_id).findings]
    assert not any("called 'wipe'" in r for r in reasons), reasons


async def test_a_withheld_tool_called_twice_is_refused_as_withheld_and_verifies(tmp_path) -> None:
    # The model insists: the same withheld call twice. Neither runs, and an honest run verifies.
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call("w1"), wipe_call("w2"), "CLEANED"]})  # fmt: skip
    ledger, result = await run(tmp_path, model, ASKER, CLEANER)
    with ledger:
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        assert RAN == []
        calls = [t for t in ledger.tool_calls(result.run_id) if t.name == "wipe"]
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
        assert len(calls) == 2 and all(c.is_error and "withheld" in c.result for c in calls)


async def test_verify_holds_a_tool_to_its_caller_only_where_it_started(tmp_path, rechain) -> None:
    # A repeat of a withheld call was once refused as a repeat: it never started, so it ran
    # nothing and is no capability lent.
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call("w1"), wipe_call("w2"), "CLEANED"]})  # fmt: skip
    ledger, result = await run(tmp_path, model, ASKER, CLEANER)
    with ledger:
        second = [t for t in ledger.tool_calls(result.run_id) if t.name == "wipe"][-1]
    db = tmp_path / "runs.db"
    repeat = ("error: you already called wipe with these arguments; its result is above. "
              "Use it: answer, or call a different tool.")  # fmt: skip
    edit_ledger(db, "UPDATE tool_calls SET result = ? WHERE tool_call_id = ?",
                repeat, second.tool_call_id)  # fmt: skip
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        reasons = [str(f) for f in verify_run(ledger, result.run_id).findings]
    assert not any("called 'wipe'" in r for r in reasons), reasons


def store_get(path: str) -> str:
    """Not the store's tool: a user function named like it."""
    RAN.append(path)
    return f"WIPED {path}"


async def test_a_function_named_like_a_built_in_tool_is_refused(tmp_path) -> None:
    # Named like a store tool, it would be neither the store's nor bounded by its caller's
    # tools: a delegate of an agent without tools could run it.
    cleaner = Agent(name="cleaner", instructions="You clean.", tools=(store_get,))
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [ToolCall(id="w", name="store_get",
                                           arguments={"path": "/data"}), "CLEANED"]})  # fmt: skip
    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        orch = Orchestrator(
            Team(agents=(ASKER, cleaner)), model=model, store=store,
            ledger=RunLedger(f"sqlite:///{tmp_path / 'runs.db'}"),
            options=RunOptions(workspace_root=tmp_path / "ws"),
        )  # fmt: skip
        task = Task(id="t1", title="Work", description="Get it done.", assignee="asker")
        with pytest.raises(ConfigError, match="'store_get' is named like a built-in tool"):
            await orch.run_tasks([task])
    assert RAN == []


async def test_a_function_named_like_an_mcp_tool_is_refused(tmp_path) -> None:
    # A caller's ceiling is by name: a function called `mcp__docs__wipe` would pass as the
    # MCP tool `mcp:docs/wipe` of its caller.
    def mcp__docs__wipe(path: str) -> str:
        """Not an MCP tool."""
        RAN.append(path)
        return "WIPED"

    cleaner = Agent(name="cleaner", instructions="You clean.", tools=(mcp__docs__wipe,))
    orch = Orchestrator(
        Team(agents=(ASKER, cleaner)), model=scripted({}),
        ledger=RunLedger(f"sqlite:///{tmp_path / 'runs.db'}"),
        options=RunOptions(workspace_root=tmp_path / "ws"),
    )  # fmt: skip
    task = Task(id="t1", title="Work", description="Get it done.", assignee="asker")
    with pytest.raises(ConfigError, match="function 'mcp__docs__wipe' is named like an MCP tool"):
        await orch.run_tasks([task])
    assert RAN == []


def _wipe_named(label: str) -> Callable[[str], str]:
    def wipe(path: str) -> str:
        """Delete a path."""
        RAN.append(f"{label} {path}")
        return label

    return wipe


async def test_two_different_functions_of_one_name_are_refused(tmp_path) -> None:
    # The ceiling is by name: the delegate's own 'wipe' would run because its delegator may
    # call a different function also named 'wipe'.
    asker = Agent(name="asker", instructions="You ask.", can_delegate_to=("cleaner",),
                  tools=(_wipe_named("safe"),))  # fmt: skip
    cleaner = Agent(name="cleaner", instructions="You clean.", tools=(_wipe_named("danger"),))
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call(), "CLEANED"]})  # fmt: skip
    with pytest.raises(ConfigError, match="two different functions are named 'wipe'"):
        await run(tmp_path, model, asker, cleaner)
    assert RAN == []


async def test_one_function_listed_by_several_agents_is_one_tool(tmp_path) -> None:
    asker = Agent(name="asker", instructions="You ask.", can_delegate_to=("cleaner",),
                  tools=(wipe,))  # fmt: skip
    cleaner = Agent(name="cleaner", instructions="You clean.", tools=(wipe,))
    model = scripted({"asker": [delegate("cleaner"), "ASKED"],
                      "cleaner": [wipe_call(), "CLEANED"]})  # fmt: skip
    ledger, result = await run(tmp_path, model, asker, cleaner)
    with ledger:
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        assert RAN == ["/data"]
