"""No capability is lent along deep, mixed chains of delegations and spawns.

One team file runs task -> delegate -> child -> delegate (and task -> delegate -> delegate
that spawns), with user tools, a tool that needs approval, store grants, workspaces and the
child cap, driven by a `FunctionModel`. Each test asserts on what each model was offered and
shown, on what ran, on the ledger's records and on `verify_run` (honest, then forged).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from clearance import (
    ApprovalDecision,
    ApprovalPending,
    ApprovalRequest,
    BudgetExceeded,
    ContextStore,
    RunLedger,
    RunServices,
    RunSpec,
    run_spec,
    verify_run,
)
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

SECRET_LEAD = "LEAD-ONLY-2020"
SECRET_MID = "MID-ONLY-2020"
SECRET_WS = "LEAD-WORKSPACE-2020"

TOOLS = '''\
from pathlib import Path

LOG = Path(__file__).parent / "ran.log"

def _ran(name: str) -> str:
    with open(LOG, "a") as log:
        log.write(name + "\\n")
    return f"{name} ran"

def t_a() -> str:
    """Tool A."""
    return _ran("t_a")

def t_b() -> str:
    """Tool B."""
    return _ran("t_b")

def t_c() -> str:
    """Tool C."""
    return _ran("t_c")

def publish(what: str) -> str:
    """Publish something."""
    return _ran("publish:" + what)
'''

TEAM = """\
name: lend20
model: test:fn
store: sqlite:///{tmp}/store.db
max_concurrency: 1
tools:
  t_a: {{function: "lend20_tools:t_a"}}
  t_b: {{function: "lend20_tools:t_b"}}
  t_c: {{function: "lend20_tools:t_c"}}
  publish: {{function: "lend20_tools:publish", approval: required}}
agents:
  - name: lead
    instructions: You are LEAD.
    tools: [t_a, t_b, publish, store_get, store_set, write_output]
    store_grants: {{"shared/*": read_write, "lead/*": read}}
    can_delegate_to: [mid]
    can_spawn: [kid]
  - name: mid
    instructions: You are MID.
    tools: [t_a, t_b, t_c, publish, store_get, store_set]
    store_grants: {{"shared/*": read, "mid/*": read_write, "lead/*": read}}
    can_delegate_to: [leaf]
    can_spawn: [kid]
    limits: {{max_children: 1}}
  - name: kid
    instructions: You are KID.
    tools: [t_a, t_c, publish, store_get, store_set, read_output]
    store_grants: {{"shared/x*": read_write, "mid/*": read, "lead/*": read}}
    can_delegate_to: [leaf]
  - name: leaf
    instructions: You are LEAF.
    tools: [t_a, t_b, t_c, publish, store_get, store_set, read_output]
    store_grants: {{"*": read_write}}
    can_delegate_to: [lead, mid, kid]
    can_spawn: [kid]
tasks:
  - {{id: work, title: Work, description: Get the work done., assignee: lead}}
  # Each agent's own task keeps its own tools in effect (a tool no path could use is refused).
  - {{id: m, title: M, description: Say hello., assignee: mid}}
  - {{id: l, title: L, description: Say hello., assignee: leaf}}
  - {{id: k, title: K, description: Say hello., assignee: kid}}
