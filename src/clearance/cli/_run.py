"""The ``run`` and ``resume`` commands: running a team, and finishing a stopped run."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shlex
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from clearance import ConfigError
from clearance.cli._approve import terminal_approver
from clearance.cli._chat import (
    MAX_CONTEXT_WINDOW,
    check_resumable,
    shared_conversation_warning,
)
from clearance.cli._common import (
    check_output_files,
    err,
    one_line_errors,
    out,
    safe_text,
)
from clearance.cli._executor import (
    ExecutorOption,
    RayAddressOption,
    RayEnvOption,
    RayWorkersOption,
    executor_spec,
)
from clearance.cli._options import (
    AnswerTimeoutOption,
    DbOption,
    InputOption,
    check_database_folder,
    check_store_and_memory,
    concurrency_option,
    model_id_option,
    not_empty,
    number_option,
)
from clearance.cli._otel import otlp_tracing
from clearance.cli._progress import RunProgress
from clearance.cli._run_output import exit_for, made_report, print_result, write_report
from clearance.cli._signals import TERMINATED_EXIT_CODE, sigterm_as_interrupt
from clearance.cli._stdin import MAX_LINE_BYTES, LineTooLong, stdin_lines
from clearance.cli._stream import StreamView
from clearance.cli._team_setup import model_error
from clearance.runs import DEFAULT_LEDGER_URL

if TYPE_CHECKING:
    from clearance import RunResult


__all__ = ["resume", "run"]


@one_line_errors
def run(
    team_file: Annotated[Path, typer.Argument(help="Team file (YAML).")],
    goal: Annotated[str | None, typer.Option(help="Goal for planning and synthesis.")] = None,
    model: Annotated[
        str | None,
        typer.Option(
            callback=model_id_option,
            help="Model id for every agent, e.g. llama-cpp:smollm2 or openai:gpt-4o-mini.",
        ),
    ] = None,
    context_window: Annotated[
        int | None,
        typer.Option(
            "--context-window",
            min=1,
            max=MAX_CONTEXT_WINDOW,  # a run's record holds no more (resume refused it)
            help="Tokens the models can attend to (overrides the team file's "
            "model_options.context_window): prompts of openai:, anthropic: and fake: models "
            "are kept within it; the llama-cpp: model is loaded with it (128 to 131072).",
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
        int | None, typer.Option(callback=concurrency_option, help="Most tasks running at once.")
    ] = None,
    store_url: Annotated[
        str | None,
        typer.Option(
            "--store",
            callback=not_empty,
            help="Context store URL; overrides the team file's store.",
        ),
    ] = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            help="Answer isolated subagents' questions yourself instead of the coordinator, "
            "and decide approvals at the terminal instead of pausing the run.",
        ),
    ] = False,
    answer_timeout: AnswerTimeoutOption = None,
    memory_url: Annotated[
        str | None,
        typer.Option(
            "--memory",
            callback=not_empty,
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
    executor_name: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    ray_workers: RayWorkersOption = None,
    ray_env: RayEnvOption = None,
) -> None:
    """Run a team: its tasks, or a plan the coordinator makes for --goal; then synthesize."""
    from clearance import RunLedger, RunServices, RunSpec, run_spec
    from clearance.models import DEFAULT_MODEL_ID
    from clearance.runs import (
        check_interactive,
        checked_run,
        concurrency_notice,
        model_settings,
        report_function,
        spec_tools,
        with_resources,
    )

    spec = RunSpec.from_file(team_file)
    given = {"context_window": context_window, "threads": threads,
             "threads_batch": threads_batch, "batch_size": batch_size}  # fmt: skip
    given = {k: v for k, v in given.items() if v is not None}
    update: dict[str, Any] = {
        "model_options": spec.model_options.model_copy(update=given),
        "executor": executor_spec(spec.executor, executor_name, ray_address, ray_workers, ray_env),
    }
    if input_dir is not None:
        update["input"] = spec.input.model_copy(update={"default": input_dir})
    for key, value in (("goal", goal), ("max_concurrency", max_concurrency), ("store", store_url)):
        if value is not None:
            update[key] = value
    if memory_url is not None:
        update["memory"] = spec.memory_settings.model_copy(update={"url": memory_url})
    spec = spec.model_copy(update=update)
    spec = spec.with_model(model) if model is not None else spec
    try:  # the team file's models decide where a setting has effect: name the file
        model_settings(spec, given_as={k: "--" + k.replace("_", "-") for k in given})
    except ConfigError as exc:
        raise exc.with_source(str(team_file)) from exc
    try:
        spec = with_resources(spec, ledger_url=db)
        loaded, _ = checked_run(spec, source=str(team_file))
    except ConfigError as exc:  # a value the command line gave is named as its option
        flag = {
            "store": ("--store", store_url),
            "memory": ("--memory", memory_url),
            "input": ("--input", input_dir),
            "input.default": ("--input", input_dir),
        }.get(exc.field or "")
        if flag is None or flag[1] is None:
            raise
        raise ConfigError(exc.message, field=flag[0]) from exc
    model_id = spec.model or DEFAULT_MODEL_ID
    if (warning := shared_conversation_warning(loaded)) is not None:
        err.print(safe_text(warning), soft_wrap=True)
    if not loaded.tasks and not spec.goal:
        raise ConfigError(
            "the team file has no tasks; give --goal so the coordinator can plan",
            source=str(team_file),
        )
    if (notice := concurrency_notice(loaded.tasks, spec.max_concurrency)) is not None:
        err.print(safe_text(notice), soft_wrap=True)
    try:
        make_report = report_function(spec.report)
    except ConfigError as exc:
        raise exc.with_source(str(team_file)) from exc
    if sarif_output is not None and spec.report != "step:code_review_report":
        raise ConfigError(
            "--sarif needs a team whose report has findings (report: step:code_review_report)",
            field="--sarif",
        )
    check_output_files({"--output": output, "--json": json_output, "--sarif": sarif_output})
    check_database_folder(db, default=DEFAULT_LEDGER_URL)
    check_store_and_memory(store_url, memory_url)
    try:  # imported and looked up now, so a bad entry is one line naming the file
        tools = spec_tools(spec)
    except ConfigError as exc:
        raise ConfigError(str(exc), source=str(team_file)) from exc
    progress = RunProgress(
        out,
        total=len(loaded.tasks),
        steps=frozenset(t.id for t in loaded.tasks if t.run is not None),
        synthesis=loaded.team.coordinator is not None,
    )
    view = StreamView(out, progress, live=not interactive) if stream else None
    services = RunServices(
        on_event=view or progress,
        ask_person=_ask_at_terminal if interactive else None,
        approver=terminal_approver() if interactive else None,
        answer_timeout_s=_answer_timeout(answer_timeout, interactive),
    )
    check_interactive(spec, interactive)  # after stdin is known to be open
    with otlp_tracing(), RunLedger(db) as ledger:
        if loaded.input_root is not None:
            out.print(safe_text(f"input: {loaded.input_root}"))
        out.print(safe_text(f"model: {model_id}"))
        work = run_spec(loaded, ledger=ledger, services=services, tools=tools, stream_text=stream)
        with view.showing() if view else contextlib.nullcontext():
            try:
                result = _run_until_interrupted(
                    work, progress, db, heartbeat=not (stream or interactive)
                )
            except ConfigError as exc:  # refused before the run started: say where from
                if progress.run_id is not None:
                    raise
                raise model_error(exc, team_file, model_option=model is not None) from exc
    print_result(result)
    report = made_report(
        lambda: make_report(result, loaded.tasks, model_id=model_id, team_name=spec.name),
        result,
    )
    write_report(
        report,
        result,
        shown=spec.report is not None,
        output=output,
        json_output=json_output,
        sarif_output=sarif_output,
    )
    exit_for(result)
    if report is None:
        raise typer.Exit(1)


def _answer_timeout(seconds: float | None, interactive: bool) -> float:
    """`RunServices`' ``answer_timeout_s``: ``--answer-timeout``, or `ANSWER_TIMEOUT_S`.

    Raises:
        ConfigError: ``--answer-timeout`` without ``--interactive`` (nobody is asked), or
            ``--interactive`` with stdin closed (no answer could ever be read).
    """
    from clearance.runs import ANSWER_TIMEOUT_S

    if interactive and sys.stdin is None:
        raise ConfigError("stdin is closed: the answers are read from it", field="--interactive")
    if seconds is None:
        return ANSWER_TIMEOUT_S
    if not interactive:
        raise ConfigError("only applies with --interactive", field="--answer-timeout")
    return seconds


async def _ask_at_terminal(task_id: str, question: str) -> str:
    """Ask the person at the terminal an isolated subagent's question (``--interactive``).

    ``""`` (no answer) at end of input or for a line over `MAX_LINE_BYTES`; the run gives
    up on the question at its ``answer_timeout_s`` (``--answer-timeout``), and a line typed
    after that answers the next question (`stdin_lines`).
    """
    err.print(safe_text(f"the subagent of task {task_id} asks: {question}"), soft_wrap=True)
    err.print("your answer> ", end="")
    try:
        line = await stdin_lines().readline()
    except LineTooLong as exc:
        err.print(safe_text(f"the answer was {exc.size:,} bytes, over the {MAX_LINE_BYTES:,} "
                            "an answer may hold: no answer was given"))  # fmt: skip
        return ""
    except OSError as exc:  # stdin cannot be read (opened write-only): as at end of input
        err.print(safe_text(f"cannot read stdin ({exc.strerror or exc}): no answer was given"))
        return ""
    except asyncio.CancelledError:
        err.print()
        err.print(f"no answer in time: the subagent of task {task_id} goes on without one")
        raise
    if not line:
        err.print()
    return line.decode("utf-8", "replace")


def _run_until_interrupted(
    work: Coroutine[Any, Any, RunResult], progress: RunProgress, db: str, *, heartbeat: bool
) -> RunResult:
    """Run ``work``; on Ctrl-C, say how to resume the run and exit with code 130.

    With ``heartbeat``, a quiet run says what it is working on every `HEARTBEAT_S`
    (`RunProgress.while_running`); not while the model's text streams, nor when a person may
    be answering a question at the terminal.

    SIGTERM stops it the same way (`sigterm_as_interrupt`), with exit code 143.

    While it runs, the objects made before it (the modules, the team, the loaded run) are
    out of the garbage collector's sight (`gc.freeze`, undone after, also on Ctrl-C or an
    error): most of them live as long as the command, and each of CPython's full collections
    would walk them again, the more often the more tasks a run holds in flight (about 14% of
    a 4,000-task run on the fake model; ``python -m bench.cli_scale``). Garbage among them
    is collected after the run.
    """
    gc.freeze()
    try:
        with sigterm_as_interrupt() as termination:
            return asyncio.run(progress.while_running(work) if heartbeat else work)
    except KeyboardInterrupt:
        how = "terminated" if termination.received else "interrupted"
        if progress.run_id is None:
            err.print(safe_text(f"{how} before the run started"))
        else:
            where = "" if db == DEFAULT_LEDGER_URL else f" --db {shlex.quote(db)}"
            err.print(
                safe_text(
                    f"{how}: run {progress.run_id} is resumable; continue it with: "
                    f"clearance resume {progress.run_id}{where}"
                ),
                soft_wrap=True,
            )
        raise typer.Exit(TERMINATED_EXIT_CODE if termination.received else 130) from None
    finally:
        gc.unfreeze()


@one_line_errors
def resume(
    run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix).")],
    model: Annotated[
        str | None,
        typer.Option(
            callback=model_id_option,
            help="Model id for every agent, instead of the ones the run recorded.",
        ),
    ] = None,
    db: DbOption = DEFAULT_LEDGER_URL,
    max_concurrency: Annotated[
        int | None, typer.Option(callback=concurrency_option, help="Most tasks running at once.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Resume even if the run's recorded process looks alive or is on another host.",
        ),
    ] = False,
    store_url: Annotated[
        str | None,
        typer.Option(
            "--store", callback=not_empty, help="Context store URL instead of the recorded one."
        ),
    ] = None,
    memory_url: Annotated[
        str | None,
        typer.Option(
            "--memory", callback=not_empty, help="Memory URL instead of the recorded one."
        ),
    ] = None,
    team_file: Annotated[
        Path | None,
        typer.Option(
            "--team",
            help="Team file providing the run's user tools and python: steps; it must "
            "declare the run as recorded (an edited agent or task is refused).",
        ),
    ] = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            help="Answer isolated subagents' new questions yourself (a question you already "
            "answered gets your recorded answer) and decide approvals at the terminal.",
        ),
    ] = False,
    answer_timeout: AnswerTimeoutOption = None,
    executor_name: ExecutorOption = None,
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
            callback=number_option(0),
            help="The run's cost budget (US dollars) instead of the recorded one.",
        ),
    ] = None,
) -> None:
    """Resume a stopped run: keep its completed results, run the rest, then synthesize.

    The run's recorded spec defines it (team, models, settings, store, memory, tools); the
    options here change it. The run's records are checked against its hash chain first (with
    CLEARANCE_LEDGER_KEY for a keyed run); python: steps come only from the team file given
    with --team, whose tools: entries provide the run's user tools.
    """
    from clearance import RunLedger, RunServices, load_team_file, recorded_run_spec, resume_run
    from clearance.runs import check_interactive, spec_tools

    check_store_and_memory(store_url, memory_url)
    progress = RunProgress(out)
    loaded = load_team_file(team_file, resuming=True) if team_file is not None else None
    tools = None
    if loaded is not None:
        try:
            tools = spec_tools(loaded.spec)
        except ConfigError as exc:
            raise ConfigError(str(exc), source=loaded.source) from exc
    with otlp_tracing(), RunLedger(db, create=False) as ledger:
        check_resumable(ledger, run_id)
        spec = recorded_run_spec(ledger, run_id)
        update: dict[str, Any] = {
            "executor": executor_spec(
                spec.executor, executor_name, ray_address, ray_workers, ray_env
            )
        }
        if max_concurrency is not None:
            update["max_concurrency"] = max_concurrency
        if budget_cost_usd is not None and not spec.prices:
            raise ConfigError("the run has no prices to count a cost in", field="--budget-cost-usd")
        if store_url is not None:
            update["store"] = store_url
        if memory_url is not None:
            update["memory"] = spec.memory_settings.model_copy(update={"url": memory_url})
        spec = spec.model_copy(update=update)
        spec = spec.with_budget(tokens=budget_tokens, cost_usd=budget_cost_usd)
        spec = spec.with_model(model) if model is not None else spec
        services = RunServices(
            on_event=progress,
            ask_person=_ask_at_terminal if interactive else None,
            approver=terminal_approver() if interactive else None,
            answer_timeout_s=_answer_timeout(answer_timeout, interactive),
        )
        check_interactive(spec, interactive)
        declared = loaded.tasks if loaded is not None else ()
        work = resume_run(run_id, ledger=ledger, spec=spec, tools=tools, services=services,
                          force=force, tasks=declared,
                          team=loaded.spec if loaded is not None else None)  # fmt: skip
        result = _run_until_interrupted(work, progress, db, heartbeat=not interactive)
    print_result(result)
    exit_for(result)
