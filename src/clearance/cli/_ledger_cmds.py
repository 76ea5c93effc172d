"""Commands that read the run ledger: ``inspect``, ``verify`` and ``runs``."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Annotated

import typer
from rich.table import Table

from clearance import ConfigError
from clearance.cli._backends import verify_lookups
from clearance.cli._common import err, one_line_errors, out, safe_line, safe_text
from clearance.cli._events import select_calls
from clearance.cli._inspect import (
    page_if_terminal,
    print_inspect,
    print_responses,
    print_run_json,
)
from clearance.cli._options import DbOption, RunIdArgument, not_empty
from clearance.runs import DEFAULT_LEDGER_URL, MAX_ROWS

__all__ = ["inspect", "runs", "verify"]


@one_line_errors
def inspect(
    run_id: RunIdArgument,
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
    """Show what every agent of a run saw: admitted items with origin and tokens, and prompts.

    A run recorded running whose process is gone (killed) is shown running (process gone).
    """
    from clearance import RunLedger
    from clearance.runs import shown_status

    if as_json and response_only:
        raise ConfigError("give --json or --response-only, not both", field="--json")
    with RunLedger(db, read_only=True) as ledger:
        record = ledger.get_run(run_id)
        shown = dataclasses.replace(record, status=shown_status(record, now=ledger.server_time()))
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
            print_inspect(shown, calls, tasks, tool_calls, events, show_prompt=show_prompt)


def _chain_head(value: str | None) -> str | None:
    """The check of ``--head``: 64 hex digits, as ``verify`` prints a head (case ignored)."""
    if value is None:
        return None
    text = value.strip().lower()
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise typer.BadParameter("is not a chain head (64 hex digits, as verify prints it)")
    return text


_STILL_RUNNING = (
    "; the run is recorded as running (in progress, or its process died): records added after "
    "this check are not covered, so verify it again once it has ended"
)
"""Ends `verify`'s line for a run recorded as running: what passed is only what is recorded."""

_PROCESS_GONE = (
    "; the run is recorded as running (process gone): it stopped before it ended, so what it "
    "recorded is what was checked; verify it again if it is resumed"
)
"""Ends it instead for such a run whose process is gone (`shown_status`, as ``runs`` shows)."""


@one_line_errors
def verify(
    run_id: RunIdArgument,
    db: DbOption = DEFAULT_LEDGER_URL,
    memory_url: Annotated[
        str | None,
        typer.Option(
            "--memory",
            callback=not_empty,
            help="Memory URL to check memory items against, instead of the one the run recorded.",
        ),
    ] = None,
    store_url: Annotated[
        str | None,
        typer.Option(
            "--store",
            callback=not_empty,
            help="Store URL to check store items against, instead of the one the run recorded.",
        ),
    ] = None,
    head: Annotated[
        str | None,
        typer.Option(
            "--head",
            callback=_chain_head,
            help="A head this command printed earlier: exit 1 if the run's hash chain no "
            "longer holds it (cut short, or the ledger rolled back).",
        ),
    ] = None,
) -> None:
    """Check every prompt of a run against its clearance and manifest (exit 1 on a finding).

    A keyed run checked without its ledger key exits 1 too: its hash chain's links (HMACs)
    cannot be checked, so a forged record would pass. A chain cut short together with its
    records (the ledger rolled back to an earlier copy) is consistent: only --head, a head
    noted earlier, tells.

    Memory and store items are checked against the memory and store the run recorded (or
    --memory / --store); an unreachable one is an error naming it. A record that is not what
    the ledger ever writes (text that is not JSON: edited by hand) fails verification.

    A run recorded running whose process is gone (killed) is said to be so.
    """
    from clearance import MalformedRecord, RunLedger, verify_run
    from clearance.runs import process_gone

    with RunLedger(db, read_only=True) as ledger, contextlib.ExitStack() as stack:
        try:
            record = ledger.get_run(run_id)
            gone = process_gone(record, now=ledger.server_time())
            memories, entries, closing = verify_lookups(record, memory=memory_url, store=store_url)
            for opened in closing:
                stack.callback(opened.close)
            report = verify_run(ledger, record.run_id, memories=memories, store=entries, head=head)
        except MalformedRecord as exc:
            out.print(safe_line(f"run {run_id}: not verified: {exc}"), soft_wrap=True)
            raise typer.Exit(1) from None
    if report.keyed:
        chain = "keyed hash chain checked with the ledger key"
    else:
        chain = "unkeyed hash chain checked"
    for channel in report.channels:
        out.print(safe_line(f"declared channel: {channel}"), soft_wrap=True)
    if report.ok and report.keyed and not report.macs_checked:
        out.print(
            safe_text(
                f"run {report.run_id}: not verified: the run is keyed and no ledger key was given, "
                "so its records cannot be told from forged ones; set CLEARANCE_LEDGER_KEY"
            ),
            soft_wrap=True,
        )
        raise typer.Exit(1)
    if report.ok:
        out.print(
            safe_text(
                f"run {report.run_id}: {report.calls_checked} model calls verified: every item "
                "was in its task's clearance and every prompt is exactly its manifest's items; "
                f"{report.entries_checked} records in its {chain}, head {report.chain_head}"
                + (_PROCESS_GONE if gone else _STILL_RUNNING if record.status == "running" else "")
            ),
            soft_wrap=True,
        )
        return
    for finding in report.findings:  # one line each, even when it quotes a line break
        out.print(safe_line(finding), soft_wrap=True)
    out.print(
        safe_text(
            f"run {report.run_id}: {len(report.findings)} problem(s) "
            f"in {report.calls_checked} calls"
        )
    )
    raise typer.Exit(1)


