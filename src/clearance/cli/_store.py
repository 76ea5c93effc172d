"""``clearance store get|set|query|cleanup``: the context store, for operators.

``get`` and ``query`` open the store read-only and ``cleanup`` only an existing one: none
of them creates a store, or writes to a database that is not one. ``set`` creates the
store, and the folder of the default one (``.clearance/``), never a folder given in --db.

Also the tool-call and delegation-chain table that ``clearance inspect`` prints.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from clearance.cli._common import err, one_line_errors, out, safe_line, safe_lines, safe_text
from clearance.cli._options import check_database_folder, number_option
from clearance.runs import DEFAULT_STORE_URL, MAX_ROWS, MAX_TTL_S

if TYPE_CHECKING:
    from clearance.runs import ToolCallRecord


__all__ = ["TOOL_CALL_COLUMNS", "chain_lines", "print_tool_calls", "store_app", "tool_call_rows"]

store_app = typer.Typer(
    name="store",
    help="Read and maintain the context store (operators only; agents use scoped views).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


StoreDbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="CLEARANCE_STORE_DB",
        help="Store database URL (SQLAlchemy form: sqlite:///path or postgresql+psycopg://...).",
        show_default=True,
    ),
]


@store_app.command("get")
@one_line_errors
def get(
    namespace: Annotated[str, typer.Argument(help="Namespace.")],
    key: Annotated[str, typer.Argument(help="Key.")],
    db: StoreDbOption = DEFAULT_STORE_URL,
) -> None:
    """Print the value of a live entry (exit 1 when absent or expired)."""
    from clearance import ContextStore

    with ContextStore(db, read_only=True) as store:
        value = store.get(namespace, key)
    if value is None:
        err.print(safe_text(f"no live entry {namespace}/{key}"))
        raise typer.Exit(1)
    _print_whole(value)


@store_app.command("set")
@one_line_errors
def set_(
    namespace: Annotated[str, typer.Argument(help="Namespace.")],
    key: Annotated[str, typer.Argument(help="Key.")],
    value: Annotated[str, typer.Argument(help="Value (text; JSON for structured reads).")],
    ttl_s: Annotated[
        float | None,
        typer.Option(
            "--ttl-s",
            callback=number_option(0.001, MAX_TTL_S),
            help="Seconds until it expires (at most 100 years; leave out for never).",
        ),
    ] = None,
    agent: Annotated[str, typer.Option(help="Recorded as the writer.")] = "operator",
    db: StoreDbOption = DEFAULT_STORE_URL,
) -> None:
    """Write an entry (an upsert)."""
    from clearance import ContextStore
    from clearance.runs import check_store_entry

    check_store_entry(namespace, key, value, agent, ttl_s)  # before the store is created
    check_database_folder(db, default=DEFAULT_STORE_URL)
    with ContextStore(db) as store:
        store.set(namespace, key, value, agent, ttl_s)
    out.print(safe_text(f"stored {namespace}/{key}"))


@store_app.command("query")
@one_line_errors
def query(
    namespace: Annotated[str, typer.Argument(help="Namespace.")],
    prefix: Annotated[str, typer.Option(help="Only keys starting with this (literally).")] = "",
    limit: Annotated[int, typer.Option(min=1, max=MAX_ROWS, help="Most entries shown.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    db: StoreDbOption = DEFAULT_STORE_URL,
) -> None:
    """List live entries of a namespace, most recently updated first, and how many more."""
    from clearance import ContextStore

    with ContextStore(db, read_only=True) as store:
        entries = store.query_by_prefix(namespace, prefix, limit)
        # Counted only when the page is full: fewer entries than the limit are all there are.
        total = store.count_by_prefix(namespace, prefix) if len(entries) == limit else 0
    more = max(total - len(entries), 0)
    shown = f"{len(entries)} entries"
    if more:
        shown = f"{len(entries)} of {total:,} entries ({more:,} more; raise --limit)"
    if as_json:
        for entry in entries:
            # ASCII JSON: every control character is a JSON escape, safe on a terminal.
            _print_whole(json.dumps(entry.to_dict(), ensure_ascii=True))
        if more:  # on stderr: stdout stays JSON lines
            err.print(safe_text(f"{namespace}: {shown}"), soft_wrap=True)
        return
    table = Table(title=safe_text(f"{namespace}: {shown}"), title_justify="left")
    for column in ("key", "value", "agent", "updated", "version", "expires"):
        table.add_column(column)
    for e in entries:
        value = e.value if len(e.value) <= 60 else e.value[:57] + "..."
        expires = f"{e.expires_at:%Y-%m-%d %H:%M:%S}Z" if e.expires_at else "never"
        updated = f"{e.updated_at:%Y-%m-%d %H:%M:%S}Z"
        cells = (e.key, value, e.agent, updated, str(e.version), expires)
        table.add_row(*map(safe_line, cells))  # a cell is one line: no forged row
    out.print(table)


@store_app.command("cleanup")
@one_line_errors
def cleanup(db: StoreDbOption = DEFAULT_STORE_URL) -> None:
    """Remove expired entries and say how many."""
    from clearance import ContextStore

    with ContextStore(db, create=False) as store:
        removed = store.cleanup()
    out.print(safe_text(f"removed {removed} expired entries"))


_PIECE_CHARS = 1 << 20


def _print_whole(text: str) -> None:
    """Print ``text`` whole and a line break, a piece of `_PIECE_CHARS` at a time, `safe`.

    A value may be up to a gigabyte, and a store edited by hand may hold more: printed as
    one rich `Text`, 50 MB took gigabytes of memory; written in pieces (no markup to render),
    it takes a few pieces more than the value itself.
    """
    for start in range(0, len(text), _PIECE_CHARS):
        out.file.write(safe_lines(text[start : start + _PIECE_CHARS]))
    out.file.write("\n")
    out.file.flush()


TOOL_CALL_COLUMNS = ("subject", "agent", "step", "tool", "arguments", "result")
"""The columns of the tool-call table `print_tool_calls` prints (and `tool_call_rows` fills)."""


def tool_call_rows(records: Sequence[ToolCallRecord]) -> list[tuple[str, ...]]:
    """The rows of the tool-call table (arguments cut at 60 characters, results at 80).

    Not yet made safe to print.
    """
    rows: list[tuple[str, ...]] = []
    for r in records:
        args = json.dumps(r.arguments, ensure_ascii=False)
        result = ("ERROR " if r.is_error else "") + r.result
        rows.append(
            (
                r.subject,
                r.agent,
                str(r.step),
                r.name,
                args if len(args) <= 60 else args[:57] + "...",
                result if len(result) <= 80 else result[:77] + "...",
            )
        )
    return rows


def chain_lines(records: Sequence[ToolCallRecord]) -> list[str]:
    """One line per ``delegate`` call: its delegation chain (not yet made safe to print)."""
    lines: list[str] = []
    for r in records:
        if not r.chain:
            continue
        steps = " -> ".join(
            [r.chain["steps"][0]["from"], *(s["to"] for s in r.chain["steps"])]
            if r.chain.get("steps")
            else []
        )
        lines.append(
            f"delegation chain ({r.tool_call_id}): {steps} (max depth {r.chain['max_depth']})"
        )
    return lines


def print_tool_calls(console: Console, records: Sequence[ToolCallRecord]) -> None:
    """Print a run's tool calls, with the delegation chain of each ``delegate`` call."""
    if not records:
        return
    table = Table(title="Tool calls", title_justify="left")
    for column in TOOL_CALL_COLUMNS:
        table.add_column(column)
    for row in tool_call_rows(records):
        table.add_row(*map(safe_line, row))  # a cell is one line: no forged row
    console.print(table)
    for line in chain_lines(records):
        console.print(safe_line(line), soft_wrap=True)
