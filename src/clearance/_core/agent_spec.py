"""Agent specs: what an agent is (`Agent`), its limits, its sampling and its file caps."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from clearance._core.errors import ConfigError
from clearance._core.memory_spec import AgentMemory
from clearance._core.names import (
    check_count,
    check_name,
    check_number,
    check_text,
    text_tuple,
)
from clearance._core.store_rules import check_grant_pattern, check_ttl

__all__ = [
    "DEFAULT_TOOL_STEPS",
    "Agent",
    "AgentLimits",
    "FileCaps",
    "LIMIT_RANGES",
    "MAX_TOKENS",
    "MAX_TOOL_TIMEOUT_S",
    "OversizePolicy",
    "Sampling",
    "TOOL_TIMEOUT_S",
]

DEFAULT_TOOL_STEPS = 8
"""Model calls a tool-using agent loop may make when ``AgentLimits.max_steps`` is ``None``."""


OversizePolicy = Literal["error", "truncate"]
"""What to do with a file over a cap: raise `LimitExceeded`, or cut it with a visible marker."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FileCaps:
    """Size caps on the files of one isolated context.

    Attributes:
        max_file_bytes: Most bytes of any one file.
        max_total_bytes: Most bytes of all files of one context together.
        on_oversize: ``"error"`` raises `LimitExceeded` (``max_file_bytes`` or
            ``max_total_bytes``); ``"truncate"`` keeps the first bytes that fit and appends
            `truncation_marker`, so the cut is visible to the model and in the manifest.
    """

    max_file_bytes: int = 64 * 1024
    max_total_bytes: int = 256 * 1024
    on_oversize: OversizePolicy = "error"

    def __post_init__(self) -> None:
        check_count("file_caps.max_file_bytes", self.max_file_bytes, least=1)
        check_count("file_caps.max_total_bytes", self.max_total_bytes, least=1)
        if self.max_file_bytes < 1 or self.max_total_bytes < 1:
            raise ConfigError("file caps must be at least 1 byte", field="file_caps")
        if self.on_oversize not in ("error", "truncate"):
            raise ConfigError(
                f"on_oversize must be 'error' or 'truncate', got {self.on_oversize!r}",
                field="file_caps.on_oversize",
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Sampling:
    """How an agent's model decodes; ``None`` leaves a setting to the provider's default.

    The embedded provider's defaults (``repeat_penalty`` 1.15 and stop sequences that end a
    turn) keep a small model from looping; see `clearance.models.LlamaCppModel`.

    Attributes:
        temperature: Sampling temperature, 0 to 2 (0: the most likely tokens). ``None``
            means 0.
        top_p: Nucleus sampling mass, in ``(0, 1]``.
        repeat_penalty: Penalty on tokens already generated, 1 to 2 (1: none). llama.cpp
            applies it as is; OpenAI-compatible servers receive it as ``repeat_penalty``
            (llama.cpp, vLLM) in the request body.
        stop: Up to 8 non-empty strings that end the answer when generated (not included).

    Raises:
        ConfigError: A value out of range, or a bad ``stop`` list.
    """

    temperature: float | None = None
    top_p: float | None = None
    repeat_penalty: float | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", text_tuple("sampling.stop", self.stop))
        for name in ("temperature", "top_p", "repeat_penalty"):
            if (value := getattr(self, name)) is not None:
                check_number(f"sampling.{name}", value)
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ConfigError("must be 0 to 2", field="sampling.temperature")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError("must be above 0 and at most 1", field="sampling.top_p")
        if self.repeat_penalty is not None and not 1 <= self.repeat_penalty <= 2:
            raise ConfigError("must be 1 to 2", field="sampling.repeat_penalty")
        if len(self.stop) > 8 or any(
            not isinstance(s, str) or not s or len(s) > 64 for s in self.stop
        ):
            raise ConfigError(
                "must be at most 8 non-empty strings of at most 64 characters",
                field="sampling.stop",
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentLimits:
    """Hard limits on one agent's work.

    Attributes:
        max_output_tokens: Most tokens the model may generate per call.
        max_prompt_tokens: Most tokens a prompt may hold; ``None`` means the model's context
            window minus ``max_output_tokens`` and the tokens its chat template adds (the
            embedded model counts its own). A larger prompt fails the task with
            `LimitExceeded`; nothing is truncated silently.
        timeout_s: Deadline, in wall-clock seconds, of one model call: every attempt, and
            the backoff between attempts, included. When it passes the call fails with
            `LimitExceeded` naming ``timeout_s`` and is not retried. ``None`` means no
            deadline (not recommended: a server that trickles bytes then holds the task).
        attempt_timeout_s: Most seconds one attempt may take before it is abandoned and
            retried (a transient failure), shorter than ``timeout_s``; ``None`` lets an attempt
            use whatever is left of the deadline.
        retries: Most retries of a model call after a transient failure (connection error,
            timeout, HTTP 429 or 5xx), with exponential backoff and jitter between attempts;
            0 disables retrying. Client errors (other 4xx) are never retried.
        max_dependency_tokens: Most tokens the result of any one task admitted into this
            agent's task prompts may hold, counted on the result text with the agent's model;
            ``None`` means no limit. A larger result fails the dependent task with
            `DependencyPayloadError`; nothing is truncated silently.
        max_steps: Most model calls of one tool-using agent loop (a task, or one delegation)
            and most steps an ``AgentSession`` may record (model calls, tool calls, spawns);
            reaching it raises `LimitExceeded` naming ``max_steps``. ``None`` means
            `DEFAULT_TOOL_STEPS` (8) for the tool loop and no limit for a session.
        max_tokens_per_step: Most tokens one model call of this agent may generate: the
            ``max_tokens`` sent is at most this, and a provider reporting more completion
            tokens fails the call with `LimitExceeded`. ``None`` means ``max_output_tokens``,
            unchecked.
        max_model_calls: Most model calls one task of this agent may cause in all: its
            tool loop, its delegates, its clarification rounds and its spawned children
            together (retries of one call are not counted again). Bounds delegation and
            spawn fan-out; reaching it fails the task with `LimitExceeded` naming
            ``max_model_calls``. An agent running as a delegate or a spawned child makes at
            most its own ``max_model_calls`` per delegation or child, within the task's
            (reaching it fails that delegation or child). ``None`` for no cap.
        max_tool_calls_per_step: Most tool calls one model answer of this agent may ask for
            (on every call path: a task's tool loop, a delegate, a child, and the paths
            without tools, where an answer with tool calls is not expected at all). An answer
            asking for more fails the call with `LimitExceeded` naming
            ``max_tool_calls_per_step`` before any of its calls runs or is recorded; with
            ``max_steps``, it bounds the tool calls of one loop.
        max_output_files: Most files an agent may write to its workspace's ``outputs/``
            (a spawned child's, in runs).
        max_output_size_bytes: Most bytes all files in an agent's ``outputs/`` may hold.
        max_children: Most children one task of this agent may spawn (its ``fan_out`` and
            ``spawn`` tool calls together); more is `LimitExceeded` naming ``max_children``.
        spawn_timeout_s: Most seconds a parent waits for the children of one fan-out; a
            child still running then is cancelled and reported as timed out.
        answer_at_max_steps: Opt-in: make the last of the ``max_steps`` model calls without
            tools, so the agent must answer with what it has instead of failing with
            `LimitExceeded` (useful with small models that keep calling tools).
        compact_tool_steps: Opt-in compaction of the tool loop (`StepCompactor`): the
            latest this many tool results stay verbatim in each prompt, each older one is
            folded to one line; a prompt that would overflow ``max_prompt_tokens`` keeps
            fewer verbatim (down to none) instead of failing. ``None`` (default): every
            result verbatim, and an overflow fails with `LimitExceeded`.
    """

    max_output_tokens: int = 512
    max_prompt_tokens: int | None = None
    timeout_s: float | None = 600.0
    attempt_timeout_s: float | None = None
    max_dependency_tokens: int | None = 4000
    max_steps: int | None = None
    max_tokens_per_step: int | None = None
    max_model_calls: int | None = 64
    max_tool_calls_per_step: int = 32
    max_output_files: int | None = None
    max_output_size_bytes: int | None = None
    answer_at_max_steps: bool = False
    retries: int = 2
    max_children: int = 8
    spawn_timeout_s: float = 300.0
    compact_tool_steps: int | None = None

    def __post_init__(self) -> None:
        for name, (least, most) in LIMIT_RANGES.items():
            if (value := getattr(self, name)) is not None:
                check_count(f"limits.{name}", value, least=least, most=most)
        for name in ("timeout_s", "attempt_timeout_s", "spawn_timeout_s"):
            if (value := getattr(self, name)) is not None:
                check_number(f"limits.{name}", value)
                if not 0 < value < 10**7:
                    raise ConfigError(
                        "must be a positive number of seconds", field=f"limits.{name}"
                    )


MAX_TOKENS = 10_000_000
"""Most tokens any token limit or context window may be set to (ten million)."""

TOOL_TIMEOUT_S = 60.0
"""Default deadline, in seconds, of one call of a function tool (as an MCP tool's)."""

MAX_TOOL_TIMEOUT_S = 86_400.0
"""Longest deadline a tool may be given: one day."""

LIMIT_RANGES: dict[str, tuple[int, int]] = {
    "max_output_tokens": (1, MAX_TOKENS),
    "max_prompt_tokens": (1, MAX_TOKENS),
    "max_dependency_tokens": (1, MAX_TOKENS),
    "max_tokens_per_step": (1, MAX_TOKENS),
    "max_steps": (1, 10_000),
    "max_model_calls": (1, 100_000),
    "max_tool_calls_per_step": (1, 128),
    "max_children": (1, 1_000),
    "max_output_files": (1, 100_000),
    "max_output_size_bytes": (0, 2**40),
    "retries": (0, 100),
    "compact_tool_steps": (0, 10_000),
}
"""`AgentLimits`' integer fields and their bounds (least, most), here and in team files: a
number past any sane setting is a mistake, and one past what a counter or a provider can
hold (``max_output_tokens: 10**30``) made negative prompt budgets."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Agent:
    """Declarative spec of an agent: a pure function from its prompt to a result text.

    Attributes:
        name: Unique name within the team; tasks name it as their assignee.
        instructions: The system prompt.
        role: One-line summary shown to the coordinator when it plans. Only a declared role
            is shown: an agent without one is listed by name only (its instructions, first
            line included, never reach the coordinator).
        model: Model id (``"provider:name"``), or ``None`` for the orchestrator's default.
        limits: Hard limits on the agent's model calls.
        tools: Tools the agent may call (opt-in; none by default): names of built-in tools
            (``store_get``, ``store_set``, ``store_query``), names of tools registered with
            the orchestrator, or plain typed Python functions.
        can_delegate_to: Agents this one may delegate to with the ``delegate`` tool (which
            it gets when this is not empty).
        can_spawn: Agents this one may spawn as children, with the ``spawn`` tool (which it
            gets when this is not empty) or a task's ``fan_out``. A child sees only its goal.
        store_grants: Store namespace (or ``prefix*``) to ``"read"``, ``"write"`` or
            ``"read_write"``; every other namespace is denied. Stored as a copy and left
            out of the hash.
        memory: Long-term memory in runs (recall before a task, record after), or ``None``
            (default) for none. Private to the agent unless ``memory.record_to`` names one
            of its memory groups.
        store_read_extends_ttl_s: When set, every store entry this agent reads through its
            tools has its expiry pushed to at least this many seconds from now (never
            earlier, and never added to an entry that does not expire): knowledge that is
            used survives. ``None`` (default): reads leave expiry alone.
        sampling: How its model decodes (temperature, top_p, repeat_penalty, stop).
    """

    name: str
    instructions: str
    role: str = ""
    model: str | None = None
    limits: AgentLimits = field(default_factory=AgentLimits)
    tools: tuple[str | Callable[..., Any], ...] = ()
    can_delegate_to: tuple[str, ...] = ()
    store_grants: Mapping[str, str] = field(default_factory=dict, hash=False)
    can_spawn: tuple[str, ...] = ()
    memory: AgentMemory | None = None
    store_read_extends_ttl_s: float | None = None
    sampling: Sampling = field(default_factory=Sampling)

    def __post_init__(self) -> None:
        check_name("agent name", self.name)
        where = f"agents.{self.name}"
        check_text(f"{where}.instructions", self.instructions)
        check_text(f"{where}.role", self.role)
        check_text(f"{where}.model", self.model, optional=True)
        if isinstance(self.tools, (str, bytes)):
            raise ConfigError("must be a list of tools, got a string", field=f"{where}.tools")
        for name in ("can_delegate_to", "can_spawn"):
            object.__setattr__(self, name, text_tuple(f"{where}.{name}", getattr(self, name)))
        ext = self.store_read_extends_ttl_s
        if ext is not None:
            check_number(f"{where}.store_read_extends_ttl_s", ext)
        check_ttl(ext, f"agents.{self.name}.store_read_extends_ttl_s")
        object.__setattr__(self, "tools", tuple(self.tools))
        for tool in self.tools:
            if not (isinstance(tool, str) or callable(tool)):
                raise ConfigError(
                    f"a tool is a name or a function, got {tool!r:.60}", field=f"{where}.tools"
                )
            if not isinstance(tool, str) and not isinstance(getattr(tool, "__name__", None), str):
                raise ConfigError(
                    f"a tool function needs a name (its __name__), {tool!r:.60} has none: "
                    "wrap it in a def", field=f"{where}.tools",
                )  # fmt: skip
        object.__setattr__(self, "can_delegate_to", tuple(dict.fromkeys(self.can_delegate_to)))
        object.__setattr__(self, "can_spawn", tuple(dict.fromkeys(self.can_spawn)))
        object.__setattr__(self, "store_grants", dict(self.store_grants))
        if self.name in self.can_delegate_to:
            raise ConfigError("an agent may not delegate to itself", field="can_delegate_to")
        for pattern, access in self.store_grants.items():
            check_grant_pattern(pattern, field=f"agents.{self.name}.store_grants.{pattern}")
            if access not in ("read", "write", "read_write"):
                raise ConfigError(
                    f"must be 'read', 'write' or 'read_write', got {access!r}",
                    field=f"agents.{self.name}.store_grants.{pattern}",
                )

    @property
    def uses_tools(self) -> bool:
        """Whether the agent runs the tool loop (it has tools, delegation or spawn targets)."""
        return bool(self.tools or self.can_delegate_to or self.can_spawn)

    @property
    def summary(self) -> str:
        """The declared role (at most 200 characters) for the coordinator's roster, or ``""``."""
        text = self.role
        return text if len(text) <= 200 else text[:197] + "..."
