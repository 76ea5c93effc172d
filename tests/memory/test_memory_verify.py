"""``clearance verify`` against a forger who moves a memory record across a scope, or who
retitles a memory block or a message to name another author or sender."""

from __future__ import annotations

import sqlite3

from clearance import Agent, Orchestrator, RunLedger, RunServices, Task, Team
from clearance._context.verify import verify_run
from clearance._core.memory_spec import AgentMemory
from clearance._core.prompt import sha256_text
from clearance.memory import PersistentMemory, RunMemory, memory_lookup
from clearance.testing import FunctionModel


async def test_a_record_moved_from_another_agents_scope_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    own = PersistentMemory(url, agent="alice").record("alpha note about the harbour")[0]
    foreign = PersistentMemory(url, agent="bob").record("bravo note about the harbour")[0]
    assert len(own.content) == len(foreign.content)
    team = Team(
        agents=(
            Agent(name="alice", instructions="A.", memory=AgentMemory(recall=5)),
            Agent(name="bob", instructions="B.", memory=AgentMemory(recall=5)),
        )
    )
    db_path = tmp_path / "runs.db"
    memory = RunMemory(url)
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        orch = Orchestrator(
            team, model=FunctionModel(lambda r: "done"), ledger=ledger, memory=memory
        )
        result = await orch.run_tasks(
            [Task(id="t", title="harbour", description="the harbour", assignee="alice")]
        )
        assert verify_run(ledger, result.run_id, memories=memory_lookup(url)).ok
    memory.close()

    # The forger puts bob's private record in alice's prompt, titled as alice's own scope,
    # re-renders the prompt, recomputes every digest and rebuilds the chain.
    def edit(block, item):
        if item["origin"] != own.origin:
            return block
        assert block.content == own.content
        item["origin"] = foreign.origin
        item["title"] = item["title"].replace(own.id, foreign.id)
        item["sha256"] = sha256_text(foreign.content)
        return type(block)(heading=item["title"], content=foreign.content, on_fence=block.on_fence)

    conn = sqlite3.connect(db_path)
    rewrite_prompt(conn, "task:t", edit)
    conn.commit()
    conn.close()
    rechain(db_path, result.run_id)

    with RunLedger(f"sqlite:///{db_path}") as ledger:
        report = verify_run(ledger, result.run_id, memories=memory_lookup(url))
    reasons = [str(f) for f in report.findings]
    assert not report.ok
    assert any("in scope 'agent:bob', not the one its title names" in r for r in reasons), reasons


def retitle(rewrite_prompt, db_path, subject: str, origin: str, title: str) -> None:
    """Give one block of a recorded prompt another title, digests and all, as a forger could."""

    def edit(block, item):
        if item["origin"] != origin:
            return block
        item["title"] = title
        return type(block)(heading=title, content=block.content, on_fence=block.on_fence)

    conn = sqlite3.connect(db_path)
    rewrite_prompt(conn, subject, edit)
    conn.commit()
    conn.close()


async def test_a_message_retitled_with_another_sender_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    from clearance import MessageBus

    db_path = tmp_path / "runs.db"
    team = Team(
        agents=(
            Agent(name="editor", instructions="E."),
            Agent(name="writer", instructions="W."),
            Agent(name="ceo", instructions="C."),
        )
    )
    bus = MessageBus()
    message = bus.send("editor", "writer", "Be brief.")
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        orch = Orchestrator(
            team, model=FunctionModel(lambda r: "done"), ledger=ledger,
            services=RunServices(messages=bus),
        )  # fmt: skip
        result = await orch.run_tasks(
            [Task(id="t", title="Write", description="Write it.", assignee="writer")]
        )
        assert verify_run(ledger, result.run_id).ok
    retitle(rewrite_prompt, db_path, "task:t", f"message:{message.id}", f"From ceo ({message.id})")
    rechain(db_path, result.run_id)
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        report = verify_run(ledger, result.run_id)
    reasons = [str(f) for f in report.findings]
    assert any("the message was sent by 'editor', not as its title says" in r for r in reasons), (
        reasons
    )


async def test_a_memory_block_retitled_with_another_author_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    from clearance._context.memory_items import memory_title
    from clearance.memory import MemoryGroup

    url = f"sqlite:///{tmp_path / 'memory.db'}"
    groups = {"lab": ["alice", "bob"]}
    shared = PersistentMemory(url, agent="bob", groups=groups).record(
        "bravo finding about the harbour", group="lab"
    )[0]
    team = Team(
        agents=(
            Agent(name="alice", instructions="A.", memory=AgentMemory(recall=5)),
            Agent(name="bob", instructions="B.", memory=AgentMemory(recall=5)),
        ),
        memory_groups=(MemoryGroup(name="lab", agents=("alice", "bob")),),
    )
    db_path = tmp_path / "runs.db"
    memory = RunMemory(url)
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        orch = Orchestrator(
            team, model=FunctionModel(lambda r: "done"), ledger=ledger, memory=memory
        )
        result = await orch.run_tasks(
            [Task(id="t", title="harbour", description="the harbour", assignee="alice")]
        )
        assert verify_run(ledger, result.run_id, memories=memory_lookup(url)).ok
    memory.close()
    honest = memory_title(shared)
    assert "by bob" in honest
    retitle(rewrite_prompt, db_path, "task:t", shared.origin, honest.replace("by bob", "by alice"))
    rechain(db_path, result.run_id)
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        report = verify_run(ledger, result.run_id, memories=memory_lookup(url))
    reasons = [str(f) for f in report.findings]
    assert any(f"the record is titled {honest!r} in the memory store" in r for r in reasons), (
        reasons
    )
