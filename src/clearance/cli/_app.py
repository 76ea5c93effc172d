"""The ``clearance`` command: run, resume, inspect, verify, graph, runs, chat, view, serve."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shlex
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table
from rich.tree import Tree

from clearance._agents.files import confined_path
from clearance._context.verify import verify_run
from clearance._core.errors import ConfigError, GraphError
from clearance._core.spec import Agent, Team
from clearance._core.teamfile import LoadedTeam, load_team_file
from clearance._orchestration.estimate import estimate_tasks
from clearance._orchestration.orchestrator import DEFAULT_WORKSPACE_ROOT, Orchestrator
from clearance._orchestration.report import build_report
from clearance._orchestration.result import RunEvent, RunResult
from clearance._orchestration.run_memory import RunMemory
from clearance._state.graph import TaskGraph
from clearance._state.graph_shape import concurrency_notice, graph_shape
from clearance._state.ledger import (
    DEFAULT_LEDGER_URL,
    CallRecord,
    EventRecord,
    RunLedger,
    RunRecord,
    TaskRecord,
    ToolCallRecord,
)
from clearance._state.messages import MessageBus
from clearance._state.store import ContextStore
from clearance.cli._backends import run_memory_for, team_tools, verify_lookups
from clearance.cli._chat import register as register_chat_command
from clearance.cli._chat import shared_conversation_warning
from clearance.cli._common import err, one_line_errors, out, safe_text
from clearance.cli._events import print_events, select_calls
from clearance.cli._inspect import (
    page_if_terminal,
    print_responses,
    print_run_json,
    prompt_cache_line,
)
from clearance.cli._store import print_tool_calls, store_app
from clearance.cli._view import register as register_view_commands
from clearance.models._base import ChatModel, split_model_id
from clearance.models._llama_cpp import CONTEXT_RANGE
from clearance.models._registry import DEFAULT_MODEL_ID, get_model

__all__ = ["app", "main"]

app = typer.Typer(
    name="clearance",
    help="Run teams of LLM agents on a task graph with need-to-know context.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(store_app, name="store")


DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="CLEARANCE_DB",
        help="Ledger database URL (SQLAlchemy form).",
        show_default=True,
    ),
]
InputOption = Annotated[
    str | None,
    typer.Option(
        "--input",
        help="Folder the team's tasks read files from (or python:<package>); "
        "overrides the team file's input.default.",
    ),
]


class _Progress:
    """Prints one line per task event, with the time since the run started."""

    def __init__(self, console: Console, total: int = 0):
        self._console = console
        self._t0 = time.perf_counter()
        self._started: dict[str, float] = {}
        self.run_id: str | None = None
        self.total = total
        self.done = 0

    def _count(self, now: float) -> str:
        """``done/total`` and, once a task finished, the estimated time left."""
        if not self.total:
            return ""
        elapsed = now - self._t0
        eta = ""
        if 0 < self.done < self.total:
            eta = f", about {elapsed / self.done * (self.total - self.done):.0f}s left"
        return f" [{self.done}/{self.total}{eta}]"

    def __call__(self, event: RunEvent) -> None:
        if event.kind == "run_started":
            self.run_id = event.run_id
        now = time.perf_counter()
        if event.kind in ("task_completed", "task_failed", "task_skipped"):
            self.done += 1
        stamp = f"[{now - self._t0:7.1f}s]"
        task = event.task_id or ""
        if event.kind == "task_started":
            self._started[task] = now
            line = f"{stamp} started    {task}"
        elif event.kind == "task_completed":
            took = now - self._started.get(task, now)
            line = f"{stamp} completed  {task} ({took:.1f}s){self._count(now)}"
        elif event.kind == "task_failed":
            line = f"{stamp} FAILED     {task}: {event.detail}{self._count(now)}"
        elif event.kind == "task_skipped":
            line = f"{stamp} skipped    {task}{self._count(now)}"
        elif event.kind == "synthesis_started":
            line = f"{stamp} synthesis  (coordinator)"
        elif event.kind == "run_started":
            line = f"{stamp} run {event.run_id} started ({event.detail})"
        elif event.kind == "plan_ready":
            line = f"{stamp} plan ready ({event.detail})"
        else:
            line = f"{stamp} run finished: {event.detail}"
        self._console.print(safe_text(line))


def _load(team_file: Path, input_dir: str | None) -> tuple[LoadedTeam, TaskGraph | None]:
    """Load a team file and validate its task graph; graph errors name the file."""
    loaded = load_team_file(team_file, input_dir=input_dir)
    if not loaded.tasks:
        return loaded, None
    _check_files(loaded)
    try:
        return loaded, TaskGraph(loaded.tasks)
    except GraphError as exc:
        raise ConfigError(str(exc), source=str(team_file)) from exc


def _check_files(loaded: LoadedTeam) -> None:
    """Refuse, before anything runs, a task file that is absolute or escapes the input folder.

    Raises:
        ConfigError: A task lists files but there is no input folder.
        PathEscapeError: A listed file is absolute, has a ``..`` part, or resolves (through
            symlinks) outside the input folder.
    """
    root = loaded.input_root.resolve() if loaded.input_root is not None else None
    for task in loaded.tasks:
        for rel in task.files:
            if root is None:
                raise ConfigError(
                    f"task {task.id!r} lists files but there is no input folder "
                    "(input.default or --input)",
                    source=loaded.source,
                )
            confined_path(root, rel)


def _with_model(loaded: LoadedTeam, model: str | None) -> tuple[LoadedTeam, str]:
    """Apply ``--model``: it replaces every agent's model, coordinator included."""
    if model is None:
        return loaded, loaded.spec.model or DEFAULT_MODEL_ID
    team = loaded.team
    agents = tuple(dataclasses.replace(a, model=None) for a in team.agents)
    coordinator = dataclasses.replace(team.coordinator, model=None) if team.coordinator else None
    team = dataclasses.replace(team, agents=agents, coordinator=coordinator)
    return dataclasses.replace(loaded, team=team), model


