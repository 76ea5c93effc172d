"""Delegation chains and spawned children through a team file: never more than the caller may.

One team file runs every nested path (task -> delegate -> delegate, task -> child,
child -> delegate -> delegate) with user tools, store grants and loops, driven by a
`FunctionModel`. Each test asserts on what the model was actually offered and shown, on the
ledger's records, and on `verify_run` (honest run, then an edited one).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance import ContextStore, RunLedger, RunServices, RunSpec, run_spec, verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

SECRET_LEAD = "LEAD-ONLY-7311"
SECRET_MID = "MID-ONLY-4242"

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
'''

TEAM = """\
name: caps16
model: test:fn
store: sqlite:///{tmp}/store.db
max_concurrency: 1
tools:
  t_a: {{function: "caps16_tools:t_a"}}
  t_b: {{function: "caps16_tools:t_b"}}
  t_c: {{function: "caps16_tools:t_c"}}
agents:
  - name: lead
    instructions: You are LEAD.
    tools: [t_a, t_b, store_get, store_set]
    store_grants: {{"shared/*": read_write, "lead/*": read}}
    can_delegate_to: [mid]
    can_spawn: [kid]
  - name: mid
    instructions: You are MID.
    tools: [t_a, t_c, store_get, store_set]
    store_grants: {{"shared/*": read, "mid/*": read}}
    can_delegate_to: [leaf]
  - name: leaf
    instructions: You are LEAF.
    tools: [t_a, t_b, t_c, store_get]
    store_grants: {{"shared/*": read, "lead/*": read, "mid/*": read}}
    can_delegate_to: [mid, lead]
  - name: kid
    instructions: You are KID.
    tools: [t_a, t_c, store_get]
    store_grants: {{"shared/*": read_write, "lead/*": read, "mid/*": read}}
    can_delegate_to: [mid]
tasks:
  - {{id: work, title: Work, description: Get the work done., assignee: lead}}
  # Each agent's own task keeps its own tools in effect (a tool no path could use is refused).
  - {{id: m, title: M, description: Say hello., assignee: mid}}
  - {{id: l, title: L, description: Say hello., assignee: leaf}}
  - {{id: k, title: K, description: Say hello., assignee: kid}}