"""

ESCAPE = "../../task_work/outputs/secret.txt"

# What each agent asks for, by the text it was handed: one list of calls per step.
SCRIPT: dict[tuple[str, str], list[list[tuple[str, dict[str, Any]]]]] = {
    ("LEAD", "Get the work done."): [
        [
            ("write_output", {"name": "secret.txt", "content": SECRET_WS}),
            ("publish", {"what": "lead"}),
        ],
        [("delegate", {"agent": "mid", "task": "M-one"})],
    ],
    # task -> delegate: mid acts for lead.
    ("MID", "M-one"): [
        [("t_c", {}), ("store_get", {"namespace": "mid/n", "key": "x"})],
        [("spawn", {"agent": "kid", "goal": "K-one"})],
        [("delegate", {"agent": "leaf", "task": "L-two"})],
    ],
    # task -> delegate -> child: kid acts for mid, for lead.
    ("KID", "K-one"): [
        [
            ("t_a", {}),
            ("t_c", {}),
            ("store_set", {"namespace": "shared/x1", "key": "k", "value": "v"}),
            ("store_get", {"namespace": "mid/n", "key": "x"}),
            ("read_output", {"name": ESCAPE}),
        ],
        [("delegate", {"agent": "leaf", "task": "L-one"})],
    ],
    # task -> delegate -> child -> delegate: leaf acts for kid, for mid, for lead.
    ("LEAF", "L-one"): [
        [
            ("t_b", {}),
            ("store_set", {"namespace": "shared/x2", "key": "k", "value": "v"}),
            ("store_get", {"namespace": "lead/n", "key": "x"}),
            ("store_get", {"namespace": "mid/n", "key": "x"}),
            ("read_output", {"name": ESCAPE}),
        ],
        [("publish", {"what": "leaf"})],
        [
            ("delegate", {"agent": "lead", "task": "up to lead"}),
            ("delegate", {"agent": "mid", "task": "up to mid"}),
            ("delegate", {"agent": "kid", "task": "up to kid"}),
        ],
    ],
    # task -> delegate -> delegate that spawns: within mid's max_children too.
    ("LEAF", "L-two"): [
        [("spawn", {"agent": "kid", "goal": "K-two"})],
    ],
    ("KID", "K-two"): [[("t_a", {})]],
}
AGENTS = ("LEAD", "MID", "KID", "LEAF")


def _who(request: ModelRequest) -> tuple[str, str]:
    system = request.prompt.messages[0].content
    user = request.prompt.messages[-1].content
    agent = next((a for a in AGENTS if f"You are {a}." in system), "")
    text = next((t for (a, t) in SCRIPT if a == agent and t in user), "")
    return agent, text


class Script:
    """Answers each (agent, handed text) with its scripted steps, then with text."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}

    def __call__(self, request: ModelRequest) -> Any:
        agent, text = _who(request)
        subject = request.prompt.manifest.subject
        steps = SCRIPT.get((agent, text))
        if not agent or steps is None:
            return "hello" if agent else "the synthesis"
        n = self.steps.get(subject, 0)
        self.steps[subject] = n + 1
        if n < len(steps):
            return [
                ToolCall(id=f"c{n}{i}", name=name, arguments=args)
                for i, (name, args) in enumerate(steps[n])
            ]
        return f"{agent} done with {text}"


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "lend20_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lend20_tools", raising=False)
    monkeypatch.chdir(tmp_path)  # workspaces under ./.clearance
    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.set("lead/n", "x", SECRET_LEAD, "lead")
        store.set("mid/n", "x", SECRET_MID, "mid")
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(tmp=tmp_path))
    return path


