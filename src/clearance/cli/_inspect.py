"""What ``clearance inspect`` prints besides its tables: JSON, responses only, and paging."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console

from clearance.cli._common import safe

if TYPE_CHECKING:
    from clearance.runs import CallRecord, EventRecord, RunRecord, TaskRecord, ToolCallRecord


__all__ = [
    "page_if_terminal",
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
    """
    for call in calls:
        text = call.response if call.error is None else f"error: {call.error}"
        if len(calls) > 1:
            sys.stdout.write(safe(f"# {call.subject} ({call.call_id})") + "\n")
        sys.stdout.write(safe(text or "") + "\n")
        if len(calls) > 1:
            sys.stdout.write("\n")


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
