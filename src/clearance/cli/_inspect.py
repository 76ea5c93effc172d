r"""What ``clearance inspect`` prints: calls with items and prompts, JSON, responses, paging.

On a terminal a run of up to `RICH_MAX_RECORDS` records and `RICH_MAX_CHARS` characters of
text is drawn with rich's tables and panels. A bigger run, or output to a pipe or file, is
written as plain aligned text in chunks: rich measures and wraps every cell and line (about
3 ms a call, a minute for 20,000 tasks), the plain layout shows the same text at a small
fraction of that. Either way a one-line field (a header, a title, a cell, an error) is
printed on one line, its line breaks as ``\n``, and a block (the goal, a message, an answer)
is boxed or behind a gutter: no text of the run prints a line that passes for ours.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from clearance.cli._common import out, safe_line, safe_lines, safe_text
from clearance.cli._events import event_rows, print_events
from clearance.cli._store import TOOL_CALL_COLUMNS, chain_lines, print_tool_calls, tool_call_rows
from clearance.events import EventKind

if TYPE_CHECKING:
    from clearance.runs import CallRecord, EventRecord, RunRecord, TaskRecord, ToolCallRecord


__all__ = [
    "RICH_MAX_CHARS",
    "RICH_MAX_RECORDS",
    "page_if_terminal",
    "print_inspect",
    "print_responses",
    "print_run_json",
    "prompt_cache",
    "prompt_cache_line",
]


def prompt_cache(calls: Sequence[CallRecord]) -> dict[str, Any]:
    """The run's prompt-cache reuse over the calls whose server reported it.

    Returns:
        ``{"calls_reporting", "prompt_tokens", "cached_prompt_tokens", "hit_rate"}``: how
        many calls reported cached prompt tokens, their prompt and cached tokens summed, and
        cached / prompt over those calls (``None`` when no call reported it or their prompts
        are empty). Calls that reported nothing are left out, not counted as 0.
    """
    known = [c.usage for c in calls if c.usage.cached_prompt_tokens is not None]
    prompt = sum(u.prompt_tokens for u in known)
    cached = sum(u.cached_prompt_tokens or 0 for u in known)
    return {
        "calls_reporting": len(known),
        "prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
        "hit_rate": cached / prompt if known and prompt else None,
    }


def prompt_cache_line(calls: Sequence[CallRecord]) -> str:
    """One line for ``inspect``: the run's prompt-cache hit rate (see `prompt_cache`)."""
    summary = prompt_cache(calls)
    if not summary["calls_reporting"]:
        return "prompt cache: not reported by the model server for any call"
    rate = summary["hit_rate"]
    shown = "n/a" if rate is None else f"{rate:.1%}"
    return (
        f"prompt cache: {summary['cached_prompt_tokens']} of {summary['prompt_tokens']} prompt "
        f"tokens reused (hit rate {shown}) over the {summary['calls_reporting']} of "
        f"{len(calls)} calls that report it"
    )


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _standard(value: Any) -> Any:
    """``value`` as plain JSON values, with each number that is not finite made ``None``.

    Records become objects (`_plain`), tuples lists. A JSON column read from the ledger may
    hold ``NaN`` or ``Infinity`` (Python's ``json`` reads and writes them; RFC 8259 has
    neither), so they are written ``null``, as JavaScript's ``JSON.stringify`` does. Walked
    with a stack, not by recursion: a column may be nested as deep as ``json`` reads.
    """
    top: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, top, 0)]
    while stack:
        item, into, key = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            item = None
        elif isinstance(item, datetime) or (
            dataclasses.is_dataclass(item) and not isinstance(item, type)
        ):
            item = _plain(item)
        if isinstance(item, dict):
            copy: dict[Any, Any] = dict.fromkeys(item)  # the keys in their order, filled below
            stack.extend((v, copy, k) for k, v in item.items())
            item = copy
        elif isinstance(item, (list, tuple)):
            items: list[Any] = [None] * len(item)
            stack.extend((v, items, i) for i, v in enumerate(item))
            item = items
        into[key] = item
    return top[0]


def print_run_json(
    record: RunRecord,
    *,
    tasks: Sequence[TaskRecord],
    calls: Sequence[CallRecord],
    tool_calls: Sequence[ToolCallRecord],
    events: Sequence[EventRecord],
) -> None:
    r"""Write the run as one JSON document on stdout.

    The shape is ``{"run", "tasks", "calls", "tool_calls", "events", "prompt_cache"}``, each
    record with the fields of its ledger class (`RunRecord`, `TaskRecord`, `CallRecord`...),
    times as ISO 8601 strings; ``prompt_cache`` is `prompt_cache` of the calls. Non-ASCII
    text is written as ``\uXXXX`` escapes, so control characters in model output reach a
    terminal as text, never as escape sequences. The document is standard JSON (RFC 8259):
    a number a JSON column of the ledger holds as ``NaN``, ``Infinity`` or ``-Infinity`` is
    written ``null``, as JavaScript's ``JSON.stringify`` does (``inspect`` without
    ``--json`` shows the value as stored).
    """
    document = {
        "run": record,
        "tasks": list(tasks),
        "calls": list(calls),
        "tool_calls": list(tool_calls),
        "events": list(events),
        "prompt_cache": prompt_cache(calls),
    }
    text = json.dumps(
        _standard(document), default=_plain, ensure_ascii=True, indent=2, allow_nan=False
    )
    sys.stdout.write(text + "\n")