"""

# What each agent asks for, by the task text it was handed: one list of calls per step.
SCRIPT: dict[tuple[str, str], list[list[tuple[str, dict[str, Any]]]]] = {
    ("LEAD", "Get the work done."): [
        [("delegate", {"agent": "mid", "task": "M-one"})],
        [("spawn", {"agent": "kid", "goal": "K-one"})],
    ],
    ("MID", "M-one"): [
        [
            ("t_c", {}),
            ("store_get", {"namespace": "mid/n", "key": "x"}),
            ("store_set", {"namespace": "shared/n", "key": "y", "value": "v"}),
        ],
        [("delegate", {"agent": "leaf", "task": "L-one"})],
    ],
    ("LEAF", "L-one"): [
        [("t_b", {}), ("t_a", {}), ("store_get", {"namespace": "lead/n", "key": "x"})],
        [
            ("delegate", {"agent": "mid", "task": "back to mid"}),
            ("delegate", {"agent": "lead", "task": "back to lead"}),
        ],
    ],
    ("KID", "K-one"): [
        [
            ("t_c", {}),
            ("store_get", {"namespace": "mid/n", "key": "x"}),
            ("store_set", {"namespace": "shared/n", "key": "z", "value": "v"}),
        ],
        [("delegate", {"agent": "mid", "task": "M-two"})],
    ],
    ("MID", "M-two"): [
        [("t_c", {})],
        [("delegate", {"agent": "leaf", "task": "L-two"})],
    ],
    ("LEAF", "L-two"): [
        [("delegate", {"agent": "lead", "task": "up to lead"})],
    ],
}


def _who(request: ModelRequest) -> tuple[str, str]:
    system = request.prompt.messages[0].content
    user = request.prompt.messages[-1].content
    agent = next((a for a in ("LEAD", "MID", "LEAF", "KID") if f"You are {a}." in system), "")
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
    (tmp_path / "caps16_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "caps16_tools", raising=False)
    monkeypatch.chdir(tmp_path)  # workspaces under ./.clearance
    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.set("lead/n", "x", SECRET_LEAD, "lead")
        store.set("mid/n", "x", SECRET_MID, "mid")
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(tmp=tmp_path))
    return path


async def _run(team: Path) -> tuple[FunctionModel, str, Path]:
    model = FunctionModel(Script(), model_id="test:fn")
    db = team.parent / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await run_spec(
            RunSpec.from_file(team), ledger=ledger, services=RunServices(models={"test:fn": model})
        )
        assert result.status == "completed", result.error
    return model, result.run_id, db


def _offered(model: FunctionModel, agent: str, text: str) -> list[list[str]]:
    """The tool names offered on each call of ``agent`` handed ``text``."""
    return [
        sorted(t["function"]["name"] for t in r.tools)
        for r in model.requests
        if _who(r) == (agent, text)
    ]


def _shown(model: FunctionModel) -> str:
    return "\n".join(m.content for r in model.requests for m in r.prompt.messages)


async def test_every_nested_path_is_offered_only_what_every_caller_may(team: Path) -> None:
    model, run_id, _db = await _run(team)
    # task -> delegate: mid acting for lead loses t_c (lead lacks it).
    assert set(map(tuple, _offered(model, "MID", "M-one"))) == {
        ("delegate", "store_get", "store_set", "t_a")
    }
    # task -> delegate -> delegate: leaf acting for mid for lead keeps only t_a.
    assert set(map(tuple, _offered(model, "LEAF", "L-one"))) == {("delegate", "store_get", "t_a")}
    # task -> child: kid spawned by lead loses t_c.
    assert set(map(tuple, _offered(model, "KID", "K-one"))) == {("delegate", "store_get", "t_a")}
    # child -> delegate -> delegate: within the kid's and lead's ceilings too.
    assert set(map(tuple, _offered(model, "MID", "M-two"))) == {
        ("delegate", "store_get", "store_set", "t_a")
    }
    ran = (team.parent / "ran.log").read_text().split()
    assert ran == ["t_a"], ran  # only leaf's t_a ran; every t_b / t_c call was withheld
    shown = _shown(model)
    assert SECRET_LEAD not in shown and SECRET_MID not in shown
    with RunLedger(f"sqlite:///{team.parent / 'runs.db'}") as ledger:
        withheld = sorted(
            (e.data["agent"], tuple(e.data["tools"]))
            for e in ledger.events(run_id)
            if e.kind == "tools_withheld"
        )
        assert withheld == [
            ("kid", ("t_c",)),
            ("leaf", ("t_b", "t_c")),
            ("leaf", ("t_b", "t_c")),
            ("mid", ("t_c",)),
            ("mid", ("t_c",)),
        ]
        calls = ledger.tool_calls(run_id)
        for name in ("t_b", "t_c"):
            assert all(c.is_error and "withheld" in c.result for c in calls if c.name == name)
        lent = sorted(
            (e.data["agent"], e.data["namespace"], e.data["operation"], tuple(e.data["chain"]))
            for e in ledger.events(run_id)
            if e.kind == "grant_withheld"
        )
        assert ("mid", "mid/n", "read", ("lead", "mid")) in lent
        assert ("leaf", "lead/n", "read", ("lead", "mid", "leaf")) in lent
        assert ("kid", "mid/n", "read") in [x[:3] for x in lent]
        sets = [c for c in calls if c.name == "store_set"]
        assert sets and all(c.is_error for c in sets)  # mid: read only; kid: below lead's
        assert verify_run(ledger, run_id).ok, verify_run(ledger, run_id).findings


async def test_loops_are_refused_in_one_recorded_line(team: Path) -> None:
    _model, run_id, _db = await _run(team)
    with RunLedger(f"sqlite:///{team.parent / 'runs.db'}") as ledger:
        refused = [c for c in ledger.tool_calls(run_id) if c.name == "delegate" and c.is_error]
    texts = sorted(c.result for c in refused)
    assert len(texts) == 3, texts  # leaf->mid, leaf->lead (L-one), leaf->lead across a spawn
    for text in texts:
        assert text.startswith("error: delegation refused:") and "\n" not in text, text
    assert all("is already in the delegation chain" in t for t in texts), texts
    assert "'lead' is already in the delegation chain lead -> kid -> mid -> leaf" in texts[0]
    # No refused delegation started a run: neither MID nor LEAD was ever handed its text.
    handed = [
        r.prompt.messages[-1].content for r in _model.requests if _who(r)[0] in ("MID", "LEAD")
    ]
    assert not [u for u in handed if "back to" in u or "up to lead" in u]


CHAIN = """\
name: chain16
model: test:fn
agents:
  - {name: d1, instructions: You are D1., can_delegate_to: [d2]}
  - {name: d2, instructions: You are D2., can_delegate_to: [d3]}
  - {name: d3, instructions: You are D3., can_delegate_to: [d4]}
  - {name: d4, instructions: You are D4., can_delegate_to: [d5]}
  - {name: d5, instructions: You are D5.}