class Approver:
    """Approves every request, keeping each."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return ApprovalDecision(approved=True, by="tester")


async def _run(team: Path) -> tuple[FunctionModel, Approver, str, Path]:
    model = FunctionModel(Script(), model_id="test:fn")
    approver = Approver()
    db = team.parent / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        services = RunServices(models={"test:fn": model}, approver=approver)
        result = await run_spec(RunSpec.from_file(team), ledger=ledger, services=services)
        assert result.status == "completed", result.error
    return model, approver, result.run_id, db


def _offered(model: FunctionModel, agent: str, text: str) -> set[tuple[str, ...]]:
    """The tool names offered on each call of ``agent`` handed ``text``."""
    return {
        tuple(sorted(t["function"]["name"] for t in r.tools))
        for r in model.requests
        if _who(r) == (agent, text)
    }


def _shown_in(request: ModelRequest) -> str:
    return "\n".join(m.content for m in request.prompt.messages)


def _shown(model: FunctionModel) -> str:
    return "\n".join(_shown_in(r) for r in model.requests)


def _calls_of(ledger: RunLedger, run_id: str, agent: str, name: str) -> list[Any]:
    return [c for c in ledger.tool_calls(run_id) if c.agent == agent and c.name == name]


async def test_a_deep_mixed_chain_acts_within_every_caller(team: Path) -> None:
    model, approver, run_id, db = await _run(team)
    # Offered: each callee only the user tools every agent above it has.
    assert _offered(model, "MID", "M-one") == {
        ("delegate", "publish", "spawn", "store_get", "store_set", "t_a", "t_b")
    }
    assert _offered(model, "KID", "K-one") == {
        ("delegate", "publish", "read_output", "store_get", "store_set", "t_a")
    }
    assert _offered(model, "LEAF", "L-one") == {
        ("delegate", "publish", "read_output", "store_get", "store_set", "t_a")
    }
    # What ran: the kid's t_a, both approved publishes, nothing withheld.
    ran = sorted((team.parent / "ran.log").read_text().split())
    assert ran == ["publish:lead", "publish:leaf", "t_a"], ran
    # The leaf's publish, three hops down, was asked of a person as a call of task work.
    asked = sorted((r.task_id, r.agent, r.tool, json.dumps(r.arguments)) for r in approver.asked)
    assert asked == [
        ("work", "lead", "publish", '{"what": "lead"}'),
        ("work", "leaf", "publish", '{"what": "leaf"}'),
    ]
    assert SECRET_MID not in _shown(model)
    # The lead's own workspace file reached no one else: each read_output escape failed.
    below = [r for r in model.requests if _who(r)[0] in ("KID", "LEAF")]
    assert below and not [r for r in below if SECRET_WS in _shown_in(r)]
    with RunLedger(f"sqlite:///{db}") as ledger:
        # lead/* is granted all the way down: the leaf read it, nothing more.
        (leaf_lead,) = [
            c for c in _calls_of(ledger, run_id, "leaf", "store_get")
            if c.arguments["namespace"] == "lead/n"
        ]  # fmt: skip
        assert not leaf_lead.is_error
        assert [r["namespace"] for r in leaf_lead.store_reads] == ["lead/n"]
        assert any(SECRET_LEAD in _shown_in(r) for r in model.requests if _who(r)[0] == "LEAF")
        for agent in ("kid", "leaf"):
            sets = _calls_of(ledger, run_id, agent, "store_set")
            assert sets and all(c.is_error for c in sets), agent
            reads = _calls_of(ledger, run_id, agent, "read_output")
            assert reads and all(c.is_error and SECRET_WS not in c.result for c in reads)
        for agent, name in (("mid", "t_c"), ("kid", "t_c"), ("leaf", "t_b")):
            (call,) = _calls_of(ledger, run_id, agent, name)
            assert call.is_error and "withheld" in call.result, call.result
        events = ledger.events(run_id)
        lent = {
            (e.data["agent"], e.data["namespace"], e.data["operation"], tuple(e.data["chain"]))
            for e in events
            if e.kind == "grant_withheld"
        }
        assert ("mid", "mid/n", "read", ("lead", "mid")) in lent
        assert ("kid", "shared/x1", "write") in {x[:3] for x in lent}
        assert ("leaf", "shared/x2", "write") in {x[:3] for x in lent}
        assert ("leaf", "mid/n", "read") in {x[:3] for x in lent}
        # Every way back up the chain is refused, across the spawn, in one line each.
        back = [
            c.result for c in _calls_of(ledger, run_id, "leaf", "delegate")
            if c.arguments["task"].startswith("up to")
        ]  # fmt: skip
        assert len(back) == 3 and all(
            t.startswith("error: delegation refused:") and "already in the delegation chain" in t
            for t in back
        ), back
        assert verify_run(ledger, run_id).ok, verify_run(ledger, run_id).findings
    # No refused delegation started a run: no lead, mid or kid was handed an "up to" task.
    handed = [r for r in model.requests if _who(r)[0] != "LEAF"]
    assert not [r for r in handed if "up to" in r.prompt.messages[-1].content]


async def test_a_delegates_delegate_spawns_within_every_callers_max_children(
    team: Path,
) -> None:
    # mid (max_children 1) spawned K-one; the leaf acting for mid may spawn no more in the
    # task: mid's cap is the leaf's ceiling, as its tools and grants are.
    model, _approver, run_id, db = await _run(team)
    assert not [r for r in model.requests if _who(r) == ("KID", "K-two")]
    with RunLedger(f"sqlite:///{db}") as ledger:
        kids = [e.data["goal"] for e in ledger.events(run_id) if e.kind == "spawn"]
        assert kids == ["K-one"], kids
        breaches = [
            (e.subject, e.data["limit"], e.data["value"], e.data["maximum"])
            for e in ledger.events(run_id)
            if e.kind == "limit_exceeded"
        ]
        assert ("task:work", "max_children", 2, 1) in breaches, breaches
        # The delegation that asked for too many failed, and mid was told why in one line.
        (asked,) = [
            c for c in _calls_of(ledger, run_id, "mid", "delegate")
            if c.arguments["task"] == "L-two"
        ]  # fmt: skip
        assert asked.is_error and "\n" not in asked.result, asked.result
        assert asked.result.startswith("error: 'leaf' failed:") and "max_children" in asked.result
        assert verify_run(ledger, run_id).ok, verify_run(ledger, run_id).findings


def _edit(db: Path, sql: str, *args: Any) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


def _findings(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [f.reason for f in verify_run(ledger, run_id).findings]


async def test_verify_flags_a_tool_a_childs_delegate_ran_for_a_caller_lacking_it(
    team: Path, rechain
) -> None:
    _model, _approver, run_id, db = await _run(team)
    assert _findings(db, run_id) == []
    _edit(
        db,
        "UPDATE tool_calls SET is_error = 0, result = 't_b ran' "
        "WHERE run_id = ? AND name = 't_b' AND agent = 'leaf'",
        run_id,
    )
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("'leaf' called 't_b' acting for 'kid', which may not call it" in f for f in found), (
        found
    )


async def test_verify_flags_a_grant_a_childs_delegate_used_that_the_task_lacks(
    team: Path, rechain
) -> None:
    # The leaf's refused read of mid/n, forged into a read that succeeded: kid and mid may
    # read mid/*, the task's assignee may not.
    _model, _approver, run_id, db = await _run(team)
    conn = sqlite3.connect(db)
    try:
        (call_id, reads) = conn.execute(
            "SELECT tool_call_id, store_reads FROM tool_calls WHERE run_id = ? AND agent = 'leaf' "
            "AND name = 'store_get' AND arguments LIKE '%mid/n%'",
            (run_id,),
        ).fetchone()
    finally:
        conn.close()
    assert json.loads(reads) == []
    (lead_read,) = [r for r in _store_reads(db, run_id) if r["namespace"] == "lead/n"]
    forged = [{**lead_read, "namespace": "mid/n"}]
    _edit(
        db,
        "UPDATE tool_calls SET is_error = 0, result = ?, store_reads = ? WHERE tool_call_id = ?",
        SECRET_MID,
        json.dumps(forged),
        call_id,
    )
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any(
        "'leaf' could read 'mid/n' acting for 'lead', which has no read grant there" in f
        for f in found
    ), found


def _store_reads(db: Path, run_id: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT store_reads FROM tool_calls WHERE run_id = ? AND agent = 'leaf'", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return [r for (text,) in rows for r in json.loads(text or "[]")]


# -- budgets: a fan-out of children shares what its caller has left --------------------------

BUDGET_TEAM = """\
name: budget20
model: test:fn
{budget}
agents:
  - name: lead
    instructions: You are LEAD.
    can_delegate_to: [mid]
    limits: {{max_model_calls: {lead_calls}}}
  - name: mid
    instructions: You are MID.
    can_spawn: [kid]
    limits: {{max_output_tokens: 4000, max_model_calls: 64, max_children: 8}}
  - name: kid
    instructions: You are KID.
    tools: [write_output]
    limits: {{max_model_calls: 64, max_steps: 40}}
