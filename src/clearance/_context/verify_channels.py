"""MCP servers shared by agents: declared channels, and undeclared ones (part of `verify_run`).

An MCP server is a channel between the agents that call it. By default each agent gets its
own stdio server folder, so no channel exists; a server declared ``share: true`` is a
channel the team file allowed, recorded in each of its ``mcp_call`` events (``shared``).
`mcp_channels` lists the declared channels a run used (which agents called which shared
server) and flags an HTTP server that several agents called without the declaration (the
team-file check refuses that at load, so only an edited or older ledger shows it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clearance._core.vocabulary import EventKind
from clearance._state.ledger import EventRecord, ToolCallRecord

__all__ = ["mcp_channels"]


def mcp_channels(
    events: Iterable[EventRecord], tool_calls: Mapping[str, ToolCallRecord]
) -> tuple[tuple[str, ...], list[tuple[str, str | None, str]]]:
    """The run's declared MCP channels, and its undeclared ones as problems.

    Args:
        events: The run's events (its ``mcp_call`` events are read).
        tool_calls: The run's tool calls by id (for the agent of each MCP call).

    Returns:
        ``(channels, problems)``: one line per shared server, ``"MCP server 'notes' shared by
        agents alice, bob (share: true)"``; ``(subject, call id, reason)`` per HTTP server
        called by several agents without ``share: true``.
    """
    callers: dict[tuple[str, bool, str], list[str]] = {}
    for event in events:
        if event.kind != EventKind.MCP_CALL:
            continue
        data = event.data
        call = tool_calls.get(str(data.get("tool_call_id")))
        key = (str(data.get("server")), data.get("shared") is True, str(data.get("transport")))
        agents = callers.setdefault(key, [])
        if call is not None and call.agent not in agents:
            agents.append(call.agent)
    channels: list[str] = []
    problems: list[tuple[str, str | None, str]] = []
    for (server, shared, transport), agents in sorted(callers.items()):
        names = ", ".join(sorted(agents)) or "no recorded agent"
        if shared:
            channels.append(f"MCP server {server!r} shared by agents {names} (share: true)")
        elif transport == "http" and len(agents) > 1:
            problems.append(
                (
                    f"MCP server {server}",
                    None,
                    f"called by agents {names} without share: true: an undeclared channel "
                    "between them",
                )
            )
    return tuple(channels), problems