WINDOWED_PROVIDERS = ("openai", "anthropic")
"""Providers whose context window comes from the team file or ``--context-window``."""

LLAMA_SETTINGS = {
    "threads": "n_threads",
    "threads_batch": "n_threads_batch",
    "batch_size": "n_batch",
}
"""``model_options`` keys that only ``llama-cpp:`` models take, and their `LlamaCppModel` names."""


def _model_options(
    loaded: LoadedTeam, default_id: str, **overrides: int | None
) -> dict[str, dict[str, int]]:
    """The `get_model` settings of the team's models, by model id (only models with settings).

    ``overrides`` (``context_window``, ``threads``, ``threads_batch``, ``batch_size``, from
    the command line) win over the team file's ``model_options``. ``context_window`` goes to
    ``openai:`` and ``anthropic:`` models as ``context_window`` and to ``llama-cpp:`` models as
    ``n_ctx``; the others go to ``llama-cpp:`` models only.

    Raises:
        ConfigError: A ``llama-cpp:`` setting is given but no agent uses a ``llama-cpp:``
            model (it would have no effect), or a ``llama-cpp:`` model's context window is
            outside 128 to 131072 tokens.
    """
    spec = loaded.spec.model_options
    values: dict[str, tuple[int, str]] = {}  # key -> (value, where it was given)
    for key in ("context_window", *LLAMA_SETTINGS):
        override = overrides.get(key)
        if override is not None:
            values[key] = (override, "--" + key.replace("_", "-"))
        elif (configured := getattr(spec, key)) is not None:
            values[key] = (configured, f"model_options.{key}")
    team = loaded.team
    agents = (*team.agents, *((team.coordinator,) if team.coordinator else ()))
    ids = sorted({default_id} | {a.model for a in agents if a.model})
    embedded = [i for i in ids if split_model_id(i)[0] == "llama-cpp"]
    if not embedded:
        for key in LLAMA_SETTINGS:
            if key in values:
                raise ConfigError(
                    "applies to llama-cpp: models only, and no agent uses one",
                    source=loaded.source,
                    field=values[key][1],
                )
    options: dict[str, dict[str, int]] = {}
    window = values.get("context_window")
    for model_id in ids:
        provider = split_model_id(model_id)[0]
        if provider in WINDOWED_PROVIDERS and window is not None:
            options[model_id] = {"context_window": window[0]}
        elif provider == "llama-cpp":
            low, high = CONTEXT_RANGE
            if window is not None and not low <= window[0] <= high:
                raise ConfigError(
                    f"must be {low} to {high} tokens for a llama-cpp: model, got {window[0]}",
                    source=loaded.source,
                    field=window[1],
                )
            settings = {"n_ctx": window[0]} if window is not None else {}
            settings |= {
                LLAMA_SETTINGS[k]: v for k, (v, _) in values.items() if k != "context_window"
            }
            if settings:
                options[model_id] = settings
    return options


