"""A memory group is shared by exactly its members, even when another team's group has its name.

Scopes are names (``group:<name>``), and teams share a memory database by default (``memory.db``
next to the ledger). A second team file that declares a group of the same name with other
members read everything the first team's members recorded to it.
"""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.memory_spec import AgentMemory, MemoryGroup
from clearance.memory import PersistentMemory, RunMemory, memory_lookup
from clearance.testing import FunctionModel

FIRST = {"research": ["scout", "analyst"]}
SECOND = {"research": ["carol", "dave"]}


class Words:
    """A bag-of-words embedder (retrieval by cosine similarity)."""

    dimensions = 3

    def embed(self, texts):
        return [[float(t.count(w)) for w in ("harbour", "crane", "code")] for t in texts]


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path):
    if request.param == "sqlite":
        eng = sa.create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    else:
        eng = sa.create_engine(request.getfixturevalue("postgres_url"))
    yield eng
    with eng.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS clearance_memories"))
        conn.execute(sa.text("DROP TABLE IF EXISTS memory_schema_version"))
        if eng.dialect.name == "sqlite":
            conn.execute(sa.text("DROP TABLE IF EXISTS clearance_memories_fts"))
    eng.dispose()


@pytest.mark.parametrize("embedder", [None, Words()], ids=["text", "embedding"])
def test_a_same_named_group_of_another_team_reads_none_of_its_records(engine, embedder):
    def memory(agent, groups):
        return PersistentMemory(engine, agent=agent, groups=groups, embedder=embedder)

    secret = memory("scout", FIRST).record("the harbour crane code is 7741", group="research")[0]
    analyst = memory("analyst", FIRST)
    assert [r.id for r in analyst.retrieve("harbour crane")] == [secret.id]  # its members do
    carol = memory("carol", SECOND)
    assert carol.retrieve("harbour crane code") == []
    assert carol.recent(10) == [] and carol.get(secret.id) is None
    assert carol.retrieve("harbour crane code", group="research") == []
    own = carol.record("the harbour crane is red", group="research")[0]
    assert [r.id for r in carol.retrieve("harbour crane")] == [own.id]
    assert [r.id for r in analyst.retrieve("harbour crane")] == [secret.id]
    mine = carol.record("carol's own harbour crane note")[0]  # her private scope: any author
    assert {r.id for r in carol.retrieve("harbour crane", limit=10)} == {own.id, mine.id}


async def test_a_run_of_another_team_never_shows_its_member_the_records(tmp_path, rechain):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    PersistentMemory(url, agent="scout", groups=FIRST).record(
        "the harbour crane code is 7741", group="research"
    )
    received = []

    def model(request):
        received.append(request.prompt.text)
        return "done"

    team = Team(
        agents=(
            Agent(name="carol", instructions="C.", memory=AgentMemory(recall=5, record="none")),
            Agent(name="dave", instructions="D."),
        ),
        memory_groups=(MemoryGroup(name="research", agents=("carol", "dave")),),
    )
    memory = RunMemory(url)
    db = tmp_path / "runs.db"
    task = Task(id="t", title="harbour crane", description="the harbour crane", assignee="carol")
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(model), ledger=ledger, memory=memory
        ).run_tasks([task])
        assert verify_run(ledger, result.run_id, memories=memory_lookup(url)).ok
    memory.close()
    assert received and not any("7741" in text for text in received)

    # A forger shows carol the first team's group record (a record of a scope she reads,
    # by name), with a recall note that lists it.
    record = PersistentMemory(url, agent="scout", groups=FIRST).recent(1)[0]
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE tool_calls SET result = ? WHERE name = 'memory_recall'",
        (f"recalled: {record.id}",),
    )
    conn.commit()
    conn.close()
    _show_memory(db, record)
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, result.run_id, memories=memory_lookup(url))
    reasons = [str(f) for f in report.findings]
    assert not report.ok
    assert any(
        "by 'scout', who is not a member of memory group 'research'" in r for r in reasons
    ), reasons


# Not `rewrite_prompt`: the forged prompt is built anew by a builder, not edited block by block.
def _show_memory(db, record) -> None:
    """Re-render the task's recorded prompt with ``record`` in it, as the builder would."""
    import json

    from clearance._context.builder import ContextBuilder
    from clearance._core.prompt import messages_sha256
    from clearance._state.graph import TaskGraph
    from clearance._state.ledger import call_record_sha256
    from clearance._state.queue import TaskQueue
    from clearance.testing import FunctionModel as _Model

    conn = sqlite3.connect(db)
    graph = json.loads(conn.execute("SELECT graph FROM runs").fetchone()[0])
    queue = TaskQueue(TaskGraph.from_dict(graph))
    builder = ContextBuilder(
        count_tokens=_Model(lambda r: "").count_tokens, memory_groups={"research": {"carol"}}
    )
    agent = Agent(name="carol", instructions="C.", memory=AgentMemory(recall=5, record="none"))
    # Built as if carol were in the group the record is in: the forger's own builder.
    forged = builder.build_task_prompt(
        queue.graph.get("t"), agent=agent, queue=queue, memories=(record,)
    )
    messages = [{"role": m.role, "content": m.content} for m in forged.messages]
    manifest = json.loads(
        conn.execute("SELECT manifest FROM calls WHERE subject = 'task:t'").fetchone()[0]
    )
    manifest["items"] = [i.to_dict() for i in forged.manifest.items]
    manifest["prompt_sha256"] = messages_sha256(forged.messages)
    manifest["total_tokens"] = forged.manifest.total_tokens
    conn.execute(
        "UPDATE calls SET messages = ?, manifest = ?, prompt_sha256 = ?, record_sha256 = ? "
        "WHERE subject = 'task:t'",
        (json.dumps(messages), json.dumps(manifest), manifest["prompt_sha256"],
         call_record_sha256(messages, manifest)),
    )  # fmt: skip
    conn.commit()
    conn.close()


def test_a_run_memory_never_hands_one_teams_group_to_another_of_that_name(tmp_path):
    # A run memory cached each agent's memory by the names of its groups: a second team
    # whose group of that name has other members got the first team's memory, members and all.
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    PersistentMemory(url, agent="scout", groups={"research": ["scout", "carol"]}).record(
        "the harbour crane code is 7741", group="research"
    )
    memory = RunMemory(url)
    try:
        first = memory.memory_of("carol", {"research": ["scout", "carol"]}, model_id="openai:x")
        assert [r.content for r in first.retrieve("harbour crane")] == [
            "the harbour crane code is 7741"
        ]
        second = memory.memory_of("carol", {"research": ["carol", "dave"]}, model_id="openai:x")
        assert second is not first and second.retrieve("harbour crane") == []
        again = memory.memory_of("carol", {"research": ("carol", "scout")}, model_id="openai:x")
        assert again is first
    finally:
        memory.close()