def print_responses(calls: Sequence[CallRecord]) -> None:
    """Write only the calls' responses (or errors), each under a ``# subject (call id)`` line.

    A single call's response is written alone, with no heading, so scripts can take it as is.
    Of several, each response's lines are written behind a ``│`` gutter, so none of them
    can pose as the heading of another call.
    """
    for call in calls:
        text = call.response if call.error is None else f"error: {call.error}"
        if len(calls) == 1:
            sys.stdout.write(safe_lines(text or "") + "\n")
            continue
        sys.stdout.write(_line(f"# {call.subject} ({call.call_id})") + "\n")
        sys.stdout.write("\n".join(_gutter(text or "")) + "\n\n")


@contextlib.contextmanager
def page_if_terminal(console: Console, enabled: bool = True) -> Iterator[None]:
    """Show what is printed inside through a pager (``$PAGER``, or ``less``) on a terminal.

    Nothing changes when output goes to a pipe or file, or when ``enabled`` is false.
    """
    if not enabled or not console.is_terminal:
        yield
        return
    with console.pager(styles=False):
        yield


RICH_MAX_RECORDS = 500
"""The most records (calls, tool calls, events) `print_inspect` draws with rich on a terminal."""

RICH_MAX_CHARS = 200_000
"""The most characters of text (goal, prompts, answers) `print_inspect` draws with rich.

Rich lays out every line of a panel: an answer of 100,000 lines took 20 seconds.
"""

_CHUNK = 2_000
"""Lines the plain layout gathers before writing them out."""


def print_inspect(
    record: RunRecord,
    calls: Sequence[CallRecord],
    tasks: dict[str, TaskRecord],
    tool_calls: Sequence[ToolCallRecord],
    events: Sequence[EventRecord],
    *,
    show_prompt: bool,
) -> None:
    """Print what every call of a run saw: a header, its items with tokens, its prompt and answer.

    Then the run's tool calls, its events and the prompt-cache line. Every text from the
    ledger is printed through `safe`. On a terminal, a run of at most `RICH_MAX_RECORDS`
    records and `RICH_MAX_CHARS` characters of text is drawn with rich's tables and panels;
    otherwise the same text is written as plain aligned lines, each message's lines behind
    a ``│`` gutter.
    """
    size = len(calls) + len(tool_calls) + len(events)
    if (
        out.is_terminal
        and size <= RICH_MAX_RECORDS
        and _text_chars(record, calls, show_prompt=show_prompt) <= RICH_MAX_CHARS
    ):
        _print_rich(record, calls, tasks, tool_calls, events, show_prompt=show_prompt)
    else:
        _print_plain(record, calls, tasks, tool_calls, events, show_prompt=show_prompt)


def _text_chars(record: RunRecord, calls: Sequence[CallRecord], *, show_prompt: bool) -> int:
    """Characters of the goal, the prompts (if shown) and the answers, counted up to a cap."""
    total = len(record.goal or "")
    for call in calls:
        total += len(call.response or "") + len(call.error or "")
        if show_prompt:
            total += sum(len(str(message["content"])) for message in call.messages)
        if total > RICH_MAX_CHARS:
            break
    return total


def _call_header(call: CallRecord, tasks: dict[str, TaskRecord], replays: Counter[str]) -> str:
    task_id = call.subject.partition(":")[2]
    status = tasks[task_id].status if task_id in tasks else ""
    header = f"{call.subject}  agent {call.agent}  model {call.model_id}  {status}".rstrip()
    if replays[call.call_id]:
        header += f"  REPLAYED on resume ({replays[call.call_id]}x, not sent again)"
    if call.finish_reason == "length":
        header += "  CUT OFF at the output limit (marked truncated)"
    return header


def _item_rows(call: CallRecord) -> list[tuple[str, str, str]]:
    """The rows of a call's items table: each item, then the totals (not yet made safe)."""
    rows = [
        (str(item["origin"]), str(item["title"]), str(item["tokens"]))
        for item in call.manifest.get("items", [])
    ]
    rows.append(("", "total prompt", str(call.manifest.get("total_tokens", ""))))
    if call.usage.cached_prompt_tokens is not None:
        cached = f"{call.usage.cached_prompt_tokens} of {call.usage.prompt_tokens}"
        rows.append(("", "cached by the server", cached))
    if call.usage.counted:
        counted = f"{call.usage.prompt_tokens} + {call.usage.completion_tokens}"
        rows.append(("", "prompt + completion, counted (server reported none)", counted))
    return rows


def _replays(events: Sequence[EventRecord]) -> Counter[str]:
    return Counter(str(e.data.get("original")) for e in events if e.kind == EventKind.REPLAYED)


