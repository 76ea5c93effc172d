"""What `resume` checks before it acts on a recorded run.

Resuming acts on what the ledger holds: approval decisions let tools run, the recorded graph
says which tasks run and how. A ledger is a file (or a database) that others may be able to
write, so before anything is rebuilt from it:

1. **The record is checked against its hash chain** (`check_run_record`): every row of the run
   (events such as ``approval_decided`` among them) must be in the run's chain, and the
   chain's links must follow. A run recorded with a ledger key is resumed only with that key,
   so its links are checked as HMACs: a row added, changed or re-chained by someone without
   the key is refused.
2. **Steps are never imported from ledger data** (`check_recorded_steps`): a recorded task
   with ``run: python:<module>:<function>`` resumes only when the resuming caller declares
   the same task with the same ``run`` (the team file, ``clearance resume --team``). Built-in
   ``step:`` names are looked up in a fixed table and need nothing.
3. **The team file given to resume (``--team``) declares the run as recorded**
   (`check_team_file`): its ``tools:`` entry for a tool the run names may not import another
   function or change whether a call needs approval, and an agent of the run may not have
   other capabilities there (``tools``, ``store_grants``, ``can_delegate_to``,
   ``can_spawn``). The run is resumed as recorded (its approvals and grants are the recorded
   ones, and ``verify`` checks against them), so such an edit would have no effect or a
   silent one; it is refused instead. So is any other edit of the run's definition: an
   agent or a task added, removed or changed (an agent's ``instructions``, ``limits`` or
   recorded ``model``, a task's description or dependencies...): the run resumes the tasks
   and prompts it recorded. ``idempotent`` and ``replay`` are the team
   file's to decide (see `clearance._agents.replay`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

from clearance._context.verify_chain import check_chain
from clearance._core.errors import ConfigError
from clearance._core.run_spec import RunSpec
from clearance._core.spec import Task
from clearance._core.teamfile_models import AgentSpec
from clearance._state.chain import LEDGER_KEY_ENV
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger

__all__ = ["check_recorded_steps", "check_run_record", "check_team_file", "one_chain_check"]

_MAX_REASON_CHARS = 300

_CHECKED: ContextVar[dict[tuple[int, str], int] | None] = ContextVar(
    "clearance_chain_checked", default=None
)
"""Within `one_chain_check`: ``(id of the ledger, run id)`` to the chain head checked."""


@contextlib.contextmanager
def one_chain_check() -> Iterator[None]:
    """Within: `check_run_record` checks a run's chain once, not again while its head holds.

    One resume reads the run back several times (`resume_run`, `Orchestrator.from_run`,
    `Orchestrator.resume`); each read checks the chain, so a call outside this scope still
    refuses a broken chain. Inside it a run whose chain was checked and whose chain has not
    grown since (one indexed query) is not walked again.
    """
    token = _CHECKED.set({})
    try:
        yield
    finally:
        _CHECKED.reset(token)


def check_run_record(ledger: RunLedger, run_id: str) -> None:
    """Refuse to resume a run whose records do not match its hash chain.

    Args:
        ledger: The ledger holding the run; its key (``CLEARANCE_LEDGER_KEY``) checks a keyed
            run's links.
        run_id: The run's full id.

    Raises:
        ConfigError: The run was recorded with a ledger key and this ledger has none, or the
            chain check found a problem (a record added, removed, changed or re-chained);
            the message names the first problem and how many there are.
        StoreError: The ledger cannot be read.
    """
    checked = _CHECKED.get()
    seen = (id(ledger), run_id)
    # Checked in this resume, and nothing appended since: not walked again.
    if (
        checked is not None
        and seen in checked
        and ledger.chain_heads([run_id]).get(run_id) == checked[seen]
    ):
        return
    report = check_chain(ledger, run_id, ledger.chain_key)
    if report.keyed and ledger.chain_key is None:
        raise ConfigError(
            f"run {run_id} was recorded with a ledger key; set {LEDGER_KEY_ENV} to that key to "
            "resume it (without the key its records cannot be told from forged ones)",
        )
    if report.problems:
        where, record_id, reason = report.problems[0]
        named = f"{where} {record_id}" if record_id else where
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        raise ConfigError(
            f"run {run_id} cannot be resumed: {named}: {reason[:_MAX_REASON_CHARS]}{more}; "
            f"nothing was replayed or run (see clearance verify {run_id})",
        )
    if checked is not None and report.last_seq:
        checked[seen] = report.last_seq


def check_recorded_steps(graph: TaskGraph | None, declared: Iterable[Task]) -> None:
    """Refuse a recorded ``python:`` step that the resuming caller does not declare.

    Args:
        graph: The recorded graph (``None``: not planned yet, nothing to check).
        declared: The tasks as their definition declares them (the team file's tasks); a
            recorded ``python:`` step is accepted only when a declared task has the same id
            and the same ``run``.

    Raises:
        ConfigError: A recorded task runs a ``python:`` function that no declared task
            names; nothing was imported.
    """
    if graph is None:
        return
    runs = {task.id: task.run for task in declared}
    for task in graph:
        if task.run is None or not task.run.startswith("python:"):
            continue
        if runs.get(task.id) != task.run:
            raise ConfigError(
                f"recorded task {task.id!r} runs {task.run!r}, a function only the ledger names; "
                "a resumed run imports no module named by its record: resume with the team file "
                "that declares this task (clearance resume --team FILE)",
                field=f"tasks.{task.id}.run",
            )


def _tool_entry(spec: RunSpec, name: str) -> tuple[str | None, bool]:
    """A ``tools:`` entry's function and whether its calls need approval."""
    return spec.tool_functions[name], name in spec.approval_tools


def check_team_file(recorded: RunSpec, declared: RunSpec) -> None:
    """Refuse a team file that would change what a resumed run's tools or agents may do.

    Args:
        recorded: The spec the run recorded.
        declared: The team file given to resume it (``clearance resume --team``).

    Raises:
        ConfigError: For a tool the run names, the team file imports another function
            (a tool the run was given in code may be named now), or requires approval
            where the run did not, or the reverse; or an agent of the run (the coordinator
            included) has other ``tools``, ``store_grants``, ``can_delegate_to`` or
            ``can_spawn``, or any other key but a ``model`` the run did not record, in the
            team file; or an agent or a task is added, removed or changed there. The message
            names the entry.
    """
    _check_tools(recorded, declared)
    _check_agents(recorded, declared)
    _check_tasks(recorded, declared)


def _check_tools(recorded: RunSpec, declared: RunSpec) -> None:
    for name in declared.tools:
        if name not in recorded.tools:
            continue  # no agent of the run uses it
        (was, gated), (now, gates) = _tool_entry(recorded, name), _tool_entry(declared, name)
        if was is not None and now != was:
            change = f"imports {now!r}, the run imported {was!r}"
        elif gates != gated:
            change = "requires approval" if gates else "does not require approval"
            change += f", the run's {'did' if gated else 'did not'}"
        else:
            continue
        raise ConfigError(
            f"{change}; a resumed run runs the tools it recorded: restore the entry to "
            "resume, or start a new run with the changed team file",
            field=f"tools.{name}",
        )


def _check_agents(recorded: RunSpec, declared: RunSpec) -> None:
    agents = {a.name: a for a in (*recorded.agents, *_lead(recorded))}
    for agent in (*declared.agents, *_lead(declared)):
        original = agents.get(agent.name)
        if original is None:
            continue  # not an agent of the run
        for key in _CAPABILITIES:
            before, now = _capability(original, key), _capability(agent, key)
            if before != now:
                raise ConfigError(
                    f"is {now} in the team file, {before} in the run's record; a resumed run "
                    "acts with the capabilities it recorded: restore them to resume, or start a "
                    "new run with the changed team file",
                    field=f"agents.{agent.name}.{key}",
                )
        _check_definition(f"agents.{agent.name}", original, agent)
    names = {a.name for a in (*declared.agents, *_lead(declared))}
    for name in agents:
        if name not in names:
            raise ConfigError(
                f"is in the run's record, not in the team file; {_AS_RECORDED}",
                field=f"agents.{name}",
            )
    for name in sorted(names - agents.keys())[:1]:
        raise ConfigError(
            f"is in the team file, not in the run's record; {_AS_RECORDED}",
            field=f"agents.{name}",
        )


def _check_definition(where: str, recorded: AgentSpec, declared: AgentSpec) -> None:
    """Refuse an agent's other key (``instructions``, ``limits``...) changed in the team file.

    Its ``model`` is compared only where the run recorded one: ``clearance run --model``
    records none for every agent (the run's default model is then the given one).
    """
    was, now = recorded.model_dump(mode="json"), declared.model_dump(mode="json")
    for key, value in now.items():
        if value == was.get(key) or (key == "model" and was.get(key) is None):
            continue
        raise ConfigError(
            f"is {_shown(value)} in the team file, {_shown(was.get(key))} in the run's "
            f"record; {_AS_RECORDED}",
            field=f"{where}.{key}",
        )


_AS_RECORDED = (
    "a resumed run runs the tasks and prompts it recorded: restore the team file to resume, "
    "or start a new run with the changed team file"
)


def _shown(value: object) -> str:
    """``value`` as JSON, cut to a length an error line can show."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."


_MAX_VALUE_CHARS = 60


def _check_tasks(recorded: RunSpec, declared: RunSpec) -> None:
    """Refuse a task added, removed or changed in the team file (the first, in file order)."""
    was = {task.id: task.model_dump(mode="json") for task in recorded.tasks}
    now = {task.id: task.model_dump(mode="json") for task in declared.tasks}
    for task_id, task in now.items():
        if task_id not in was:
            raise ConfigError(
                f"is in the team file, not in the run's record; {_AS_RECORDED}",
                field=f"tasks.{task_id}",
            )
        for key, value in task.items():
            if value != was[task_id].get(key):
                raise ConfigError(
                    f"is {_shown(value)} in the team file, {_shown(was[task_id].get(key))} in "
                    f"the run's record; {_AS_RECORDED}",
                    field=f"tasks.{task_id}.{key}",
                )
    removed = [task_id for task_id in was if task_id not in now]
    if removed:
        raise ConfigError(
            f"is in the run's record, not in the team file; {_AS_RECORDED}",
            field=f"tasks.{removed[0]}",
        )


_CAPABILITIES = ("tools", "store_grants", "can_delegate_to", "can_spawn")
"""The keys of an agent that say what it may do."""


def _lead(spec: RunSpec) -> tuple[AgentSpec, ...]:
    return (spec.coordinator,) if spec.coordinator is not None else ()


def _capability(agent: AgentSpec, key: str) -> str:
    """One capability of an agent, in a form that compares (order aside) and reads."""
    value = getattr(agent, key)
    if isinstance(value, dict):
        return json.dumps(dict(sorted(value.items())))
    return json.dumps(sorted(value))
