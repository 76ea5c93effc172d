import json
import sqlite3

import pytest

from clearance import (
    AccessDenied,
    Agent,
    AgentChat,
    AgentLimits,
    ConfigError,
    ContextBuilder,
    ContextViolation,
    Orchestrator,
    RunLedger,
    Task,
    TaskGraph,
    Team,
)
from clearance._context.verify import verify_run
from clearance._core.teamfile import load_team_file
from clearance._state.queue import TaskQueue
from clearance.memory import (
    MemoryGroup,
    PersistentMemory,
    SharedConversation,
    TeamConversation,
    memory_lookup,
)
from clearance.testing import FunctionModel
from clearance.tokens import counter_for

ALICE = Agent(name="alice", instructions="You are Alice.")
BOB = Agent(name="bob", instructions="You are Bob.")
CAROL = Agent(name="carol", instructions="You are Carol.")
GROUP = MemoryGroup(
    name="research",
    agents=("alice", "bob"),
    shared_conversation=SharedConversation(window=2, retrieval="relevance"),
)


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path / 'memory.db'}"


def test_builder_admits_own_and_group_memories_only(db):
    groups = {"research": ["alice", "bob"]}
    alice = PersistentMemory(db, agent="alice", groups=groups)
    bob = PersistentMemory(db, agent="bob", groups=groups)
    own = alice.record("CANARY-alice private note")[0]
    shared = bob.record("group finding", group="research")[0]
    bobs = bob.record("CANARY-bob private note")[0]
    graph = TaskGraph([Task(id="t", title="T", description="Do t.", assignee="alice")])
    builder = ContextBuilder(count_tokens=counter_for("openai:gpt-4o"), memory_groups=groups)
    prompt = builder.build_task_prompt(
        graph.get("t"), agent=ALICE, queue=TaskQueue(graph), memories=[own, shared]
    )
    assert prompt.manifest.origins[-2:] == (own.origin, shared.origin)
    assert "## From memory" in prompt.text and "group finding" in prompt.text
    assert prompt.manifest.clearance["memory_scopes"] == ["agent:alice", "group:research"]
    with pytest.raises(ContextViolation) as info:
        builder.build_task_prompt(
            graph.get("t"), agent=ALICE, queue=TaskQueue(graph), memories=[bobs]
        )
    assert info.value.origin == bobs.origin
    # Without the group declared, the group's record is refused too.
    plain = ContextBuilder(count_tokens=counter_for("openai:gpt-4o"))
    with pytest.raises(ContextViolation):
        plain.build_task_prompt(
            graph.get("t"), agent=ALICE, queue=TaskQueue(graph), memories=[shared]
        )


def test_team_file_declares_memory_groups(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents:\n"
        "  - {name: alice, instructions: A}\n"
        "  - {name: bob, instructions: B}\n"
        "  - {name: carol, instructions: C}\n"
        "memory_groups:\n"
        "  - name: research\n"
        "    agents: [alice, bob]\n"
        "    shared_conversation: {window: 25, retrieval: relevance}\n"
    )
    team = load_team_file(path).team
    (group,) = team.memory_groups
    assert group.agents == ("alice", "bob")
    assert group.shared_conversation == SharedConversation(window=25, retrieval="relevance")
    path.write_text(path.read_text().replace("[alice, bob]", "[alice, zed]"))
    with pytest.raises(ConfigError, match="zed"):
        load_team_file(path)
    path.write_text(path.read_text().replace("window: 25", "window: 0"))
    with pytest.raises(ConfigError, match="window"):
        load_team_file(path)


def test_shared_conversation_is_opt_in_and_within_the_group(db):
    groups = {"research": ["alice", "bob"]}
    alice = PersistentMemory(db, agent="alice", groups=groups)
    bob = PersistentMemory(db, agent="bob", groups=groups)
    carol = PersistentMemory(db, agent="carol", groups=groups)
    with pytest.raises(ConfigError, match="off unless declared"):
        TeamConversation(alice, MemoryGroup(name="research", agents=("alice", "bob")))
    with pytest.raises(AccessDenied):
        TeamConversation(carol, GROUP)
    a, b = TeamConversation(alice, GROUP), TeamConversation(bob, GROUP)
    a.post("alice measured the graphene sample at 4 kelvin")
    a.post("alice ordered lunch")
    b.post("bob found the graphene paper")
    recent = [r.content for r in TeamConversation(bob, GROUP).view()]
    assert recent == ["alice: alice ordered lunch", "bob: bob found the graphene paper"]
    relevant = b.view("graphene")
    assert len(relevant) == 2 and all("graphene" in r.content for r in relevant)
    assert {r.author for r in relevant} == {"alice", "bob"}  # attribution
    assert carol.retrieve("graphene") == []


