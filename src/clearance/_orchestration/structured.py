"""Structured hand-offs: a task's JSON answer, parsed and checked against its ``output_schema``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from clearance._core.json_answer import dumps_answer, read_json_answer
from clearance._core.reasons import bounded_reason
from clearance._core.schema_check import schema_errors
from clearance._core.task_spec import Task

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["parsed_output", "validated_json"]

_REASON_CHARS = 500
"""Most characters of the reason a structured answer was refused (it quotes the answer)."""


def validated_json(
    text: str, schema: dict[str, Any], output_type: type[BaseModel] | None = None
) -> str:
    """Parse a structured answer and validate it against the task's ``output_schema``.

    Args:
        text: The completion: a JSON value, or a fenced code block (```` ```json ````) holding
            one.
        schema: The task's (already checked) JSON Schema.
        output_type: The task's pydantic model, which the value must also validate as (its
            own validators included), or ``None``.

    Returns:
        The value re-serialized canonically (`dumps_answer`): as
        ``json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)`` writes it, each
        number as the answer wrote it (read exactly, and held to the schema so).

    Raises:
        ValueError: With a one-line reason fit to show the model on the repair attempt
            (empty answer, invalid JSON, a key given twice in one object, a number beyond a
            float's range such as ``1e999``, the schema error and the JSON path it is at, or
            the first error of the pydantic model), cut to 500 characters: it may quote the
            answer.
    """
    body = text.strip()
    if not body:
        raise ValueError("the answer is empty; reply with a JSON value only")
    try:
        canonical = _validated_json_value(body, schema)
    except RecursionError as exc:
        raise ValueError("the JSON is nested too deeply") from exc
    if output_type is not None:
        from pydantic import ValidationError

        try:
            output_type.model_validate_json(canonical)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the value"
            raise ValueError(bounded_reason(f"the JSON is not a valid {output_type.__name__} "
                                            f"at {where}: {first['msg']}",
                                            _REASON_CHARS)) from exc  # fmt: skip
    return canonical


def parsed_output(task: Task, result: str | None) -> Any:
    """A completed task's result as a value: what `TaskOutcome.output` holds.

    Args:
        task: The task.
        result: Its recorded result text, or ``None`` if it did not complete.

    Returns:
        An instance of ``task.output_type``; the JSON value of a result with an
        ``output_schema``; ``None`` for a free-text result, a task that did not complete,
        or a ``run:`` task (its output is not validated).

    Raises:
        ValueError: The recorded result is not valid JSON or not a valid ``output_type``
            (a ledger changed after the run).
    """
    if result is None or task.output_schema is None or task.run is not None:
        return None
    if task.output_type is not None:
        return task.output_type.model_validate_json(result)
    return json.loads(result)


def _validated_json_value(body: str, schema: dict[str, Any]) -> str:
    value = read_json_answer(body, exact=True)
    from jsonschema.exceptions import best_match  # with the validator, when first needed

    errors = schema_errors(schema, value)
    error = best_match(errors)
    if error is not None:
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        where = f"the JSON does not match the output schema at {error.json_path}"
        raise ValueError(bounded_reason(f"{where}: {error.message}{more}", _REASON_CHARS))
    return dumps_answer(value)
