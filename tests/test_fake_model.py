"""The fake:<name> test model: deterministic, reachable by id, optional latency."""

import time

import pytest

from clearance import Agent, ConfigError, Orchestrator, Task, Team
from clearance.models import get_model
from clearance.testing import LATENCY_ENV, FakeModel

TEAM = Team(agents=(Agent(name="a", instructions="A."),))
TASKS = [
    Task(id="x", title="X", description="do x", assignee="a"),
    Task(id="y", title="Y", description="do y", assignee="a", depends_on=("x",)),
]


async def test_get_model_resolves_fake_ids_and_runs_are_deterministic(ledger):
    first = get_model("fake:echo")
    assert isinstance(first, FakeModel) and first.model_id == "fake:echo"
    one = await Orchestrator(TEAM, model=first, ledger=ledger).run_tasks(TASKS)
    two = await Orchestrator(TEAM, model="fake:echo", ledger=ledger).run_tasks(TASKS)
    other = await Orchestrator(TEAM, model="fake:other", ledger=ledger).run_tasks(TASKS)
    results = {k: v.result for k, v in one.tasks.items()}
    assert results == {k: v.result for k, v in two.tasks.items()}
    assert results != {k: v.result for k, v in other.tasks.items()}
    assert one.synthesis == two.synthesis
    assert results["x"].startswith("echo result for X: ")
    # A dependent's answer changes with its dependency's result (it digests the whole prompt).
    assert results["y"] != other.tasks["y"].result


async def test_latency_from_the_option_or_the_environment(monkeypatch, ledger):
    monkeypatch.setenv(LATENCY_ENV, "0.2")
    model = get_model("fake:slow")
    assert model.latency_s == 0.2
    assert get_model("fake:fast", latency_s=0).latency_s == 0
    t0 = time.perf_counter()
    await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(TASKS[:1])
    assert time.perf_counter() - t0 >= 0.4  # the task and the synthesis


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_bad_latency_is_a_config_error(monkeypatch, value):
    monkeypatch.setenv(LATENCY_ENV, value)
    with pytest.raises(ConfigError, match=LATENCY_ENV):
        get_model("fake:x")