async def test_chat_records_verifiable_calls_and_verify_catches_a_foreign_scope(tmp_path, db):
    groups = {"research": ["alice", "bob"]}
    team_groups = (GROUP,)
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    memory = PersistentMemory(db, agent="alice", groups=groups)
    memory.record("the lab door code is 4711")
    PersistentMemory(db, agent="bob", groups=groups).record("CANARY bob's lab secret")
    model = FunctionModel(lambda request: "noted " * 20, model_id="test:function")
    model.context_window = 600
    chat = AgentChat(
        agent=Agent(
            name="alice", instructions="You are Alice.", limits=AgentLimits(max_output_tokens=64)
        ),
        model=model,
        memory=memory,
        memory_groups=team_groups,
        shared_group="research",
        ledger=ledger,
    )
    for i in range(15):
        await chat.say(f"message {i} about the lab door and " + "filler " * 20)
    assert chat.compressions, "the conversation outgrew the window"
    assert all(p.manifest.total_tokens <= 600 for p in chat.prompts)
    assert all("CANARY" not in p.text for p in chat.prompts)
    assert any("4711" in p.text for p in chat.prompts)
    compressed = [p for p in chat.prompts if p.manifest.compression]
    assert compressed and compressed[0].manifest.compression["dropped"]
    report = verify_run(ledger, chat.run_id, memories=memory_lookup(db))
    assert report.ok, [str(f) for f in report.findings]
    assert report.calls_checked == 15

    # Forge a call: retitle a memory block as if it came from bob's private scope.
    ledger.close()
    con = sqlite3.connect(tmp_path / "runs.db")
    (call_id, manifest_json), *_ = con.execute(
        "SELECT call_id, manifest FROM calls WHERE manifest LIKE '%memory:%'"
    ).fetchall()
    manifest = json.loads(manifest_json)
    for item in manifest["items"]:
        if item["origin"].startswith("memory:"):
            item["title"] = item["title"].replace("agent:alice", "agent:bob")
    manifest["clearance"]["memory_scopes"].append("agent:bob")
    # Manifest only, digests left stale on purpose (unlike `rewrite_prompt`): "altered".
    con.execute("UPDATE calls SET manifest = ? WHERE call_id = ?", (json.dumps(manifest), call_id))
    con.commit()
    con.close()
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as again:
        report = verify_run(again, chat.run_id)
    reasons = " | ".join(str(f) for f in report.findings)
    assert "altered" in reasons
    assert "not readable" in reasons or "clearance differs" in reasons


async def test_orchestrator_records_memory_groups_and_runs_verify_clean(tmp_path):
    team = Team(agents=(ALICE, BOB, CAROL), memory_groups=(GROUP,))
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(team, model=FunctionModel(lambda r: "ok"), ledger=ledger)
        result = await orch.run_tasks(
            [Task(id="a", title="A", description="Do a.", assignee="alice")]
        )
        run = ledger.get_run(result.run_id)
        groups = {g["name"]: sorted(g["agents"]) for g in run.config["memory_groups"]}
        assert groups == {"research": ["alice", "bob"]}
        (call,) = ledger.calls(result.run_id, subject="task:a")
        assert call.manifest["clearance"]["memory_scopes"] == ["agent:alice", "group:research"]
        assert verify_run(ledger, result.run_id).ok


async def test_chat_summaries_are_recorded_and_verified(tmp_path, db):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    memory = PersistentMemory(db, agent="alice")

    def reply(request):
        if request.prompt.manifest.subject == "summary:alice":
            return "Summary: the user sent numbered messages."
        return "ok " * 10

    model = FunctionModel(reply, model_id="test:function")
    model.context_window = 500
    chat = AgentChat(
        agent=Agent(name="alice", instructions="A.", limits=AgentLimits(max_output_tokens=32)),
        model=model,
        memory=memory,
        strategy="summarize",
        ledger=ledger,
    )
    for i in range(20):
        await chat.say(f"message {i} " + "filler " * 15)
    assert chat.compressions and all(c.summary_id for c in chat.compressions)
    subjects = [c.subject for c in ledger.calls(chat.run_id)]
    assert subjects.count("summary:alice") == len(chat.compressions)
    assert subjects.count("conversation:alice") == 20
    report = verify_run(ledger, chat.run_id, memories=memory_lookup(db))
    assert report.ok, [str(f) for f in report.findings]
    # Nothing dropped is lost: every turn is in the conversation or in long-term memory
    # (an earlier summary is folded into the next one instead).
    for record in chat.compressions:
        for turn_id in record.dropped:
            assert turn_id.startswith("summary_") or memory.get(turn_id) is not None
    ledger.close()


async def test_runs_recorded_before_memory_scopes_still_verify(tmp_path, rechain):
    from clearance._state.ledger import call_record_sha256

    db_path = tmp_path / "runs.db"
    team = Team(agents=(ALICE,))
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        orch = Orchestrator(team, model=FunctionModel(lambda r: "ok"), ledger=ledger)
        result = await orch.run_tasks(
            [Task(id="a", title="A", description="Do a.", assignee="alice")]
        )
    con = sqlite3.connect(db_path)
    # Not `rewrite_prompt`: every call's manifest put in the old shape, prompts untouched.
    rows = con.execute("SELECT call_id, messages, manifest FROM calls").fetchall()
    for call_id, messages, manifest_json in rows:
        manifest = json.loads(manifest_json)
        if manifest.get("clearance"):
            del manifest["clearance"]["memory_scopes"]  # the old shape
        digest = call_record_sha256(json.loads(messages), manifest)
        con.execute(
            "UPDATE calls SET manifest = ?, record_sha256 = ? WHERE call_id = ?",
            (json.dumps(manifest), digest, call_id),
        )
    con.commit()
    con.close()
    rechain(db_path, result.run_id)  # the run recorded so, chain included
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_chat_records_where_its_memory_lives_and_finishes_its_run(tmp_path, db):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    model = FunctionModel(lambda request: "ok", model_id="test:function")
    model.context_window = 4000
    chat = AgentChat(
        agent=ALICE, model=model, memory=PersistentMemory(db, agent="alice"), ledger=ledger
    )
    await chat.say("hello")
    chat.finish()
    run = ledger.get_run(chat.run_id)
    assert run.config["memory"] == {"url": db, "on_error": "fail"}
    assert run.status == "completed" and run.usage.requests == 1
    failed = AgentChat(
        agent=ALICE,
        model=model,
        memory=PersistentMemory("sqlite:///:memory:", agent="alice"),
        ledger=ledger,
    )
    failed.finish(error="the model failed")
    run = ledger.get_run(failed.run_id)
    assert run.config["memory"] is None  # nothing that outlives the process to check against
    assert run.status == "failed" and run.error == "the model failed"
    ledger.close()
