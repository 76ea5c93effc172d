"""``clearance verify`` against a memory item in a task prompt that the task never recalled.

A task's clearance admits its assignee's memory scopes, but a run puts in a prompt only the
records the task recalled (noted in the ledger as its ``memory_recall`` tool call). A forger
who shows an agent a record of its own scope that it never recalled (an agent with
``recall: 0``, or a record beyond what was recalled) kept the scope check happy."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.memory_spec import AgentMemory
from clearance._state.ledger import call_record_sha256
from clearance.memory import PersistentMemory, RunMemory, memory_lookup
from clearance.testing import FunctionModel

TASK = Task(id="t", title="harbour", description="the harbour crane", assignee="alice")


async def _run(db: Path, memory_url: str, settings: AgentMemory) -> str:
    team = Team(agents=(Agent(name="alice", instructions="A.", memory=settings),))
    memory = RunMemory(memory_url)
    with RunLedger(f"sqlite:///{db}") as ledger:
        orch = Orchestrator(
            team, model=FunctionModel(lambda r: "done"), ledger=ledger, memory=memory
        )
        result = await orch.run_tasks([TASK])
        report = verify_run(ledger, result.run_id, memories=memory_lookup(memory_url))
        assert report.ok, [str(f) for f in report.findings]
    memory.close()
    return result.run_id


def _prompt(db: Path) -> tuple[str, str, str]:
    conn = sqlite3.connect(db)
    row = conn.execute(
        "SELECT messages, manifest, prompt_sha256 FROM calls WHERE subject = 'task:t'"
    ).fetchone()
    conn.close()
    return row


# Not `rewrite_prompt`: puts in a whole prompt another run recorded, its prompt digest kept.
def _put_prompt(db: Path, prompt: tuple[str, str, str]) -> None:
    """Make the run's task call hold ``prompt``, its record digest recomputed."""
    import json

    messages, manifest, digest = prompt
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE calls SET messages = ?, manifest = ?, prompt_sha256 = ?, record_sha256 = ? "
        "WHERE subject = 'task:t'",
        (messages, manifest, digest,
         call_record_sha256(json.loads(messages), json.loads(manifest))),
    )  # fmt: skip
    conn.commit()
    conn.close()


async def test_a_memory_item_the_task_never_recalled_is_a_finding(tmp_path, rechain):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    record = PersistentMemory(url, agent="alice").record("a private note on the harbour crane")[0]
    # A run where alice recalls: her prompt holds her record (the forger's source).
    recalled = tmp_path / "recalled.db"
    await _run(recalled, url, AgentMemory(recall=5, record="none"))
    source = _prompt(recalled)
    assert record.origin in source[1]
    # A run of the same task where alice recalls nothing: her prompt holds no memory.
    db = tmp_path / "runs.db"
    run_id = await _run(db, url, AgentMemory(recall=0, record="none"))
    assert record.origin not in _prompt(db)[1]

    _put_prompt(db, source)  # the forger shows alice the record she never recalled
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id, memories=memory_lookup(url))
    reasons = [str(f) for f in report.findings]
    assert not report.ok
    assert any(record.origin in r and "was not recalled for task 't'" in r for r in reasons), (
        reasons
    )


async def test_a_record_beyond_those_recalled_is_a_finding(tmp_path, rechain):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    memory = PersistentMemory(url, agent="alice")
    first = memory.record("the harbour crane lifts forty tonnes")[0]
    second = memory.record("the harbour crane was painted red")[0]
    # A run recalling both records, as the forger's source.
    both = tmp_path / "both.db"
    await _run(both, url, AgentMemory(recall=5, record="none"))
    source = _prompt(both)
    assert first.origin in source[1] and second.origin in source[1]
    # The real run recalls one record only.
    db = tmp_path / "runs.db"
    run_id = await _run(db, url, AgentMemory(recall=1, record="none"))
    held = _prompt(db)[1]
    assert (first.origin in held) != (second.origin in held)
    shown_only_by_forger = second if first.origin in held else first

    _put_prompt(db, source)
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id, memories=memory_lookup(url))
    reasons = [str(f) for f in report.findings]
    assert not report.ok
    assert any(shown_only_by_forger.origin in r and "not recalled" in r for r in reasons), reasons
