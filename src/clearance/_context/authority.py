"""`Authority`: what an agent may do when it acts for a caller — never more than its caller.

A task's assignee acts for nobody: it has its own tools and store grants. A delegate acts for
its delegator, and a spawned child for the agent that spawned it (a task's assignee for its
``fan_out``, or the agent whose ``spawn`` call asked): each has the intersection of its own
capabilities and its caller's effective ones, so along a chain of delegations and spawns an
agent has at most what every agent above it has:

- **store grants**: `StoreGrants.intersect` (exact for namespace patterns); an operation
  refused only for that reason is a ``grant_withheld`` event. Reads push expiry forward
  (``store_read_extends_ttl_s``) only when every agent above extends on its reads too, by
  the shortest extension;
- **tools** from ``tools:`` (user functions and MCP tools): only those its caller may call
  too. A withheld tool is not offered to the model (its prompt does not list it) and a call
  of it is refused; each loop that withholds tools records a ``tools_withheld`` event. The
  store tools are bounded by the grants above, exactly per namespace and operation; the
  workspace tools (``write_output``, ``read_output``) act on the agent's own fresh folder
  only; ``delegate`` and ``spawn`` follow ``can_delegate_to`` and ``can_spawn`` (and the
  chain bounds what the next agent may do in turn): none of these is withheld;
- **children**: an agent that spawns acting for others spawns, in the task, at most the
  fewest ``max_children`` of any agent above it (and its own), as the task's assignee does.

This is the object-capability rule of attenuation (a capability passed on is never
amplified: Miller, *Robust Composition*, 2006), applied to LLM agents: the confused deputy
(Hardy, 1988) is a delegate that reads, writes or calls for a caller what the caller may not.
``clearance verify`` rebuilds whom each tool call acted for (`callers_of`) and checks both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clearance._context.tool_sections import STORE_TOOLS, WORKSPACE_TOOLS, tool_name
from clearance._core.spec import Agent
from clearance._core.vocabulary import EventKind
from clearance._state.grants import StoreGrants
from clearance._state.ledger import Recorder

__all__ = ["Authority", "ceiling_tools", "effective_grants", "missing_tool", "withheld_tools"]


_OWN = frozenset((*WORKSPACE_TOOLS, *STORE_TOOLS))
"""Tools never withheld: bounded by the agent's own folder, or by the grants."""


def ceiling_tools(agent: Agent) -> frozenset[str]:
    """The names of ``agent``'s user and MCP tools: those a caller's ceiling bounds."""
    return frozenset(tool_name(t) for t in agent.tools).difference(_OWN)


@dataclass(frozen=True, slots=True)
class Authority:
    """What one agent may do as it acts.

    Attributes:
        grants: Its effective store grants.
        tools: The names of the user and MCP tools it may call (`ceiling_tools`; the
            workspace and store tools are not bounded by name).
        read_extends_ttl_s: How far its store reads push expiry forward (its
            ``store_read_extends_ttl_s``), ``None`` for not at all: acting for others, only
            when each of them extends on its reads too, and by the shortest extension.
        max_children: Most children the task it serves may have when it spawns: its own
            ``max_children``, and acting for others the fewest of theirs too.
    """

    grants: StoreGrants
    tools: frozenset[str]
    read_extends_ttl_s: float | None = None
    max_children: int | None = None

    @classmethod
    def of(cls, agent: Agent, ceiling: Authority | None) -> Authority:
        """``agent``'s authority acting for a caller whose authority is ``ceiling``.

        ``None`` (acting for nobody: a task's assignee) gives its own grants and tools.
        """
        grants, tools = StoreGrants.parse(agent.store_grants), ceiling_tools(agent)
        extends = agent.store_read_extends_ttl_s
        children = agent.limits.max_children
        if ceiling is None:
            return cls(grants=grants, tools=tools, read_extends_ttl_s=extends,
                       max_children=children)  # fmt: skip
        if extends is not None and ceiling.read_extends_ttl_s is not None:
            extends = min(extends, ceiling.read_extends_ttl_s)
        else:  # a read that would touch what its caller's own reads leave alone
            extends = None
        if ceiling.max_children is not None:
            children = min(children, ceiling.max_children)
        return cls(grants=grants.intersect(ceiling.grants), tools=tools & ceiling.tools,
                   read_extends_ttl_s=extends, max_children=children)  # fmt: skip

    def withholds(self, name: str) -> bool:
        """Whether a ``tools:`` entry named ``name`` is withheld (its caller may not call it)."""
        return name not in _OWN and name not in self.tools


def effective_grants(agent: Agent, ceiling: Authority | None) -> StoreGrants:
    """What ``agent`` may do in the store acting for a caller of authority ``ceiling``."""
    return Authority.of(agent, ceiling).grants


def missing_tool(name: str, tools: Mapping[str, object], withheld: frozenset[str]) -> str:
    """The error a model gets for calling a tool it was not given, naming why."""
    if name in withheld:
        return (
            f"error: tool {name!r} is withheld: an agent you act for may not call it, so "
            "neither may you"
        )
    return f"error: unknown tool {name!r} (tools: {', '.join(tools) or 'none'})"


def withheld_tools(
    ledger: Recorder, run_id: str, subject: str, agent: Agent, ceiling: Authority | None
) -> frozenset[str]:
    """The names of ``agent``'s tools withheld under ``ceiling``; recorded when any are.

    A ``tools_withheld`` event (subject ``subject``, data ``agent`` and the sorted ``tools``)
    says which tools the model of this loop was not offered.
    """
    if ceiling is None:
        return frozenset()
    authority = Authority.of(agent, ceiling)
    withheld = frozenset(n for n in (tool_name(t) for t in agent.tools) if authority.withholds(n))
    if withheld:
        ledger.record_event(run_id, EventKind.TOOLS_WITHHELD, subject,
                            {"agent": agent.name, "tools": sorted(withheld)})  # fmt: skip
    return withheld
