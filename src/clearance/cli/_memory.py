"""``clearance memory``: the records of a team's long-term memory, for operators.

Lists every scope, newest first, with the model provider that wrote each record: the fake
model's records (``fake``, from runs on ``--model fake:...``) are marked, since they form a
partition of their own that real-model runs never recall.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from clearance.cli._common import one_line_errors, out, safe_line, safe_text
from clearance.cli._options import DbOption, not_empty
from clearance.runs import DEFAULT_LEDGER_URL

__all__ = ["register"]

FAKE = "fake"
"""The fake model's provider: its records are marked ``fake run``."""

PREVIEW_CHARS = 80
"""Characters of each record's text shown (its first line)."""


@one_line_errors
def memory(
    team_file: Annotated[
        Path | None,
        typer.Argument(help="A team file: list the memory its memory: key names."),
    ] = None,
    memory_url: Annotated[
        str | None,
        typer.Option(
            "--memory", callback=not_empty, help="Memory database URL (overrides the team file's)."
        ),
    ] = None,
    db: DbOption = DEFAULT_LEDGER_URL,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most records shown.")] = 50,
) -> None:
    """List the newest long-term memory records, marking those written by the fake model.

    The memory is --memory, else the team file's memory:, else memory.db next to the ledger
    (as for clearance run). Records of the fake model are recalled only by runs on a fake:
    model, never by runs on a real one.
    """
    from clearance import load_team_file
    from clearance.memory import count_memories, default_memory_url, list_memories
    from clearance.runs import masked_url

    url = memory_url
    if url is None and team_file is not None:
        url = load_team_file(team_file).spec.memory_settings.url
    url = url or default_memory_url(db)
    if _missing_file(url):
        out.print(safe_text(f"no memory at {masked_url(url)} yet"), soft_wrap=True)
        return
    records = list_memories(url, limit=limit)
    # Counted only when the page is full: fewer records than the limit are all there are.
    more = count_memories(url) - len(records) if len(records) == limit else 0
    tail = f"; {more:,} more, raise --limit" if more > 0 else ""
    out.print(
        safe_text(f"memory: {masked_url(url)} ({len(records)} newest records{tail})"),
        soft_wrap=True,
    )
    for record in records:  # two lines each, whatever they quote: readable at any width
        provider = record.provider or "?"
        head = safe_line(f"{record.id}  {record.scope}  by {record.author}  ")
        if provider == FAKE:
            head.append("fake run", style="yellow")
        else:
            head.append_text(safe_line(provider))
        head.append(f"  {record.created_at:%Y-%m-%d %H:%M}")
        out.print(head, soft_wrap=True)
        out.print(safe_line("    " + _preview(record.content)), soft_wrap=True)


def _preview(content: str) -> str:
    """The first line of ``content``, at most `PREVIEW_CHARS`; ``…`` ends it if more is left out."""
    lines = content.splitlines()
    first = lines[0] if lines else ""
    if len(first) > PREVIEW_CHARS:
        return first[: PREVIEW_CHARS - 1] + "…"
    return first + (" …" if len(lines) > 1 else "")


def _missing_file(url: str) -> bool:
    """Whether ``url`` names an SQLite file that does not exist (no memory recorded yet).

    A folder there is not missing: opening it says it is one; nor is a name the system
    refuses (too long, a loop of links).
    """
    from clearance.runs import sqlite_file_path

    try:
        path = sqlite_file_path(url)
    except ValueError:
        return False  # list_memories names the bad URL
    if path is None or "\x00" in path:
        return False
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:  # a name too long, a loop of links...: opening it names the problem
        return False
    return False


def register(app: typer.Typer) -> None:
    """Add ``memory`` to the ``clearance`` command."""
    app.command()(memory)
