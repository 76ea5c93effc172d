"""Runs from a program: what the command line uses to prepare, report on and show runs.

`clearance` holds the run's definition and the functions that run, resume and verify it
(`RunSpec`, `run_spec`, `resume_run`, `verify_run`). This namespace holds the rest of what
``clearance run``, ``inspect``, ``graph`` and ``approve`` use, for programs that
do the same:

- preparing a spec: `checked_run`, `check_interactive` (``--interactive``),
  `with_resources`, `model_settings`, `spec_tools`,
  `ExecutorSpec` (its `ExecutorKind`), `WINDOWED_PROVIDERS`, and `check_chat_agent`,
  `check_chat_name` and `check_room_for_prompt` (its context window) for ``clearance chat``;
- the ledger's records: `RunRecord`, `TaskRecord`, `CallRecord`, `EventRecord`,
  `ToolCallRecord`, and where runs and the store live (`DEFAULT_LEDGER_URL`,
  `DEFAULT_STORE_URL`, `masked_url`, `sqlite_file_path`); `MAX_ROWS`, the most rows one
  listing returns; `process_gone` and `shown_status` (a run recorded ``running`` whose
  process is gone, as ``clearance runs`` shows it);
- checking what a command line gives: `check_model_id` (a model id, as the team file's
  ``model:``), `MAX_CONCURRENCY` (the most tasks at once), `MAX_TTL_S` (the longest a
  store entry may live) and `check_store_entry` (what a store write accepts);
- a graph before it runs: `graph_shape`, `concurrency_notice`, `estimate_tasks` (a
  `TaskEstimate` each; `model_windows`, its models' windows), `wall_time_range`;
- plan only (``clearance plan``): `plan_only` records the coordinator's plan as a run of
  its own (a `PlannedRun`), `plan_team_file` writes it as an editable team file;
- the team file's reference (``clearance schema``, ``clearance init``): `team_file_schema`,
  `team_file_markdown`, and the schema's file name `SCHEMA_ID`;
- after a run: `report_function` and its `Report`; approvals (`Approver`, `decide`,
  `default_decider`, `MAX_REASON_CHARS`); how long a person may take to answer (`ANSWER_TIMEOUT_S`,
  `check_answer_timeout`, ``--answer-timeout``). The run page is in `clearance.view`.
"""

import typing

from clearance._core import lazy as _lazy

if typing.TYPE_CHECKING:
    from clearance._core.locations import DEFAULT_LEDGER_URL, DEFAULT_STORE_URL, SCHEMA_ID
    from clearance._core.row_limit import MAX_ROWS
    from clearance._core.run_spec import ANSWER_TIMEOUT_S, MAX_CONCURRENCY, ExecutorSpec
    from clearance._core.store_rules import MAX_TTL_S
    from clearance._core.team_reference import team_file_markdown, team_file_schema
    from clearance._core.teamfile_checks import check_chat_agent
    from clearance._core.teamfile_models import check_model_id
    from clearance._core.teamfile_unread import check_interactive
    from clearance._core.vocabulary import ExecutorKind
    from clearance._orchestration.approval import (
        MAX_REASON_CHARS,
        Approver,
        check_answer_timeout,
        decide,
        default_decider,
    )
    from clearance._orchestration.chat import check_chat_name
    from clearance._orchestration.estimate import (
        TaskEstimate,
        estimate_tasks,
        model_windows,
        wall_time_range,
    )
    from clearance._orchestration.model_pool import check_room_for_prompt
    from clearance._orchestration.plan_only import PlannedRun, plan_only, plan_team_file
    from clearance._orchestration.resume import process_gone, shown_status
    from clearance._orchestration.run_config import WINDOWED_PROVIDERS, model_settings, spec_tools
    from clearance._orchestration.run_memory import masked_url
    from clearance._orchestration.spec_check import checked_run
    from clearance._orchestration.spec_run import with_resources
    from clearance._reports import Report, report_function
    from clearance._state.db.sqlite import sqlite_file_path
    from clearance._state.graph_shape import concurrency_notice, graph_shape
    from clearance._state.ledger import (
        CallRecord,
        EventRecord,
        RunRecord,
        TaskRecord,
        ToolCallRecord,
    )
    from clearance._state.store.entry import check_store_entry

