"""Opening a run's memory and store for the commands: from the team file, or as recorded."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clearance import StoreError

if TYPE_CHECKING:
    from clearance import StoreEntry
    from clearance.memory import MemoryRecord
    from clearance.runs import RunRecord


__all__ = ["verify_lookups"]


def _recorded(record: RunRecord, key: str) -> str | None:
    """The URL a run recorded for its store or memory (a URL, or ``{url: ...}``)."""
    value = record.config.get(key)
    url = value.get("url") if isinstance(value, dict) else value
    return url if isinstance(url, str) and url else None


def _reachable(url: str, what: str, option: str) -> None:
    """Refuse a masked URL or a missing SQLite file, naming the backend and the override."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from clearance.runs import masked_url, sqlite_file_path

    hint = f"; give it with {option} URL"
    if "***" in url:
        raise StoreError(f"the run's {what} is at {url}, whose password is not recorded{hint}")
    try:
        make_url(url)
        path = sqlite_file_path(url)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(f"the run's {what} URL {masked_url(url)!r} is not valid{hint}") from exc
    if path is not None and not os.path.isfile(path):  # False for a name too long too
        raise StoreError(
            f"the run's {what} at {masked_url(url)} is unreachable: no such file{hint}"
        )


def verify_lookups(
    record: RunRecord, *, memory: str | None, store: str | None
) -> tuple[
    Callable[[str], MemoryRecord | None] | None,
    Callable[[str, str], StoreEntry | None] | None,
    list[Any],
]:
    """Lookups into the run's memory and store: the overrides, else the recorded URLs.

    Returns:
        ``(memory lookup or None, store lookup or None, things to close)``: the caller closes
        them when done.

    Raises:
        StoreError: A backend is unreachable (the message names it and the override option);
            what was opened before it is closed.
    """
    from clearance import ContextStore
    from clearance.memory import memory_lookup

    closing: list[Any] = []
    try:  # what is open is closed when a later backend is refused
        memory_url = memory or _recorded(record, "memory")
        memories = None
        if memory_url is not None:
            _reachable(memory_url, "memory", "--memory")
            try:
                memories = memory_lookup(memory_url)
            except StoreError as exc:
                raise StoreError(
                    f"the run's memory is unreachable: {exc}; give it with --memory URL"
                ) from exc
            closing.append(memories)
        store_url = store or _recorded(record, "store")
        entries = None
        if store_url is not None:
            _reachable(store_url, "store", "--store")
            try:  # read-only: verify never creates, migrates or writes to a store
                opened = ContextStore(store_url, read_only=True)
            except StoreError as exc:
                raise StoreError(
                    f"the run's store is unreachable: {exc}; give it with --store URL"
                ) from exc
            closing.append(opened)
            entries = opened.get_entry
    except BaseException:
        for opened_backend in closing:
            opened_backend.close()
        raise
    return memories, entries, closing
