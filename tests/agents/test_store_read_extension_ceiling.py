"""A delegate's or child's reads push expiry forward no further than its caller's would.

``store_read_extends_ttl_s`` makes every read of an agent touch the entry, even on a
read-only grant: a change of the store. An agent acting for another (a delegate for its
delegator, a child for its parent) never acts with more than its caller may, so its reads
extend expiry only when every agent it acts for extends on its reads too, and by the
shortest of their extensions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_delegation import scripted  # the same scripted model the delegation tests use

from clearance import Agent, ContextStore, Orchestrator, RunOptions, Task, TaskStatus, Team
from clearance._context.authority import Authority
from clearance.models import ToolCall

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def read_call() -> ToolCall:
    return ToolCall(id="g", name="store_get", arguments={"namespace": "facts", "key": "k"})


async def _run(tmp_path: Path, asker_extends: float | None) -> datetime | None:
    """The entry's expiry after the asker's delegate read it (written to expire in 60 s)."""
    store = ContextStore(f"sqlite:///{tmp_path / 'store.db'}", clock=lambda: NOW)
    store.set("facts", "k", "water boils", "w", ttl_s=60)
    asker = Agent(name="asker", instructions="You ask.", can_delegate_to=("reader",),
                  tools=("store_get",), store_grants={"facts": "read"},
                  store_read_extends_ttl_s=asker_extends)  # fmt: skip
    reader = Agent(name="reader", instructions="You read.", tools=("store_get",),
                   store_grants={"facts": "read"}, store_read_extends_ttl_s=3600)  # fmt: skip
    handoff = ToolCall(id="d", name="delegate", arguments={"agent": "reader", "task": "Read."})
    model = scripted({"asker": [handoff, "ASKED"], "reader": [read_call(), "READ"]})
    with store:
        result = await Orchestrator(
            Team(agents=(asker, reader)), model=model, store=store,
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks([Task(id="t", title="T", description="Ask.", assignee="asker")])  # fmt: skip
        assert result.tasks["t"].status is TaskStatus.COMPLETED, result.tasks["t"].error
        (read,) = [r for r in model.requests if r.prompt.manifest.agent == "reader"][1:]
        assert "water boils" in read.prompt.text  # the read itself is granted
        entry = store.get_entry("facts", "k")
        assert entry is not None
        return entry.expires_at


async def test_a_delegate_of_an_agent_whose_reads_leave_expiry_alone_leaves_it_too(tmp_path):
    assert await _run(tmp_path, None) == NOW + timedelta(seconds=60)


async def test_a_delegate_extends_by_the_shortest_extension_of_the_agents_it_acts_for(
    tmp_path,
):
    assert await _run(tmp_path, 600) == NOW + timedelta(seconds=600)


@pytest.mark.parametrize(
    ("own", "caller", "expected"),
    [(None, None, None), (3600, None, None), (None, 60, None), (3600, 60, 60), (60, 3600, 60)],
)
def test_the_extension_of_an_authority_is_the_shortest_of_the_chain(own, caller, expected):
    top = Authority.of(Agent(name="top", instructions="i", store_read_extends_ttl_s=caller), None)
    agent = Agent(name="a", instructions="i", store_read_extends_ttl_s=own)
    assert Authority.of(agent, top).read_extends_ttl_s == expected
    assert Authority.of(agent, None).read_extends_ttl_s == own
