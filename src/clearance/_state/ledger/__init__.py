"""The run ledger: the durable record of every run.

- `run_ledger`: `RunLedger`, its writes (runs, tasks, calls, messages, tool calls).
- `events`: the events of a run, recorded and read.
- `reads`: every other read (runs, tasks, calls, messages, tool calls, the hash chain).
- `audit`: one read of every record of a run for ``verify``, its prompts one at a time.
- `task_view`: the tasks of a run as read: their rows, and the graph's unstarted tasks.
- `base`: opening, group commit, the write-behind thread, closing.
- `recorder`: `Recorder`, the protocol code that only records depends on.
- `schema`: the migrations and the tables they define.
- `records`: the record dataclasses and how each is read from its row.
- `row_checks`: what in a stored row no write puts there, named by record and field.
- `rows`: the rows each write commits; `statements`: the statement of each kind of row.
- `chaining`: each record appended to its run's hash chain; `digest`: the call digest.
- `leases`: one process runs a run at a time.
"""

from clearance._state.ledger.base import DEFAULT_LEDGER_URL
from clearance._state.ledger.digest import call_record_sha256
from clearance._state.ledger.recorder import Recorder
from clearance._state.ledger.records import (
    CallRecord,
    ChainEntry,
    EventRecord,
    RunRecord,
    TaskRecord,
    ToolCallRecord,
)
from clearance._state.ledger.run_ledger import RUN_STATUSES, RunLedger
from clearance._state.ledger.schema import SCHEMA_VERSION

__all__ = [
    "DEFAULT_LEDGER_URL",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "CallRecord",
    "ChainEntry",
    "EventRecord",
    "Recorder",
    "RunLedger",
    "RunRecord",
    "TaskRecord",
    "ToolCallRecord",
    "call_record_sha256",
]
