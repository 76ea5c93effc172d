"""Canary leak test over random task graphs: a result reaches a prompt iff it is cleared.

Every completion of the `CanaryModel` carries a unique canary. For random graphs (up to 45
tasks), random memory scopes, random failures, random messages and random concurrency, the
canary of task X occurs in the prompt of task Y exactly when X is in Y's clearance (computed
here from the drawn graph, independently of `Clearance`) and X completed before Y started.
For ``"dependencies"`` and ``"transitive"`` scopes that is every cleared task: all of them
must complete before Y can start. Messages reach exactly their addressees' prompts, and the
synthesis sees every completed result.

Isolated tasks (``mode: isolated``) and spawned children are drawn too: an isolated task's
prompt admits exactly what a standard task's does, less messages (a fresh subagent's context
holds no messages); a child's prompt holds no task's result at all, and its result reaches
exactly its parent's prompt.
"""

import asyncio
import itertools
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from clearance import (
    Agent,
    Clearance,
    Message,
    MessageBus,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    TaskGraph,
    TaskStatus,
    Team,
)
from clearance._core.spec import FanOut
from clearance.testing import CanaryModel, assert_never_saw, assert_saw

MAX_TASKS = 45
MAX_DEPENDENCIES = 5
SCOPES = ("dependencies", "transitive", "all")
COORDINATOR = "lead"
SPAWNER = "ag0"  # the one worker that may spawn children
CHILD = "kid"


@dataclass(frozen=True)
class Scenario:
    agents: tuple[str, ...]
    tasks: tuple[Task, ...]
    fail: frozenset[str]
    messages: tuple[tuple[str, str], ...]  # (sender, recipient); recipient may be "*"
    max_concurrency: int


TASK_SPEC = st.tuples(
    # Dependencies as offsets back from the task, so a task depends on earlier tasks only
    # (acyclic by construction) and an offset shrinks to 0, the task just before.
    st.lists(st.integers(0, MAX_TASKS), max_size=MAX_DEPENDENCIES),
    st.sampled_from(SCOPES),
    st.integers(0, 3),  # assignee, modulo the number of agents
    st.integers(0, 9),  # 9: the task's model call fails
    st.integers(0, 3),  # 3: an isolated task
    st.integers(0, 2),  # children it fans out to (when its assignee may spawn)
)


@st.composite
def scenarios(draw):
    agents = tuple(f"ag{i}" for i in range(draw(st.integers(1, 4))))
    # A drawn lower bound on the size: small graphs half the time (they are cheap), up to
    # MAX_TASKS otherwise. A bound, not a fixed length, so a failing graph shrinks task by task.
    least = draw(st.integers(1, 12) | st.integers(1, MAX_TASKS))
    specs = draw(st.lists(TASK_SPEC, min_size=least, max_size=MAX_TASKS))
    tasks, fail = [], set()
    for i, (offsets, scope, agent, failure, mode, children) in enumerate(specs):
        deps = sorted({i - 1 - (k % i) for k in offsets}) if i else []
        assignee = agents[agent % len(agents)]
        fan_out = None
        if children and assignee == SPAWNER:
            fan_out = FanOut(agent=CHILD, goals=tuple(f"Part {c} of step {i}." for c in
                                                      range(children)))  # fmt: skip
        tasks.append(
            Task(
                id=f"t{i}",
                title=f"Task {i}",
                description=f"Do step {i}.",
                assignee=assignee,
                depends_on=tuple(f"t{d}" for d in deps),
                memory_scope=scope,
                mode="isolated" if mode == 3 else "standard",
                fan_out=fan_out,
            )
        )
        if failure == 9:
            fail.add(f"t{i}")
    parties = (*agents, COORDINATOR)
    messages = draw(
        st.lists(st.tuples(st.sampled_from(parties), st.sampled_from((*parties, "*"))), max_size=6)
    )
    size = len(tasks) // 10 * 10
    event(f"graph of {size}-{size + 9} tasks")
    return Scenario(agents, tuple(tasks), frozenset(fail), tuple(messages), draw(st.integers(1, 4)))


class TickClock:
    """Strictly increasing timestamps, so "X finished before Y started" is never a tie."""

    def __init__(self):
        self._ticks = itertools.count(1)

    def __call__(self):
        return datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=next(self._ticks))


def oracle_clearance(tasks, task):
    """The results ``task`` may see, straight from the spec (not from `Clearance`)."""
    by_id = {t.id: t for t in tasks}
    if task.memory_scope == "all":
        return {t.id for t in tasks} - {task.id}
    if task.memory_scope == "dependencies":
        return set(task.depends_on)
    seen, stack = set(), list(task.depends_on)
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(by_id[current].depends_on)
    return seen


def expected_statuses(tasks, fail):
    """Failed: in ``fail`` and every ancestor completed; skipped: an ancestor failed."""
    status = {}
    for task in tasks:  # dependencies come first
        if any(status[d] is not TaskStatus.COMPLETED for d in task.depends_on):
            status[task.id] = TaskStatus.SKIPPED
        elif task.id in fail:
            status[task.id] = TaskStatus.FAILED
        else:
            status[task.id] = TaskStatus.COMPLETED
    return status


def subject_of(task):
    return f"{'isolated' if task.mode == 'isolated' else 'task'}:{task.id}"


