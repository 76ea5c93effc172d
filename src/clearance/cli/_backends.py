"""Opening a run's memory and store for the commands: from the team file, or as recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from clearance._agents.mcp import load_mcp_tools_sync
from clearance._agents.tools import Tool, import_function, mark_tool
from clearance._core.errors import ConfigError, StoreError
from clearance._core.mcp_spec import mcp_refs
from clearance._core.teamfile import LoadedTeam
from clearance._orchestration.run_memory import RunMemory, default_memory_url, masked_url
from clearance._state.ledger import RunRecord
from clearance._state.memory import MemoryRecord, memory_lookup
from clearance._state.store import ContextStore, StoreEntry

__all__ = ["run_memory_for", "team_tools", "verify_lookups"]


def run_memory_for(
    loaded: LoadedTeam, *, override: str | None, ledger_url: str
) -> RunMemory | None:
    """The run's memory, or ``None`` when nothing uses memory.

    ``--memory``, else the team file's ``memory:``, else (when an agent has memory settings)
    ``memory.db`` next to the ledger.

    Raises:
        ConfigError: The URL is malformed.
    """
    settings = loaded.spec.memory_settings
    uses = loaded.spec.memory is not None or any(a.memory is not None for a in loaded.team.agents)
    if override is None and not uses:
        return None
    url = override or settings.url or default_memory_url(ledger_url)
    return RunMemory(url, on_error=settings.on_error)


def team_tools(loaded: LoadedTeam) -> dict[str, Callable[..., Any] | Tool]:
    """The team file's ``tools:`` (name to ``module:function``), imported, and its MCP tools.

    The MCP tools agents list (``mcp:<server>/<tool>``) are looked up on their servers
    (see `load_mcp_tools`), keyed by the function name a model calls (``mcp__<server>__<tool>``).

    Raises:
        ConfigError: An entry cannot be imported, or an MCP server cannot be used (the
            message names the file and entry or server).
    """
    tools: dict[str, Callable[..., Any] | Tool] = {}
    for name, path in loaded.spec.tool_functions.items():
        try:
            function = import_function(path, field=f"tools.{name}")
        except ConfigError as exc:
            raise ConfigError(str(exc), source=loaded.source) from exc
        if not isinstance(entry := loaded.spec.tools[name], str):
            mark_tool(function, idempotent=entry.idempotent, replay=entry.replay)
        tools[name] = function
    agents = (*loaded.team.agents, *filter(None, [loaded.team.coordinator]))
    refs = [ref for agent in agents for ref in mcp_refs(agent.tools)]
    try:
        tools.update(load_mcp_tools_sync(loaded.spec.mcp_servers, refs))
    except ConfigError as exc:
        raise ConfigError(str(exc), source=loaded.source) from exc
    return tools


def _recorded(record: RunRecord, key: str) -> str | None:
    value = record.config.get(key)
    url = value.get("url") if isinstance(value, dict) else None
    return url if isinstance(url, str) and url else None


def _reachable(url: str, what: str, option: str) -> None:
    """Refuse a masked URL or a missing SQLite file, naming the backend and the override."""
    hint = f"; give it with {option} URL"
    if "***" in url:
        raise StoreError(f"the run's {what} is at {url}, whose password is not recorded{hint}")
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(f"the run's {what} URL {masked_url(url)!r} is not valid{hint}") from exc
    database = parsed.database or ""
    local = database not in ("", ":memory:") and not database.startswith("file:")
    if parsed.drivername.startswith("sqlite") and local and not Path(database).is_file():
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
        ``(memory lookup or None, store lookup or None, things to close)``.

    Raises:
        StoreError: A backend is unreachable (the message names it and the override option).
    """
    closing: list[Any] = []
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
    store_url = store or _recorded(record, "store")
    entries = None
    if store_url is not None:
        _reachable(store_url, "store", "--store")
        try:
            opened = ContextStore(store_url)
        except StoreError as exc:
            raise StoreError(
                f"the run's store is unreachable: {exc}; give it with --store URL"
            ) from exc
        closing.append(opened)
        entries = opened.get_entry
    return memories, entries, closing
