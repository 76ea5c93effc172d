"""The executor seam and the Ray boundary, without Ray: what a worker answers is checked."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import (
    Agent,
    ConfigError,
    ModelError,
    ModelExecutor,
    Orchestrator,
    RayExecutor,
    RunLedger,
    RunServices,
    Task,
    Team,
)
from clearance._orchestration.ray_executor import checked_outcome
from clearance._orchestration.ray_worker import ModelWorker
from clearance.cli import app
from clearance.models._base import ChatModel, ModelRequest, ModelResponse, ToolCall, Usage
from clearance.testing._fake import FakeModel

TEAM = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))
OK = ModelResponse(text="fine", usage=Usage(requests=1), model_id="fake:m")


@pytest.mark.parametrize(
    "outcome",
    [
        None,
        "ok",
        ("ok",),
        ("ok", "fine"),
        ("ok", OK, "extra"),
        ("okay", OK),
        ("ok", ModelResponse(text=b"bytes", usage=Usage(), model_id="m")),  # type: ignore[arg-type]
        ("ok", ModelResponse(text="x", usage={"requests": 1}, model_id="m")),  # type: ignore[arg-type]
        ("ok", ModelResponse(text="x", usage=Usage(), model_id="m", tool_calls=[])),  # type: ignore[arg-type]
        (
            "ok",
            ModelResponse(
                text="x",
                usage=Usage(),
                model_id="m",
                tool_calls=(ToolCall(id="1", name="t", arguments="{}"),),
            ),
        ),  # type: ignore[arg-type]
        ("ok", ModelResponse(text="x", usage=Usage(), model_id="m", finish_reason=3)),  # type: ignore[arg-type]
        ("error", "ModelError", "boom", "yes"),
        ("error", 1, "boom", True),
        ("error", "ModelError", None, True),
    ],
)
def test_a_malformed_worker_answer_is_a_model_error(outcome: Any) -> None:
    with pytest.raises(ModelError, match="malformed outcome") as info:
        checked_outcome(outcome, "fake:m")
    assert info.value.model_id == "fake:m"
    assert not info.value.transient


def test_a_worker_reported_failure_keeps_its_transience_and_is_bounded() -> None:
    assert checked_outcome(("ok", OK), "fake:m") is OK
    with pytest.raises(ModelError) as info:
        checked_outcome(("error", "ModelError", "x" * 100_000, True), "fake:m")
    assert info.value.transient
    assert len(str(info.value)) < 5000
    with pytest.raises(ModelError) as info:
        checked_outcome(("error", "ValueError", "nope", False), "fake:m")
    assert not info.value.transient and "ValueError: nope" in str(info.value)


class _Broken:
    model_id = "fake:broken"
    context_window = None

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def request(self, request: ModelRequest) -> ModelResponse:
        raise self.exc

    def count_tokens(self, text: str) -> int:
        return 1


def _request() -> ModelRequest:
    from clearance import ContextBuilder, TaskGraph
    from clearance._state.queue import TaskQueue
    from clearance.tokens import heuristic_tokens

    task = Task(id="x", title="X", description="x", assignee="alpha")
    builder = ContextBuilder(count_tokens=heuristic_tokens)
    prompt = builder.build_task_prompt(
        task, agent=TEAM.agents[0], queue=TaskQueue(TaskGraph([task]))
    )
    return ModelRequest(prompt=prompt, max_tokens=8)


async def test_the_worker_answers_failures_with_tagged_tuples_never_exceptions() -> None:
    cases = [
        (ModelError("rate limited", model_id="fake:broken", transient=True), ("ModelError", True)),
        (ModelError("bad", model_id="fake:broken"), ("ModelError", False)),
        (RuntimeError("provider bug"), ("RuntimeError", False)),
    ]
    for exc, (kind, transient) in cases:
        worker = ModelWorker(lambda model_id, exc=exc, **_: _Broken(exc))
        outcome = await worker.complete("fake:broken", {}, _request())
        assert outcome[0] == "error" and outcome[1] == kind and outcome[3] is transient
    unknown = await ModelWorker().complete("nope:x", {}, _request())
    assert unknown[:2] == ("error", "ConfigError") and unknown[3] is False


async def test_the_worker_makes_each_model_once_and_records_only_when_asked() -> None:
    made: list[tuple[str, dict[str, Any]]] = []

    def factory(model_id: str, **options: Any) -> ChatModel:
        made.append((model_id, options))
        return FakeModel(model_id.partition(":")[2])

    worker = ModelWorker(factory, record=True)
    for _ in range(3):
        assert (await worker.complete("fake:a", {"context_window": 9}, _request()))[0] == "ok"
    assert made == [("fake:a", {"context_window": 9})]
    assert [r[:2] for r in worker.received()] == [("fake:a", {"context_window": 9})] * 3
    quiet = ModelWorker()
    await quiet.complete("fake:a", {}, _request())
    assert quiet.received() == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workers": 0},
        {"workers": 257},
        {"workers": True},
        {"workers": 1.5},
        {"calls_per_worker": 0},
        {"worker_retries": -1},
        {"worker_retries": 11},
        {"max_calls_per_model": 0},
        {"cpus_per_worker": -1},
        {"cpus_per_worker": math.nan},
        {"start_timeout_s": 0},
        {"start_timeout_s": math.inf},
        {"address": ""},
        {"address": "  "},
        {"worker_env": {"A=B": "x"}},
        {"worker_env": {"": "x"}},
        {"worker_env": {"A": 1}},
    ],
)
def test_executor_settings_out_of_range_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RayExecutor(**kwargs)


class _CountingExecutor:
    """A local executor that counts the calls routed through it."""

    def __init__(self) -> None:
        self.calls = 0
        self.made: list[str] = []
        self.recorders: list[Any] = []
        self._models: dict[str, ChatModel] = {}

    def model(self, model_id: str, local: ChatModel, options: Mapping[str, Any]) -> ChatModel:
        if model_id not in self._models:
            self.made.append(model_id)
            outer = self

            class Routed:
                model_id = local.model_id
                context_window = local.context_window

                async def request(self, request: ModelRequest) -> ModelResponse:
                    outer.calls += 1
                    return await local.request(request)

                def count_tokens(self, text: str) -> int:
                    return local.count_tokens(text)

            self._models[model_id] = Routed()
        return self._models[model_id]

    def attach(self, record: Any) -> None:
        self.recorders.append(record)


async def test_every_model_call_of_a_run_goes_through_the_executor(tmp_path: Path) -> None:
    executor = _CountingExecutor()
    assert isinstance(executor, ModelExecutor)
    tasks = [Task(id=f"t{i}", title=f"T{i}", description="d", assignee="alpha") for i in range(5)]
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(
            TEAM, model="fake:m", ledger=ledger, services=RunServices(executor=executor)
        )
        result = await orch.run_tasks(tasks)
        assert result.status == "completed"
        assert executor.calls == len(ledger.calls(result.run_id)) == 6  # 5 tasks, synthesis
        lost = {"worker": 0, "model_id": "fake:m", "error": "RayActorError", "retry": True}
        executor.recorders[-1]("worker_lost", "task:t0", lost)
        assert [e.kind for e in ledger.events(result.run_id, kind="worker_lost")] == ["worker_lost"]
    assert executor.made == ["fake:m"]


def test_ray_options_without_the_ray_executor_are_one_line_errors(tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(
        "name: t\nagents:\n  - {name: a, instructions: A.}\n"
        "tasks:\n  - {id: x, title: X, description: d, assignee: a}\n"
    )
    db = f"sqlite:///{tmp_path / 'r.db'}"
    for flags, named in (
        (["--ray-address", "127.0.0.1:1"], "--ray-address"),
        (["--ray-workers", "3"], "--ray-workers"),
        (["--executor", "ray", "--ray-env", "CLEARANCE_SURELY_UNSET_VARIABLE"], "--ray-env"),
    ):
        result = CliRunner().invoke(
            app, ["run", str(team), "--model", "fake:m", "--db", db, *flags]
        )
        assert result.exit_code == 2, result.output
        assert named in result.output and "Traceback" not in result.output
