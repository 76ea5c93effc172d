"""Structured hand-offs: a task's JSON answer, parsed and checked against its ``output_schema``."""

from __future__ import annotations

import json
import re
from typing import Any

from clearance._core.task_spec import schema_validator

__all__ = ["validated_json"]

_FENCED_JSON = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def validated_json(text: str, schema: dict[str, Any]) -> str:
    """Parse a structured answer and validate it against the task's ``output_schema``.

    Args:
        text: The completion: a JSON value, or a fenced code block (```` ```json ````) holding
            one.
        schema: The task's (already checked) JSON Schema.

    Returns:
        The value re-serialized canonically:
        ``json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)``.

    Raises:
        ValueError: With a one-line reason fit to show the model on the repair attempt
            (empty answer, invalid JSON, or the schema error and the JSON path it is at).
    """
    body = text.strip()
    if not body:
        raise ValueError("the answer is empty; reply with a JSON value only")
    try:
        return _validated_json_value(body, schema)
    except RecursionError as exc:
        raise ValueError("the JSON is nested too deeply") from exc


def _validated_json_value(body: str, schema: dict[str, Any]) -> str:
    try:
        value = json.loads(body, parse_constant=_reject_constant, strict=False)
    except ValueError as exc:
        match = _FENCED_JSON.search(body)
        if match is None:
            raise ValueError(f"the answer is not valid JSON: {exc}") from exc
        try:
            value = json.loads(match.group(1), parse_constant=_reject_constant, strict=False)
        except ValueError as inner:
            raise ValueError(f"the fenced block is not valid JSON: {inner}") from inner
    from jsonschema.exceptions import best_match  # with the validator, when first needed

    errors = list(schema_validator(schema).iter_errors(value))
    error = best_match(errors)
    if error is not None:
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise ValueError(
            f"the JSON does not match the output schema at {error.json_path}: {error.message}{more}"
        )
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