@one_line_errors
def runs(
    limit: Annotated[int, typer.Option(min=1, max=MAX_ROWS, help="How many runs.")] = 20,
    db: DbOption = DEFAULT_LEDGER_URL,
) -> None:
    """List recent runs, newest first, and how many older ones are not shown.

    A run recorded running whose process is gone (killed) is shown running (process gone).

    A run whose record is malformed (edited by hand) is left out of the table and named, with
    what is wrong, on one line of its own on stderr; the others are listed as usual, and the
    command then exits 2.
    """
    from clearance import MalformedRecord, RunLedger
    from clearance.runs import shown_status

    with RunLedger(db, read_only=True) as ledger:
        listed = ledger.run_listing(limit=limit)
        now = ledger.server_time()
        # Counted only when the page is full: fewer runs than the limit are all there are.
        more = ledger.run_count() - len(listed) if len(listed) == limit else 0
    records = [r for r in listed if not isinstance(r, MalformedRecord)]
    broken = [r for r in listed if isinstance(r, MalformedRecord)]
    rows = [
        (
            r.run_id,
            r.team,
            shown_status(r, now=now),
            f"{r.created_at:%Y-%m-%d %H:%M}",
            _cut(r.goal or "", 60),
        )
        for r in records
    ]
    # The run id (what people copy from here), the status and the date are never cut or
    # wrapped; the team and the goal wrap in what room is left.
    names = ("run id", "team", "status", "created (UTC)", "goal")
    table = Table(box=None, padding=(0, 2, 0, 0), pad_edge=False, header_style="bold")
    for i, name in enumerate(names):
        if name in ("team", "goal"):
            table.add_column(name, overflow="fold")
        else:
            widest = max([len(name), *(len(row[i]) for row in rows)])
            table.add_column(name, no_wrap=True, min_width=widest)
    for row in rows:  # each cell one line: a line break in a goal would forge a row
        table.add_row(*map(safe_line, row))
    if rows or not broken:
        out.print(table)
    if more > 0:
        out.print(f"{more:,} older runs not shown; raise --limit")
    for problem in broken:  # one line each, even when the message quotes a line break
        message = "\\n".join(str(problem).splitlines())
        err.print(safe_text(f"error: {message}"), soft_wrap=True)
    if broken:
        raise typer.Exit(2)


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in ``…`` when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
