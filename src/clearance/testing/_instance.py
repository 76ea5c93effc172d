"""A deterministic instance of a JSON Schema, for `FakeModel`'s structured answers.

Covers what hand-off schemas and pydantic models use: ``type`` (the first non-null one of a
list), ``const``, ``enum``, ``$ref`` into ``$defs``/``definitions``, ``anyOf``/``oneOf`` (the
first branch), ``allOf`` (merged), ``properties`` with ``required`` (only the required ones are
written), ``items``/``prefixItems`` with ``minItems``, string ``minLength``/``maxLength``,
and number bounds (at most 1,000 items and 100,000 characters are built, so a schema that
asks for more gets an answer it refuses). ``pattern``, ``format`` and ``uniqueItems`` are not
honoured.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["schema_instance"]

_MAX_DEPTH = 32
_MAX_ITEMS = 1_000
"""Most items of an array built (a ``minItems`` beyond it gives an answer the schema refuses)."""
_MAX_CHARS = 100_000
"""Most characters of a string built (likewise for ``minLength``)."""


def schema_instance(schema: dict[str, Any], text: str) -> Any:
    """A value valid against ``schema`` (within the keywords above), strings built from ``text``.

    Args:
        schema: A JSON Schema (a dict).
        text: The text strings are made of (cut to ``maxLength``, padded to ``minLength``).

    Returns:
        The instance: a dict, list, str, int, float, bool or ``None``.
    """
    return _Builder(schema, text).build(schema, 0)


class _Builder:
    def __init__(self, root: dict[str, Any], text: str) -> None:
        self.root = root
        self.text = text

    def build(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return None
        schema = self._resolved(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self.build({**_without(schema, key), **schema[key][0]}, depth + 1)
        if schema.get("allOf"):
            merged = _without(schema, "allOf")
            for part in schema["allOf"]:
                merged = _merged(merged, self._resolved(part))
            return self.build(merged, depth + 1)
        return self._typed(schema, _type_of(schema), depth)

    def _resolved(self, schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target: Any = self.root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return {**_without(schema, "$ref"), **target} if isinstance(target, dict) else schema

    def _typed(self, schema: dict[str, Any], json_type: str, depth: int) -> Any:
        if json_type == "object":
            properties = schema.get("properties", {})
            return {
                name: self.build(properties.get(name, {}), depth + 1)
                for name in schema.get("required", [])
            }
        if json_type == "array":
            prefix = schema.get("prefixItems", [])
            count = min(max(int(schema.get("minItems", 0)), len(prefix)), _MAX_ITEMS)
            items = schema.get("items", {})
            return [
                self.build(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(count)
            ]
        if json_type == "string":
            return self._string(schema)
        if json_type in ("integer", "number"):
            return _number(schema, integer=json_type == "integer")
        if json_type == "boolean":
            return False
        return None

    def _string(self, schema: dict[str, Any]) -> str:
        low = min(int(schema.get("minLength", 0)), _MAX_CHARS)
        high = schema.get("maxLength")
        value = self.text if high is None else self.text[: int(high)]
        return value + "x" * max(0, low - len(value))


def _type_of(schema: dict[str, Any]) -> str:
    json_type = schema.get("type")
    if isinstance(json_type, list):
        json_type = next((k for k in json_type if k != "null"), "null")
    if isinstance(json_type, str):
        return json_type
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "string"


def _number(schema: dict[str, Any], *, integer: bool) -> int | float:
    """The lowest allowed value (between exclusive bounds for a number), 0 when unbounded."""
    low, low_x = _bound(schema, "minimum"), _bound(schema, "exclusiveMinimum")
    high, high_x = _bound(schema, "maximum"), _bound(schema, "exclusiveMaximum")
    if integer:
        if low is not None:
            return math.ceil(low)
        if low_x is not None:
            return math.floor(low_x) + 1
        if high is not None and high < 0:
            return math.floor(high)
        if high_x is not None and high_x <= 0:
            return math.ceil(high_x) - 1
        return 0
    top = high if high is not None else high_x
    if low is not None:
        return float(low)
    if low_x is not None:
        return (low_x + top) / 2 if top is not None else low_x + 1.0
    if high is not None and high < 0:
        return float(high)
    if high_x is not None and high_x <= 0:
        return high_x - 1.0
    return 0.0


def _bound(schema: dict[str, Any], key: str) -> float | None:
    value = schema.get(key)
    return None if isinstance(value, bool) or value is None else float(value)


def _without(schema: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {**a, **b}
    if "properties" in a or "properties" in b:
        out["properties"] = {**a.get("properties", {}), **b.get("properties", {})}
    if "required" in a or "required" in b:
        out["required"] = list(dict.fromkeys([*a.get("required", []), *b.get("required", [])]))
    return out
