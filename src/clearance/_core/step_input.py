"""`StepInput`: what a non-model task (``run:``) is given."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["StepInput"]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepInput:
    """The input of a non-model task: the same need-to-know view a model task gets.

    Attributes:
        task_id: The task's id.
        title: The task's title.
        description: The task's description.
        files: The contents of the task's ``files`` (read through the confined reader), by
            path relative to the input root.
        results: The results of the completed tasks its ``memory_scope`` admits, by task id
            (graph order).
        failed: Admitted tasks that failed or were skipped, by task id: the reason only,
            never a partial result.
        input_name: The name of the input folder (the package name for ``python:json``),
            or ``""`` when the run has none.
    """

    task_id: str
    title: str
    description: str
    files: Mapping[str, str] = field(default_factory=dict)
    results: Mapping[str, str] = field(default_factory=dict)
    failed: Mapping[str, str] = field(default_factory=dict)
    input_name: str = ""