def _configured_models(
    options: dict[str, dict[str, int]],
) -> dict[str, ChatModel]:
    """The models that have settings, made with them (weights load lazily).

    Raises:
        ConfigError: A model cannot be made (no API key, a malformed id, a setting out of
            range...).
    """
    return {model_id: get_model(model_id, **settings) for model_id, settings in options.items()}


@app.command()
@one_line_errors
def run(
    team_file: Annotated[Path, typer.Argument(help="Team file (YAML).")],
    goal: Annotated[str | None, typer.Option(help="Goal for planning and synthesis.")] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Model id for every agent, e.g. llama-cpp:smollm2 or openai:gpt-4o-mini."
        ),
    ] = None,
    context_window: Annotated[
        int | None,
        typer.Option(
            "--context-window",
            min=1,
            help="Tokens the models can attend to (overrides the team file's "
            "model_options.context_window): prompts are kept within it; the llama-cpp: model "
            "is loaded with it (128 to 131072).",
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            max=256,
            help="CPU threads of the llama-cpp: model for generation (overrides the team "
            "file's model_options.threads).",
        ),
    ] = None,
    threads_batch: Annotated[
        int | None,
        typer.Option(
            "--threads-batch",
            min=1,
            max=256,
            help="CPU threads of the llama-cpp: model for prompt evaluation (prefill; "
            "overrides model_options.threads_batch).",
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            min=1,
            max=8192,
            help="Prompt tokens the llama-cpp: model evaluates per step (overrides "
            "model_options.batch_size).",
        ),
    ] = None,
    db: DbOption = DEFAULT_LEDGER_URL,
    input_dir: InputOption = None,
    max_concurrency: Annotated[
        int | None, typer.Option(min=1, help="Most tasks running at once.")
    ] = None,
    store_url: Annotated[
        str | None,
        typer.Option("--store", help="Context store URL; overrides the team file's store."),
    ] = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            help="Answer isolated subagents' questions yourself instead of the coordinator.",
        ),
    ] = False,
    memory_url: Annotated[
        str | None,
        typer.Option(
            "--memory",
            help="Memory database URL; overrides the team file's memory (default: memory.db "
            "next to the ledger).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Write the report (Markdown) to this file."),
    ] = None,
    json_output: Annotated[
        Path | None,
        typer.Option("--json", help="Write the machine-readable result (JSON) to this file."),
    ] = None,
) -> None:
    """Run a team: its tasks, or a plan the coordinator makes for --goal; then synthesize."""
    loaded, model_id = _with_model(_load(team_file, input_dir)[0], model)
    model_options = _model_options(
        loaded, model_id, context_window=context_window, threads=threads,
        threads_batch=threads_batch, batch_size=batch_size,
    )  # fmt: skip
    models = _configured_models(model_options)
    goal = goal or loaded.spec.goal
    if (warning := shared_conversation_warning(loaded)) is not None:
        err.print(safe_text(warning), soft_wrap=True)
    if not loaded.tasks and not goal:
        raise ConfigError(
            "the team file has no tasks; give --goal so the coordinator can plan",
            source=str(team_file),
        )
    limit = max_concurrency or loaded.spec.max_concurrency
    if (notice := concurrency_notice(loaded.tasks, limit)) is not None:
        err.print(safe_text(notice), soft_wrap=True)
    bus = MessageBus()
    for message in loaded.spec.messages:
        bus.send(message.sender, message.to, message.content)
    for target in (output, json_output):
        if target is not None and not target.parent.is_dir():
            raise ConfigError(f"folder {str(target.parent)!r} does not exist", field="--output")
    progress = _Progress(out, total=len(loaded.tasks))
    store_url = store_url or loaded.spec.store
    tools = team_tools(loaded)
    memory = run_memory_for(loaded, override=memory_url, ledger_url=db)
    store = ContextStore(store_url) if store_url else None
    with (
        RunLedger(db) as ledger,
        contextlib.closing(store) if store else contextlib.nullcontext(),
        contextlib.closing(memory) if memory else contextlib.nullcontext(),
    ):
        orchestrator = Orchestrator(
            loaded.team,
            model=model_id,
            models=models,
            model_options=model_options,
            ledger=ledger,
            max_concurrency=max_concurrency or loaded.spec.max_concurrency,
            input_root=loaded.input_root,
            messages=bus,
            on_event=progress,
            store=store,
            project_root=loaded.project_root,
            file_caps=loaded.file_caps(),
            clarification_rounds=loaded.spec.isolation.max_rounds,
            workspace_root=loaded.spec.workspace or DEFAULT_WORKSPACE_ROOT,
            ask_person=_ask_at_terminal if interactive else None,
            memory=memory,
            tools=tools,
            synthesis_from=loaded.synthesis_from,
        )
        if loaded.input_root is not None:
            out.print(safe_text(f"input: {loaded.input_root}"))
        out.print(safe_text(f"model: {model_id}"))
        if loaded.tasks:
            work = orchestrator.run_tasks(loaded.tasks, goal=goal)
        else:
            assert goal is not None
            work = orchestrator.run_team(goal)
        result = _run_until_interrupted(work, progress, db)
    _print_result(result)
    if loaded.tasks:
        report = build_report(
            result, loaded.tasks, model_id=model_id, title=f"Code review ({loaded.spec.name})"
        )
        if report.data["modules"]:
            out.print(Markdown(report.markdown))
        if output is not None:
            output.write_text(report.markdown, encoding="utf-8")
            out.print(safe_text(f"report written to {output}"))
        if json_output is not None:
            data = {**report.data, "tasks": _task_data(result)}
            json_output.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", "utf-8")
            out.print(safe_text(f"result written to {json_output}"))
    if result.status != "completed":
        raise typer.Exit(1)


