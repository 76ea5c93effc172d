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
"""

from __future__ import annotations

from collections.abc import Iterable

from clearance._context.verify_chain import check_chain
from clearance._core.errors import ConfigError
from clearance._core.spec import Task
from clearance._state.chain import LEDGER_KEY_ENV
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger

__all__ = ["check_recorded_steps", "check_run_record"]

_MAX_REASON_CHARS = 300


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
    report = check_chain(ledger, run_id, ledger.chain_key)
    if report.keyed and ledger.chain_key is None:
        raise ConfigError(
            f"run {run_id} was recorded with a ledger key; set {LEDGER_KEY_ENV} to that key to "
            "resume it (without the key its records cannot be told from forged ones)",
            field="run",
        )
    if report.problems:
        where, record_id, reason = report.problems[0]
        named = f"{where} {record_id}" if record_id else where
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        raise ConfigError(
            f"run {run_id} cannot be resumed: {named}: {reason[:_MAX_REASON_CHARS]}{more}; "
            f"nothing was replayed or run (see clearance verify {run_id})",
            field="run",
        )


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
