"""`RunSpec`: the team file, the recorded run and resume hold one definition of a run.

A property test generates specs (agents with limits, sampling, tools, grants and memory;
tasks; run settings; models; executor; MCP servers; store) and round-trips each through
its team file (YAML dump, then `RunSpec.from_file`) and through the record a run keeps in the ledger
(what `Orchestrator` records when a run starts, then `recorded_run_spec` as resume reads it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clearance import ConfigError, Orchestrator, RunLedger, RunSpec, recorded_run_spec
from clearance._core.ids import new_id
from clearance._core.teamfile_models import (
    AgentMemorySpec,
    AgentSpec,
    FileCapsSpec,
    InputSpec,
    IsolationSpec,
    LimitsSpec,
    MemoryGroupSpec,
    MemorySpec,
    MessageSpec,
    ModelOptionsSpec,
    SamplingSpec,
    SharedConversationSpec,
    TaskSpec,
    ToolEntrySpec,
)

NAMES = st.from_regex(r"[a-z][a-z0-9_-]{0,7}", fullmatch=True)
TEXT = st.text(
    st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), min_size=1, max_size=40
).filter(str.strip)
MODELS = st.sampled_from(["fake:x", "openai:gpt-4o-mini", "llama-cpp:smollm2"])

STOP = st.text(st.characters(codec="ascii", categories=("L", "P")), min_size=1, max_size=6)
SAMPLING = st.builds(
    SamplingSpec,
    temperature=st.none() | st.floats(0, 2),
    top_p=st.none() | st.floats(0.01, 1),
    repeat_penalty=st.none() | st.floats(1, 2),
    stop=st.lists(
        st.text(st.characters(codec="ascii", categories=("L", "P")), min_size=1, max_size=6),
        max_size=3,
    ),
)
LIMITS = st.builds(
    LimitsSpec,
    max_output_tokens=st.integers(1, 4096),
    timeout_s=st.none() | st.floats(0.5, 1000),
    max_steps=st.none() | st.integers(1, 20),
    max_model_calls=st.none() | st.integers(1, 100),
    retries=st.integers(0, 5),
    answer_at_max_steps=st.booleans(),
)
MEMORY = st.none() | st.builds(
    AgentMemorySpec,
    recall=st.integers(0, 10),
    record=st.sampled_from(["none", "result", "task_and_result"]),
)


@st.composite
def agent_specs(draw: st.DrawFn, name: str) -> AgentSpec:
    return AgentSpec(
        name=name,
        instructions=draw(TEXT),
        role=draw(st.just("") | TEXT),
        model=draw(st.none() | MODELS),
        limits=draw(LIMITS),
        tools=draw(st.lists(st.sampled_from(["store_get", "store_set", "lookup"]), unique=True)),
        store_grants=draw(
            st.dictionaries(NAMES, st.sampled_from(["read", "write", "read_write"]), max_size=2)
        ),
        memory=draw(MEMORY),
        store_read_extends_ttl_s=draw(st.none() | st.floats(1, 1000)),
        sampling=draw(SAMPLING),
    )


@st.composite
def run_specs(draw: st.DrawFn) -> RunSpec:
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    agents = [draw(agent_specs(n)) for n in names]
    ids = draw(st.lists(NAMES, max_size=3, unique=True))
    tasks = [
        TaskSpec(
            id=task_id,
            title=draw(TEXT),
            description=draw(TEXT),
            assignee=draw(st.sampled_from(names)),
            depends_on=ids[:i],
            mode=draw(st.sampled_from(["standard", "isolated"])),
            approval=draw(st.sampled_from(["none", "required"])),
        )
        for i, task_id in enumerate(ids)
    ]
    budget = draw(
        st.none()
        | st.fixed_dictionaries({"tokens": st.integers(1, 10**9)})
        | st.fixed_dictionaries({"cost_usd": st.floats(0.01, 100)})
    )
    return RunSpec(
        name=draw(NAMES),
        goal=draw(st.none() | TEXT),
        model=draw(st.none() | MODELS),
        model_options=ModelOptionsSpec(
            context_window=draw(st.none() | st.integers(128, 8192)),
            by_model=draw(
                st.dictionaries(MODELS, st.fixed_dictionaries({"n_threads": st.integers(1, 8)}))
            ),
        ),
        max_concurrency=draw(st.integers(1, 16)),
        store=draw(st.none() | st.just("sqlite:///store.db")),
        input=InputSpec(default=draw(st.none() | st.just("src")), include=["*.py"]),
        workspace=draw(st.none() | st.just("ws")),
        isolation=IsolationSpec(
            max_rounds=draw(st.integers(0, 10)),
            file_caps=FileCapsSpec(on_oversize=draw(st.sampled_from(["error", "truncate"]))),
        ),
        agents=agents,
        coordinator=draw(st.none() | agent_specs("lead")),
        tasks=tasks,
        messages=[MessageSpec(**{"from": names[0], "to": names[-1], "content": draw(TEXT)})],
        memory_groups=[
            MemoryGroupSpec(name="g", agents=names, shared_conversation=SharedConversationSpec())
        ]
        if len(names) > 1
        else [],
        memory=draw(
            st.none()
            | st.just("sqlite:///memory.db")
            | st.just(MemorySpec(url="sqlite:///m.db", on_error="continue"))
        ),
        tools={
            "lookup": draw(
                st.just("json:loads")
                | st.builds(
                    ToolEntrySpec,
                    function=st.just("json:dumps"),
                    approval=st.sampled_from(["none", "required"]),
                )
            )
        },
        synthesis_from=draw(st.none() | st.just(ids)),
        executor=draw(
            st.just({"kind": "local"})
            | st.fixed_dictionaries(
                {
                    "kind": st.just("ray"),
                    "address": st.just("auto"),
                    "workers": st.integers(1, 4),
                    "env": st.lists(st.sampled_from(["OPENAI_API_KEY", "HF_TOKEN"]), unique=True),
                }
            )
        ),
        budget=budget,
        prices={"fake:x": {"input_per_mtok": 0.5, "output_per_mtok": 2}}
        if budget and "cost_usd" in budget
        else {},
        plan={"run_id": "run_x", "tasks_sha256": "0" * 64}
        if tasks and draw(st.booleans())
        else None,
        mcp_servers=draw(
            st.just({})
            | st.just(
                {
                    "docs": {
                        "url": "https://example.com/mcp",
                        "headers": {"Authorization": "${DOCS_TOKEN}"},
                    }
                }
            )
        ),
    )


DOCS_HEADERS = {"Authorization": "${DOCS_TOKEN}"}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(spec=run_specs())
def test_a_spec_survives_its_team_file(tmp_path_factory: pytest.TempPathFactory, spec: RunSpec):
    path = tmp_path_factory.mktemp("spec") / "team.yaml"
    path.write_text(yaml.safe_dump(spec.to_data(), allow_unicode=True), encoding="utf-8")
    assert RunSpec.from_file(path) == spec


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunLedger]:
    with RunLedger(f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'runs.db'}") as opened:
        yield opened


@SETTINGS
@given(spec=run_specs())
def test_a_spec_survives_the_record_a_run_keeps(ledger: RunLedger, spec: RunSpec) -> None:
    # What `Orchestrator.from_spec` records when a run starts, read back as resume reads it.
    orchestrator = Orchestrator(spec.team(), model="fake:x", ledger=ledger)
    orchestrator.spec = spec
    run_id = new_id("run")
    ledger.start_run(run_id=run_id, team=spec.name, goal=None, graph=None,
                     config=orchestrator._config())  # fmt: skip
    assert recorded_run_spec(ledger, run_id) == spec


def test_sampling_is_in_the_record() -> None:
    agent = AgentSpec(
        name="a", instructions="A.", sampling=SamplingSpec(temperature=0.7, top_p=0.9, stop=["END"])
    )
    recorded = RunSpec(agents=[agent]).to_record()
    assert recorded["agents"][0]["sampling"] == {"temperature": 0.7, "top_p": 0.9, "stop": ["END"]}
    back = RunSpec.from_record(recorded, run_id="r").team().agent("a").sampling
    assert (back.temperature, back.top_p, back.stop) == (0.7, 0.9, ("END",))


def test_secrets_are_masked_in_the_record() -> None:
    spec = RunSpec(
        agents=[AgentSpec(name="a", instructions="A.", tools=["mcp:docs/search"])],
        mcp_servers={
            "docs": {
                "url": "https://example.com/mcp",
                "headers": {"Authorization": "Bearer s3cret", "X-Key": "${KEY}"},
            }
        },
    )
    headers = spec.to_record()["mcp_servers"]["docs"]["headers"]
    assert headers == {"Authorization": "***", "X-Key": "${KEY}"}


def test_a_record_that_is_not_a_spec_is_one_line() -> None:
    with pytest.raises(
        ConfigError, match=r"run r1 cannot be rebuilt from its recorded spec"
    ) as info:
        RunSpec.from_record({"agents": [], "max_concurrency": 0}, run_id="r1")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"run r2 was recorded by an older version"):
        RunSpec.from_record({"default_model": "fake:x", "agents": []}, run_id="r2")


def test_an_executor_setting_without_ray_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text("agents: [{name: a, instructions: A}]\nexecutor: {workers: 2}\n")
    with pytest.raises(ConfigError, match=r"executor: .*workers needs kind: ray"):
        RunSpec.from_file(path)


def test_budget_prices_and_plan_are_checked_across_keys() -> None:
    agents = [{"name": "a", "instructions": "A."}]
    with pytest.raises(ValueError, match="prices: has no effect without budget"):
        RunSpec.model_validate(
            {"agents": agents, "budget": {"tokens": 5},
             "prices": {"fake:x": {"input_per_mtok": 1, "output_per_mtok": 1}}}
        )  # fmt: skip
    with pytest.raises(ValueError, match="plan: names the run that planned the tasks"):
        RunSpec.model_validate(
            {"agents": agents, "plan": {"run_id": "run_x", "tasks_sha256": "0" * 64}}
        )