async def _ask_at_terminal(task_id: str, question: str) -> str:
    """Ask the person at the terminal an isolated subagent's question (``--interactive``)."""
    err.print(safe_text(f"the subagent of task {task_id} asks: {question}"), soft_wrap=True)
    return await asyncio.to_thread(input, "your answer> ")


def _task_data(result: RunResult) -> list[dict[str, Any]]:
    """Every task's outcome as JSON-ready data (results as text)."""
    return [
        {
            "task_id": o.task_id,
            "assignee": o.assignee,
            "status": str(o.status),
            "result": o.result,
            "error": o.error,
            "prompt_tokens": o.prompt_tokens,
        }
        for o in result.tasks.values()
    ]


def _run_until_interrupted(
    work: Coroutine[Any, Any, RunResult], progress: _Progress, db: str
) -> RunResult:
    """Run ``work``; on Ctrl-C, say how to resume the run and exit with code 130."""
    try:
        return asyncio.run(work)
    except KeyboardInterrupt:
        if progress.run_id is None:
            err.print(safe_text("interrupted before the run started"))
        else:
            where = "" if db == DEFAULT_LEDGER_URL else f" --db {shlex.quote(db)}"
            err.print(
                safe_text(
                    f"interrupted: run {progress.run_id} is resumable; continue it with: "
                    f"clearance resume {progress.run_id}{where}"
                ),
                soft_wrap=True,
            )
        raise typer.Exit(130) from None


