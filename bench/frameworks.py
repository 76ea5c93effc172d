"""One runner per framework, all on the same workload and the same fake model.

Each runner takes the task specs and a `FakeModel`, runs the whole graph, and returns the
prompt text every task's model call received (task id -> prompt) so prompt sizes can be
compared. Graph construction is part of what is timed, for every framework alike; LangGraph's
graph build and compilation is also recorded on its own (`BUILD_S`).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Annotated, Any, TypedDict

from bench.workload import FakeModel, Spec
from clearance import RunOptions

PromptLog = dict[str, str]

BUILD_S: list[float] = []
"""Seconds each LangGraph run spent building and compiling its graph (inside its timed run;
reported apart, so its makespan can be read without it)."""


ASSIGNEE = "worker"
"""The one agent every task is assigned to."""
INSTRUCTIONS = "You do one task."
"""Its instructions."""


def _prompt(spec: Spec, context: list[str]) -> str:
    head = f"# Task {spec.id}\n{spec.title}\n{spec.description}"
    return "\n\n".join([head, *context])


def _labelled(spec: Spec, result: str) -> str:
    """A dependency's result with its label (its title and assignee): content, not framing."""
    return f"{spec.title} (by {ASSIGNEE})\n{result}"


# -- the floor: a plain asyncio scheduler -----------------------------------------------------


async def run_floor(specs: list[Spec], model: FakeModel) -> PromptLog:
    """Start each task when its dependencies finish.

    Its prompt: the agent's instructions, the task's id, title and description, then each
    dependency's result under its label (`_labelled`): the least text that tells an agent
    what to do and which result is which, with no framework text.
    """
    by_id = {s.id: s for s in specs}
    results: dict[str, str] = {}
    prompts: PromptLog = {}
    waiting = {s.id: len(s.depends_on) for s in specs}
    dependents: dict[str, list[Spec]] = {s.id: [] for s in specs}
    for s in specs:
        for d in s.depends_on:
            dependents[d].append(s)
    done = asyncio.Event()
    remaining = len(specs)

    async def run(spec: Spec) -> None:
        nonlocal remaining
        context = [_labelled(by_id[d], results[d]) for d in spec.depends_on]
        prompts[spec.id] = f"{INSTRUCTIONS}\n\n{_prompt(spec, context)}"
        results[spec.id] = await model.answer(spec.id)
        for nxt in dependents[spec.id]:
            waiting[nxt.id] -= 1
            if waiting[nxt.id] == 0:
                tasks.add(asyncio.create_task(run(nxt)))
        remaining -= 1
        if remaining == 0:
            done.set()

    tasks: set[asyncio.Task[None]] = set()
    for s in specs:
        if not s.depends_on:
            tasks.add(asyncio.create_task(run(s)))
    await done.wait()
    return prompts


def global_memory_prompts(specs: list[Spec], model: FakeModel) -> PromptLog:
    """The global-shared-memory baseline: every task sees every result of earlier layers."""
    prompts: PromptLog = {}
    seen: list[str] = []
    layer = 0
    pending: list[str] = []
    for s in specs:
        if s.layer != layer:
            seen.extend(pending)
            pending, layer = [], s.layer
        prompts[s.id] = _prompt(s, list(seen))
        pending.append(model.text(s.id))
    return prompts


# -- Clearance ---------------------------------------------------------------------------------


class _BenchChatModel:
    """Clearance's side of the fake: a `ChatModel` that keeps only the prompt texts.

    Like every other framework's runner, it captures what each task's model call received as
    a string. (`clearance.testing.FunctionModel` would keep every request object alive to
    the end of the run, which the peers' runners do not pay for.)
    """

    context_window: int | None = None

    def __init__(self, model: FakeModel):
        from clearance.models import ModelResponse, Usage
        from clearance.tokens import heuristic_tokens

        self.model_id = "bench:fake"
        self.prompts: PromptLog = {}
        self.count_tokens = heuristic_tokens
        self._model = model
        self._response, self._usage = ModelResponse, Usage(requests=1)

    async def request(self, request: Any) -> Any:
        subject = request.prompt.manifest.subject
        if subject == "synthesis":
            text = "SYNTHESIS"
        else:
            tid = subject.removeprefix("task:")
            self.prompts[tid] = request.prompt.text
            text = await self._model.answer(tid)
        return self._response(text=text, usage=self._usage, model_id=self.model_id)


async def run_clearance(
    specs: list[Spec],
    model: FakeModel,
    *,
    ledger_url: str | None,
    scope: str = "dependencies",
    max_concurrency: int | None = None,
) -> PromptLog:
    """Clearance's `Orchestrator.run_tasks`; ``ledger_url=None`` runs with a `NullLedger`."""
    from clearance import Agent, Orchestrator, RunLedger, Task, Team

    fake = _BenchChatModel(model)
    team = Team(agents=(Agent(name=ASSIGNEE, instructions=INSTRUCTIONS),), name="bench")
    tasks = [
        Task(
            id=s.id,
            title=s.title,
            description=s.description,
            assignee=ASSIGNEE,
            depends_on=s.depends_on,
            memory_scope=scope,  # type: ignore[arg-type]
        )
        for s in specs
    ]
    if ledger_url:
        ledger = RunLedger(ledger_url)
    else:
        from clearance import NullLedger  # type: ignore[attr-defined,unused-ignore]

        ledger = NullLedger()
    try:
        orch = Orchestrator(
            team,
            model=fake,
            ledger=ledger,
            options=RunOptions(max_concurrency=max_concurrency or len(specs)),
        )
        result = await orch.run_tasks(tasks)
    finally:
        ledger.close()
    assert result.status == "completed", result.error
    return fake.prompts


