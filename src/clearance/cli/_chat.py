"""``clearance chat``: a conversation at the terminal with one agent of a team file.

The agent keeps its private long-term memory in the team's memory database (the same one,
at the same default place, as ``clearance run``): turns that compression drops from the
conversation are recorded there, and the records most relevant to each message are recalled
into the prompt, in this session and later ones. A member of a memory group that declares
``shared_conversation`` takes part in that group's shared conversation. The session is one
run in the ledger (team ``chat:<agent>``) that ``clearance verify`` checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from rich.text import Text

from clearance import BudgetExceeded, ClearanceError, ConfigError, LimitExceeded
from clearance.cli._common import err, one_line_errors, out, safe, safe_line
from clearance.cli._options import check_database_folder, model_id_option, not_empty
from clearance.cli._signals import TERMINATED_EXIT_CODE, sigterm_as_interrupt
from clearance.cli._stdin import MAX_LINE_BYTES, LineTooLong, stdin_lines
from clearance.runs import DEFAULT_LEDGER_URL

if TYPE_CHECKING:
    from clearance import Agent, AgentChat, LoadedTeam, RunBudget, RunLedger
    from clearance.memory import Strategy


__all__ = [
    "check_resumable",
    "register",
    "shared_conversation_warning",
]

QUIT = "/quit"
"""A line that ends the conversation (as end of input does)."""

MAX_CONTEXT_WINDOW = 10_000_000
"""Largest ``--context-window`` accepted, in tokens."""


def shared_conversation_warning(loaded: LoadedTeam) -> str | None:
    """The warning ``clearance run`` prints for ``shared_conversation`` (it has no effect there).

    A run builds each task's prompt from its clearance, not from a conversation, so a group's
    shared conversation is used only by ``clearance chat``.

    Returns:
        One line naming the groups, or ``None`` when no group declares one.
    """
    names = [g.name for g in loaded.team.memory_groups if g.shared_conversation is not None]
    if not names:
        return None
    fields = ", ".join(f"memory_groups.{name}.shared_conversation" for name in names)
    return (
        f"warning: {loaded.source}: {fields} has no effect in clearance run "
        "(task prompts are built per task); it is used by clearance chat"
    )


def check_resumable(ledger: RunLedger, run_id: str) -> None:
    """Refuse to resume a chat session's run (``clearance resume``): it has no tasks to run.

    A chat run is recorded by `AgentChat` (team ``chat:<agent>``, its memory groups as a
    mapping of members), not from a run spec.

    Raises:
        StoreError: No run (or several) match ``run_id``.
        ConfigError: The run is a chat session.
    """
    record = ledger.get_run(run_id)
    if record.team.startswith("chat:") and isinstance(record.config.get("memory_groups"), dict):
        raise ConfigError(f"run {record.run_id} is a chat session; it cannot be resumed")


def _agent(loaded: LoadedTeam, name: str) -> Agent:
    """The team file's agent (or coordinator) called ``name``.

    Raises:
        ConfigError: No agent has that name (the message lists the names there are), it
            declares tools a chat turn would not run (`check_chat_agent`), or it is named
            ``user`` (`check_chat_name`).
    """
    from clearance.runs import check_chat_agent, check_chat_name

    team = loaded.team
    agents: list[Agent] = [*team.agents, *([team.coordinator] if team.coordinator else [])]
    for agent in agents:
        if agent.name == name:
            check_chat_agent(agent)  # what a chat turn cannot apply is refused
            check_chat_name(agent, field="--agent")  # nor its turns read as the user's
            return agent
    names = ", ".join(a.name for a in agents)
    raise ConfigError(f"no agent {name!r} in {loaded.source} (agents: {names})", field="--agent")


def _model_options(loaded: LoadedTeam, model: str | None, model_id: str) -> dict[str, int]:
    """The team file's ``model_options`` for the chat's model, as ``clearance run`` gives them.

    Args:
        loaded: The team file.
        model: ``--model``, which replaces every agent's model as in ``clearance run``.
        model_id: The chat's model.

    Raises:
        ConfigError: As `model_settings` (a setting no model of the team, or of ``--model``,
            takes), naming the file.
    """
    from clearance.runs import model_settings

    spec = loaded.spec.with_model(model) if model is not None else loaded.spec
    try:
        return model_settings(spec).get(model_id, {})
    except ConfigError as exc:
        raise exc.with_source(loaded.source) from exc


def _run_settings(loaded: LoadedTeam, model_id: str) -> RunBudget | None:
    """The team file's budget for the chat, once the run settings chat cannot apply are refused.

    A chat session is one run: ``budget:`` (with ``prices:``) bounds its calls as a run's.
    Its calls are made in this process, so an ``executor`` other than the local one would
    have no effect. A failure of the memory fails the turn (its recall, the shared
    conversation and the records of dropped turns have no way on without the memory), so
    ``memory.on_error: continue`` would have none either.

    Raises:
        ConfigError: The file gives ``executor: {kind: ray}``, ``memory.on_error:
            continue``, or a cost budget without a price for the chat's model, naming the
            file.
    """
    from clearance.runs import ExecutorKind

    spec = loaded.spec
    try:
        if spec.executor.kind is not ExecutorKind.LOCAL:
            raise ConfigError(
                "has no effect in clearance chat: a chat turn calls its model in this process "
                "(remove executor, or run the team file)",
                field="executor",
            )
        if spec.memory_settings.on_error == "continue":
            raise ConfigError(
                "continue has no effect in clearance chat: a failure of the memory ends the "
                "session (remove on_error, or run the team file)",
                field="memory.on_error",
            )
        budget = spec.run_budget()
        if budget is not None:
            budget.check_prices({model_id})
    except ConfigError as exc:
        raise exc.with_source(loaded.source) from exc
    return budget


def _strategy(value: str) -> Strategy:
    """``--strategy`` checked against the monitor's strategies."""
    from clearance.memory import Strategy

    allowed: tuple[Strategy, ...] = get_args(Strategy)
    for strategy in allowed:
        if value == strategy:
            return strategy
    raise ConfigError(f"must be {' or '.join(allowed)}, got {value!r}", field="--strategy")


