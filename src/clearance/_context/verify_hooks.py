"""Verify items user hooks added to task prompts (``hook:<name>/<n>``, `RunHooks`).

A task prompt's recorded clearance may name hook items only as recorded for that task
(event ``hook_context``), and each ``hook:<ref>`` item must have the recorded title and
content hash.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from clearance._context.verify_facts import Problem
from clearance._core.origins import Origin
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import EventRecord

__all__ = ["check_hook_item", "hooks_shown"]


def _offered(events: Sequence[EventRecord], task_id: str) -> dict[str, dict[str, Any]]:
    """Every hook item recorded for ``task_id``, by ref (all its sessions)."""
    offered: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.kind == EventKind.HOOK_CONTEXT and event.subject == f"task:{task_id}":
            for item in event.data.get("items") or ():
                if isinstance(item, dict):
                    offered.setdefault(str(item.get("ref")), {}).update(item)
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
    elif item.get("sha256") != recorded.get("sha256") or item.get("title") != recorded.get("title"):
        yield origin, "the item is not what the hook was recorded to offer"
