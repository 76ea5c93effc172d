"""Delegations `clearance verify` must catch when the ledger is rewritten and rechained.

A forger with write access rebuilds the hash chain (the `rechain` fixture), so only the
rules themselves can catch these: a delegation the delegator's ``can_delegate_to`` does not
name, a loop (A -> B -> A), a chain deeper than the runtime allows, a forged chain record.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, TaskStatus, Team
from clearance._agents.delegation import DEFAULT_MAX_DEPTH, DelegationChain
from clearance._context.verify import verify_run
from clearance._context.verify_delegation import check_delegation_chain
from clearance._core.errors import ConfigError
from clearance._state.ledger import ToolCallRecord
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")


def _delegate(to: str, text: str) -> ToolCall:
    return ToolCall(id="d", name="delegate", arguments={"agent": to, "task": text})


def _model(plans: dict[str, list[object]]) -> FunctionModel:
    def answer(request: ModelRequest) -> object:
        manifest = request.prompt.manifest
        if manifest.subject == "synthesis":
            return "SYNTH"
        plan = plans[manifest.agent]
        step = len([o for o in manifest.origins if o.startswith("tool:")])
        return plan[min(step, len(plan) - 1)]

    return FunctionModel(answer)


async def _record(db: Path, agents: tuple[Agent, ...], plans: dict[str, list[object]]) -> str:
    with RunLedger(f"sqlite:///{db}") as ledger:
        orchestrator = Orchestrator(
            Team(agents=agents, coordinator=COORD), model=_model(plans), ledger=ledger
        )
        task = Task(id="t1", title="Work", description="Do the work.", assignee="alice")
        result = await orchestrator.run_tasks([task])
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        assert verify_run(ledger, result.run_id).ok
        return result.run_id


def _findings(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


async def test_a_delegation_its_delegator_may_not_make_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    agents = (
        Agent(name="alice", instructions="A.", can_delegate_to=("bob",)),
        Agent(name="bob", instructions="B."),
        Agent(name="carol", instructions="C."),
    )
    run_id = await _record(db, agents, {"alice": [_delegate("bob", "x"), "A"], "bob": ["B"]})
    conn = sqlite3.connect(db)
    (config,) = conn.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    config = json.loads(config)
    config["agents"][0]["can_delegate_to"] = ["carol"]  # the record says alice may not ask bob
    conn.execute("UPDATE runs SET config = ? WHERE run_id = ?", (json.dumps(config), run_id))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    assert any("which its can_delegate_to does not name" in f for f in _findings(db, run_id))


async def test_a_forged_loop_a_b_a_is_a_finding(tmp_path, rechain):
    """Alice -> bob -> carol, rewritten as alice -> bob -> alice with every record agreeing."""
    db = tmp_path / "runs.db"
    agents = (
        Agent(name="alice", instructions="Same.", can_delegate_to=("bob",)),
        Agent(name="bob", instructions="B.", can_delegate_to=("alice", "carol")),
        Agent(name="carol", instructions="Same."),
    )
    plans = {"alice": [_delegate("bob", "x"), "A"], "bob": [_delegate("carol", "y"), "B"],
             "carol": ["C"]}  # fmt: skip
    run_id = await _record(db, agents, plans)
    conn = sqlite3.connect(db)
    tool_call_id, arguments, chain = conn.execute(
        "SELECT tool_call_id, arguments, chain FROM tool_calls WHERE agent = 'bob'"
    ).fetchone()
    arguments, chain = json.loads(arguments), json.loads(chain)
    arguments["agent"] = chain["steps"][1]["to"] = "alice"
    conn.execute(
        "UPDATE tool_calls SET arguments = ?, chain = ? WHERE tool_call_id = ?",
        (json.dumps(arguments), json.dumps(chain), tool_call_id),
    )
    conn.execute("UPDATE calls SET agent = 'alice' WHERE subject = ?",
                 (f"delegation:{tool_call_id}",))  # fmt: skip
    conn.commit()
    conn.close()
    rechain(db, run_id)
    findings = _findings(db, run_id)
    assert any("'alice' is already in the delegation chain alice -> bob" in f for f in findings)


async def test_a_forged_chain_record_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    agents = (
        Agent(name="alice", instructions="A.", can_delegate_to=("bob",)),
        Agent(name="bob", instructions="B."),
    )
    run_id = await _record(db, agents, {"alice": [_delegate("bob", "x"), "A"], "bob": ["B"]})
    conn = sqlite3.connect(db)
    (chain,) = conn.execute("SELECT chain FROM tool_calls WHERE name = 'delegate'").fetchone()
    chain = json.loads(chain)
    chain["steps"][0]["task"] = "something else"  # what inspect would show
    conn.execute("UPDATE tool_calls SET chain = ? WHERE name = 'delegate'", (json.dumps(chain),))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    assert any("recorded delegation chain is not" in f for f in _findings(db, run_id))


def _step(call_id: str, subject: str, by: str, to: str) -> ToolCallRecord:
    return ToolCallRecord(
        tool_call_id=call_id, run_id="r", subject=subject, agent=by, step=1, name="delegate",
        arguments={"agent": to, "task": "t"}, result="ok", is_error=False, store_reads=(),
        chain=None, created_at=datetime.now(UTC),
    )  # fmt: skip


def test_a_chain_deeper_than_the_runtime_allows_is_a_finding():
    names = ["a", "b", "c", "d", "e"]
    calls, subject = {}, "task:t"
    for n, (by, to) in enumerate(itertools.pairwise(names), 1):
        calls[f"c{n}"] = _step(f"c{n}", subject, by, to)
        subject = f"delegation:c{n}"
    assert len(calls) == DEFAULT_MAX_DEPTH + 1
    problems = [reason for _, reason in check_delegation_chain("c4", calls, {})]
    assert problems == [f"the delegation chain has 4 steps, more than {DEFAULT_MAX_DEPTH}"]
    assert list(check_delegation_chain("c3", calls, {})) == []


def test_delegate_calls_that_point_at_each_other_are_a_finding():
    calls = {"c1": _step("c1", "delegation:c2", "a", "b"),
             "c2": _step("c2", "delegation:c1", "b", "a")}  # fmt: skip
    problems = [reason for _, reason in check_delegation_chain("c1", calls, {})]
    assert problems == ["the delegate calls leading to this delegation are not all recorded"]


@pytest.mark.parametrize("depth", [0, -1, float("nan"), float("inf"), True, 10**9, "3"])
def test_a_chain_depth_that_would_never_stop_is_refused(depth):
    with pytest.raises(ConfigError, match="max_depth"):
        DelegationChain(max_depth=depth)  # type: ignore[arg-type]


async def test_a_loop_through_a_spawn_is_a_finding(tmp_path, rechain):
    # The run refuses it (`DelegationChain.above`); a rewritten ledger showing one must fail.
    from clearance import RunOptions

    db = tmp_path / "runs.db"
    agents = (
        Agent(name="alice", instructions="A.", can_spawn=("carol",)),
        Agent(name="carol", instructions="C.", can_delegate_to=("dave",)),
        Agent(name="dave", instructions="D."),
    )

    def answer(request: ModelRequest) -> object:
        manifest = request.prompt.manifest
        if manifest.subject == "synthesis":
            return "SYNTH"
        seen = [o for o in manifest.origins if o.startswith("tool:")]
        if manifest.agent == "alice":
            if any(o.startswith("child_result:") for o in manifest.origins):
                return "A"
            return ToolCall(id="s", name="spawn", arguments={"agent": "carol", "goal": "help"})
        if manifest.agent == "carol":
            return _delegate("dave", "x") if not seen else "C"
        return "D"

    with RunLedger(f"sqlite:///{db}") as ledger:
        orchestrator = Orchestrator(Team(agents=agents, coordinator=COORD),
                                    model=FunctionModel(answer), ledger=ledger,
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        task = Task(id="t1", title="Work", description="Do the work.", assignee="alice")
        result = await orchestrator.run_tasks([task])
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        assert verify_run(ledger, result.run_id).ok
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT event_id, data FROM events WHERE kind = 'spawn'").fetchall()
    ((event_id, data),) = rows
    forged = {**json.loads(data), "parent_agent": "dave"}  # dave spawned carol, who asked dave
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(forged), event_id))
    conn.commit()
    conn.close()
    rechain(db, result.run_id)
    findings = _findings(db, result.run_id)
    assert any("'dave' is above the child that started this chain" in f for f in findings), findings