@app.command()
@one_line_errors
def resume(
    run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix).")],
    model: Annotated[
        str | None,
        typer.Option(help="Model id for every agent, instead of the ones the run recorded."),
    ] = None,
    db: DbOption = DEFAULT_LEDGER_URL,
    max_concurrency: Annotated[
        int | None, typer.Option(min=1, help="Most tasks running at once.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Resume even if the run's recorded process looks alive or is on another host.",
        ),
    ] = False,
    store_url: Annotated[
        str | None, typer.Option("--store", help="Context store URL instead of the recorded one.")
    ] = None,
    memory_url: Annotated[
        str | None, typer.Option("--memory", help="Memory URL instead of the recorded one.")
    ] = None,
    team_file: Annotated[
        Path | None,
        typer.Option("--team", help="Team file whose tools: entries provide the run's user tools."),
    ] = None,
) -> None:
    """Resume a stopped run: keep its completed results, run the rest, then synthesize.

    The store, memory, user tools and memory groups are the ones the run recorded.
    """
    progress = _Progress(out)
    tools = team_tools(load_team_file(team_file)) if team_file is not None else {}
    with contextlib.ExitStack() as stack:
        ledger = stack.enter_context(RunLedger(db))
        store = stack.enter_context(ContextStore(store_url)) if store_url else None
        memory = RunMemory(memory_url) if memory_url else None
        orchestrator = Orchestrator.from_run(
            run_id, ledger=ledger, model=model, on_event=progress, store=store, memory=memory,
            tools=tools,
        )  # fmt: skip
        for opened in (orchestrator.store, orchestrator.memory):
            if opened is not None:
                stack.callback(opened.close)
        if model is not None:
            orchestrator.team = _team_with_model_reset(orchestrator.team)
        if max_concurrency is not None:
            orchestrator.max_concurrency = max_concurrency
        result = _run_until_interrupted(orchestrator.resume(run_id, force=force), progress, db)
    _print_result(result)
    if result.status != "completed":
        raise typer.Exit(1)


def _team_with_model_reset(team: Team) -> Team:
    """``team`` with every agent's model (coordinator's too) left to the default model."""
    agents = tuple(dataclasses.replace(a, model=None) for a in team.agents)
    coordinator = dataclasses.replace(team.coordinator, model=None) if team.coordinator else None
    return dataclasses.replace(team, agents=agents, coordinator=coordinator)


def _print_result(result: RunResult) -> None:
    table = Table(title="Tasks", title_justify="left")
    for column in ("task", "agent", "status", "prompt tokens"):
        table.add_column(column, justify="right" if column == "prompt tokens" else "left")
    for outcome in result.tasks.values():
        table.add_row(
            *map(
                safe_text,
                (outcome.task_id, outcome.assignee, outcome.status, outcome.prompt_tokens),
            )
        )
    out.print(table)
    if result.synthesis is not None:
        out.print(Panel(safe_text(result.synthesis), title="Synthesis", title_align="left"))
    if result.error:
        err.print(safe_text(f"run {result.run_id}: {result.error}"))
    usage = result.usage
    out.print(
        safe_text(
            f"run id: {result.run_id}  status: {result.status}  model calls: {usage.requests}  "
            f"prompt tokens: {usage.prompt_tokens}  completion tokens: {usage.completion_tokens}"
        )
    )
    out.print(safe_text(f"see every prompt: clearance inspect {result.run_id}"))


@app.command()
@one_line_errors
def inspect(
    run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix).")],
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="Only this task's calls (its own, isolated, clarification, children's and "
            "delegates'), or one call subject such as child:ID, synthesis or plan.",
        ),
    ] = None,
    show_prompt: Annotated[
        bool, typer.Option("--prompt/--no-prompt", help="Show the full prompt text.")
    ] = True,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the run's records as one JSON document.")
    ] = False,
    response_only: Annotated[
        bool, typer.Option("--response-only", help="Print only the responses.")
    ] = False,
    pager: Annotated[
        bool, typer.Option("--pager/--no-pager", help="Page long output on a terminal.")
    ] = True,
    db: DbOption = DEFAULT_LEDGER_URL,
) -> None:
    """Show what every agent of a run saw: admitted items with origin and tokens, and prompts."""
    if as_json and response_only:
        raise ConfigError("give --json or --response-only, not both", field="--json")
    with RunLedger(db, read_only=True) as ledger:
        record = ledger.get_run(run_id)
        calls = ledger.calls(record.run_id)
        tasks = {t.task_id: t for t in ledger.tasks(record.run_id)}
        tool_calls = ledger.tool_calls(record.run_id)
        events = ledger.events(record.run_id)
    if task is not None:
        calls = select_calls(calls, task, events=events, tool_calls=tool_calls)
        if not calls:
            raise ConfigError(f"run {record.run_id} has no model call for {task!r}", field="--task")
        subjects = {c.subject for c in calls} | {f"task:{task}"}
        events = [e for e in events if e.subject in subjects]
        tool_calls = [t for t in tool_calls if t.subject in subjects]
        tasks = {k: t for k, t in tasks.items() if f"task:{k}" in subjects}
    if as_json:
        print_run_json(
            record, tasks=list(tasks.values()), calls=calls, tool_calls=tool_calls, events=events
        )
    elif response_only:
        print_responses(calls)
    else:
        with page_if_terminal(out, enabled=pager):
            _print_inspect(record, calls, tasks, tool_calls, events, show_prompt=show_prompt)