tasks:
  - {id: deep, title: Deep, description: Go deep., assignee: d1}
"""


def _deep(request: ModelRequest) -> Any:
    system, user = request.prompt.messages[0].content, request.prompt.messages[-1].content
    for n in range(1, 5):
        if f"You are D{n}." in system:
            if "## Results of your tool calls" in user:
                return f"d{n} done"
            task = {"agent": f"d{n + 1}", "task": f"Level {n + 1}."}
            return [ToolCall(id="c", name="delegate", arguments=task)]
    return "d5 done" if "You are D5." in system else "the synthesis"


async def test_a_chain_past_its_depth_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(CHAIN)
    model = FunctionModel(_deep, model_id="test:fn")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await run_spec(
            RunSpec.from_file(path), ledger=ledger, services=RunServices(models={"test:fn": model})
        )
        assert result.status == "completed", result.error
        delegations = [c for c in ledger.tool_calls(result.run_id) if c.name == "delegate"]
        refused = [c for c in delegations if c.is_error]
        assert [c.agent for c in refused] == ["d4"]
        assert refused[0].result == (
            "error: delegation refused: 'd4' may not delegate to 'd5': the delegation chain "
            "is at its maximum depth of 3"
        )
        chains = [len(c.chain["steps"]) for c in delegations if not c.is_error and c.chain]
        assert sorted(chains) == [1, 2, 3]
        assert verify_run(ledger, result.run_id).ok
    assert not any("You are D5." in r.prompt.messages[0].content for r in model.requests)


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


async def test_verify_flags_a_withheld_tool_a_delegate_ran(team: Path, rechain) -> None:
    _model, run_id, db = await _run(team)
    _edit(
        db,
        "UPDATE tool_calls SET is_error = 0, result = 't_b ran' "
        "WHERE run_id = ? AND name = 't_b' AND agent = 'leaf'",
        run_id,
    )
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("'leaf' called 't_b' acting for 'mid', which may not call it" in f for f in found), (
        found
    )


@pytest.mark.parametrize(
    ("who", "kind", "tool", "finding"),
    [
        ("LEAF", "delegation", "t_b", "'leaf' was offered 't_b' acting for 'mid'"),
        ("KID", "child", "t_c", "'kid' was offered 't_c' acting for 'lead'"),
    ],
)
async def test_verify_flags_a_callee_offered_a_tool_its_callers_lack(
    team: Path, rechain, who: str, kind: str, tool: str, finding: str
) -> None:
    # The honest run verifies; the edit (one offered tool more in a recorded request, the
    # chain rebuilt as a forger could) is a callee given more than its callers may.
    _model, run_id, db = await _run(team)
    assert _findings(db, run_id) == []
    conn = sqlite3.connect(db)
    try:
        (call_id, parameters) = conn.execute(
            "SELECT call_id, parameters FROM calls WHERE run_id = ? AND messages LIKE ? "
            "AND subject LIKE ? ORDER BY ordinal LIMIT 1",
            (run_id, f"%You are {who}.%", f"{kind}:%"),
        ).fetchone()
    finally:
        conn.close()
    data = json.loads(parameters)
    data["tools"].append({"name": tool, "sha256": "0" * 64})
    _edit(db, "UPDATE calls SET parameters = ? WHERE call_id = ?", json.dumps(data), call_id)
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert [f for f in found if "was offered" in f] == [
        f"{finding}, which may not call it (a capability lent)"
    ], found
