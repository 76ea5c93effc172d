"""Team-file keys nothing reads in some teams: the coordinator's, limits, input, memory groups.

The companion of `clearance._core.teamfile_checks`: each check refuses, with one line naming
the key, a setting the run would accept and then never read.
"""

from __future__ import annotations

from clearance._core.errors import ConfigError
from clearance._core.run_spec import RunSpec
from clearance._core.spec import Task
from clearance._core.teamfile_models import AgentSpec

__all__ = ["check_interactive", "check_unread"]

_STORE_READS = ("store_get", "store_query", "store_get_structured", "store_search")
"""The store tools whose reads move an entry's expiry (``store_read_extends_ttl_s``)."""


def check_unread(spec: RunSpec, tasks: tuple[Task, ...]) -> None:
    """Refuse keys no call path reads in this team.

    Raises:
        ConfigError: The coordinator's ``role`` (roles are the roster the coordinator plans
            with, which lists the workers only); the coordinator's ``store_read_extends_ttl_s``
            when it reads the store through no tool; the coordinator's
            ``max_dependency_tokens`` when no prompt of it admits a task's result; an
            ``attempt_timeout_s`` no shorter than its ``timeout_s`` (the deadline ends the
            call first); ``input.default`` (or ``--input``) when no task reads the input
            folder; a ``memory_groups`` entry none of whose members has ``memory:`` (nothing
            recalls or records its memory) and that declares no ``shared_conversation``.
            The keys only tasks read are not refused where the coordinator plans the tasks,
            or planned them (`_planned`).
    """
    _check_groups(spec)
    coordinator = spec.coordinator
    if coordinator is not None:
        _check_coordinator(spec, coordinator, tasks)
    for entry in (*spec.agents, *((coordinator,) if coordinator else ())):
        where = "coordinator" if entry is coordinator else f"agents.{entry.name}"
        limits = entry.limits
        attempt, deadline = limits.attempt_timeout_s, limits.timeout_s
        if attempt is not None and deadline is not None and attempt >= deadline:
            raise ConfigError(
                f"has no effect: it is not shorter than timeout_s ({deadline:g}), whose "
                "deadline ends the call first (make it shorter, or drop it)",
                field=f"{where}.limits.attempt_timeout_s",
            )
    if (
        spec.input.default is not None
        and not _planned(spec, tasks)
        and not _reads_input(spec, tasks)
    ):
        raise ConfigError(
            "has no effect: no task reads the input folder (files, for_each_file, an "
            "isolated task without project:, or a run: step)",
            field="input.default",
        )


def _check_groups(spec: RunSpec) -> None:
    """Refuse a memory group whose memory nobody recalls or records (no member has memory:).

    A group's ``shared_conversation`` is used by ``clearance chat`` whatever its members'
    ``memory:``, so a group that declares one is kept.
    """
    remembering = {
        entry.name
        for entry in (*spec.agents, *filter(None, [spec.coordinator]))
        if entry.memory is not None
    }
    for group in spec.memory_groups:
        if group.shared_conversation is None and not remembering.intersection(group.agents):
            raise ConfigError(
                "has no effect: none of its agents has memory:, so nothing recalls or records "
                f"the group's memory (give one of {', '.join(group.agents)} memory: {{recall: 3}})",
                field=f"memory_groups.{group.name}",
            )


def _check_coordinator(spec: RunSpec, coordinator: AgentSpec, tasks: tuple[Task, ...]) -> None:
    """Refuse the coordinator's keys that none of its prompts (plan, clarification...) reads."""
    if coordinator.role:
        raise ConfigError(
            "has no effect: roles are shown to the coordinator when it plans, and its roster "
            "lists the agents only (say it in its instructions)",
            field="coordinator.role",
        )
    reads = any(t in _STORE_READS for t in coordinator.tools)
    bounds = coordinator.can_delegate_to or coordinator.can_spawn
    if coordinator.store_read_extends_ttl_s is not None and not (reads or bounds):
        raise ConfigError(
            "has no effect: the coordinator reads the store through no tool "
            f"({', '.join(_STORE_READS)}) and has no delegate or child to bound",
            field="coordinator.store_read_extends_ttl_s",
        )
    if "max_dependency_tokens" not in coordinator.limits.model_fields_set or _planned(spec, tasks):
        return
    asks = spec.isolation.max_rounds > 0  # a clarification prompt holds the task's results
    admitting = [
        t
        for t in tasks
        if t.run is None
        and (t.depends_on or t.memory_scope == "all")
        and (t.assignee == coordinator.name or (t.mode == "isolated" and asks))
    ]
    if not admitting:
        raise ConfigError(
            "has no effect: no prompt of the coordinator admits a task's result (it answers "
            "no question of an isolated task with dependencies, and has no such task)",
            field="coordinator.limits.max_dependency_tokens",
        )


def _planned(spec: RunSpec, tasks: tuple[Task, ...]) -> bool:
    """Whether the coordinator plans the tasks (none are given) or planned them.

    A file ``clearance plan`` wrote (its ``plan:`` key) keeps the keys of the team file it
    planned for, and its tasks are the plan, to be edited before it runs (files given, a
    task made isolated): a key that only such tasks would read is not refused there, as it
    is not in the file the plan came from.
    """
    return not tasks or spec.plan is not None


def _reads_input(spec: RunSpec, tasks: tuple[Task, ...]) -> bool:
    """Whether a task reads the input folder: its files, a step, or an isolated task's project."""
    if any(t.for_each_file for t in spec.tasks):
        return True
    for task in tasks:
        if task.mode == "isolated":
            if spec.project is None:
                return True  # the input folder is its project
        elif task.files or task.run is not None:
            return True
    return False


def check_interactive(spec: RunSpec, interactive: bool) -> None:
    """Refuse ``--interactive`` (of ``clearance run`` or ``resume``) where it would ask nothing.

    It answers isolated tasks' questions (when ``isolation.max_rounds`` allows any) and
    decides approvals (a task's ``approval: required``, or a ``tools:`` entry's). A run the
    coordinator plans (no tasks in the spec) may plan either, so it is not refused.

    Raises:
        ConfigError: ``interactive`` is true and no task of ``spec`` is isolated (with
            clarification rounds) or needs approval, and no tool needs approval.
    """
    if not interactive or not spec.tasks or spec.approval_tools:
        return
    rounds = spec.isolation.max_rounds > 0
    if any(t.approval == "required" or (t.mode == "isolated" and rounds) for t in spec.tasks):
        return
    raise ConfigError(
        "has no effect: no task is isolated (with isolation.max_rounds above 0) or needs "
        "approval, and no tool needs approval, so nobody would be asked anything",
        field="--interactive",
    )
