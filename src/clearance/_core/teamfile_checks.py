"""Team-file checks across keys: settings that would have no effect, messages to nobody."""

from __future__ import annotations

from clearance._core.errors import ConfigError
from clearance._core.run_spec import RunSpec
from clearance._core.spec import Task, Team

__all__ = ["check_effective", "check_messages"]


_NEEDS = {
    "max_output_files": ("write_output", "writes no outputs: give it the write_output tool"),
    "max_output_size_bytes": ("write_output", "writes no outputs: give it the write_output tool"),
    "max_children": ("spawn", "spawns no children: give it can_spawn"),
    "spawn_timeout_s": ("spawn", "spawns no children: give it can_spawn"),
    "max_steps": ("tools", "runs no tool loop: give it tools, can_delegate_to or can_spawn"),
    "answer_at_max_steps": (
        "tools",
        "runs no tool loop: give it tools, can_delegate_to or can_spawn",
    ),
}


def check_effective(spec: RunSpec, team: Team, tasks: tuple[Task, ...]) -> None:
    """Refuse keys that would have no effect: a setting nobody reads is a silent no-op.

    Raises:
        ConfigError: An agent limit its agent never uses (``max_output_files`` without
            ``write_output``, ``max_children`` without ``can_spawn``, ``max_steps`` without a
            tool loop), or ``project``, ``isolation`` or ``workspace`` in a team without
            isolated tasks or spawning.
    """
    specs = [*spec.agents, *((spec.coordinator,) if spec.coordinator else ())]
    for entry in specs:
        agent = entry.to_agent()
        has = {
            "write_output": "write_output" in entry.tools,
            "spawn": bool(agent.can_spawn),
            "tools": agent.uses_tools,
        }
        for name in sorted(entry.limits.model_fields_set):
            need = _NEEDS.get(name)
            if need is not None and not has[need[0]]:
                raise ConfigError(
                    f"has no effect: agent {agent.name!r} {need[1]}",
                    field=f"agents.{agent.name}.limits.{name}",
                )
    isolated = any(t.mode == "isolated" for t in tasks)
    spawns = any(a.can_spawn for a in team.agents)
    for key, used, why in (
        ("project", isolated, "no task has mode: isolated"),
        ("isolation", isolated, "no task has mode: isolated"),
        ("workspace", spawns, "no agent can spawn children (can_spawn)"),
    ):
        if key in spec.model_fields_set and not used:
            raise ConfigError(f"has no effect: {why}", field=key)


def check_messages(spec: RunSpec) -> None:
    """Refuse a message to an agent the team does not have (it would reach nobody)."""
    names = {a.name for a in spec.agents}
    if spec.coordinator is not None:
        names.add(spec.coordinator.name)
    for i, message in enumerate(spec.messages):
        if message.to != "*" and message.to not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(
                f"message to unknown agent {message.to!r} would reach nobody (agents: {known})",
                field=f"messages.{i}.to",
            )
