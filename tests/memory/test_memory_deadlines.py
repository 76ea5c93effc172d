"""Every long-term memory operation has a deadline, in runs and in chat alike.

A memory database that never answers (a PostgreSQL server that hangs, an SQLite file held
locked) stands here for one whose `PersistentMemory` method blocks until the test lets it go.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from clearance import Agent, AgentChat, ConfigError, Orchestrator, RunLedger, Task, Team
from clearance._core.errors import StoreError
from clearance._core.memory_spec import AgentMemory, MemoryGroup, SharedConversation
from clearance._orchestration.run_memory import RunMemory
from clearance._state.memory import PersistentMemory
from clearance._state.memory_calls import check_memory_timeout
from clearance.testing import CanaryModel, FunctionModel

HANG_S = 30.0
"""How long a hung operation would block if nothing gave up on it (the test releases it)."""


@pytest.fixture
def hang(monkeypatch):
    """Make `PersistentMemory.<name>` block until the test ends; yields the patcher."""
    release = threading.Event()
    entered = threading.Event()

    def patch(name: str) -> threading.Event:
        def blocked(self, *args, **kwargs):
            entered.set()
            release.wait(HANG_S)
            raise AssertionError("a hung memory operation was waited for")

        monkeypatch.setattr(PersistentMemory, name, blocked)
        return entered

    yield patch
    release.set()


async def ticks_while(awaitable, *, every_s: float = 0.01) -> tuple[int, BaseException | None]:
    """Await ``awaitable`` and count how often another task ran meanwhile."""
    count = 0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal count
        while not done.is_set():
            count += 1
            await asyncio.sleep(every_s)

    ticker = asyncio.create_task(tick())
    error: BaseException | None = None
    try:
        await awaitable
    except Exception as exc:
        error = exc
    finally:
        done.set()
        await ticker
    return count, error


def chat(tmp_path, *, memory_timeout_s: float = 0.3, asked: list | None = None) -> AgentChat:
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'memory.db'}", agent="alice")

    def answer(request):
        if asked is not None:
            asked.append(request.prompt.text)
        return "an answer " * 40

    model = FunctionModel(answer, model_id="test:function")
    return AgentChat(
        agent=Agent(name="alice", instructions="You are Alice."),
        model=model,
        memory=memory,
        context_window=2000,
        memory_timeout_s=memory_timeout_s,
    )


async def test_a_hung_recall_fails_the_turn_at_its_deadline_and_the_loop_goes_on(tmp_path, hang):
    asked: list[str] = []
    session = chat(tmp_path, asked=asked)
    hang("retrieve")
    started = time.monotonic()
    ticks, error = await ticks_while(session.say("hello"))
    elapsed = time.monotonic() - started
    assert isinstance(error, StoreError)
    assert str(error) == "recall: the memory store did not answer within 0.3 s"
    assert elapsed < 3
    assert ticks >= 10, "the event loop was blocked by the memory query"
    assert asked == [], "the model was asked without the recall"
    assert session.last_answer is None


async def test_a_hung_recording_of_dropped_turns_fails_after_the_answer_is_kept(tmp_path, hang):
    session = chat(tmp_path)
    hang("record")
    error = None
    for turn in range(40):  # until the conversation is compressed
        held = len(session.conversation.get_messages())
        ticks, error = await ticks_while(session.say(f"message {turn}"))
        if error is not None:
            break
    assert isinstance(error, StoreError), error
    assert str(error) == "recording dropped turns: the memory store did not answer within 0.3 s"
    assert ticks >= 10, "the event loop was blocked by the memory write"
    assert session.last_answer == "an answer " * 40, "the answer came and is kept to show"
    # Nothing left the conversation unrecorded: it holds every turn it held, and the new two.
    assert len(session.conversation.get_messages()) == held + 2


async def test_a_hung_post_to_the_shared_conversation_fails_at_its_deadline(tmp_path, hang):
    memory = PersistentMemory(
        f"sqlite:///{tmp_path / 'memory.db'}", agent="alice", groups={"lab": ("alice", "bob")}
    )
    group = MemoryGroup(
        name="lab", agents=("alice", "bob"), shared_conversation=SharedConversation()
    )
    session = AgentChat(
        agent=Agent(name="alice", instructions="You are Alice."),
        model=FunctionModel(lambda request: "ok", model_id="test:function"),
        memory=memory,
        memory_groups=(group,),
        shared_group="lab",
        context_window=4000,
        memory_timeout_s=0.3,
    )
    hang("record")
    _, error = await ticks_while(session.say("hello"))
    assert isinstance(error, StoreError)
    assert "posting to the shared conversation: " in str(error)
    assert session.last_answer == "ok", "the answer came and is kept to show"


def run_team() -> Team:
    return Team(
        agents=(Agent(name="alice", instructions="You are Alice.", memory=AgentMemory(recall=3)),)
    )


@pytest.mark.parametrize("on_error", ["fail", "continue"])
def test_a_hung_recall_in_a_run_neither_blocks_the_run_nor_its_exit(tmp_path, hang, on_error):
    # The recall ran in the loop's default executor (`asyncio.to_thread`): past the deadline
    # the task failed, but `asyncio.run` then waited for the hung thread before returning.
    hang("retrieve")
    memory = RunMemory(f"sqlite:///{tmp_path / 'memory.db'}", on_error=on_error, timeout_s=0.3)

    async def run():
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orch = Orchestrator(run_team(), model=CanaryModel(), ledger=ledger, memory=memory)
            return await orch.run_tasks(
                [Task(id=f"t{i}", title=f"Step {i}", description="Do it.", assignee="alice")
                 for i in range(3)]
            )  # fmt: skip

    started = time.monotonic()
    result = asyncio.run(run())
    assert time.monotonic() - started < 5
    if on_error == "fail":
        assert result.status == "failed"
        errors = {o.error for o in result.tasks.values()}
        assert all("did not answer within 0.3 s" in (e or "") for e in errors), errors
    else:
        assert result.status == "completed", result.error


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, True, "30", 86_401])
def test_memory_deadlines_out_of_range_are_refused_naming_the_setting(tmp_path, value):
    with pytest.raises(ConfigError, match="memory_timeout_s"):
        check_memory_timeout(value, field="memory_timeout_s")
    with pytest.raises(ConfigError, match=r"memory\.timeout_s"):
        RunMemory(f"sqlite:///{tmp_path / 'm.db'}", timeout_s=value)
    with pytest.raises(ConfigError, match="memory_timeout_s"):
        chat(tmp_path, memory_timeout_s=value)


def test_the_chat_gives_its_deadline_to_the_monitor_and_the_default_is_thirty_seconds(tmp_path):
    assert chat(tmp_path, memory_timeout_s=2.5).monitor.memory_timeout_s == 2.5
    session = AgentChat(
        agent=Agent(name="alice", instructions="You are Alice."),
        model=FunctionModel(lambda request: "ok", model_id="test:function"),
        context_window=2000,
    )
    assert session.memory_timeout_s == session.monitor.memory_timeout_s == 30.0
