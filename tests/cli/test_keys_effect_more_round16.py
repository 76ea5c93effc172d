"""Keys and options whose effect was shown only by a refusal, a neighbour or the library.

Each test goes through the product path: a team file and ``clearance run`` / ``resume`` /
``plan`` / ``chat`` on a fake or scripted model, and asserts on what the model received, what
the ledger recorded, or what was printed. `test_every_key_is_read_round16` points at them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, update
from typer.testing import CliRunner

from clearance import ContextStore, RunLedger
from clearance._core.clock import utc_now
from clearance._state.ledger.schema import RUNS
from clearance.cli import app
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

runner = CliRunner()
SRC = str(Path(__file__).parents[2] / "src")

A = "{name: a, instructions: You work.}"
CHAIN = (
    "tasks:\n"
    "  - {id: s, title: S, description: Go., assignee: a}\n"
    "  - {id: t, title: T, description: Go., assignee: a, depends_on: [s]}\n"
)


def team(tmp_path: Path, body: str, model: str = "fake:x") -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(f"model: {model}\n" + body.replace("{tmp}", str(tmp_path)))
    return path


def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs.db"


def cli(*args: str, stdin: str | None = None) -> Any:
    return runner.invoke(app, list(args), input=stdin)


def run(tmp_path: Path, body: str, *extra: str, model: str = "fake:x") -> Any:
    return cli("run", str(team(tmp_path, body, model)), "--db", db(tmp_path), *extra)


def only_run(tmp_path: Path) -> str:
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
    return record.run_id


def calls_of(tmp_path: Path, run_id: str) -> dict[str, Any]:
    with RunLedger(db(tmp_path)) as ledger:
        return {c.subject: c for c in ledger.calls(run_id)}


def subject(request: ModelRequest) -> str:
    return str(request.prompt.manifest.subject)


def scripted_fake(monkeypatch: pytest.MonkeyPatch, answer: Callable[[ModelRequest], Any]) -> None:
    """Every ``fake:<name>`` model the command makes answers with ``answer(request)``."""

    class Scripted(FunctionModel):
        def __init__(
            self, name: str, *, latency_s: float | None = None, context_window: int | None = None
        ) -> None:
            super().__init__(answer, model_id=f"fake:{name}")
            self.context_window = context_window

    monkeypatch.setattr("clearance.testing._fake.FakeModel", Scripted)


# -- embedded model settings (the model is made, never loaded) ---------------------------------


def test_threads_batch_and_batch_size_are_what_the_embedded_model_is_made_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The team file's ``threads_batch`` and ``--batch-size`` reach the embedded model's
    constructor through ``clearance run``; the run then answers on that model."""
    made: list[dict[str, Any]] = []

    class Embedded(FunctionModel):
        def __init__(
            self,
            name: str,
            *,
            n_ctx: int = 8192,
            n_threads: int | None = None,
            n_threads_batch: int | None = None,
            n_batch: int = 512,
        ) -> None:
            super().__init__(lambda r: "EMBEDDED-ANSWER", model_id=f"llama-cpp:{name}")
            self.context_window = n_ctx
            made.append({"n_ctx": n_ctx, "n_threads": n_threads,
                         "n_threads_batch": n_threads_batch, "n_batch": n_batch})  # fmt: skip

    monkeypatch.setattr("clearance.models._llama_cpp.LlamaCppModel", Embedded)
    body = (
        "model_options: {threads_batch: 3, batch_size: 64}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    )
    result = run(tmp_path, body, "--batch-size", "128", model="llama-cpp:smollm2")
    assert result.exit_code == 0, result.output
    assert made and all(m["n_threads_batch"] == 3 and m["n_batch"] == 128 for m in made), made
    call = calls_of(tmp_path, only_run(tmp_path))["task:t"]
    assert call.model_id == "llama-cpp:smollm2" and "EMBEDDED-ANSWER" in call.response


# -- resume's options ------------------------------------------------------------------------


def stopped_by_budget(tmp_path: Path, body: str, budget: str = "budget: {tokens: 1}\n") -> str:
    """A run of ``body`` whose budget stops it after task ``s``: ``t`` is left to resume."""
    result = run(tmp_path, budget + body)
    assert result.exit_code == 2 and "budget" in result.output, result.output
    run_id = only_run(tmp_path)
    with RunLedger(db(tmp_path)) as ledger:
        statuses = {t.task_id: t.status for t in ledger.tasks(run_id)}
    assert statuses == {"s": "completed", "t": "interrupted"}, statuses
    return run_id


def test_resume_budget_cost_usd_replaces_the_runs_cost_budget(tmp_path: Path) -> None:
    prices = "prices: {fake:x: {input_per_mtok: 1000000, output_per_mtok: 1000000}}\n"
    run_id = stopped_by_budget(tmp_path, prices + f"agents: [{A}]\n" + CHAIN,
                               budget="budget: {cost_usd: 1}\n")  # fmt: skip
    again = cli("resume", run_id, "--db", db(tmp_path), "--budget-cost-usd", "1000000")
    assert again.exit_code == 0, again.output
    with RunLedger(db(tmp_path)) as ledger:
        assert ledger.get_run(run_id).status == "completed"
        budgets = [e.data for e in ledger.events(run_id, "budget")]
    assert budgets[-1]["cost_usd"] == 1_000_000
    assert "task:t" in calls_of(tmp_path, run_id)


def test_resume_store_and_memory_are_the_ones_the_rest_of_the_run_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task ``t`` (run on resume) reads the store --store names, and its result is recorded
    in the memory --memory names, not in the ones the run recorded."""

    def answer(request: ModelRequest) -> Any:
        text = request.prompt.text
        if subject(request) != "task:t" or "STORE-CANARY" in text:
            return f"ANSWER-{subject(request)}"
        return [ToolCall(id="c1", name="store_get", arguments={"namespace": "n", "key": "k"})]

    scripted_fake(monkeypatch, answer)
    body = (
        "store: sqlite:///{tmp}/store-first.db\nmemory: {url: sqlite:///{tmp}/memory-first.db}\n"
        "agents: [{name: a, instructions: You work., tools: [store_get],"
        " store_grants: {n: read}, memory: {recall: 3}}]\n" + CHAIN
    )
    run_id = stopped_by_budget(tmp_path, body)
    with ContextStore(f"sqlite:///{tmp_path}/store-second.db") as store:
        store.set("n", "k", "STORE-CANARY", "seed")
    memory = f"sqlite:///{tmp_path}/memory-second.db"
    again = cli("resume", run_id, "--db", db(tmp_path), "--budget-tokens", "1000000",
                "--store", f"sqlite:///{tmp_path}/store-second.db", "--memory", memory)  # fmt: skip
    assert again.exit_code == 0, again.output
    with RunLedger(db(tmp_path)) as ledger:
        work = [c for c in ledger.calls(run_id) if c.subject == "task:t"]
    assert "STORE-CANARY" in str(work[-1].messages)
    listing = cli("memory", str(tmp_path / "team.yaml"), "--memory", memory)
    assert listing.exit_code == 0, listing.output
    assert "ANSWER-task:t" in listing.output and "ANSWER-task:s" not in listing.output


def test_resume_force_takes_over_a_run_another_host_holds(tmp_path: Path) -> None:
    run_id = stopped_by_budget(tmp_path, f"agents: [{A}]\n" + CHAIN)
    with RunLedger(db(tmp_path)) as ledger:
        ledger.reopen_run(run_id, process={"host": "elsewhere.example", "pid": 4242})
    engine = create_engine(db(tmp_path))
    try:
        with engine.begin() as conn:
            conn.execute(update(RUNS).where(RUNS.c.run_id == run_id).values(
                owner="elsewhere.example:4242:1.abcd",
                lease_expires_at=utc_now() + timedelta(seconds=600)))  # fmt: skip
    finally:
        engine.dispose()
    args = ("resume", run_id, "--db", db(tmp_path), "--budget-tokens", "1000000")
    refused = cli(*args)
    assert refused.exit_code == 2, refused.output
    (line,) = refused.output.strip().splitlines()
    assert "elsewhere.example" in line and "--force" in line
    assert "task:t" not in calls_of(tmp_path, run_id)  # nothing ran
    forced = cli(*args, "--force")
    assert forced.exit_code == 0, forced.output
    with RunLedger(db(tmp_path)) as ledger:
        assert ledger.get_run(run_id).status == "completed"
    assert "task:t" in calls_of(tmp_path, run_id)


# -- plan's --input ----------------------------------------------------------------------------

PLANNED = {"tasks": [{"id": "draft", "title": "Draft", "description": "Write a draft.",
                      "assignee": "a", "depends_on": []}]}  # fmt: skip


def test_plan_input_is_the_folder_the_planned_file_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan written keeps the folder ``--input`` gave, so running it (once a task is
    given files) reads that folder with no ``--input`` repeated."""
    import json

    scripted_fake(monkeypatch, lambda r: json.dumps(PLANNED) if subject(r) == "plan" else "ok")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("NOTE-PLANNED-8\n")
    team(tmp_path, f"coordinator: {{name: boss, instructions: You lead.}}\nagents: [{A}]\n")
    plan_file = tmp_path / "plan.yaml"
    result = cli("plan", str(tmp_path / "team.yaml"), "--goal", "Draft.", "--db", db(tmp_path),
                 "--input", str(tmp_path / "in"), "-o", str(plan_file))  # fmt: skip
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(plan_file.read_text())
    assert written["input"]["default"] == str(tmp_path / "in")
    written["tasks"][0]["files"] = ["notes.txt"]
    plan_file.write_text(yaml.safe_dump(written, sort_keys=False))
    replay = cli("run", str(plan_file), "--db", db(tmp_path))
    assert replay.exit_code == 0, replay.output
    with RunLedger(db(tmp_path)) as ledger:
        (call,) = [c for r in ledger.list_runs() for c in ledger.calls(r.run_id)
                   if c.subject == "task:draft"]  # fmt: skip
    assert "NOTE-PLANNED-8" in str(call.messages)


def test_plan_input_given_relative_is_written_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative --input is the folder under the current one at plan time: the plan names
    it absolute, so it is the same folder wherever the plan is run from."""
    import json

    scripted_fake(monkeypatch, lambda r: json.dumps(PLANNED) if subject(r) == "plan" else "ok")
    (tmp_path / "in").mkdir()
    team(tmp_path, f"coordinator: {{name: boss, instructions: You lead.}}\nagents: [{A}]\n")
    monkeypatch.chdir(tmp_path)
    result = cli("plan", "team.yaml", "--goal", "Draft.", "--db", db(tmp_path),
                 "--input", "in", "-o", "plan.yaml")  # fmt: skip
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((tmp_path / "plan.yaml").read_text())
    assert written["input"]["default"] == str(tmp_path / "in")


# -- chat's --memory ---------------------------------------------------------------------------


def test_chat_memory_is_the_memory_a_session_recalls_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run records into the memory --memory names; a chat given that memory recalls it,
    one given the default (beside the ledger) recalls nothing."""

    def answer(request: ModelRequest) -> str:
        return "the favourite colour is ultramarine" if subject(request) == "task:t" else "ok"

    scripted_fake(monkeypatch, answer)
    monkeypatch.chdir(tmp_path)
    body = (
        "agents: [{name: a, instructions: You work., memory: {recall: 3}}]\n"
        "tasks: [{id: t, title: Colour, description: Pick a colour., assignee: a}]\n"
    )
    url = f"sqlite:///{tmp_path}/chosen-memory.db"
    assert run(tmp_path, body, "--memory", url).exit_code == 0
    recalled: dict[str, str] = {}
    for label, extra in (("chosen", ("--memory", url)), ("default", ())):
        chat = cli("chat", str(tmp_path / "team.yaml"), "--agent", "a", "--db", db(tmp_path),
                   "--context-window", "4000", *extra,
                   stdin="what is the favourite colour?\n")  # fmt: skip
        assert chat.exit_code == 0, chat.output
        with RunLedger(db(tmp_path)) as ledger:
            latest = ledger.list_runs()[0]
            (call,) = ledger.calls(latest.run_id)
        assert call.subject == "conversation:a", call.subject
        items = [i["origin"] for i in call.manifest["items"] if i["origin"].startswith("memory:")]
        recalled[label] = str(call.messages) if items else ""
    assert "ultramarine" in recalled["chosen"]
    assert recalled["default"] == ""


# -- task and isolation keys through clearance run ---------------------------------------------


def test_memory_scope_decides_which_earlier_results_a_task_is_given(tmp_path: Path) -> None:
    body = (
        f"agents: [{A}]\n" + CHAIN
        + "  - {id: wide, title: W, description: Go., assignee: a, depends_on: [t],"
        " memory_scope: transitive}\n"
        "  - {id: near, title: N, description: Go., assignee: a, depends_on: [t]}\n"
    )  # fmt: skip
    result = run(tmp_path, body)
    assert result.exit_code == 0, result.output
    calls = calls_of(tmp_path, only_run(tmp_path))

    def origins(name: str) -> set[str]:
        return {i["origin"] for i in calls[name].manifest["items"]}

    assert {"task_result:s", "task_result:t"} <= origins("task:wide")
    assert "task_result:t" in origins("task:near")
    assert "task_result:s" not in origins("task:near")


ISOLATED_FILES = (
    "agents: [{A}]\n"
    "tasks: [{{id: t, title: T, description: Go., assignee: a, mode: isolated,"
    " files: [one.txt, two.txt, three.txt]}}]\n"
    "input: {{default: '{{tmp}}'}}\n"
    "isolation: {{file_caps: {{max_total_bytes: 1000, on_oversize: {policy}}}}}\n"
)


@pytest.mark.parametrize("policy", ["error", "truncate"])
def test_file_caps_of_an_isolated_task_hold_through_run(tmp_path: Path, policy: str) -> None:
    """Three files of 400 bytes against a total of 1000: the third is over the cap; under
    ``error`` the task fails naming the cap and no subagent is sent the files; under
    ``truncate`` the subagent gets the third cut, with the marker."""
    for name in ("one", "two", "three"):
        (tmp_path / f"{name}.txt").write_text(name.upper() + "-" + "y" * 390 + "-END\n")
    result = run(tmp_path, ISOLATED_FILES.format(A=A, policy=policy))
    run_id = only_run(tmp_path)
    calls = calls_of(tmp_path, run_id)
    with RunLedger(db(tmp_path)) as ledger:
        (task,) = ledger.tasks(run_id)
    if policy == "error":
        assert result.exit_code != 0, result.output
        assert task.status == "failed" and "max_total_bytes" in (task.error or ""), task
        assert "isolated:t" not in calls
        return
    assert result.exit_code == 0, result.output
    sent = str(calls["isolated:t"].messages)
    assert "ONE-" in sent and "TWO-" in sent and "truncated three.txt" in sent
    assert sent.count("-END") == 2


def test_memory_groups_share_recorded_memory_with_members_only(tmp_path: Path) -> None:
    """A second run: ``b`` (in ``a``'s group) recalls what ``a`` recorded; ``c`` does not."""
    agents = (
        "memory_groups: [{name: g, agents: [a, b]}]\n"
        "agents:\n"
        "  - {name: a, instructions: You work., memory: {recall: 3, record_to: g}}\n"
        "  - {name: b, instructions: You help., memory: {recall: 3}}\n"
        "  - {name: c, instructions: You watch., memory: {recall: 3}}\n"
    )
    first = "tasks: [{id: s, title: Zanzibar, description: Note zanzibar., assignee: a}]\n"
    assert run(tmp_path, agents + first).exit_code == 0
    second = (
        "tasks:\n  - {id: t, title: Zanzibar, description: Recall zanzibar., assignee: b}\n"
        "  - {id: u, title: Zanzibar too, description: Recall zanzibar., assignee: c}\n"
    )
    again = run(tmp_path, agents + second)
    assert again.exit_code == 0, again.output
    with RunLedger(db(tmp_path)) as ledger:
        latest = ledger.list_runs()[0]
        calls = {c.subject: c for c in ledger.calls(latest.run_id)}

    def memories(name: str) -> list[str]:
        return [i["origin"] for i in calls[name].manifest["items"]
                if i["origin"].startswith("memory:")]  # fmt: skip

    assert memories("task:t"), calls["task:t"].manifest
    assert memories("task:u") == []


# -- the coordinator's keys on its own calls ---------------------------------------------------


@pytest.mark.parametrize(
    "limit",
    ["max_steps: 3", "compact_tool_steps: 2", "answer_at_max_steps: true", "max_children: 2",
     "spawn_timeout_s: 5", "max_output_files: 2", "max_output_size_bytes: 100"],
)  # fmt: skip
def test_a_tool_loop_limit_on_a_coordinator_without_one_is_refused_by_its_own_name(
    tmp_path: Path, limit: str
) -> None:
    """It was refused as ``agents.boss.limits...``, a key the file does not have."""
    body = (
        f"coordinator: {{name: boss, instructions: You lead., limits: {{{limit}}}}}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    )
    result = run(tmp_path, body)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    key = f"coordinator.limits.{limit.split(':')[0]}"
    assert line.startswith(f"error: {tmp_path / 'team.yaml'}: {key}: "), line
    assert "has no effect" in line
    assert not (tmp_path / "runs.db").exists() or not RunLedger(db(tmp_path)).list_runs()


def breaching(key: str) -> Callable[[ModelRequest], Any]:
    """A model whose synthesis call breaks the limit ``key`` names (the worker's calls not)."""
    from clearance import ModelError

    failed: list[str] = []

    async def answer(request: ModelRequest) -> Any:
        if subject(request) != "synthesis":
            return "WORK-DONE"
        if key == "retries" and not failed:
            failed.append("once")
            raise ModelError("overloaded", model_id="fake:x", transient=True)
        if key == "timeout_s" or (key == "attempt_timeout_s" and not failed):
            import asyncio

            failed.append("slow")
            await asyncio.sleep(30)
        if key == "max_tool_calls_per_step":
            return [ToolCall(id=f"c{i}", name="store_get", arguments={}) for i in range(3)]
        if key == "max_tokens_per_step":
            return "LONG " * 300  # counted as its completion tokens
        return "SYNTHESIS-DONE"

    return answer


@pytest.mark.parametrize(
    ("limit", "breach"),
    [
        ("retries: 1", ""),  # one transient failure, retried: the synthesis completes
        ("retries: 0", "overloaded"),
        ("timeout_s: 1", "timeout_s"),
        # the first attempt ends at its deadline, and the retry answers
        ("attempt_timeout_s: 1, retries: 1", ""),
        ("max_tool_calls_per_step: 1", "max_tool_calls_per_step"),
        ("max_tokens_per_step: 50", "max_tokens_per_step"),
        ("max_prompt_tokens: 40", "max_prompt_tokens"),
    ],
)
def test_the_coordinators_limits_hold_on_its_synthesis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str, breach: str
) -> None:
    key = limit.split(":")[0]
    scripted_fake(monkeypatch, breaching(key))
    body = (
        f"coordinator: {{name: boss, instructions: You lead., limits: {{{limit}}}}}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    )
    result = run(tmp_path, body)
    run_id = only_run(tmp_path)
    with RunLedger(db(tmp_path)) as ledger:
        record = ledger.get_run(run_id)
        tasks = {t.task_id: t.status for t in ledger.tasks(run_id)}
    assert tasks == {"t": "completed"}  # the worker is held to no limit of the coordinator
    if not breach:
        assert result.exit_code == 0, result.output
        assert "SYNTHESIS-DONE" in result.output
        return
    assert result.exit_code != 0, result.output
    assert breach in (record.error or "") + result.output, (record.error, result.output)
    assert "SYNTHESIS-DONE" not in result.output


@pytest.mark.parametrize(
    "key",
    ["tools: [store_get]", "store_grants: {n: read}", "memory: {recall: 3}",
     "can_delegate_to: [a]", "can_spawn: [a]"],
)  # fmt: skip
def test_a_loop_or_memory_key_on_a_coordinator_without_a_task_is_refused(
    tmp_path: Path, key: str
) -> None:
    """Its plan, clarification answers and synthesis are one call each, without tools or
    memory, and no task is ever assigned to it: the key would act on none of its calls."""
    body = (
        f"coordinator: {{name: boss, instructions: You lead., {key}}}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    )
    result = run(tmp_path, body)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    name = key.split(":")[0]
    assert line.startswith(f"error: {tmp_path / 'team.yaml'}: coordinator.{name}: "), line
    # The advice is one a user can follow: no task may be assigned to the coordinator.
    assert "has no effect" in line and "give it to a worker agent" in line
    assert not (tmp_path / "runs.db").exists() or not RunLedger(db(tmp_path)).list_runs()


@pytest.mark.parametrize("limit", ["", "limits: {max_dependency_tokens: 9}"])
def test_the_coordinators_dependency_limit_holds_where_it_answers_a_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    """The coordinator's answer to an isolated task's question is given the task's admitted
    results: over its ``max_dependency_tokens`` the task fails naming the limit, as a
    worker's task does; without the limit the question is answered."""

    def answer(request: ModelRequest) -> str:
        name = subject(request)
        if name == "task:s":
            return "LONG-RESULT " * 40
        if name.startswith("isolated:"):
            if "BOSS-ANSWER" in request.prompt.text:
                return "ISO-DONE\nSTATUS: done"
            return "I need to know.\nSTATUS: needs_context\nQUESTION: Which part?"
        return "BOSS-ANSWER: the first" if name.startswith("clarification") else "SYNTH"

    scripted_fake(monkeypatch, answer)
    body = (
        f"coordinator: {{name: boss, instructions: You lead., {limit}}}\n"
        "isolation: {max_rounds: 2}\n"
        f"agents: [{A}]\n"
        "tasks:\n  - {id: s, title: S, description: Go., assignee: a}\n"
        "  - {id: t, title: T, description: Go., assignee: a, depends_on: [s], mode: isolated}\n"
    )
    result = run(tmp_path, body.replace(", }", "}"))
    run_id = only_run(tmp_path)
    with RunLedger(db(tmp_path)) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        subjects = [c.subject for c in ledger.calls(run_id)]
    assert tasks["s"].status == "completed"
    if not limit:
        assert result.exit_code == 0, result.output
        assert tasks["t"].status == "completed" and "ISO-DONE" in (tasks["t"].result or "")
        assert any(s.startswith("clarification") for s in subjects), subjects
        return
    assert tasks["t"].status == "failed", tasks["t"]
    assert "max_dependency_tokens" in (tasks["t"].error or ""), tasks["t"].error
    assert not any(s.startswith("clarification") for s in subjects), subjects


# -- executor: keys of a team file, on a Ray cluster ------------------------------------------


@pytest.fixture(scope="module")
def ray_head() -> Any:
    """A Ray head on 127.0.0.1 with 2 CPUs (as ``tests/ray``'s); its GCS address."""
    from clearance._orchestration.ray_executor import LOCAL_RAY_ENV

    for key, value in {**LOCAL_RAY_ENV, "RAY_AUTH_MODE": "disabled"}.items():
        os.environ.setdefault(key, value)
    ray = pytest.importorskip("ray", reason="Ray is not installed")
    context = ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                       log_to_driver=False, configure_logging=False)  # fmt: skip
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def clearance_process(tmp_path: Path, *args: str, env: dict[str, str]) -> Any:
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, full.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "clearance", *args], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=240, check=False)  # fmt: skip