def run_scenario(scenario, ledger, workspace):
    agents = tuple(
        Agent(name=a, instructions=f"You are {a}.", can_spawn=(CHILD,) if a == SPAWNER else ())
        for a in scenario.agents
    )
    agents += (Agent(name=CHILD, instructions="You are a child."),)
    team = Team(agents=agents, coordinator=Agent(name=COORDINATOR, instructions="Lead."))
    bus = MessageBus()
    sent = [
        bus.send(sender, recipient, f"note MSG-{k}-{secrets.token_hex(4)} from {sender}")
        for k, (sender, recipient) in enumerate(scenario.messages, start=1)
    ]
    model = CanaryModel(fail=scenario.fail)
    orch = Orchestrator(
        team,
        model=model,
        ledger=ledger,
        options=RunOptions(max_concurrency=scenario.max_concurrency, workspace_root=workspace),
        services=RunServices(messages=bus, clock=TickClock()),
    )
    result = asyncio.run(orch.run_tasks(scenario.tasks, goal="G"))
    return model, result, sent


def marker(message: Message) -> str:
    return message.content.split()[1]


def check(scenario, model, result, sent, ledger):
    tasks = scenario.tasks
    by_id = {t.id: t for t in tasks}
    graph = TaskGraph(tasks)

    # Outcomes: failures and skips exactly as drawn; skipped tasks never reach a model.
    statuses = expected_statuses(tasks, scenario.fail)
    assert {k: v.status for k, v in result.tasks.items()} == statuses
    completed = {k for k, s in statuses.items() if s is TaskStatus.COMPLETED}
    reached = {k for k, s in statuses.items() if s is not TaskStatus.SKIPPED}
    spawns = [e for e in ledger.events(result.run_id) if e.kind == "spawn"]
    children = {f"child:{e.data['child_id']}": e.subject.removeprefix("task:") for e in spawns}
    fanned = {k for k in reached if by_id[k].fan_out is not None}
    assert set(children.values()) == fanned
    assert len(children) == sum(len(by_id[k].fan_out.goals) for k in fanned)
    assert set(model.canaries) == completed | {"synthesis"} | set(children)

    # What reached the model is what the ledger recorded, one call per task that ran.
    recorded = ledger.calls(result.run_id)
    calls = {c.subject: c for c in recorded}
    assert len(calls) == len(recorded) == len(model.requests)
    assert set(calls) == {subject_of(by_id[k]) for k in reached} | {"synthesis"} | set(children)
    requests = {r.prompt.manifest.subject: r for r in model.requests}
    for subject, call in calls.items():
        assert call.messages == requests[subject].prompt.to_dicts()

    records = {r.task_id: r for r in ledger.tasks(result.run_id)}
    canary = {x: model.canary_of(x) for x in completed}
    for child, parent in children.items():
        text = requests[child].prompt.text
        assert not any(canary[x] in text for x in completed), child  # a goal, and no result
        assert model.canary_of(child) in requests[subject_of(by_id[parent])].prompt.text
        for other in set(children) - {child}:
            assert model.canary_of(other) not in text
    for y in sorted(reached):
        task = by_id[y]
        prompt = requests[subject_of(task)].prompt
        own = {c for c, p in children.items() if p == y}
        for child in children:
            assert (model.canary_of(child) in prompt.text) == (child in own), (y, child)
        text = prompt.text
        cleared = oracle_clearance(tasks, task)
        # Its prompt is built right before its call (after its children, if it has any).
        started = calls[subject_of(task)].started_at
        # Cleared and completed before Y's prompt was built.
        visible = {x for x in cleared & completed if records[x].finished_at < started}
        for x in completed:
            assert (canary[x] in text) == (x in visible), (
                f"canary of {x} {'in' if canary[x] in text else 'missing from'} the prompt of "
                f"{y} (scope {task.memory_scope}, cleared {sorted(cleared)})"
            )
        results_in_manifest = {
            o.removeprefix("task_result:")
            for o in prompt.manifest.origins
            if o.startswith("task_result:")
        }
        assert results_in_manifest == visible, (y, results_in_manifest ^ visible)
        if task.memory_scope != "all":
            # Y starts only once every dependency, hence every ancestor, completed.
            assert visible == cleared, (y, task.memory_scope, cleared - visible)
        assert Clearance.for_task(graph, y).result_task_ids == cleared, y
        assert canary.get(y, "CANARY-none") not in text  # no task sees its own result
        assert model.canary_of("synthesis") not in text

        # Messages: exactly those addressed to the assignee, with their origins.
        for message in sent:
            addressed = message.is_for(task.assignee) and task.mode != "isolated"
            assert (marker(message) in text) == addressed, (y, task.assignee, message)
            assert (f"message:{message.id}" in prompt.manifest.origins) == addressed

    # The synthesis sees every completed result, and nothing meant for one agent only.
    synthesis = requests["synthesis"].prompt
    assert {
        o.removeprefix("task_result:")
        for o in synthesis.manifest.origins
        if o.startswith("task_result:")
    } == completed
    for x in completed:
        assert canary[x] in synthesis.text, x
    for message in sent:
        assert marker(message) not in synthesis.text

    # The one-line helpers agree, read back from the ledger (a few spot checks).
    for x in sorted(completed)[:2]:
        assert_saw(ledger, "synthesis", canary[x], run_id=result.run_id)
        assert_never_saw(ledger, x, canary[x], run_id=result.run_id)
        dependents = [y for y in graph.dependents(x) if y in reached]
        for y in [y for y in dependents if by_id[y].mode != "isolated"][:2]:
            assert_saw(ledger, y, canary[x], run_id=result.run_id)


@pytest.fixture(scope="module")
def shared_ledger(tmp_path_factory):
    """One ledger for every example; each example is its own run, checked by its run id."""
    folder = tmp_path_factory.mktemp("isolation")
    with RunLedger(f"sqlite:///{folder / 'runs.db'}") as ledger:
        yield ledger, folder / "workspaces"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_a_result_reaches_a_prompt_iff_it_is_cleared(shared_ledger, scenario):
    ledger, workspace = shared_ledger
    model, result, sent = run_scenario(scenario, ledger, workspace)
    check(scenario, model, result, sent, ledger)