def _print_inspect(
    record: RunRecord,
    calls: list[CallRecord],
    tasks: dict[str, TaskRecord],
    tool_calls: list[ToolCallRecord],
    events: list[EventRecord],
    *,
    show_prompt: bool,
) -> None:
    out.print(
        safe_text(
            f"run {record.run_id}  team {record.team}  status {record.status}  "
            f"created {record.created_at:%Y-%m-%d %H:%M:%S}Z"
        )
    )
    if record.goal:
        out.print(safe_text(f"goal: {record.goal}"))
    for call in calls:
        task_id = call.subject.partition(":")[2]
        status = tasks[task_id].status if task_id in tasks else ""
        header = f"{call.subject}  agent {call.agent}  model {call.model_id}  {status}".rstrip()
        if call.finish_reason == "length":
            header += "  CUT OFF at the output limit (marked truncated)"
        table = Table(title=safe_text(header), title_justify="left", show_lines=False)
        table.add_column("origin")
        table.add_column("title")
        table.add_column("tokens", justify="right")
        for item in call.manifest.get("items", []):
            table.add_row(*map(safe_text, (item["origin"], item["title"], item["tokens"])))
        table.add_row("", "total prompt", safe_text(call.manifest.get("total_tokens", "")))
        if call.usage.cached_prompt_tokens is not None:
            cached = f"{call.usage.cached_prompt_tokens} of {call.usage.prompt_tokens}"
            table.add_row("", "cached by the server", cached)
        out.print(table)
        if show_prompt:
            for message in call.messages:
                out.print(
                    Panel(
                        safe_text(message["content"]),
                        title=safe_text(message["role"]),
                        title_align="left",
                    )
                )
        if call.pending:
            out.print(safe_text("sent, no outcome recorded (the process stopped during the call)"))
        elif call.error:
            out.print(safe_text(f"error: {call.error}"))
        elif call.response is not None:
            out.print(Panel(safe_text(call.response), title="response", title_align="left"))
    print_tool_calls(out, tool_calls)
    print_events(out, events)
    out.print(safe_text(prompt_cache_line(calls)))


@app.command()
@one_line_errors
def verify(
    run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix).")],
    db: DbOption = DEFAULT_LEDGER_URL,
    memory_url: Annotated[
        str | None,
        typer.Option(
            "--memory",
            help="Memory URL to check memory items against, instead of the one the run recorded.",
        ),
    ] = None,
    store_url: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Store URL to check store items against, instead of the one the run recorded.",
        ),
    ] = None,
) -> None:
    """Check every prompt of a run against its clearance and manifest (exit 1 on a finding).

    Memory and store items are checked against the memory and store the run recorded (or
    --memory / --store); an unreachable one is an error naming it.
    """
    with RunLedger(db, read_only=True) as ledger, contextlib.ExitStack() as stack:
        record = ledger.get_run(run_id)
        memories, entries, closing = verify_lookups(record, memory=memory_url, store=store_url)
        for opened in closing:
            stack.callback(opened.close)
        report = verify_run(ledger, record.run_id, memories=memories, store=entries)
    if report.keyed and not report.macs_checked:
        chain = "keyed hash chain: links not checked (set CLEARANCE_LEDGER_KEY to check them)"
    elif report.keyed:
        chain = "keyed hash chain checked with the ledger key"
    else:
        chain = "unkeyed hash chain checked"
    if report.ok:
        out.print(
            safe_text(
                f"run {report.run_id}: {report.calls_checked} model calls verified: every item "
                "was in its task's clearance and every prompt is exactly its manifest's items; "
                f"{report.entries_checked} records in its {chain}, head {report.chain_head}"
            ),
            soft_wrap=True,
        )
        return
    for finding in report.findings:
        out.print(safe_text(str(finding)), soft_wrap=True)
    out.print(
        safe_text(
            f"run {report.run_id}: {len(report.findings)} problem(s) "
            f"in {report.calls_checked} calls"
        )
    )
    raise typer.Exit(1)