__all__ = [
    "ANSWER_TIMEOUT_S",
    "Approver",
    "CallRecord",
    "DEFAULT_LEDGER_URL",
    "DEFAULT_STORE_URL",
    "EventRecord",
    "ExecutorKind",
    "ExecutorSpec",
    "MAX_CONCURRENCY",
    "MAX_REASON_CHARS",
    "MAX_ROWS",
    "MAX_TTL_S",
    "PlannedRun",
    "Report",
    "RunRecord",
    "SCHEMA_ID",
    "TaskEstimate",
    "TaskRecord",
    "ToolCallRecord",
    "WINDOWED_PROVIDERS",
    "check_answer_timeout",
    "check_chat_agent",
    "check_chat_name",
    "check_interactive",
    "check_model_id",
    "check_room_for_prompt",
    "check_store_entry",
    "checked_run",
    "concurrency_notice",
    "decide",
    "default_decider",
    "estimate_tasks",
    "graph_shape",
    "masked_url",
    "model_settings",
    "model_windows",
    "plan_only",
    "plan_team_file",
    "process_gone",
    "report_function",
    "shown_status",
    "spec_tools",
    "sqlite_file_path",
    "team_file_markdown",
    "team_file_schema",
    "wall_time_range",
    "with_resources",
]

_EXPORTS = {
    "ANSWER_TIMEOUT_S": "clearance._core.run_spec",
    "Approver": "clearance._orchestration.approval",
    "CallRecord": "clearance._state.ledger",
    "DEFAULT_LEDGER_URL": "clearance._core.locations",
    "DEFAULT_STORE_URL": "clearance._core.locations",
    "EventRecord": "clearance._state.ledger",
    "ExecutorKind": "clearance._core.vocabulary",
    "ExecutorSpec": "clearance._core.run_spec",
    "MAX_CONCURRENCY": "clearance._core.run_spec",
    "MAX_ROWS": "clearance._core.row_limit",
    "MAX_TTL_S": "clearance._core.store_rules",
    "PlannedRun": "clearance._orchestration.plan_only",
    "Report": "clearance._reports",
    "RunRecord": "clearance._state.ledger",
    "SCHEMA_ID": "clearance._core.locations",
    "TaskEstimate": "clearance._orchestration.estimate",
    "TaskRecord": "clearance._state.ledger",
    "ToolCallRecord": "clearance._state.ledger",
    "WINDOWED_PROVIDERS": "clearance._orchestration.run_config",
    "MAX_REASON_CHARS": "clearance._orchestration.approval",
    "check_answer_timeout": "clearance._orchestration.approval",
    "check_chat_agent": "clearance._core.teamfile_checks",
    "check_chat_name": "clearance._orchestration.chat",
    "check_interactive": "clearance._core.teamfile_unread",
    "check_model_id": "clearance._core.teamfile_models",
    "check_room_for_prompt": "clearance._orchestration.model_pool",
    "check_store_entry": "clearance._state.store.entry",
    "checked_run": "clearance._orchestration.spec_check",
    "concurrency_notice": "clearance._state.graph_shape",
    "decide": "clearance._orchestration.approval",
    "default_decider": "clearance._orchestration.approval",
    "estimate_tasks": "clearance._orchestration.estimate",
    "graph_shape": "clearance._state.graph_shape",
    "masked_url": "clearance._orchestration.run_memory",
    "model_settings": "clearance._orchestration.run_config",
    "model_windows": "clearance._orchestration.estimate",
    "plan_only": "clearance._orchestration.plan_only",
    "plan_team_file": "clearance._orchestration.plan_only",
    "process_gone": "clearance._orchestration.resume",
    "shown_status": "clearance._orchestration.resume",
    "report_function": "clearance._reports",
    "spec_tools": "clearance._orchestration.run_config",
    "sqlite_file_path": "clearance._state.db.sqlite",
    "team_file_markdown": "clearance._core.team_reference",
    "team_file_schema": "clearance._core.team_reference",
    "wall_time_range": "clearance._orchestration.estimate",
    "with_resources": "clearance._orchestration.spec_run",
}
"""Each public name and the module that defines it, imported on first use."""

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
