"""The ``run`` and ``resume`` commands: running a team, and finishing a stopped run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table

from clearance._core.budget import RunBudget
from clearance._core.errors import ConfigError
from clearance._core.teamfile import load_team_file
from clearance._orchestration.orchestrator import DEFAULT_WORKSPACE_ROOT, Orchestrator
from clearance._orchestration.result import RunResult
from clearance._orchestration.run_memory import RunMemory
from clearance._reports import Report, report_function
from clearance._state.graph_shape import concurrency_notice
from clearance._state.ledger import DEFAULT_LEDGER_URL, RunLedger
from clearance._state.messages import MessageBus
from clearance._state.store import ContextStore
from clearance.cli._approve import EXIT_AWAITING_APPROVAL, terminal_approver
from clearance.cli._backends import run_memory_for, team_tools
from clearance.cli._chat import shared_conversation_warning
from clearance.cli._common import err, one_line_errors, out, safe_text
from clearance.cli._executor import (
    ExecutorName,
    ExecutorOption,
    RayAddressOption,
    RayEnvOption,
    RayWorkersOption,
    executor,
)
from clearance.cli._options import DbOption, InputOption
from clearance.cli._otel import otlp_tracing
from clearance.cli._plan import plan_hooks
from clearance.cli._progress import RunProgress
from clearance.cli._stream import StreamView
from clearance.cli._team_setup import (
    configured_models,
    load_checked,
    team_model_options,
    team_with_model_reset,
    with_model,
)

__all__ = ["raised_budget", "resume", "run"]


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
            help="Answer isolated subagents' questions yourself instead of the coordinator, "
            "and decide approvals at the terminal instead of pausing the run.",
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
    sarif_output: Annotated[
        Path | None,
        typer.Option(
            "--sarif",
            help="Write the report's findings as SARIF 2.1.0 (for CI code scanning) to this "
            "file; for a team whose report has findings (report: step:code_review_report).",
        ),
    ] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="Show the running tasks' text as it is generated.")
    ] = False,
    executor_name: ExecutorOption = ExecutorName.local,
    ray_address: RayAddressOption = None,
    ray_workers: RayWorkersOption = None,
    ray_env: RayEnvOption = None,
) -> None:
    """Run a team: its tasks, or a plan the coordinator makes for --goal; then synthesize."""
    loaded, model_id = with_model(load_checked(team_file, input_dir)[0], model)
    model_options = team_model_options(
        loaded, model_id, context_window=context_window, threads=threads,
        threads_batch=threads_batch, batch_size=batch_size,
    )  # fmt: skip
    models = configured_models(model_options)
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
    make_report = report_function(loaded.spec.report)
    if sarif_output is not None and loaded.spec.report != "step:code_review_report":
        raise ConfigError(
            "--sarif needs a team whose report has findings (report: step:code_review_report)",
            field="--sarif",
        )
    for flag, target in (("--output", output), ("--json", json_output), ("--sarif", sarif_output)):
        if target is not None and not target.parent.is_dir():
            raise ConfigError(f"folder {str(target.parent)!r} does not exist", field=flag)
    progress = RunProgress(
        out,
        total=len(loaded.tasks),
        steps=frozenset(t.id for t in loaded.tasks if t.run is not None),
        synthesis=loaded.team.coordinator is not None,
    )
    view = StreamView(out, progress, live=not interactive) if stream else None
    store_url = store_url or loaded.spec.store
    tools = team_tools(loaded)
    memory = run_memory_for(loaded, override=memory_url, ledger_url=db)
    store = ContextStore(store_url) if store_url else None
    with (
        otlp_tracing(),
        RunLedger(db) as ledger,
        contextlib.closing(store) if store else contextlib.nullcontext(),
        contextlib.closing(memory) if memory else contextlib.nullcontext(),
        executor(executor_name, address=ray_address, workers=ray_workers, env=ray_env) as remote,
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
            on_event=view or progress,
            stream_text=stream,
            store=store,
            project_root=loaded.project_root,
            file_caps=loaded.file_caps(),
            clarification_rounds=loaded.spec.isolation.max_rounds,
            workspace_root=loaded.spec.workspace or DEFAULT_WORKSPACE_ROOT,
            ask_person=_ask_at_terminal if interactive else None,
            memory=memory,
            tools=tools,
            synthesis_from=loaded.synthesis_from,
            executor=remote,
            approval_tools=loaded.spec.approval_tools,
            approver=terminal_approver() if interactive else None,
            budget=loaded.spec.run_budget(),
            hooks=plan_hooks(loaded, ledger),
        )
        if loaded.input_root is not None:
            out.print(safe_text(f"input: {loaded.input_root}"))
        out.print(safe_text(f"model: {model_id}"))
        if loaded.tasks:
            work = orchestrator.run_tasks(loaded.tasks, goal=goal)
        else:
            assert goal is not None
            work = orchestrator.run_team(goal)
        with view.showing() if view else contextlib.nullcontext():
            result = _run_until_interrupted(work, progress, db)
    _print_result(result)
    _write_report(
        make_report(result, loaded.tasks, model_id=model_id, team_name=loaded.spec.name),
        result,
        shown=loaded.spec.report is not None,
        output=output,
        json_output=json_output,
        sarif_output=sarif_output,
    )
    _exit_for(result)


def _write_report(
    report: Report,
    result: RunResult,
    *,
    shown: bool,
    output: Path | None,
    json_output: Path | None,
    sarif_output: Path | None,
) -> None:
    """Print a named report, and write the files asked for."""
    if shown:
        out.print(Markdown(report.markdown))
    if output is not None:
        output.write_text(report.markdown, encoding="utf-8")
        out.print(safe_text(f"report written to {output}"))
    if json_output is not None:
        data = {**report.data, "tasks": _task_data(result)}
        json_output.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", "utf-8")
        out.print(safe_text(f"result written to {json_output}"))
    if sarif_output is not None and report.sarif is not None:
        text = json.dumps(report.sarif, indent=2, ensure_ascii=False) + "\n"
        sarif_output.write_text(text, "utf-8")
        out.print(safe_text(f"SARIF written to {sarif_output}"))


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
    work: Coroutine[Any, Any, RunResult], progress: RunProgress, db: str
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
        typer.Option("--team", help="Team file providing the run's user tools and python: steps."),
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive", help="Decide approvals at the terminal.")
    ] = False,
    executor_name: ExecutorOption = ExecutorName.local,
    ray_address: RayAddressOption = None,
    ray_workers: RayWorkersOption = None,
    ray_env: RayEnvOption = None,
    budget_tokens: Annotated[
        int | None,
        typer.Option(
            "--budget-tokens",
            min=1,
            help="The run's token budget instead of the recorded one (raise it to "
            "finish a run stopped by its budget).",
        ),
    ] = None,
    budget_cost_usd: Annotated[
        float | None,
        typer.Option(
            "--budget-cost-usd",
            min=0,
            help="The run's cost budget (US dollars) instead of the recorded one.",
        ),
    ] = None,
) -> None:
    """Resume a stopped run: keep its completed results, run the rest, then synthesize.

    The store, memory, user tools and memory groups are the ones the run recorded. The run's
    records are checked against its hash chain first (with CLEARANCE_LEDGER_KEY for a keyed
    run); python: steps come only from the team file given with --team.
    """
    progress = RunProgress(out)
    loaded = load_team_file(team_file) if team_file is not None else None
    tools = team_tools(loaded) if loaded is not None else {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(otlp_tracing())
        ledger = stack.enter_context(RunLedger(db))
        store = stack.enter_context(ContextStore(store_url)) if store_url else None
        memory = RunMemory(memory_url) if memory_url else None
        model_executor = stack.enter_context(
            executor(executor_name, address=ray_address, workers=ray_workers, env=ray_env)
        )
        orchestrator = Orchestrator.from_run(
            run_id, ledger=ledger, model=model, on_event=progress, store=store, memory=memory,
            tools=tools, executor=model_executor,
            approver=terminal_approver() if interactive else None,
        )  # fmt: skip
        for opened in (orchestrator.store, orchestrator.memory):
            if opened is not None:
                stack.callback(opened.close)
        if model is not None:
            orchestrator.team = team_with_model_reset(orchestrator.team)
        if max_concurrency is not None:
            orchestrator.max_concurrency = max_concurrency
        orchestrator.budget = raised_budget(orchestrator.budget, budget_tokens, budget_cost_usd)
        declared = loaded.tasks if loaded is not None else ()
        work = orchestrator.resume(run_id, force=force, tasks=declared)
        result = _run_until_interrupted(work, progress, db)
    _print_result(result)
    _exit_for(result)


def raised_budget(
    budget: RunBudget | None, tokens: int | None, cost_usd: float | None
) -> RunBudget | None:
    """A resumed run's budget: the recorded one with ``--budget-*`` replacing its caps.

    Raises:
        ConfigError: ``--budget-cost-usd`` for a run recorded without prices.
    """
    if tokens is None and cost_usd is None:
        return budget
    if budget is None:
        if cost_usd is not None:
            raise ConfigError("the run has no prices to count a cost in", field="--budget-cost-usd")
        return RunBudget(tokens=tokens)
    return budget.raised(tokens=tokens, cost_usd=cost_usd)


def _exit_for(result: RunResult) -> None:
    """Exit 1 for a failed run, `EXIT_AWAITING_APPROVAL` for one paused for approval."""
    if result.status == "awaiting_approval":
        raise typer.Exit(EXIT_AWAITING_APPROVAL)
    if result.status != "completed":
        raise typer.Exit(1)


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
        err.print(safe_text(f"run {result.run_id}: {result.error}"), soft_wrap=True)
    usage = result.usage
    out.print(
        safe_text(
            f"run id: {result.run_id}  status: {result.status}  model calls: {usage.requests}  "
            f"prompt tokens: {usage.prompt_tokens}  completion tokens: {usage.completion_tokens}"
        )
    )
    out.print(safe_text(f"see every prompt: clearance inspect {result.run_id}"))