# -- LangGraph ---------------------------------------------------------------------------------


def _merge(a: dict[str, str], b: dict[str, str]) -> dict[str, str]:
    return {**a, **b}


class State(TypedDict):
    results: Annotated[dict[str, str], _merge]


async def run_langgraph(specs: list[Spec], model: FakeModel) -> PromptLog:
    """A `StateGraph` with one node per task; results merged into state by a reducer."""
    from langgraph.graph import END, START, StateGraph

    prompts: PromptLog = {}

    def node(spec: Spec) -> Any:
        async def fn(state: State) -> dict[str, dict[str, str]]:
            prompts[spec.id] = _prompt(spec, [state["results"][d] for d in spec.depends_on])
            return {"results": {spec.id: await model.answer(spec.id)}}

        return fn

    t0 = time.perf_counter()
    builder = StateGraph(State)
    has_dependents = {d for s in specs for d in s.depends_on}
    for s in specs:
        builder.add_node(s.id, node(s))
        if s.depends_on:
            builder.add_edge(list(s.depends_on), s.id)  # waits for all of them
        else:
            builder.add_edge(START, s.id)
        if s.id not in has_dependents:
            builder.add_edge(s.id, END)
    graph = builder.compile()
    BUILD_S.append(time.perf_counter() - t0)
    final = await graph.ainvoke({"results": {}}, {"recursion_limit": 10_000})
    assert len(final["results"]) == len(specs)
    return prompts


# -- CrewAI ------------------------------------------------------------------------------------


def crewai_environment() -> None:
    """Switch off CrewAI's telemetry and tracing so it runs offline."""
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    os.environ.setdefault("CREWAI_STORAGE_DIR", "clearance-bench")


def run_crewai(
    specs: list[Spec], model: FakeModel, *, use_context: bool = True, parallel: bool = True
) -> PromptLog:
    """A `Crew` with one `Task` per spec, ``context=`` its dependencies, and a fake LLM.

    With ``parallel``, every task but the last of its layer is ``async_execution=True``: CrewAI
    runs consecutive asynchronous tasks concurrently (in threads) and joins them at the next
    synchronous task, and it refuses an asynchronous task whose ``context=`` names another
    task of the same asynchronous run, so one synchronous task per layer is the most
    parallelism it allows on this graph. Without ``use_context``
    tasks get no ``context=`` and CrewAI's default applies (the outputs of earlier tasks).
    """
    crewai_environment()
    from crewai import Agent, Crew, Process, Task
    from crewai.llms.base_llm import BaseLLM

    prompts: PromptLog = {}

    class FakeLLM(BaseLLM):
        def call(self, messages: Any, *args: Any, from_task: Any = None, **kw: Any) -> str:
            text = (
                messages
                if isinstance(messages, str)
                else "\n".join(str(m.get("content", "")) for m in messages)
            )
            tid = from_task.name if from_task is not None else "?"
            prompts[tid] = text
            return f"Thought: I now know the final answer\nFinal Answer: {model.answer_sync(tid)}"

        def supports_function_calling(self) -> bool:
            return False

        def get_input_tokens_count(self, messages: Any, *args: Any, **kw: Any) -> int:
            # CrewAI's fallback is the same estimate plus a warning logged on every call.
            text = messages if isinstance(messages, str) else str(messages)
            return (len(text) + 3) // 4

        def get_context_window_size(self) -> int:
            return 10_000_000

    llm = FakeLLM(model="fake/bench")
    # An agent's executor runs one task at a time, so parallel tasks need distinct agents:
    # one per position in a layer.
    width = sum(1 for s in specs if s.layer == 0)
    agents = [
        Agent(
            role=f"Worker {j}",
            goal="Do one task",
            backstory="You do one task.",
            llm=llm,
            verbose=False,
        )
        for j in range(width)
    ]
    position: dict[int, int] = {}
    by_id: dict[str, Any] = {}
    crew_tasks = []
    for i, s in enumerate(specs):
        last = i == len(specs) - 1 or specs[i + 1].layer != s.layer
        kwargs: dict[str, Any] = {}
        if use_context:
            kwargs["context"] = [by_id[d] for d in s.depends_on]
        task = Task(
            name=s.id,
            description=f"{s.title}\n{s.description}",
            expected_output="The result.",
            agent=agents[position.setdefault(s.layer, 0) % width],
            async_execution=parallel and not last,
            **kwargs,
        )
        position[s.layer] += 1
        by_id[s.id] = task
        crew_tasks.append(task)
    crew = Crew(agents=agents, tasks=crew_tasks, process=Process.sequential, verbose=False)
    crew.kickoff()
    return prompts