def ray_workers_made() -> int:
    """How many model-worker actors the head has seen (alive or gone)."""
    import ray

    actors = ray._private.state.actors().values()  # the GCS's table: no dashboard needed
    return sum(1 for a in actors if "Worker" in str(a.get("ActorClassName", "")))


@pytest.mark.ray
def test_a_team_files_executor_keys_run_the_calls_on_that_cluster(
    tmp_path: Path, ray_head: str
) -> None:
    """kind and address: the calls are answered by workers on the fixture's head (which
    counts ``workers`` new actors), not in the command's process; env: only a variable the
    file names reaches them (the fake model's latency, set in the command's environment)."""
    tasks = f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    latencies: dict[str, float] = {}
    for label, workers, env in (("env", 2, ", env: [CLEARANCE_FAKE_LATENCY_S]"), ("none", 1, "")):
        before = ray_workers_made()
        (tmp_path / label).mkdir()
        executor = f"executor: {{kind: ray, address: '{ray_head}', workers: {workers}{env}}}\n"
        team(tmp_path / label, executor + tasks)
        done = clearance_process(tmp_path / label, "run", "team.yaml", "--db", db(tmp_path),
                                 env={"CLEARANCE_FAKE_LATENCY_S": "1.5"})  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert ray_workers_made() - before == workers
        with RunLedger(db(tmp_path)) as ledger:
            latest = ledger.list_runs()[0]
            (call,) = [c for c in ledger.calls(latest.run_id) if c.subject == "task:t"]
        latencies[label] = call.latency_s
    assert latencies["env"] >= 1.5 and latencies["none"] < 1.0, latencies