tasks:
  - {{id: work, title: Work, description: Get the work done., assignee: lead}}
"""


def _greedy(request: ModelRequest) -> Any:
    """Lead delegates, mid spawns four kids at once, each kid writes files for ever."""
    system, user = request.prompt.messages[0].content, request.prompt.messages[-1].content
    results = "## Results of your tool calls" in user
    if "You are LEAD." in system:
        task = {"agent": "mid", "task": "Spawn."}
        return "lead done" if results else [ToolCall(id="d", name="delegate", arguments=task)]
    if "You are MID." in system:
        if results:
            return "mid done"
        return [
            ToolCall(id=f"s{n}", name="spawn", arguments={"agent": "kid", "goal": f"Dig {n}."})
            for n in range(4)
        ]
    if "You are KID." in system:
        n = user.count("wrote outputs/")
        args = {"name": f"f{n}.txt", "content": "x" * 40}
        return [ToolCall(id=f"w{n}", name="write_output", arguments=args)]
    return "the synthesis"


async def _greedy_run(tmp_path: Path, *, budget: str, lead_calls: int) -> tuple[str, Any, Path]:
    path = tmp_path / "team.yaml"
    path.write_text(BUDGET_TEAM.format(budget=budget, lead_calls=lead_calls))
    model = FunctionModel(_greedy, model_id="test:fn")
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await run_spec(
            RunSpec.from_file(path), ledger=ledger, services=RunServices(models={"test:fn": model})
        )
    return result.run_id, result, db


async def test_children_of_a_delegate_share_the_tasks_max_model_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lead may cause 9 calls in all: its own, mid's and the four kids' together. Each kid
    # alone may make 64, and wants 40: the task's cap, not each kid's, is what binds.
    monkeypatch.chdir(tmp_path)
    run_id, result, db = await _greedy_run(tmp_path, budget="", lead_calls=9)
    assert result.status == "failed", result.error
    assert "max_model_calls" in (result.tasks["work"].error or ""), result.tasks["work"]
    with RunLedger(f"sqlite:///{db}") as ledger:
        calls = [c for c in ledger.calls(run_id) if c.subject != "synthesis"]
        assert len(calls) == 9, [c.subject for c in calls]
        kids = [c for c in calls if c.subject.startswith("child:")]
        assert len(kids) == 7  # 9 less lead's first call and mid's first
        breaches = [e.data for e in ledger.events(run_id) if e.kind == "limit_exceeded"]
        assert breaches and all(b["limit"] == "max_model_calls" for b in breaches), breaches
        assert {b["maximum"] for b in breaches} == {9}
        assert verify_run(ledger, run_id).ok, verify_run(ledger, run_id).findings


async def test_children_of_a_delegate_share_the_runs_token_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mid asks up to 4,000 completion tokens a call, each kid 512; four kids run together.
    # The run's budget binds them all: past it by at most the one call that crossed it.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BudgetExceeded) as raised:
        await _greedy_run(tmp_path, budget="budget: {tokens: 6000}", lead_calls=200)
    run_id, db = raised.value.run_id, tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        used = [c.usage.prompt_tokens + c.usage.completion_tokens for c in ledger.calls(run_id)]
        assert len(used) > 4
        assert sum(used) - max(used) < 6000 <= sum(used), used
        # Stopped inside mid's delegation (not recorded yet: a resume finishes it), the
        # honest record verifies: mid's children are judged as acting for mid, for lead.
        assert not [c for c in ledger.tool_calls(run_id) if c.name == "delegate"]
        assert verify_run(ledger, run_id).ok, verify_run(ledger, run_id).findings


# -- a run stopped inside a child's delegate: verified, and judged for every caller ----------


class Pauser(Approver):
    """Approves the lead's own calls; leaves every other request open (the run pauses)."""

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        if request.agent != "lead":
            raise ApprovalPending([request.call_id])
        return ApprovalDecision(approved=True, by="tester")


