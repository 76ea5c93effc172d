"""The kinds of analysis results, and reading them back from results' text."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["MODULE_FACTS", "PACKAGE_FACTS", "checked_facts", "parse_facts"]

MODULE_FACTS = "module_facts"
"""``kind`` of a `module_facts` result."""
PACKAGE_FACTS = "package_facts"
"""``kind`` of a `package_facts` result."""


def parse_facts(results: Iterable[str], kind: str = MODULE_FACTS) -> list[dict[str, Any]]:
    """The results that are facts of ``kind`` (JSON objects), in the given order."""
    found = []
    for text in results:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("kind") == kind:
            found.append(value)
    return found


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Function(_Strict):
    name: str
    line: int
    lines: int
    complexity: int


class _Finding(_Strict):
    code: str
    message: str
    line: int
    severity: str = "low"


class _Name(_Strict):
    name: str
    kind: str = ""
    line: int | None = None


class _ModuleFacts(_Strict):
    module: str
    slug: str
    lines: int | None = None
    functions: int = 0
    public_count: int = 0
    purpose: str = ""
    public: list[_Name] = Field(default_factory=list)
    imports: list[str] = Field(default_factory=list)
    type_imports: list[str] = Field(default_factory=list)
    imported_names: dict[str, list[str]] = Field(default_factory=dict)
    imports_count: int = 0
    type_imports_count: int = 0
    imported_names_count: int = 0
    most_complex: list[_Function] = Field(default_factory=list)
    findings: list[_Finding] = Field(default_factory=list)
    findings_total: int = 0
    rule_counts: dict[str, int] = Field(default_factory=dict)


def checked_facts(results: Mapping[str, str]) -> list[dict[str, Any]]:
    """`parse_facts` of the results (by task id), each checked against ``module_facts``.

    Each must have the fields of ``module_facts`` with their types.

    Raises:
        ValueError: A result of kind ``module_facts`` has a missing or mistyped field;
            the message names the task and the first bad field.
    """
    found = []
    for task_id, text in results.items():
        for facts in parse_facts([text]):
            try:
                _ModuleFacts.model_validate(facts)
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(part) for part in error["loc"]) or "(the result)"
                raise ValueError(
                    f"the result of task {task_id!r} claims to be module facts but {where}: "
                    f"{error['msg']}"
                ) from None
            found.append(facts)
    return found
