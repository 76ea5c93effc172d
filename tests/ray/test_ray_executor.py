"""Model calls answered by Ray worker actors: a local Ray head on 127.0.0.1, started once.

Skipped only where Ray cannot be imported. The head has 2 CPUs, no dashboard and no usage
statistics; every test's executor runs 2 worker actors on it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from clearance import RunOptions, RunServices
from clearance._orchestration.ray_executor import LOCAL_RAY_ENV

for _key, _value in {**LOCAL_RAY_ENV, "RAY_AUTH_MODE": "disabled"}.items():
    os.environ.setdefault(_key, _value)  # before Ray is imported

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'clearance[ray]')")

from typer.testing import CliRunner  # noqa: E402

from clearance import (  # noqa: E402
    Agent,
    AgentLimits,
    LimitExceeded,
    Orchestrator,
    RayExecutor,
    RunLedger,
    RunResult,
    Task,
    Team,
)
from clearance._context.verify import verify_run  # noqa: E402
from clearance.cli import app  # noqa: E402
from clearance.models._base import ModelRequest  # noqa: E402
from clearance.testing import assert_never_saw, assert_saw  # noqa: E402
from clearance.testing._fake import FakeModel  # noqa: E402

pytestmark = pytest.mark.ray

TEAM = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))
SRC = str(Path(__file__).parents[2] / "src")


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A Ray head on 127.0.0.1 with 2 CPUs; its GCS address."""
    context = ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
        # The workers import this module's functions (model factories) by value.
        runtime_env={"env_vars": {"PYTHONPATH": SRC}},
    )
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def executor(ray_head: str) -> Iterator[RayExecutor]:
    with RayExecutor(address=ray_head, workers=2, cpus_per_worker=0, record_received=True) as ex:
        yield ex


def wide_tasks(n: int, chain: int = 10, prefix: str = "t") -> list[Task]:
    return [
        Task(
            id=f"{prefix}{i}",
            title=f"Step {i}",
            description=f"Do step {i}.",
            assignee="alpha",
            depends_on=(f"{prefix}{i - 1}",) if i % chain else (),
        )
        for i in range(n)
    ]


def verify_cli(run_id: str, db: str) -> None:
    result = CliRunner().invoke(app, ["verify", run_id, "--db", db])
    assert result.exit_code == 0, result.output