async def _paused(team: Path) -> tuple[str, Path]:
    model = FunctionModel(Script(), model_id="test:fn")
    db = team.parent / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        services = RunServices(models={"test:fn": model}, approver=Pauser())
        result = await run_spec(RunSpec.from_file(team), ledger=ledger, services=services)
        assert result.status == "awaiting_approval", (result.status, result.error)
        # Paused at the leaf's publish: inside kid's delegation, inside mid's (a child of
        # a delegate), neither delegate call answered yet.
        run_id = result.run_id
        assert not [c for c in ledger.tool_calls(run_id) if c.name == "delegate"]
        assert [c.name for c in _calls_of(ledger, run_id, "leaf", "t_b")] == ["t_b"]
    return run_id, db


async def test_verify_accepts_a_run_paused_inside_a_childs_delegate(team: Path) -> None:
    run_id, db = await _paused(team)
    assert _findings(db, run_id) == []


async def test_verify_judges_a_paused_childs_delegate_against_every_caller(
    team: Path, rechain
) -> None:
    # The leaf's refused read of mid/n, forged into a read that succeeded, in the paused
    # run: its delegation and its delegator's are not recorded yet, and still the read is
    # judged as acting for kid, mid and lead (which may not read mid/*).
    run_id, db = await _paused(team)
    conn = sqlite3.connect(db)
    try:
        (call_id,) = conn.execute(
            "SELECT tool_call_id FROM tool_calls WHERE run_id = ? AND agent = 'leaf' "
            "AND name = 'store_get' AND arguments LIKE '%mid/n%'",
            (run_id,),
        ).fetchone()
    finally:
        conn.close()
    (lead_read,) = [r for r in _store_reads(db, run_id) if r["namespace"] == "lead/n"]
    _edit(
        db,
        "UPDATE tool_calls SET is_error = 0, result = 'entry mid/n/x read', store_reads = ? "
        "WHERE tool_call_id = ?",
        json.dumps([{**lead_read, "namespace": "mid/n"}]),
        call_id,
    )
    rechain(db, run_id)  # (rebuilt in record-kind order: approvals then follow the calls)
    found = _findings(db, run_id)
    assert (
        "'leaf' could read 'mid/n' acting for 'lead', which has no read grant there "
        "(a capability lent)"
    ) in found, found
    assert not [f for f in found if "no delegate tool call" in f], found


