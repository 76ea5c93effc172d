"""Per-dependency payload limits: an oversized result fails the dependent, never truncated."""

import pytest

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    ContextBuilder,
    DependencyPayloadError,
    LimitExceeded,
    Orchestrator,
    Task,
    TaskGraph,
    TaskStatus,
    Team,
)
from clearance._core.teamfile import load_team_file
from clearance._state.queue import TaskQueue
from clearance.models import estimate_tokens
from clearance.testing import FunctionModel

AGENT = Agent(name="worker", instructions="You are careful.")
COORD = Agent(name="lead", instructions="You synthesize.")


def t(task_id, *deps, scope="dependencies"):
    return Task(
        id=task_id,
        title=f"Title {task_id}",
        description=f"Do {task_id}.",
        assignee="worker",
        depends_on=deps,
        memory_scope=scope,
    )


def text_of(tokens):
    """A text of exactly ``tokens`` tokens for `estimate_tokens` (4 bytes per token)."""
    return "abcd" * tokens


def queue_with(results, tasks):
    q = TaskQueue(TaskGraph(tasks))
    for task_id, result in results.items():
        q.start(task_id)
        q.complete(task_id, result)
    return q


def builder():
    return ContextBuilder(count_tokens=estimate_tokens)


def test_result_over_the_limit_raises_naming_dependency_and_sizes():
    q = queue_with({"a": text_of(101), "x": "small"}, [t("a"), t("x"), t("b", "x", "a")])
    with pytest.raises(DependencyPayloadError) as info:
        builder().build_task_prompt(
            q.graph.get("b"), agent=AGENT, queue=q, max_dependency_tokens=100
        )
    exc = info.value
    assert isinstance(exc, LimitExceeded)
    assert (exc.dependency, exc.task_id, exc.tokens, exc.maximum) == ("a", "b", 101, 100)
    assert (exc.limit, exc.value, exc.subject) == ("max_dependency_tokens", 101, "task:b")
    message = str(exc)
    assert "'a'" in message and "'b'" in message
    assert "101 tokens" in message and "100 tokens" in message


def test_results_at_or_under_the_limit_pass_untruncated():
    payload = text_of(100)
    q = queue_with({"a": payload, "x": "small"}, [t("a"), t("x"), t("b", "x", "a")])
    prompt = builder().build_task_prompt(
        q.graph.get("b"), agent=AGENT, queue=q, max_dependency_tokens=100
    )
    assert payload in prompt.text
    assert {"task_result:a", "task_result:x"} <= set(prompt.manifest.origins)


def test_no_limit_by_default_in_the_builder():
    q = queue_with({"a": text_of(50_000)}, [t("a"), t("b", "a")])
    prompt = builder().build_task_prompt(q.graph.get("b"), agent=AGENT, queue=q)
    assert text_of(50_000) in prompt.text


def test_results_outside_the_clearance_are_not_measured():
    # "x" is huge but not admitted to "b": it is neither shown nor counted.
    q = queue_with({"a": "small", "x": text_of(500)}, [t("a"), t("x"), t("b", "a")])
    prompt = builder().build_task_prompt(
        q.graph.get("b"), agent=AGENT, queue=q, max_dependency_tokens=10
    )
    assert prompt.manifest.origins == ("instructions", "task:b", "task_result:a")


def test_the_limit_applies_per_result_under_every_scope():
    q = queue_with(
        {"a": text_of(20), "m": "ok"},
        [t("a"), t("m", "a"), t("b", "m", scope="transitive")],
    )
    with pytest.raises(DependencyPayloadError) as info:
        builder().build_task_prompt(
            q.graph.get("b"), agent=AGENT, queue=q, max_dependency_tokens=10
        )
    assert info.value.dependency == "a"


def test_agent_limit_default_and_validation():
    assert AgentLimits().max_dependency_tokens == 4000
    assert AgentLimits(max_dependency_tokens=None).max_dependency_tokens is None
    with pytest.raises(ConfigError) as info:
        AgentLimits(max_dependency_tokens=0)
    assert info.value.field == "limits.max_dependency_tokens"


def test_team_file_limit(tmp_path):
    path = tmp_path / "team.yaml"
    body = (
        "agents:\n"
        "  - name: worker\n"
        "    instructions: You are careful.\n"
        "    limits:\n"
        "      max_dependency_tokens: {value}\n"
        "  - name: other\n"
        "    instructions: Default limits.\n"
    )
    path.write_text(body.format(value=123), encoding="utf-8")
    agents = load_team_file(path).team.agents
    assert agents[0].limits.max_dependency_tokens == 123
    assert agents[1].limits.max_dependency_tokens == 4000
    path.write_text(body.format(value="null"), encoding="utf-8")
    assert load_team_file(path).team.agents[0].limits.max_dependency_tokens is None
    path.write_text(body.format(value=0), encoding="utf-8")
    with pytest.raises(ConfigError, match="max_dependency_tokens"):
        load_team_file(path)


def subject(request):
    return request.prompt.manifest.subject


def answers(results):
    def answer(request):
        s = subject(request)
        return "SYNTHESIS" if s == "synthesis" else results.get(s, f"RESULT-{s}")

    return FunctionModel(answer)


async def test_oversized_dependency_fails_the_dependent_and_the_run_goes_on(ledger):
    limited = Agent(name="worker", instructions="x", limits=AgentLimits(max_dependency_tokens=50))
    team = Team(agents=(limited,), coordinator=COORD)
    model = answers({"task:a": text_of(51)})
    result = await Orchestrator(team, model=model, ledger=ledger).run_tasks(
        [t("a"), t("b", "a"), t("c", "b"), t("x"), t("y", "x")]
    )
    status = {k: v.status for k, v in result.tasks.items()}
    assert status == {
        "a": TaskStatus.COMPLETED,
        "b": TaskStatus.FAILED,
        "c": TaskStatus.SKIPPED,
        "x": TaskStatus.COMPLETED,
        "y": TaskStatus.COMPLETED,
    }
    error = result.tasks["b"].error or ""
    assert "dependency 'a'" in error and "51 tokens" in error and "50 tokens" in error
    seen = {subject(r) for r in model.requests}
    assert "task:b" not in seen and "task:c" not in seen  # never reached a model
    synth = next(r for r in model.requests if subject(r) == "synthesis").prompt.text
    assert text_of(51) in synth  # synthesis still sees the full result
    assert result.synthesis == "SYNTHESIS" and result.status == "failed"


async def test_the_default_limit_applies_in_a_run(ledger):
    team = Team(agents=(AGENT,), coordinator=COORD)
    model = answers({"task:a": text_of(4001), "task:x": text_of(4000)})
    result = await Orchestrator(team, model=model, ledger=ledger).run_tasks(
        [t("a"), t("b", "a"), t("x"), t("y", "x")]
    )
    assert result.tasks["b"].status is TaskStatus.FAILED
    assert "4001 tokens" in (result.tasks["b"].error or "")
    assert result.tasks["y"].status is TaskStatus.COMPLETED
    y_prompt = next(r for r in model.requests if subject(r) == "task:y").prompt
    assert text_of(4000) in y_prompt.text
