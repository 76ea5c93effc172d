"""Output schemas whose allowed values come from a prerequisite's structured result.

A string property of a task's ``output_schema`` may say ``x-enum-from: <key>``: when the
task runs, the property's allowed values become the strings listed under ``<key>`` in the
JSON results of the task's completed prerequisites (a module review may then only name the
module's real functions, say). The keyword is a JSON Schema annotation, so the schema as
written stays valid; the narrowed schema is what the model is held to and what its answer
is checked against.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["ENUM_FROM", "narrowed_schema"]

ENUM_FROM = "x-enum-from"
"""The keyword naming the key of a prerequisite's result that lists the allowed values."""
_NONE = ""
"""The one value allowed when the results list none (an enum cannot be empty)."""


def _values(results: Iterable[str], key: str) -> list[str]:
    found: set[str] = set()
    for text in results:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            continue
        listed = value.get(key) if isinstance(value, dict) else None
        if isinstance(listed, list):
            found.update(v for v in listed if isinstance(v, str))
    return sorted(found)


def narrowed_schema(schema: dict[str, Any], results: Iterable[str]) -> dict[str, Any]:
    """``schema`` with every ``x-enum-from`` replaced by the values it names.

    Args:
        schema: A task's ``output_schema``.
        results: The task's completed prerequisites' results (text; JSON objects count).

    Returns:
        A new schema (``schema`` itself when it has no ``x-enum-from``): each property
        with ``x-enum-from: key`` gets ``enum`` of the strings listed under ``key`` plus
        those of its own ``enum`` (``[""]`` when there are none), sorted, and loses the
        keyword and any ``maxLength``.
    """
    results = list(results)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items() if k != ENUM_FROM}
            key = node.get(ENUM_FROM)
            if isinstance(key, str):
                out.pop("maxLength", None)
                written = [v for v in node.get("enum", ()) if isinstance(v, str)]
                out["enum"] = sorted({*written, *_values(results, key)}) or [_NONE]
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    if ENUM_FROM not in json.dumps(schema):
        return schema
    narrowed: dict[str, Any] = walk(schema)
    return narrowed