# -- verify: a delegate's spawns are held to every caller's max_children (prompt_format 5) ---


def _with_config(db: Path, run_id: str, mid_children: int, prompt_format: int | None) -> None:
    """Forge the recorded config: mid's max_children, and maybe the run's prompt_format."""
    conn = sqlite3.connect(db)
    try:
        (text,) = conn.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        config = json.loads(text)
        (mid,) = [a for a in config["agents"] if a["name"] == "mid"]
        mid["limits"]["max_children"] = mid_children
        if prompt_format is not None:
            config["prompt_format"] = prompt_format
        conn.execute("UPDATE runs SET config = ? WHERE run_id = ?", (json.dumps(config), run_id))
        conn.commit()
    finally:
        conn.close()


def _raise_mid_cap(team: Path) -> None:
    team.write_text(team.read_text().replace("max_children: 1", "max_children: 2"))


async def _two_kids(team: Path) -> tuple[str, Path]:
    """An honest run where mid may spawn 2: the leaf, acting for mid, spawns K-two."""
    _raise_mid_cap(team)
    _model, _approver, run_id, db = await _run(team)
    with RunLedger(f"sqlite:///{db}") as ledger:
        spawns = [(e.data["goal"], e.data["parent_agent"]) for e in ledger.events(run_id)
                  if e.kind == "spawn"]  # fmt: skip
        config = ledger.get_run(run_id).config
    assert spawns == [("K-one", "mid"), ("K-two", "leaf")], spawns
    assert config["prompt_format"] >= 5
    assert _findings(db, run_id) == []
    return run_id, db


def _forged_findings(db: Path, run_id: str, rechain: Any, prompt_format: int | None) -> list[str]:
    """The findings the cap adds: a rechained run (record-kind order, so its approvals read as
    late) with mid's recorded cap 2, then with it 1; only what the cap changed is returned."""
    _with_config(db, run_id, 2, prompt_format)
    rechain(db, run_id)
    baseline = _findings(db, run_id)
    _with_config(db, run_id, 1, prompt_format)
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert not Counter(baseline) - Counter(found), (baseline, found)
    return list((Counter(found) - Counter(baseline)).elements())


async def test_verify_flags_a_delegates_child_over_an_intermediate_callers_max_children(
    team: Path, rechain
) -> None:
    # Recorded as if mid's cap were 1: the leaf's spawn, acting for mid (for lead), makes a
    # second child of task work, past mid's cap though within the leaf's and lead's (8).
    run_id, db = await _two_kids(team)
    assert _forged_findings(db, run_id, rechain, None) == [
        "task:work: 2 children in one session, but its max_children is 1 "
        "(that of 'mid', which 'leaf' acted for)"
    ]


async def test_verify_keeps_the_old_child_cap_for_a_format_4_run(team: Path, rechain) -> None:
    # The same shape recorded by a format-4 run: its delegates spawned within their own and
    # the assignee's caps only, so verify holds it to those.
    run_id, db = await _two_kids(team)
    assert _forged_findings(db, run_id, rechain, 4) == []