def _window(agent: Agent, model_id: str, model_window: int | None, given: int | None) -> int:
    """The context window of the conversation, in tokens.

    Raises:
        ConfigError: It is unknown, or leaves no room for a prompt next to the agent's
            ``max_output_tokens``.
    """
    window = given or model_window
    if window is None:
        raise ConfigError(
            f"the context window of {model_id} is unknown; give --context-window N",
            field="--context-window",
        )
    from clearance.runs import check_room_for_prompt  # with the session

    check_room_for_prompt(agent, window, field="--context-window")
    return window


async def _converse(session: AgentChat) -> int:
    """Read lines from stdin until end of input or ``/quit``; print each answer.

    Returns:
        How many messages were answered.

    Raises:
        ClearanceError: A turn failed (the model, the prompt budget, the memory), or stdin
            could not be read (opened write-only, say).
    """
    answered = 0
    lines = stdin_lines()
    prompting = sys.stdin.isatty()
    while True:
        if prompting:
            err.print("you> ", end="")
        try:
            line = await lines.readline()
        except OSError as exc:  # not a file to read lines from: one line, not a traceback
            raise ConfigError(f"cannot read stdin: {exc.strerror or exc}") from None
        except LineTooLong as exc:  # read to its end and dropped; the conversation goes on
            err.print(
                safe_line(
                    f"error: the line is {exc.size:,} bytes, over the {MAX_LINE_BYTES:,} a "
                    "message may hold; the message was not sent"
                ),
                soft_wrap=True,
            )
            continue
        if not line:
            return answered
        try:
            text = line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:  # a lone surrogate could be sent nowhere
            where = f"byte 0x{line[exc.start]:02x} at position {exc.start}"
            err.print(
                safe_line(
                    f"error: the line is not valid UTF-8 ({where}); the message was not sent"
                ),
                soft_wrap=True,
            )
            continue
        if text.strip() == QUIT:
            return answered
        if not text.strip():
            continue
        try:  # a message that can never fit is refused; the conversation goes on
            session.check_message(text)
        except LimitExceeded as exc:
            err.print(safe_line(f"error: {exc}; the message was not sent"), soft_wrap=True)
            continue
        try:
            answer = await session.say(text)
        except ClearanceError:
            if session.last_answer is not None:  # answered, then compressing failed
                _print_answer(session.last_answer)
            raise
        _print_answer(answer)
        answered += 1


_SEPARATORS = str.maketrans({"\u2028": "\n", "\u2029": "\n"})
"""The line and paragraph separators, as the line breaks of a chat answer they are."""


def _print_answer(answer: str) -> None:
    """Print the agent's answer: one line as it is, several each behind a ``│`` gutter.

    The answer is model output. A line of its own could pose as one of the session's lines
    (``error: ...``, ``chat run ...``): a one-line answer stands where answers stand, alone
    on its line, as a script reading stdout takes it; every line of a longer one starts with
    the gutter, a line break being a newline or a line or paragraph separator (U+2028,
    U+2029), as an editor breaks the line there. Control characters (NEL, a bare CR too) and
    bidirectional overrides are shown escaped (`safe`).
    """
    lines = safe(answer.translate(_SEPARATORS)).splitlines()
    if len(lines) > 1:
        lines = [f"│ {line}" if line else "│" for line in lines]
    out.print(Text("\n".join(lines)), soft_wrap=True)


def _session_line(session: AgentChat, db: str) -> str:
    where = "" if db == DEFAULT_LEDGER_URL else f" --db {shlex.quote(db)}"
    calls = session.caller.usage.requests
    return (
        f"chat run {session.run_id}: {calls} model calls, {len(session.compressions)} "
        f"compressions; check it with: clearance verify {session.run_id}{where}"
    )


