"""`DelegationChain`: an immutable record of who delegated what to whom.

A chain is passed along with each delegation, so a delegate cannot hand work back to any
agent already in it (no loops), and the chain stops growing at ``max_depth`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from clearance._context.verify_delegation import DEFAULT_MAX_DEPTH
from clearance._core.errors import ConfigError

__all__ = ["DEFAULT_MAX_DEPTH", "MAX_DEPTH", "DelegationChain", "DelegationStep"]

MAX_DEPTH = 64
"""Most steps a chain may be allowed (``max_depth``): every delegation is a nested tool loop."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DelegationStep:
    """One delegation: ``from_agent`` asked ``to_agent`` to do ``task``.

    Attributes:
        from_agent: The delegating agent.
        to_agent: The delegate.
        task: The delegated task text, verbatim.
    """

    from_agent: str
    to_agent: str
    task: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"from": self.from_agent, "to": self.to_agent, "task": self.task}


@dataclass(frozen=True, kw_only=True, slots=True)
class DelegationChain:
    """Who delegated what to whom, in order. Immutable: `add_step` returns a new chain.

    Attributes:
        steps: The delegations so far, oldest first.
        max_depth: Most steps the chain may hold: an integer from 1 to `MAX_DEPTH` (default
            `DEFAULT_MAX_DEPTH`, 3).
        origin: The agent the chain starts from before any step (the task's assignee), or
            ``None``; it counts as part of the chain for `would_loop`.
        above: For a spawned child's chain: the agents of the chain its spawner acted in
            (the task's assignee and every delegate on the way, the spawner last). None of
            them may be delegated to from this chain (`would_loop`), so a loop cannot pass
            through a spawn (A delegates to B, B spawns C, C delegates to A). Not part of
            the chain's record (`to_dict`), which starts at the child.

    Raises:
        ConfigError: ``max_depth`` is not an integer from 1 to `MAX_DEPTH` (``nan`` or
            ``inf`` would never stop the chain).
    """

    steps: tuple[DelegationStep, ...] = ()
    max_depth: int = DEFAULT_MAX_DEPTH
    origin: str | None = None
    above: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        depth = self.max_depth
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise ConfigError(f"must be an integer from 1 to {MAX_DEPTH}, got {depth!r}",
                              field="max_depth")  # fmt: skip
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "above", tuple(self.above))

    def add_step(self, from_agent: str, to_agent: str, task: str) -> DelegationChain:
        """A new chain with one more step; this chain is left unchanged.

        Checks nothing: callers ask `would_loop` and `is_max_depth` first.
        """
        step = DelegationStep(from_agent=from_agent, to_agent=to_agent, task=task)
        return replace(self, steps=(*self.steps, step))

    @property
    def agents(self) -> tuple[str, ...]:
        """Every agent of the chain in order of appearance, each once (origin first)."""
        names: list[str] = [self.origin] if self.origin else []
        for step in self.steps:
            names.extend((step.from_agent, step.to_agent))
        return tuple(dict.fromkeys(names))

    def would_loop(self, agent: str) -> bool:
        """Whether ``agent`` already appears in the chain (a source or a target) or above it."""
        return agent in self.agents or agent in self.above

    def is_max_depth(self) -> bool:
        """Whether the chain holds ``max_depth`` steps (or more), so it may not grow."""
        return len(self.steps) >= self.max_depth

    @property
    def depth(self) -> int:
        """How many steps the chain holds."""
        return len(self.steps)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, recorded in the ledger."""
        return {
            "origin": self.origin,
            "max_depth": self.max_depth,
            "steps": [s.to_dict() for s in self.steps],
        }

    def __str__(self) -> str:
        return " -> ".join(self.agents) or "(empty)"
