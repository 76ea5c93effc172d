"""The built-in store tools: ``store_get``, ``store_set`` and the rest, bound to one agent's view.

Each is bound to a `StoreView` (the agent's grants, at most its caller's), so a model reaches
only the namespaces the view admits; a read also returns the entries read, which the ledger
records and ``clearance verify`` checks. Arguments are checked against the tool's JSON Schema
and the tools run on the event loop (they are the store's own quick calls, not user code).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from clearance._agents.tools import Tool, ToolOutput, check_arguments
from clearance._state.grants import StoreView

__all__ = ["store_tools"]


def store_tools(view: StoreView) -> dict[str, Tool]:
    """The built-in store tools bound to one agent's scoped view.

    - ``store_get(namespace, key)``: the value, or a note that there is none;
    - ``store_set(namespace, key, value, ttl_s=None)``: write (as the view's agent);
    - ``store_query(namespace, prefix="", limit=10)``: live entries, newest first;
    - ``store_set_with_extension(namespace, key, value, ttl_s=None)``: write, pushing expiry
      forward (never earlier; an entry that never expires keeps none);
    - ``store_touch(namespace, key, ttl_s=None)``: push a live entry's expiry forward;
    - ``store_get_structured(namespace, key)``: read a value that must be valid JSON;
    - ``store_search(text, limit=10)``: entries whose key or value holds ``text``, across
      every namespace the agent may read (and no other), newest first.

    ``limit`` is clamped to 1..50. A denied namespace gives an error output naming the
    agent, namespace and operation. Entries read enter the next prompt as ``store:`` items.
    """

    def store_get(namespace: str, key: str) -> ToolOutput:
        entry = view.get_entry(namespace, key)
        if entry is None:
            return ToolOutput(content=f"no entry {namespace}/{key}")
        return ToolOutput(content=f"entry {namespace}/{key} read", store_reads=(entry,))

    def store_set(namespace: str, key: str, value: str, ttl_s: float | None = None) -> ToolOutput:
        view.set(namespace, key, value, ttl_s)
        return ToolOutput(content=f"stored {namespace}/{key}")

    def store_query(namespace: str, prefix: str = "", limit: int = 10) -> ToolOutput:
        entries = view.query_by_prefix(namespace, prefix, min(max(limit, 1), 50))
        keys = ", ".join(e.key for e in entries) or "none"
        return ToolOutput(content=f"{len(entries)} entries: {keys}", store_reads=tuple(entries))

    def store_set_with_extension(
        namespace: str, key: str, value: str, ttl_s: float | None = None
    ) -> ToolOutput:
        view.set_with_extension(namespace, key, value, ttl_s)
        return ToolOutput(content=f"stored {namespace}/{key}; its expiry only moved forward")

    def store_touch(namespace: str, key: str, ttl_s: float | None = None) -> ToolOutput:
        if view.touch(namespace, key, ttl_s):
            return ToolOutput(content=f"expiry of {namespace}/{key} pushed forward")
        return ToolOutput(content=f"no entry {namespace}/{key}")

    def store_get_structured(namespace: str, key: str) -> ToolOutput:
        entry = view.get_entry(namespace, key)
        if entry is None:
            return ToolOutput(content=f"no entry {namespace}/{key}")
        try:
            json.loads(entry.value)
        except (ValueError, RecursionError) as exc:
            problem = "nested too deeply to read" if isinstance(exc, RecursionError) else exc
            return ToolOutput(
                content=f"error: the value of {namespace}/{key} is not valid JSON: {problem}",
                is_error=True,
            )
        return ToolOutput(content=f"JSON entry {namespace}/{key} read", store_reads=(entry,))

    def store_search(text: str, limit: int = 10) -> ToolOutput:
        entries = view.search(text, min(max(limit, 1), 50))
        found = ", ".join(f"{e.namespace}/{e.key}" for e in entries) or "none"
        return ToolOutput(content=f"{len(entries)} entries: {found}", store_reads=tuple(entries))

    docs = {
        "store_get": "Read the value stored under a key in a namespace of the shared store.",
        "store_set": "Write a text value under a key in a namespace of the shared store.",
        "store_query": "List entries of a namespace whose key starts with a prefix, newest first.",
        "store_set_with_extension": "Write a text value under a key and push its expiry "
        "forward (it never moves earlier).",
        "store_touch": "Push the expiry of an entry forward without changing its value.",
        "store_get_structured": "Read a JSON value stored under a key in a namespace.",
        "store_search": "Find entries whose key or value contains a text, in every namespace "
        "you may read, newest first.",
    }
    functions: dict[str, Callable[..., ToolOutput]] = {
        "store_get": store_get,
        "store_set": store_set,
        "store_query": store_query,
        "store_set_with_extension": store_set_with_extension,
        "store_touch": store_touch,
        "store_get_structured": store_get_structured,
        "store_search": store_search,
    }
    tools = {}
    for name, function in functions.items():
        function.__doc__ = docs[name]
        base = Tool.from_function(function, name=name)
        tools[name] = Tool(
            name=name, description=base.description, parameters=base.parameters,
            run=_raw_output(base, function),
        )  # fmt: skip
    return tools


def _raw_output(
    base: Tool, function: Callable[..., ToolOutput]
) -> Callable[[dict[str, Any]], ToolOutput]:
    """Run ``function`` with arguments checked against ``base``'s schema, keeping its output."""

    def run(arguments: dict[str, Any]) -> ToolOutput:
        problems = check_arguments(base.parameters, arguments)
        if problems:
            return ToolOutput(content=f"error: invalid arguments: {problems}", is_error=True)
        return function(**arguments)

    return run