@app.command()
@one_line_errors
def graph(
    team_file: Annotated[Path, typer.Argument(help="Team file (YAML).")],
    input_dir: InputOption = None,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Print each task's estimated prompt tokens against its budget and the "
            "model's context window (exit 1 if one is over).",
        ),
    ] = False,
) -> None:
    """Print a team file's task graph (after validation), in dependency order."""
    loaded, task_graph = _load(team_file, input_dir)
    if task_graph is None:
        out.print(safe_text("no tasks: the coordinator plans them from --goal at run time"))
        return
    if estimate:
        _print_estimate(loaded, task_graph)
        return
    tree = Tree(safe_text(f"{loaded.spec.name}: {len(task_graph)} tasks"))
    for task_id in task_graph.topological_order():
        task = task_graph.get(task_id)
        deps = ", ".join(task.depends_on) or "-"
        node = tree.add(safe_text(f"{task.id}  [{task.assignee}]  {task.title}"))
        node.add(safe_text(f"depends on: {deps}"))
        if task.memory_scope != "dependencies":
            node.add(safe_text(f"memory scope: {task.memory_scope}"))
        if task.files:
            node.add(safe_text(f"files: {', '.join(task.files)}"))
    out.print(tree)


def _print_estimate(loaded: LoadedTeam, task_graph: TaskGraph) -> None:
    """The ``--estimate`` table; exit 1 when a task's estimate is over its budget."""
    default = loaded.spec.model or DEFAULT_MODEL_ID
    models: dict[str, int | None] = {}
    configured = loaded.spec.model_options.context_window

    def window(agent: Agent) -> int | None:
        key = agent.model or default
        if key not in models:
            if configured is not None and split_model_id(key)[0] in (
                *WINDOWED_PROVIDERS,
                "llama-cpp",
            ):
                models[key] = configured
            else:
                models[key] = get_model(key).context_window  # weights load lazily
        return models[key]

    ordered = [task_graph.get(t) for t in task_graph.topological_order()]
    rows = estimate_tasks(ordered, loaded.team, input_root=loaded.input_root,
                          context_window=window)  # fmt: skip
    shape = graph_shape(ordered)
    out.print(
        safe_text(
            f"graph: {len(ordered)} tasks, width {shape.width}, critical path "
            f"{shape.critical_path} tasks, max_concurrency {loaded.spec.max_concurrency}"
        )
    )
    if (notice := concurrency_notice(ordered, loaded.spec.max_concurrency)) is not None:
        out.print(safe_text(notice), soft_wrap=True)
    table = Table(title="Estimated prompt tokens", title_justify="left")
    for column in ("task", "estimate", "budget", "context window", ""):
        table.add_column(column, justify="left" if column in ("task", "") else "right")
    for row in rows:
        if row.prompt_tokens == 0:
            table.add_row(row.task_id, "-", "-", "-", "step (no model)")
            continue
        table.add_row(
            row.task_id, str(row.prompt_tokens), str(row.budget or "?"),
            str(row.context_window or "?"), "OVER BUDGET" if row.over else "ok",
        )  # fmt: skip
    out.print(table)
    if any(r.over for r in rows):
        raise typer.Exit(1)


@app.command()
@one_line_errors
def runs(
    limit: Annotated[int, typer.Option(min=1, help="How many runs.")] = 20,
    db: DbOption = DEFAULT_LEDGER_URL,
) -> None:
    """List recent runs, newest first."""
    with RunLedger(db, read_only=True) as ledger:
        records = ledger.list_runs(limit=limit)
    table = Table()
    # A run id is what people copy from here: never cut or wrapped.
    widest = max((len(r.run_id) for r in records), default=0)
    table.add_column("run id", no_wrap=True, min_width=widest)
    for column in ("team", "status", "created (UTC)", "goal"):
        table.add_column(column)
    for r in records:
        goal = (r.goal or "")[:60]
        created = f"{r.created_at:%Y-%m-%d %H:%M:%S}"
        table.add_row(*map(safe_text, (r.run_id, r.team, r.status, created, goal)))
    out.print(table)


register_view_commands(app)
register_chat_command(app)


def main() -> None:
    """Entry point of the ``clearance`` command."""
    app()
