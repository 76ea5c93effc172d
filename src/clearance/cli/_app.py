"""The ``clearance`` command: run, resume, inspect, verify, graph, runs (view, serve, store)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shlex
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.tree import Tree

from clearance._agents.files import confined_path
from clearance._context.verify import verify_run
from clearance._core.errors import ConfigError, GraphError
from clearance._core.spec import Team
from clearance._core.teamfile import LoadedTeam, load_team_file
from clearance._orchestration.orchestrator import DEFAULT_WORKSPACE_ROOT, Orchestrator
from clearance._orchestration.result import RunEvent, RunResult
from clearance._state.graph import TaskGraph
from clearance._state.ledger import (
    DEFAULT_LEDGER_URL,
    CallRecord,
    RunLedger,
    RunRecord,
    TaskRecord,
    ToolCallRecord,
)
from clearance._state.messages import MessageBus
from clearance._state.store import ContextStore
from clearance.cli._common import err, one_line_errors, out, safe_text
from clearance.cli._inspect import page_if_terminal, print_responses, print_run_json, select_calls
from clearance.cli._store import print_tool_calls, store_app
from clearance.cli._view import register as register_view_commands
from clearance.models._registry import DEFAULT_MODEL_ID

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

    def __init__(self, console: Console):
        self._console = console
        self._t0 = time.perf_counter()
        self._started: dict[str, float] = {}
        self.run_id: str | None = None

    def __call__(self, event: RunEvent) -> None:
        if event.kind == "run_started":
            self.run_id = event.run_id
        now = time.perf_counter()
        stamp = f"[{now - self._t0:7.1f}s]"
        task = event.task_id or ""
        if event.kind == "task_started":
            self._started[task] = now
            line = f"{stamp} started    {task}"
        elif event.kind == "task_completed":
            took = now - self._started.get(task, now)
            line = f"{stamp} completed  {task} ({took:.1f}s)"
        elif event.kind == "task_failed":
            line = f"{stamp} FAILED     {task}: {event.detail}"
        elif event.kind == "task_skipped":
            line = f"{stamp} skipped    {task}"
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
) -> None:
    """Run a team: its tasks, or a plan the coordinator makes for --goal; then synthesize."""
    loaded, model_id = _with_model(_load(team_file, input_dir)[0], model)
    goal = goal or loaded.spec.goal
    if not loaded.tasks and not goal:
        raise ConfigError(
            "the team file has no tasks; give --goal so the coordinator can plan",
            source=str(team_file),
        )
    bus = MessageBus()
    for message in loaded.spec.messages:
        bus.send(message.sender, message.to, message.content)
    progress = _Progress(out)
    store_url = store_url or loaded.spec.store
    store = ContextStore(store_url) if store_url else None
    with RunLedger(db) as ledger, contextlib.closing(store) if store else contextlib.nullcontext():
        orchestrator = Orchestrator(
            loaded.team,
            model=model_id,
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
    if result.status != "completed":
        raise typer.Exit(1)


async def _ask_at_terminal(task_id: str, question: str) -> str:
    """Ask the person at the terminal an isolated subagent's question (``--interactive``)."""
    err.print(safe_text(f"the subagent of task {task_id} asks: {question}"), soft_wrap=True)
    return await asyncio.to_thread(input, "your answer> ")


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
) -> None:
    """Resume a stopped run: keep its completed results, run the rest, then synthesize."""
    progress = _Progress(out)
    with RunLedger(db) as ledger:
        orchestrator = Orchestrator.from_run(run_id, ledger=ledger, model=model, on_event=progress)
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
        str | None, typer.Option("--task", help="Only this task (or 'synthesis', 'plan').")
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
    with RunLedger(db) as ledger:
        record = ledger.get_run(run_id)
        calls = ledger.calls(record.run_id)
        tasks = {t.task_id: t for t in ledger.tasks(record.run_id)}
        tool_calls = ledger.tool_calls(record.run_id)
        events = ledger.events(record.run_id) if as_json else []
    calls = select_calls(record.run_id, calls, task)
    if as_json:
        subjects = {c.subject for c in calls}
        print_run_json(
            record,
            tasks=[t for t in tasks.values() if task is None or f"task:{t.task_id}" in subjects],
            calls=calls,
            tool_calls=[t for t in tool_calls if task is None or t.subject in subjects],
            events=[e for e in events if task is None or e.subject in subjects],
        )
    elif response_only:
        print_responses(calls)
    else:
        with page_if_terminal(out, enabled=pager):
            _print_inspect(record, calls, tasks, tool_calls, show_prompt=show_prompt)


def _print_inspect(
    record: RunRecord,
    calls: list[CallRecord],
    tasks: dict[str, TaskRecord],
    tool_calls: list[ToolCallRecord],
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
        task_id = call.subject.removeprefix("task:")
        status = tasks[task_id].status if task_id in tasks else ""
        header = f"{call.subject}  agent {call.agent}  model {call.model_id}  {status}".rstrip()
        table = Table(title=safe_text(header), title_justify="left", show_lines=False)
        table.add_column("origin")
        table.add_column("title")
        table.add_column("tokens", justify="right")
        for item in call.manifest.get("items", []):
            table.add_row(*map(safe_text, (item["origin"], item["title"], item["tokens"])))
        table.add_row("", "total prompt", safe_text(call.manifest.get("total_tokens", "")))
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
        if call.error:
            out.print(safe_text(f"error: {call.error}"))
        elif call.response is not None:
            out.print(Panel(safe_text(call.response), title="response", title_align="left"))
    print_tool_calls(out, tool_calls)


@app.command()
@one_line_errors
def verify(
    run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix).")],
    db: DbOption = DEFAULT_LEDGER_URL,
) -> None:
    """Check every prompt of a run against its clearance and manifest (exit 1 on a finding)."""
    with RunLedger(db) as ledger:
        report = verify_run(ledger, run_id)
    if report.ok:
        out.print(
            safe_text(
                f"run {report.run_id}: {report.calls_checked} model calls verified: every item "
                "was in its task's clearance and every prompt is exactly its manifest's items"
            )
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
) -> None:
    """Print a team file's task graph (after validation), in dependency order."""
    loaded, task_graph = _load(team_file, input_dir)
    if task_graph is None:
        out.print(safe_text("no tasks: the coordinator plans them from --goal at run time"))
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


@app.command()
@one_line_errors
def runs(
    limit: Annotated[int, typer.Option(min=1, help="How many runs.")] = 20,
    db: DbOption = DEFAULT_LEDGER_URL,
) -> None:
    """List recent runs, newest first."""
    with RunLedger(db) as ledger:
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


def main() -> None:
    """Entry point of the ``clearance`` command."""
    app()
