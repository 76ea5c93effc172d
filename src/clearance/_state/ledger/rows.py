"""Row builders: the parameter rows each ledger write commits, by kind of statement.

A write is queued as rows per kind (``"run"``, ``"task"``, ``"call"``...; see
`clearance._state.ledger.statements`), or as a function building them on the writer thread.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from clearance._core.prompt import Prompt, canonical_json
from clearance._state.db import JSONText, canonical_json_text
from clearance._state.ledger.digest import record_sha256
from clearance._state.queue import TaskState
from clearance._state.write_behind import Rows
from clearance.models._base import ModelResponse, Usage

__all__ = ["build_task_rows", "call_rows", "finish_row", "last_upsert_per_task", "task_row"]

_NO_USAGE = Usage()
"""The usage of a call without a response (a request, a failure): frozen, so shared."""


def build_task_rows(
    run_id: str, states: tuple[TaskState, ...], recorded_at: datetime | None
) -> Rows:
    """The task upserts of ``states``, and a reason row (at ``recorded_at``) per error."""
    rows: dict[str, list[dict[str, Any]]] = {"task": [task_row(run_id, s) for s in states]}
    reasons = [
        {
            "run_id": run_id,
            "task_id": s.task.id,
            "status": str(s.status),
            "error": s.error,
            "recorded_at": recorded_at,
        }
        for s in states
        if s.error is not None
    ]
    if reasons:
        rows["task_reason"] = reasons
    return rows


def task_row(run_id: str, state: TaskState) -> dict[str, Any]:
    """The upsert row of one task's state."""
    task = state.task
    return {
        "run_id": run_id,
        "task_id": task.id,
        "title": task.title,
        "assignee": task.assignee,
        "depends_on": _depends_on(task.depends_on),
        "memory_scope": task.memory_scope,
        "status": str(state.status),  # a StrEnum: its value, without the slow `.value`
        "result": state.result,
        "error": state.error,
        "started_at": state.started_at,
        "finished_at": state.finished_at,
    }


_DEPENDS_ON: dict[tuple[str, ...], JSONText] = {}
"""`_depends_on`'s memo, by the task's own tuple; emptied when it holds `_MEMO_SIZE` lists."""

_MEMO_SIZE = 65_536


def _depends_on(ids: tuple[str, ...]) -> JSONText | list[str]:
    """A task's ``depends_on`` column: its canonical JSON text, made once per list of ids.

    Each of a task's rows (one per state) held the list, which the column's serializer and
    the row's digest each wrote out again. A list orjson refuses (a lone surrogate, which a
    task id cannot hold) stays a list, for the standard library's serializer, as before.
    """
    found = _DEPENDS_ON.get(ids)
    if found is None:
        found = canonical_json_text(list(ids))
        if found is None:
            return list(ids)
        if len(_DEPENDS_ON) >= _MEMO_SIZE:
            _DEPENDS_ON.clear()
        _DEPENDS_ON[ids] = found
    return found


def last_upsert_per_task(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One upsert per task: its last row, at the position of its first.

    The task upsert overwrites every column but the key and the ordinal, so applying only a
    task's last row where its first row was leaves the same table (the same order included)
    as applying them all.
    """
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        merged[(row["run_id"], row["task_id"])] = row  # a dict keeps the first key's position
    return list(merged.values())


def call_rows(
    *,
    call_id: str,
    run_id: str,
    subject: str,
    agent: str,
    model_id: str,
    prompt: Prompt,
    response: ModelResponse | None,
    error: str | None,
    started_at: datetime,
    latency_s: float,
    pending: bool = False,
    parameters: dict[str, Any] | None = None,
) -> Rows:
    """The row of one model call (its messages and manifest serialized once, canonically).

    ``parameters`` is `ModelRequest.parameters` (``None``: not known, as for calls recorded
    before it was); it is chained with the call (`OPTIONAL_FIELDS`).
    """
    usage = response.usage if response is not None else _NO_USAGE
    # Each is serialized once, canonically: for the digest and for its column.
    messages = canonical_json(prompt.to_dicts())
    manifest = canonical_json(prompt.manifest.to_dict())
    return {
        "call": [
            {
                "call_id": call_id,
                "run_id": run_id,
                "subject": subject,
                "agent": agent,
                "model_id": model_id,
                "messages": JSONText(messages),
                "manifest": JSONText(manifest),
                "prompt_sha256": prompt.manifest.prompt_sha256,
                "record_sha256": record_sha256(messages, manifest),
                "response": response.text if response is not None else None,
                "finish_reason": response.finish_reason if response is not None else None,
                "requests": usage.requests,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cached_prompt_tokens": usage.cached_prompt_tokens,
                "usage_counted": 1 if usage.counted else None,
                "error": error,
                "started_at": started_at,
                "latency_s": latency_s,
                "pending": int(pending),
                "parameters": parameters,
            }
        ]
    }


def finish_row(
    call_id: str,
    run_id: str,
    response: ModelResponse | None,
    error: str | None,
    latency_s: float,
    usage: Usage | None = None,
) -> dict[str, Any]:
    """The ``call_finish`` row recording the outcome of a call sent before (``b_`` names).

    ``usage`` is a refused answer's (see `RunLedger.finish_call`); else the response's.
    """
    if usage is None:
        usage = response.usage if response is not None else _NO_USAGE
    return {
        "b_call_id": call_id,
        "b_run_id": run_id,
        "b_response": response.text if response is not None else None,
        "b_finish_reason": response.finish_reason if response is not None else None,
        "b_requests": usage.requests,
        "b_prompt_tokens": usage.prompt_tokens,
        "b_completion_tokens": usage.completion_tokens,
        "b_cached_prompt_tokens": usage.cached_prompt_tokens,
        "b_usage_counted": 1 if usage.counted else None,
        "b_error": error,
        "b_latency_s": latency_s,
    }