def _run_lines(record: RunRecord) -> tuple[str, str | None]:
    head = (
        f"run {record.run_id}  team {record.team}  status {record.status}  "
        f"created {record.created_at:%Y-%m-%d %H:%M:%S}Z"
    )
    return head, (f"goal: {record.goal}" if record.goal else None)


def _print_rich(
    record: RunRecord,
    calls: Sequence[CallRecord],
    tasks: dict[str, TaskRecord],
    tool_calls: Sequence[ToolCallRecord],
    events: Sequence[EventRecord],
    *,
    show_prompt: bool,
) -> None:
    # One-line fields (the header, a title, a cell, an error) stay one line, a block (the
    # goal, a message, a response) is boxed: no text of the run can pose as a line of ours.
    head, goal = _run_lines(record)
    out.print(safe_line(head), soft_wrap=True)
    if goal is not None and "\n" in goal:
        out.print(Panel(safe_text(record.goal), title="goal", title_align="left"))
    elif goal is not None:
        out.print(safe_line(goal), soft_wrap=True)
    replays = _replays(events)
    for call in calls:
        # Printed unwrapped, not as the table's title: a wrapped title's next line could
        # start with any text a field padded with spaces puts there.
        out.print(safe_line(_call_header(call, tasks, replays)), soft_wrap=True)
        table = Table(show_lines=False)
        table.add_column("origin")
        table.add_column("title")
        table.add_column("tokens", justify="right")
        for row in _item_rows(call):
            table.add_row(*map(safe_line, row))
        out.print(table)
        if show_prompt:
            for message in call.messages:
                out.print(
                    Panel(
                        safe_text(message["content"]),
                        title=safe_line(message["role"]),
                        title_align="left",
                    )
                )
        if call.pending:
            out.print(safe_text("sent, no outcome recorded (the process stopped during the call)"))
        elif call.error:
            out.print(safe_line(f"error: {call.error}"), soft_wrap=True)
        elif call.response is not None:
            out.print(Panel(safe_text(call.response), title="response", title_align="left"))
    print_tool_calls(out, tool_calls)
    print_events(out, events)
    out.print(safe_text(prompt_cache_line(calls)))


def _line(text: object) -> str:
    r"""`safe` text on one line: a line break in it is shown as ``\n`` (and a tab as ``\t``)."""
    return safe_lines(text).replace("\n", "\\n").replace("\t", "\\t")


def _gutter(text: object) -> list[str]:
    """Each line of ``text`` (`safe`) behind a ``│`` gutter, so none can pose as our own."""
    return [f"│ {line}" if line else "│" for line in safe_lines(text).split("\n")]


def _block(title: str, text: object) -> list[str]:
    """A titled block: each line of ``text`` behind a gutter, so none can pose as a header."""
    return [f"─ {_line(title)}", *_gutter(text)]


def _table(
    header: Sequence[str] | None, rows: Sequence[Sequence[str]], *, right: int = -1
) -> list[str]:
    """Rows as aligned columns, indented two spaces; column ``right`` is aligned right."""
    cells = [[_line(c) for c in row] for row in ([header] if header else []) + list(rows)]
    if not cells:
        return []
    widths = [max(cell_len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = []
    for row in cells:
        padded = [
            " " * (w - cell_len(c)) + c if i == right else c + " " * (w - cell_len(c))
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(("  " + "  ".join(padded)).rstrip())
    return lines


def _print_plain(
    record: RunRecord,
    calls: Sequence[CallRecord],
    tasks: dict[str, TaskRecord],
    tool_calls: Sequence[ToolCallRecord],
    events: Sequence[EventRecord],
    *,
    show_prompt: bool,
) -> None:
    file = out.file
    lines: list[str] = []

    def flush() -> None:
        if lines:
            file.write("\n".join(lines) + "\n")
            lines.clear()

    head, goal = _run_lines(record)
    lines.append(_line(head))
    if goal is not None:
        lines.extend(_block("goal", record.goal) if "\n" in goal else [_line(goal)])
    replays = _replays(events)
    for call in calls:
        lines.extend(("", _line(_call_header(call, tasks, replays))))
        lines.extend(_table(("origin", "title", "tokens"), _item_rows(call), right=2))
        if show_prompt:
            for message in call.messages:
                lines.extend(_block(str(message["role"]), message["content"]))
        if call.pending:
            lines.append("sent, no outcome recorded (the process stopped during the call)")
        elif call.error:
            lines.append(_line(f"error: {call.error}"))
        elif call.response is not None:
            lines.extend(_block("response", call.response))
        if len(lines) >= _CHUNK:
            flush()
    if tool_calls:
        lines.extend(("", "Tool calls"))
        lines.extend(_table(TOOL_CALL_COLUMNS, tool_call_rows(tool_calls), right=2))
        lines.extend(_line(line) for line in chain_lines(tool_calls))
    shown = event_rows(events)
    if shown:
        lines.extend(("", "Events"))
        lines.extend(_table(("kind", "subject", "what"), shown))
    lines.extend(("", _line(prompt_cache_line(calls))))
    flush()
    file.flush()
