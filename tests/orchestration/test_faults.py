"""Fault injection: transient faults are retried away; exhausted retries fail one branch only."""

import hashlib

import pytest

from clearance import (
    Agent,
    AgentLimits,
    ModelError,
    Orchestrator,
    RetryPolicy,
    RunOptions,
    Task,
    TaskStatus,
    Team,
)
from clearance.testing import FAULT_KINDS, FaultInjectingModel, FunctionModel

NO_WAIT = RetryPolicy(initial_s=0, max_s=0, jitter_s=0)


def subject(request):
    return request.prompt.manifest.subject


def digest_model():
    """A deterministic model: the answer is a digest of the whole prompt."""

    def answer(request):
        return f"{subject(request)}={hashlib.sha256(request.prompt.text.encode()).hexdigest()[:12]}"

    return FunctionModel(answer)


def big_graph(n=100):
    tasks = []
    for i in range(n):
        deps = set()
        if i:
            deps.add(f"t{(i - 1) // 2}")
        if i >= 10 and i % 3 == 0:
            deps.add(f"t{i - 10}")
        tasks.append(
            Task(
                id=f"t{i}",
                title=f"Task {i}",
                description=f"Work on part {i}.",
                assignee="w" if i % 2 else "v",
                depends_on=tuple(sorted(deps)),
            )
        )
    return tasks


def team(retries, attempt_timeout_s=None):
    limits = AgentLimits(retries=retries, attempt_timeout_s=attempt_timeout_s)
    return Team(
        agents=(
            Agent(name="v", instructions="You are V.", limits=limits),
            Agent(name="w", instructions="You are W.", limits=limits),
        ),
        coordinator=Agent(name="lead", instructions="You lead.", limits=limits),
    )


async def test_thirty_percent_faults_with_retries_give_the_fault_free_results(ledger):
    tasks = big_graph()
    clean = await Orchestrator(
        team(retries=0), model=digest_model(), ledger=ledger, options=RunOptions(max_concurrency=8)
    ).run_tasks(tasks)
    assert clean.status == "completed"

    faulty = FaultInjectingModel(digest_model(), rate=0.3, seed=7, hang_s=5.0)
    result = await Orchestrator(
        team(retries=10, attempt_timeout_s=0.05),
        model=faulty,
        ledger=ledger,
        options=RunOptions(max_concurrency=8, retry_policy=NO_WAIT),
    ).run_tasks(tasks)

    assert result.status == "completed", result.error
    assert {k: v.result for k, v in result.tasks.items()} == {
        k: v.result for k, v in clean.tasks.items()
    }
    assert result.synthesis == clean.synthesis
    # Every kind of fault happened, and about 30% of the calls failed.
    assert set(faulty.injected) == set(FAULT_KINDS)
    injected = sum(faulty.injected.values())
    assert 0.2 < injected / faulty.calls < 0.4
    # Every attempt is in the ledger: one failed call per injected fault, with its error.
    calls = ledger.calls(result.run_id)
    failed = [c for c in calls if c.error is not None]
    assert len(calls) == faulty.calls
    assert len(failed) == injected
    timeouts = [c for c in failed if "attempt_timeout_s exceeded" in c.error]
    assert len(timeouts) == faulty.injected["hang"]
    assert all(c.error.startswith("attempt ") for c in failed)
    assert len(calls) - len(failed) == 101  # 100 tasks and the synthesis, once each


async def test_exhausted_retries_fail_the_task_skip_its_dependents_and_keep_the_rest(ledger):
    tasks = [
        Task(id="a", title="A", description="a", assignee="v"),
        Task(id="b", title="B", description="b", assignee="v"),
        Task(id="c", title="C", description="c", assignee="v", depends_on=("b",)),
        Task(id="d", title="D", description="d", assignee="v", depends_on=("c",)),
        Task(id="e", title="E", description="e", assignee="v", depends_on=("a",)),
    ]
    model = FaultInjectingModel(
        digest_model(), rate=1.0, kinds=["server_error"], when=lambda r: subject(r) == "task:b"
    )
    result = await Orchestrator(
        team(retries=3), model=model, ledger=ledger, options=RunOptions(retry_policy=NO_WAIT)
    ).run_tasks(tasks)

    status = {k: v.status for k, v in result.tasks.items()}
    assert status == {
        "a": TaskStatus.COMPLETED,
        "b": TaskStatus.FAILED,
        "c": TaskStatus.SKIPPED,
        "d": TaskStatus.SKIPPED,
        "e": TaskStatus.COMPLETED,
    }
    assert "HTTP 503" in result.tasks["b"].error
    b_calls = ledger.calls(result.run_id, subject="task:b")
    assert [c.error.split(":")[0] for c in b_calls] == [f"attempt {i} of 4" for i in (1, 2, 3, 4)]
    # The synthesis still ran and was told about the failure and the skipped tasks.
    assert result.synthesis is not None
    synthesis_prompt = ledger.calls(result.run_id, subject="synthesis")[0]
    origins = [item["origin"] for item in synthesis_prompt.manifest["items"]]
    assert "task_status:b" in origins and "task_status:c" in origins
    assert "HTTP 503" in synthesis_prompt.messages[-1]["content"]
    assert result.status == "failed" and "b" in result.error


async def test_client_errors_are_not_retried(ledger):
    def answer(request):
        if subject(request) == "task:a":
            raise ModelError("HTTP 400 bad request", status_code=400, transient=False)
        return "ok"

    result = await Orchestrator(
        team(retries=5),
        model=FunctionModel(answer),
        ledger=ledger,
        options=RunOptions(retry_policy=NO_WAIT),
    ).run_tasks([Task(id="a", title="A", description="a", assignee="v")])
    assert result.tasks["a"].status is TaskStatus.FAILED
    assert len(ledger.calls(result.run_id, subject="task:a")) == 1


async def test_plain_connection_errors_from_a_model_are_retried(ledger):
    attempts = []

    def answer(request):
        attempts.append(subject(request))
        if len(attempts) < 3:
            raise ConnectionResetError("peer reset")
        return "ok"

    result = await Orchestrator(
        team(retries=2),
        model=FunctionModel(answer),
        ledger=ledger,
        options=RunOptions(retry_policy=NO_WAIT),
    ).run_tasks([Task(id="a", title="A", description="a", assignee="v")])
    assert result.tasks["a"].result == "ok"
    errors = [c.error for c in ledger.calls(result.run_id, subject="task:a")]
    assert errors[2] is None and "ConnectionResetError: peer reset" in errors[0]


def test_fault_injector_rejects_bad_settings():
    from clearance import ConfigError

    with pytest.raises(ConfigError, match="rate"):
        FaultInjectingModel(digest_model(), rate=1.5)
    with pytest.raises(ConfigError, match="kinds"):
        FaultInjectingModel(digest_model(), rate=0.1, kinds=["meteor"])