@one_line_errors
def chat(
    team_file: Annotated[Path, typer.Argument(help="Team file (YAML).")],
    agent_name: Annotated[
        str, typer.Option("--agent", help="The agent of the team file to talk to.")
    ],
    db: Annotated[
        str,
        typer.Option("--db", envvar="CLEARANCE_DB", help="Ledger database URL (SQLAlchemy form)."),
    ] = DEFAULT_LEDGER_URL,
    memory_url: Annotated[
        str | None,
        typer.Option(
            "--memory",
            callback=not_empty,
            help="Memory database URL; overrides the team file's memory (default: memory.db "
            "next to the ledger).",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            callback=model_id_option,
            help="Model id instead of the agent's (or the team file's) model.",
        ),
    ] = None,
    strategy: Annotated[
        str,
        typer.Option(help="How the conversation is compressed: drop_oldest or summarize."),
    ] = "drop_oldest",
    context_window: Annotated[
        int | None,
        typer.Option(
            min=1, max=MAX_CONTEXT_WINDOW, help="Tokens of context instead of the model's own."
        ),
    ] = None,
) -> None:
    """Talk with one agent of a team file, with its long-term memory (reads lines from stdin).

    End with /quit or end of input. The session is one run in the ledger; check it with
    clearance verify RUN_ID.
    """
    from clearance import AgentChat, RunLedger, load_team_file
    from clearance.memory import RunMemory, default_memory_url, group_members
    from clearance.models import DEFAULT_MODEL_ID, get_model

    if sys.stdin is None:  # started with stdin closed: no line could ever be read
        raise ConfigError("stdin is closed: clearance chat reads the messages from it")
    check_database_folder(db, default=DEFAULT_LEDGER_URL)
    if memory_url is not None:
        check_database_folder(memory_url, default="", flag="--memory")
    loaded = load_team_file(team_file)
    agent = _agent(loaded, agent_name)
    how = _strategy(strategy)
    model_id = model or agent.model or loaded.spec.model or DEFAULT_MODEL_ID
    budget = _run_settings(loaded, model_id)
    chat_model = get_model(model_id, **_model_options(loaded, model, model_id))
    window = _window(agent, model_id, chat_model.context_window, context_window)
    settings = loaded.spec.memory_settings
    memory = RunMemory(
        memory_url or settings.url or default_memory_url(db), on_error=settings.on_error
    )
    groups = loaded.team.memory_groups
    shared = next(
        (g.name for g in groups if g.shared_conversation is not None and agent.name in g.agents),
        None,
    )
    recall = agent.memory.recall if agent.memory is not None else 3
    with RunLedger(db) as ledger, contextlib.closing(memory):
        session = AgentChat(
            agent=agent,
            model=chat_model,
            memory=memory.memory_of(agent.name, group_members(groups), model_id=model_id),
            memory_groups=groups,
            shared_group=shared,
            strategy=how,
            recall_limit=recall,
            ledger=ledger,
            context_window=window,
            memory_timeout_s=memory.timeout_s,
            budget=budget,
        )
        joined = f"; shared conversation of group {shared}" if shared else ""
        err.print(
            safe_line(
                f"chat with {agent.name} ({model_id}, memory {memory.masked_url}{joined}); "
                f"{QUIT} or end of input to stop"
            ),
            soft_wrap=True,
        )
        _run_session(session, db)


def _run_session(session: AgentChat, db: str) -> None:
    """Converse, then record the end of the run; exit 1 when a turn failed, 130 on Ctrl-C.

    SIGTERM ends it as Ctrl-C does (`sigterm_as_interrupt`), with exit code 143. Either,
    during a message, records the run ``interrupted`` (`AgentChat.finish`), as a run's.

    However the session ends, its run is finished: a failure that is not a `ClearanceError`
    (a bug) is recorded as the run's error and raised on.
    """
    try:
        with sigterm_as_interrupt() as termination:
            asyncio.run(_converse(session))
    except KeyboardInterrupt:
        if session.interrupted and session.last_answer is not None:
            _print_answer(session.last_answer)  # it came; compressing after it was stopped
        session.finish(stopped_by="terminated" if termination.received else "interrupted")
        err.print(safe_line(_session_line(session, db)), soft_wrap=True)
        raise typer.Exit(TERMINATED_EXIT_CODE if termination.received else 130) from None
    except ClearanceError as exc:
        message = " ".join(str(exc).splitlines())
        if isinstance(exc, BudgetExceeded):  # a chat session is never resumed
            used = f"{exc.used:.6f}".rstrip("0").rstrip(".") if exc.limit != "tokens" else exc.used
            message = (
                f"the chat session reached its budget.{exc.limit} ({used} used of "
                f"{exc.maximum}) before a model call; the message was not answered"
            )
        session.finish(error=message)
        err.print(safe_line(f"error: {message}"), soft_wrap=True)
        err.print(safe_line(_session_line(session, db)), soft_wrap=True)
        raise typer.Exit(1) from None
    except BaseException as exc:
        session.finish(error=" ".join(f"{type(exc).__name__}: {exc}".splitlines()))
        raise
    session.finish()
    err.print(safe_line(_session_line(session, db)), soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``chat`` to the ``clearance`` command."""
    app.command()(chat)
