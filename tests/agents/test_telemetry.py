"""OpenTelemetry: a GenAI client span per model call; metadata only unless content is asked for."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clearance import Agent, AgentLimits, ModelError, Orchestrator, Task, Team
from clearance._agents import telemetry
from clearance._agents.caller import ModelCaller
from clearance._agents.telemetry import span_ref, span_task_id
from clearance._context.builder import ContextBuilder
from clearance._context.isolated import IsolatedContext
from clearance.testing import FunctionModel

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")

WORKERS = (
    Agent(name="alice", instructions="You are Alice.\nALICE-SECRET"),
    Agent(name="bob", instructions="You are Bob.\nBOB-SECRET"),
)
TEAM = Team(agents=WORKERS, coordinator=Agent(name="lead", instructions="LEAD-SECRET"), name="t")
SECRETS = ("ALICE-SECRET", "BOB-SECRET", "LEAD-SECRET", "GOAL-SECRET", "RESULT-", "DESCRIBE-")


def task(task_id, *deps, assignee="alice"):
    return Task(
        id=task_id,
        title=f"Title {task_id}",
        description=f"DESCRIBE-{task_id}",
        assignee=assignee,
        depends_on=deps,
    )


def answer(request):
    subject = request.prompt.manifest.subject
    return "SYNTHESIS" if subject == "synthesis" else f"RESULT-{subject.removeprefix('task:')}"


def all_values(span):
    values = span.attributes.values()
    return " ".join(json.dumps(v) if isinstance(v, str) else repr(v) for v in values)


def chats(spans):
    return [s for s in spans if s.name.startswith("chat ")]


async def run_two_tasks(ledger):
    model = FunctionModel(answer, model_id="test:fn-model")
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks([task("a"), task("b", "a", assignee="bob")], goal="GOAL-SECRET")
    assert result.status == "completed"
    requests = {r.prompt.manifest.subject: r for r in model.requests}
    return result, requests


async def test_a_run_emits_one_chat_span_per_model_call(ledger, spans):
    result, requests = await run_two_tasks(ledger)
    # Ids are digests on spans by default (a plan's task ids are a model's text).
    plain = {span_ref(subject): subject for subject in ("task:a", "task:b", "synthesis")}
    assert span_ref("task:a") != "task:a" and span_ref("task:a").startswith("task:h")
    finished = {plain[s.attributes["clearance.subject"]]: s for s in chats(spans())}
    assert set(finished) == {"task:a", "task:b", "synthesis"}
    for subject, span in finished.items():
        manifest = requests[subject].prompt.manifest
        attrs = span.attributes
        assert span.name == "chat fn-model"
        assert span.kind is trace.SpanKind.CLIENT
        assert span.instrumentation_scope.name == "clearance"
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == attrs["gen_ai.system"] == "test"
        assert attrs["gen_ai.request.model"] == "fn-model"
        assert attrs["gen_ai.response.model"] == "fn-model"
        assert attrs["gen_ai.request.max_tokens"] == requests[subject].max_tokens
        assert attrs["gen_ai.request.temperature"] == 0.0
        assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
        assert attrs["clearance.run_id"] == result.run_id
        assert attrs["clearance.prompt.origins"] == tuple(map(span_ref, manifest.origins))
        assert attrs["clearance.prompt.item_tokens"] == tuple(i.tokens for i in manifest.items)
        assert attrs["clearance.prompt.total_tokens"] == manifest.total_tokens
        assert attrs["gen_ai.usage.input_tokens"] > 0
        assert attrs["gen_ai.usage.output_tokens"] > 0
        assert "error.type" not in attrs
    assert finished["task:a"].attributes["clearance.task_id"] == span_task_id("a") != "a"
    assert finished["task:a"].attributes["clearance.agent"] == "alice"
    assert finished["task:b"].attributes["clearance.task_id"] == span_task_id("b")
    assert finished["task:b"].attributes["clearance.agent"] == "bob"
    assert span_ref("task_result:a") in finished["task:b"].attributes["clearance.prompt.origins"]
    assert "clearance.task_id" not in finished["synthesis"].attributes
    input_tokens = sum(s.attributes["gen_ai.usage.input_tokens"] for s in finished.values())
    output_tokens = sum(s.attributes["gen_ai.usage.output_tokens"] for s in finished.values())
    assert (input_tokens, output_tokens) == (
        result.usage.prompt_tokens,
        result.usage.completion_tokens,
    )


async def test_no_prompt_or_completion_text_on_spans_by_default(ledger, spans, monkeypatch):
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_ENV, raising=False)
    await run_two_tasks(ledger)
    finished = spans()
    assert len(finished) == 6  # three model calls, two agent spans, the run's root span
    for span in finished:
        text = all_values(span)
        for secret in SECRETS:
            assert secret not in text, (span.name, secret)
        assert "gen_ai.input.messages" not in span.attributes
        assert "gen_ai.output.messages" not in span.attributes
        assert not span.events  # no exception text either


async def test_content_is_captured_when_the_user_opts_in(ledger, spans, monkeypatch):
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "1")
    await run_two_tasks(ledger)
    finished = {s.attributes["clearance.subject"]: s for s in chats(spans())}
    sent = json.loads(finished["task:b"].attributes["gen_ai.input.messages"])
    assert sent[0]["role"] == "system" and "BOB-SECRET" in sent[0]["parts"][0]["content"]
    assert any("RESULT-a" in m["parts"][0]["content"] for m in sent)
    got = json.loads(finished["task:b"].attributes["gen_ai.output.messages"])
    assert got == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "RESULT-b"}],
            "finish_reason": "stop",
        }
    ]


def isolated_prompt(agent):
    context = IsolatedContext(task_id="t7", task_description="PROMPT-SECRET")
    return ContextBuilder(count_tokens=len).build_isolated_prompt(context, agent=agent)


async def test_a_failed_call_sets_error_type_and_no_message(spans):
    def fail(request):
        raise RuntimeError("SERVER-ECHOED PROMPT-SECRET")

    agent = Agent(name="a", instructions="You are A.", limits=AgentLimits(retries=0))
    caller = ModelCaller()
    with pytest.raises(ModelError):
        await caller.call(
            subject="isolated:t7",
            agent=agent,
            model=FunctionModel(fail, model_id="local"),
            prompt=isolated_prompt(agent),
        )
    (span,) = spans()
    assert span.name == "chat local"
    assert span.attributes["error.type"] == "ModelError"
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.attributes["clearance.task_id"] == span_task_id("t7")
    assert "clearance.run_id" not in span.attributes  # no run outside a ledger
    assert "gen_ai.provider.name" not in span.attributes  # a model id without a provider
    assert "gen_ai.usage.input_tokens" not in span.attributes
    assert not span.events
    assert "SECRET" not in all_values(span) + (span.status.description or "")


async def test_a_run_decides_once_whether_to_trace(ledger, spans, monkeypatch):
    asked = []
    real = telemetry.tracing_now
    monkeypatch.setattr(telemetry, "tracing_now", lambda: asked.append(1) or real())
    await run_two_tasks(ledger)
    assert len(asked) == 1  # not once per task, model call or span
    assert len(chats(spans())) == 3  # two tasks and the synthesis, still traced
    assert telemetry.tracing() is not None and len(asked) == 2  # outside a run: asked each time


async def test_without_opentelemetry_calls_work_and_nothing_is_recorded(spans, monkeypatch):
    # OpenTelemetry not importable (an entry of None in sys.modules makes its import fail).
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    assert not telemetry.tracing_configured()
    agent = Agent(name="a", instructions="You are A.")
    response = await ModelCaller().call(
        subject="task:x",
        agent=agent,
        model=FunctionModel(lambda r: "fine"),
        prompt=isolated_prompt(agent),
    )
    assert response.text == "fine"
    assert spans() == ()


async def test_each_task_runs_in_an_agent_span_parenting_its_model_calls(ledger, spans):
    result, _ = await run_two_tasks(ledger)
    finished = spans()
    plain = {span_task_id(t): t for t in ("a", "b")}
    agents = {
        plain[s.attributes["clearance.task_id"]]: s
        for s in finished
        if s.name.startswith("invoke_agent ")
    }
    assert set(agents) == {"a", "b"}
    assert agents["a"].name == "invoke_agent alice" and agents["b"].name == "invoke_agent bob"
    for task_id, span in agents.items():
        assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert span.attributes["clearance.run_id"] == result.run_id
        (call,) = [
            s
            for s in chats(finished)
            if s.attributes["clearance.subject"] == span_ref(f"task:{task_id}")
        ]
        assert call.parent is not None and call.parent.span_id == span.context.span_id
    (synthesis,) = [s for s in chats(finished) if s.attributes["clearance.subject"] == "synthesis"]
    assert synthesis.parent is None or synthesis.parent.span_id not in {
        s.context.span_id for s in agents.values()
    }


async def test_a_failed_task_marks_its_agent_span(ledger, spans):
    def fail_b(request):
        if request.prompt.manifest.subject == "task:b":
            raise ValueError("BOOM PROMPT-SECRET")
        return answer(request)

    orch = Orchestrator(TEAM, model=FunctionModel(fail_b), ledger=ledger)
    result = await orch.run_tasks([task("a"), task("b", assignee="bob")])
    assert result.status != "completed"
    (span,) = [s for s in spans() if s.name == "invoke_agent bob"]
    assert span.attributes["error.type"] == "ModelError"
    assert span.status.status_code is trace.StatusCode.ERROR
    assert "SECRET" not in (span.status.description or "")


# Run in a fresh process: the global tracer provider of this one is set once by `spans`.
_NO_PROVIDER = textwrap.dedent(
    """
    import asyncio, sys
    from clearance import Agent, NullLedger, Orchestrator, Task, Team
    from clearance.testing import FunctionModel

    from clearance.models import ToolCall

    team = Team(agents=(Agent(name="a", instructions="A.", tools=("echo",)),), name="t")
    tasks = [Task(id="x", title="X", description="d", assignee="a"),
             Task(id="y", title="Y", description="d", assignee="a", depends_on=("x",))]

    def echo(text: str) -> str:
        return text

    def answer(request):
        done = "## Results of your tool calls" in request.prompt.messages[-1].content
        if request.prompt.manifest.subject.startswith("task:") and not done:
            return ToolCall(id="c", name="echo", arguments={"text": "hi"})
        return "ok"

    def run():
        orch = Orchestrator(team, model=FunctionModel(answer), ledger=NullLedger(), tools=[echo])
        assert asyncio.run(orch.run_tasks(tasks)).status == "completed"

    run()
    print("imported:", "opentelemetry" in sys.modules)
    from opentelemetry import trace  # installed: the API alone, no provider set

    made = []
    original = trace.ProxyTracerProvider.get_tracer
    def counting(self, *args, **kwargs):
        made.append(args)
        return original(self, *args, **kwargs)
    trace.ProxyTracerProvider.get_tracer = counting
    run()
    print("tracers without a provider:", len(made))
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    run()
    print("spans with a provider:", len(exporter.get_finished_spans()))
    """
)


def test_without_a_tracer_provider_no_span_is_made_and_opentelemetry_is_not_imported():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    src = str(Path(telemetry.__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _NO_PROVIDER], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "imported: False",
        "tracers without a provider: 0",
        # The root span, two agent spans, two tool calls, and five chat spans (a tool call
        # and an answer per task, the synthesis).
        "spans with a provider: 10",
    ]


def test_a_provider_named_by_the_environment_turns_tracing_on(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    assert not telemetry._export_requested()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert not telemetry._export_requested()  # the command sets a provider for this one
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    assert telemetry._export_requested()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not telemetry._export_requested()


async def test_model_chosen_ids_stay_off_spans_by_default(ledger, spans, monkeypatch):
    """A coordinator's plan names tasks: by default those names reach no span attribute."""
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_ENV, raising=False)
    leaked = "exfil-4111-1111-1111-1111"
    plan = {
        "tasks": [
            {"id": leaked, "title": "T", "description": "D.", "assignee": "alice",
             "depends_on": []},
            {"id": "after", "title": "U", "description": "E.", "assignee": "bob",
             "depends_on": [leaked]},
        ]
    }  # fmt: skip

    def reply(request):
        subject = request.prompt.manifest.subject
        return json.dumps(plan) if subject.startswith("plan") else "fine"

    orch = Orchestrator(TEAM, model=FunctionModel(reply), ledger=ledger)
    result = await orch.run_team("GOAL")
    assert result.status == "completed", result.error
    finished = spans()
    assert len(chats(finished)) >= 4  # plan, two tasks, synthesis
    for span in finished:
        assert "4111" not in all_values(span) + span.name
