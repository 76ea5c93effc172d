"""The queued writes of tasks, calls and outcomes build the rows and name the operation.

`TaskWrite`, `CallWrite` and `FinishWrite` replace a `PendingWrite` holding a function (or
rows) built on the caller's thread: their rows and error texts must be the same.
"""

from datetime import UTC, datetime

from clearance._context.builder import ContextBuilder
from clearance._core.spec import Agent, Task
from clearance._state.graph import TaskGraph
from clearance._state.ledger.rows import build_task_rows, call_rows, finish_row
from clearance._state.ledger.writes import CallWrite, FinishWrite, TaskWrite
from clearance._state.queue import TaskQueue
from clearance.models import ModelResponse, Usage, estimate_tokens

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
AGENT = Agent(name="alice", instructions="Alice.")
GRAPH = TaskGraph(
    [
        Task(id="a", title="A", description="Do a.", assignee="alice"),
        Task(id="b", title="B", description="Do b.", assignee="alice", depends_on=["a"]),
    ]
)


def test_task_writes_build_the_rows_of_one_state_or_several():
    queue = TaskQueue(GRAPH)
    queue.start("a")
    queue.fail("a", "boom")
    failed, waiting = queue.get("a"), queue.get("b")

    one = TaskWrite("run_1", failed, T0)
    assert one.build() == build_task_rows("run_1", (failed,), T0)
    assert one.build()["task_reason"][0]["error"] == "boom"
    assert one.operation == "record task 'a' of run 'run_1'"

    several = TaskWrite("run_1", (failed, waiting), T0)
    assert several.build() == build_task_rows("run_1", (failed, waiting), T0)
    assert [r["task_id"] for r in several.build()["task"]] == ["a", "b"]
    assert several.operation == "record 2 tasks of run 'run_1'"

    # A single state is a named tuple: it must not be taken for a tuple of states.
    assert len(TaskWrite("run_1", waiting, None).build()["task"]) == 1


def test_call_and_finish_writes_build_the_rows_of_call_rows_and_finish_row():
    prompt = ContextBuilder(count_tokens=estimate_tokens).build_task_prompt(
        GRAPH.get("a"), agent=AGENT, queue=TaskQueue(GRAPH)
    )
    response = ModelResponse(
        text="ok", usage=Usage(requests=1, prompt_tokens=5, completion_tokens=1), model_id="m"
    )
    fields = dict(
        call_id="call_1", run_id="run_1", subject="task:a", agent="alice", model_id="m",
        prompt=prompt, started_at=T0, parameters={"temperature": 0.5},
    )  # fmt: skip
    request = CallWrite(**fields, response=None, error=None, latency_s=0.0, pending=True)
    expected = call_rows(**fields, response=None, error=None, latency_s=0.0, pending=True)
    assert request.build() == expected
    assert request.build()["call"][0]["pending"] == 1
    assert request.operation == "record a 'task:a' request of run 'run_1'"

    call = CallWrite(**fields, response=response, error=None, latency_s=0.5, pending=False)
    assert call.build() == call_rows(**fields, response=response, error=None, latency_s=0.5)
    assert call.build()["call"][0]["response"] == "ok"
    assert call.operation == "record a 'task:a' call of run 'run_1'"

    outcome = FinishWrite("call_1", "run_1", None, "ModelError: x", 1.5)
    assert outcome.build() == {
        "call_finish": [finish_row("call_1", "run_1", None, "ModelError: x", 1.5)]
    }
    assert outcome.operation == "record the outcome of call 'call_1' of run 'run_1'"
