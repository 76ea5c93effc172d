"""Verify items user hooks added to task prompts (``hook:<name>/<n>``, `RunHooks`).

A task prompt's recorded clearance may name hook items only as recorded for that task
(event ``hook_context``), and each ``hook:<ref>`` item must have the title and content hash
of one recorded offer of that ref to the task (a hook may offer other text in each session
of a resumed run: each session's prompt holds its own). Events are read through their schema:
a malformed one is verify's finding elsewhere and offers nothing here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from clearance._context.verify_facts import Problem
from clearance._core.errors import ConfigError
from clearance._core.event_schema import HookContextEvent, parse_event
from clearance._core.origins import Origin
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import EventRecord

__all__ = ["check_hook_item", "hooks_shown"]


def _offered(events: Sequence[EventRecord], task_id: str) -> dict[str, list[tuple[str, str]]]:
    """Every hook item recorded for ``task_id``: ref to its ``(title, sha256)`` offers."""
    offered: dict[str, list[tuple[str, str]]] = {}
    for event in events:
        if event.kind != EventKind.HOOK_CONTEXT or event.subject != f"task:{task_id}":
            continue
        try:
            data = parse_event(event.kind, event.data)
        except ConfigError:
            continue
        if isinstance(data, HookContextEvent):
            for item in data.items:
                offered.setdefault(item.ref, []).append((item.title, item.sha256))
    return offered


def hooks_shown(events: Sequence[EventRecord], task_id: str, recorded: Any) -> list[str] | None:
    """The hook refs a recorded clearance names, if all were recorded for the task.

    Returns:
        The refs (``[]`` for none), or ``None`` when one was never recorded.
    """
    named = recorded.get("hooks", []) if isinstance(recorded, dict) else []
    if not isinstance(named, list):
        return None
    return (
        [str(r) for r in named] if set(map(str, named)) <= set(_offered(events, task_id)) else None
    )


def check_hook_item(
    events: Sequence[EventRecord], task_id: str, origin: str, item: dict[str, Any]
) -> Iterator[Problem]:
    """A ``hook:<ref>`` item is what the hook was recorded to offer the task."""
    recorded = _offered(events, task_id).get(Origin.parse(origin).id)
    if recorded is None:
        yield origin, "no hook was recorded offering this item to the task"
    elif (item.get("title"), item.get("sha256")) not in recorded:
        yield origin, "the item is not what the hook was recorded to offer"
