"""Memory settings from outside: group names, windows, recall counts, and group membership."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clearance import Agent, ConfigError, RunLedger, Team
from clearance._context.verify import verify_run
from clearance._core.memory_spec import AgentMemory
from clearance._core.teamfile import load_team_file
from clearance.memory import (
    MemoryGroup,
    PersistentMemory,
    RunMemory,
    SharedConversation,
    memory_lookup,
)


@pytest.mark.parametrize(
    "name",
    [
        "lab one",  # a space: the scope named in a memory block's title was cut at it
        "lab, by bob",
        "lab\nnext",
        "",
        "r\u0435search",  # a Cyrillic "ie": looks like "research", is another scope
        "café",
        "-lab",
    ],
)
def test_a_memory_group_name_is_a_name(name):
    with pytest.raises(ConfigError, match="memory group name"):
        MemoryGroup(name=name, agents=("alice", "bob"))


def test_a_team_file_with_a_bad_group_name_is_refused_with_the_field(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(
        "memory_groups:\n"
        "  - {name: 'lab one', agents: [a, b]}\n"
        "agents:\n"
        "  - {name: a, instructions: A., memory: {record_to: 'lab one'}}\n"
        "  - {name: b, instructions: B.}\n"
    )
    with pytest.raises(ConfigError, match="memory group name 'lab one' is not valid"):
        load_team_file(path)


@pytest.mark.parametrize("window", [math.nan, 2.5, True, 0, -3, 10**30, "5"])
def test_a_shared_conversation_window_is_a_bounded_count(window):
    with pytest.raises(ConfigError, match=r"shared_conversation\.window"):
        SharedConversation(window=window)


def test_a_huge_window_in_a_team_file_is_refused_at_load(tmp_path):
    # It reached the database as LIMIT 4e30: an OverflowError, with a traceback, in chat.
    path = tmp_path / "team.yaml"
    path.write_text(
        "memory_groups:\n"
        "  - {name: lab, agents: [a, b], shared_conversation: {window: 1000000000000000000000}}\n"
        "agents:\n"
        "  - {name: a, instructions: A.}\n"
        "  - {name: b, instructions: B.}\n"
    )
    with pytest.raises(ConfigError, match=r"shared_conversation\.window"):
        load_team_file(path)


@pytest.mark.parametrize("recall", [2.5, True, math.nan, "3", -1, 51])
def test_recall_is_a_count_from_0_to_50(recall):
    with pytest.raises(ConfigError, match=r"memory\.recall"):
        AgentMemory(recall=recall)


@pytest.mark.parametrize("record_to", ["", "a b", 7])
def test_record_to_names_a_group(record_to):
    with pytest.raises(ConfigError, match="record_to"):
        AgentMemory(record_to=record_to)


def test_a_run_memory_gives_each_team_its_own_groups(tmp_path):
    # The agent's memory was cached by name alone: a second team, where alice is in no
    # group, still read the first team's group.
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    PersistentMemory(url, agent="bob", groups={"lab": ["alice", "bob"]}).record(
        "CANARY lab finding", group="lab"
    )
    memory = RunMemory(url)
    try:
        in_lab = memory.memory_of("alice", {"lab": ["alice", "bob"]}, model_id="openai:x")
        assert [r.content for r in in_lab.retrieve("CANARY")] == ["CANARY lab finding"]
        alone = memory.memory_of("alice", {}, model_id="openai:x")
        assert alone.scopes == {"agent:alice"}
        assert alone.retrieve("CANARY") == []
        assert memory.memory_of("alice", {"lab": ("bob", "alice")}, model_id="openai:x") is in_lab
    finally:
        memory.close()


async def test_an_honest_run_of_a_group_verifies_with_the_memory_store(tmp_path: Path):
    from clearance import Orchestrator, Task
    from clearance.testing import FunctionModel

    url = f"sqlite:///{tmp_path / 'memory.db'}"
    group = MemoryGroup(name="lab.one-2", agents=("alice", "bob"))
    team = Team(
        agents=(
            Agent(name="alice", instructions="A.", memory=AgentMemory(record_to="lab.one-2")),
            Agent(name="bob", instructions="B.", memory=AgentMemory()),
        ),
        memory_groups=(group,),
    )
    memory = RunMemory(url)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(
            team, model=FunctionModel(lambda r: "graphene result"), ledger=ledger, memory=memory
        )
        await orch.run_tasks([Task(id="a", title="graphene", description="x", assignee="alice")])
        result = await orch.run_tasks(
            [Task(id="b", title="graphene", description="y", assignee="bob")]
        )
        (call,) = ledger.calls(result.run_id, subject="task:b")
        assert any(i["origin"].startswith("memory:") for i in call.manifest["items"])
        report = verify_run(ledger, result.run_id, memories=memory_lookup(url))
        assert report.ok, [str(f) for f in report.findings]
    memory.close()


@pytest.mark.parametrize(
    ("field", "settings"),
    [
        ("context_window", {"context_window": math.nan}),
        ("context_window", {"context_window": math.inf}),
        ("context_window", {"context_window": True}),
        ("context_window", {"context_window": 1000.5}),
        ("trigger_threshold", {"trigger_threshold": True}),
        ("target_ratio", {"target_ratio": math.nan}),
        ("summary_max_tokens", {"summary_max_tokens": -5}),
        ("summary_max_tokens", {"summary_max_tokens": 0}),
        ("summary_max_tokens", {"summary_max_tokens": 2.5}),
        ("summary_max_tokens", {"summary_max_tokens": 1000}),  # no room left below the target
    ],
)
def test_the_window_monitor_refuses_settings_that_are_not_numbers_in_range(field, settings):
    from clearance import ContextBuilder
    from clearance.memory import ContextWindowMonitor
    from clearance.tokens import counter_for

    values = {"context_window": 1000, **settings}
    with pytest.raises(ConfigError, match=field):
        ContextWindowMonitor(builder=ContextBuilder(count_tokens=counter_for("x:y")), **values)


@pytest.mark.parametrize(
    ("field", "settings"),
    [
        ("recall_limit", {"recall_limit": math.nan}),
        ("recall_limit", {"recall_limit": -1}),
        ("recall_limit", {"recall_limit": 2.5}),
        ("context_window", {"context_window": 0}),  # was taken as "the model's own"
        ("context_window", {"context_window": math.nan}),
    ],
)
def test_agent_chat_refuses_settings_that_are_not_counts(field, settings):
    from clearance import AgentChat
    from clearance.testing import FunctionModel

    model = FunctionModel(lambda request: "ok", model_id="test:function")
    model.context_window = 4000
    with pytest.raises(ConfigError, match=field):
        AgentChat(agent=Agent(name="alice", instructions="A."), model=model, **settings)


@pytest.mark.parametrize("size", [2.5, True, math.nan, -1])
def test_conversation_sizes_are_counts(size):
    from clearance.memory import ConversationMemory, Turn

    conversation = ConversationMemory(agent="alice")
    conversation.add(Turn(id="t1", role="user", content="hello"))
    with pytest.raises(ConfigError):
        conversation.get_messages(size)
    with pytest.raises(ConfigError):
        conversation.truncate_to_size(size)
    assert len(conversation) == 1