async def test_a_200_task_graph_on_a_fake_model_runs_on_the_workers_and_verifies(
    executor: RayExecutor, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(db) as ledger:
        orch = Orchestrator(
            TEAM,
            model="fake:echo",
            ledger=ledger,
            options=RunOptions(max_concurrency=16),
            services=RunServices(executor=executor),
        )
        before = sum(len(r) for r in executor.received())
        result = await orch.run_tasks(wide_tasks(200))
    assert result.status == "completed", result.error
    assert len(result.tasks) == 200
    # Every model call (200 tasks and the synthesis) was answered by a worker, and both
    # workers answered some.
    per_worker = [len(r) for r in executor.received()]
    assert sum(per_worker) - before == 201
    assert min(per_worker) > 0
    verify_cli(result.run_id, db)


class _Requests:
    """The requests the workers received, as the canary assertions read them."""

    def __init__(self, requests: Sequence[ModelRequest]) -> None:
        self.requests = list(requests)


async def test_canary_no_worker_receives_anything_outside_its_task_prompt(
    ray_head: str, tmp_path: Path
) -> None:
    canaries = {f"c{i}": f"CANARY-c{i}-{os.urandom(4).hex()}" for i in range(12)}
    deps = {f"c{i}": ((f"c{i - 1}",) if i % 4 else ()) for i in range(12)}
    tasks = [
        Task(
            id=t,
            title=f"Step {t} {canaries[t]}",
            description=f"Do {t} ({canaries[t]}).",
            assignee="alpha",
            depends_on=deps[t],
        )
        for t in canaries
    ]
    with (
        RayExecutor(address=ray_head, workers=2, cpus_per_worker=0, record_received=True) as ex,
        RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger,
    ):
        orch = Orchestrator(
            TEAM, model="fake:echo", ledger=ledger, services=RunServices(executor=ex)
        )
        result = await orch.run_tasks(tasks)
        received = ex.received()
    assert result.status == "completed", result.error
    calls = [call for worker in received for call in worker]
    assert len(calls) == 13  # 12 tasks and the synthesis
    pattern = re.compile(r"CANARY-(c\d+)-[0-9a-f]{8}")
    for model_id, options, request in calls:
        # Exactly three things cross per call: the model id, its settings, the request.
        assert (model_id, options, type(request)) == ("fake:echo", {}, ModelRequest)
        subject = request.prompt.manifest.subject
        blob = repr((model_id, options, request))
        seen = set(pattern.findall(blob))
        if subject == "synthesis":
            continue  # the coordinator is cleared for every result
        task = subject.removeprefix("task:")
        assert task in seen, (task, seen)  # the check can see a canary
        assert seen <= {task, *deps[task]}, (task, seen)
    recorded = _Requests([r for _, _, r in calls])
    for task, own in canaries.items():
        assert_saw(recorded, task, own)
        for other, canary in canaries.items():
            if other != task and other not in deps[task]:
                assert_never_saw(recorded, task, canary)
    assert_saw(recorded, "c1", canaries["c0"])  # a dependency's result does arrive


def first_call(flag: str) -> bool:
    """Whether this is the first call across every worker: the one that creates ``flag``."""
    try:
        fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def dying_model(flag: str, model_id: str, **options: Any) -> Any:
    """A fake model whose first call (across every worker) kills its worker process."""

    class Dying(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            if not first_call(flag):
                return await super().request(request)
            os._exit(1)

    return Dying(model_id.partition(":")[2], latency_s=0)


async def test_a_worker_that_dies_mid_call_is_retried_on_another_and_recorded(
    ray_head: str, tmp_path: Path
) -> None:
    factory = functools.partial(dying_model, str(tmp_path / "died"))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with (
        RayExecutor(address=ray_head, workers=2, cpus_per_worker=0, model_factory=factory) as ex,
        RunLedger(db) as ledger,
    ):
        team = Team(agents=(Agent(name="alpha", instructions="A.", limits=AgentLimits(retries=0)),))
        orch = Orchestrator(
            team, model="fake:echo", ledger=ledger, services=RunServices(executor=ex)
        )
        result = await orch.run_tasks(wide_tasks(6, chain=3))
        events = ledger.events(result.run_id, kind="worker_lost")
        assert (tmp_path / "died").exists()
        lost = ex.lost_workers
    assert result.status == "completed", result.error  # with retries=0: the executor retried
    # One worker process died; each call it was answering then is recorded and sent again.
    assert len(events) == lost >= 1
    assert len({e.data["worker"] for e in events}) == 1
    assert all(e.data["retry"] is True and e.data["model_id"] == "fake:echo" for e in events)
    verify_cli(result.run_id, db)


def _slow_model(latency_s: float, model_id: str, **options: Any) -> FakeModel:
    return FakeModel(model_id.partition(":")[2], latency_s=latency_s)


def _slow_on_request(model_id: str, **options: Any) -> FakeModel:
    """A fake model that takes 30 s over a prompt holding ``SLOW``, no time otherwise."""

    class SlowOnRequest(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            self.latency_s = 30.0 if "SLOW" in request.prompt.text else 0.0
            return await super().request(request)

    return SlowOnRequest(model_id.partition(":")[2])


def _prompt(title: str) -> Any:
    from clearance import ContextBuilder, TaskGraph
    from clearance._state.queue import TaskQueue
    from clearance.tokens import heuristic_tokens

    task = Task(id="x", title=title, description=title, assignee="alpha")
    queue = TaskQueue(TaskGraph([task]))
    builder = ContextBuilder(count_tokens=heuristic_tokens)
    return builder.build_task_prompt(task, agent=TEAM.agents[0], queue=queue)


async def test_the_callers_deadline_cancels_the_remote_call(ray_head: str) -> None:
    from clearance._agents.caller import ModelCaller

    agent = Agent(name="alpha", instructions="A.", limits=AgentLimits(timeout_s=0.5, retries=0))
    with RayExecutor(address=ray_head, workers=1, calls_per_worker=1, cpus_per_worker=0,
                     model_factory=_slow_on_request) as ex:  # fmt: skip
        model = ex.model("fake:m", FakeModel("m"), {})
        caller = ModelCaller()
        started = time.monotonic()
        with pytest.raises(LimitExceeded) as info:
            await caller.call(subject="task:x", agent=agent, model=model, prompt=_prompt("SLOW"))
        assert info.value.limit == "timeout_s"
        assert time.monotonic() - started < 5
        # The only worker answers one call at a time: it is free again, so the abandoned
        # 30 s call was cancelled there.
        started = time.monotonic()
        response = await caller.call(
            subject="task:x", agent=agent, model=model, prompt=_prompt("fast")
        )
        assert response.text.startswith("m result for")
        assert time.monotonic() - started < 5


async def test_concurrency_is_bounded_per_model(ray_head: str) -> None:
    factory = functools.partial(_slow_model, 0.3)
    with RayExecutor(address=ray_head, workers=2, cpus_per_worker=0, max_calls_per_model=1,
                     model_factory=factory) as ex:  # fmt: skip
        orch = Orchestrator(
            TEAM,
            model="fake:m",
            ledger=None,
            options=RunOptions(max_concurrency=4),
            services=RunServices(executor=ex),
        )
        started = time.monotonic()
        result = await orch.run_tasks(wide_tasks(4, chain=1))
        elapsed = time.monotonic() - started
    assert result.status == "completed", result.error
    assert elapsed >= 4 * 0.3 + 0.3 - 0.05  # 4 tasks and the synthesis, one at a time


def test_an_embedded_model_per_worker_runs_a_6_task_graph(ray_head: str, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from clearance._core.errors import ConfigError
    from clearance.models._llama_cpp import smollm2_path

    try:
        smollm2_path()
    except ConfigError as exc:
        pytest.skip(str(exc))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    limits = AgentLimits(max_output_tokens=24)
    team = Team(agents=(Agent(name="alpha", instructions="Answer briefly.", limits=limits),))
    options = {"llama-cpp:smollm2": {"n_ctx": 2048, "n_threads": 1, "n_threads_batch": 1}}
    with RayExecutor(address=ray_head, workers=2, calls_per_worker=1) as ex, RunLedger(db) as led:
        orch = Orchestrator(
            team,
            model="llama-cpp:smollm2",
            ledger=led,
            options=RunOptions(model_options=options, max_concurrency=2),
            services=RunServices(executor=ex),
        )

        async def run() -> RunResult:
            return await orch.run_tasks(wide_tasks(6, chain=3))

        result = asyncio.run(run())
        report = verify_run(led, result.run_id)
    assert result.status == "completed", result.error
    assert all(o.result for o in result.tasks.values())
    assert report.ok, report.findings
    verify_cli(result.run_id, db)


def clearance(*args: str, env: dict[str, str] | None = None, cwd: Path) -> subprocess.Popen[str]:
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, full.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "clearance", *args], cwd=cwd, env=full,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_resume_after_the_orchestrator_is_killed_while_workers_are_busy(
    ray_head: str, postgres_url: str, tmp_path: Path
) -> None:
    lines = ["name: killable\nagents:\n  - {name: alpha, instructions: You are Alpha.}\ntasks:\n"]
    for i in range(16):
        dep = f"[k{i - 1}]" if i % 4 else "[]"
        lines.append(f"  - {{id: k{i}, title: Step {i}, description: Do {i}., assignee: alpha, "
                     f"depends_on: {dep}}}\n")  # fmt: skip
    team = tmp_path / "team.yaml"
    team.write_text("".join(lines))
    with RunLedger(postgres_url) as ledger:
        known = {r.run_id for r in ledger.list_runs(limit=1000)}
    ray_args = ("--executor", "ray", "--ray-address", ray_head, "--db", postgres_url)
    proc = clearance(
        "run", str(team), "--model", "fake:m", "--max-concurrency", "2", *ray_args,
        "--ray-env", "CLEARANCE_FAKE_LATENCY_S", env={"CLEARANCE_FAKE_LATENCY_S": "0.4"},
        cwd=tmp_path,
    )  # fmt: skip
    run_id = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            with RunLedger(postgres_url) as ledger:
                new = [r for r in ledger.list_runs(limit=1000) if r.run_id not in known]
                states = [t.status for t in ledger.tasks(new[0].run_id)] if new else []
            if states.count("completed") >= 3 and "running" in states:
                run_id = new[0].run_id
                break
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)  # while the workers answer the running tasks
        proc.communicate(timeout=30)
    assert run_id is not None, "the run never got going"
    with RunLedger(postgres_url) as ledger:
        assert ledger.get_run(run_id).status == "running"
    resumed = clearance("resume", run_id, *ray_args, cwd=tmp_path)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out + err
    assert f"run id: {run_id}  status: completed" in out
    verify = clearance("verify", run_id, "--db", postgres_url, cwd=tmp_path)
    out, err = verify.communicate(timeout=60)
    assert verify.returncode == 0, out + err
