"""The kinds of analysis results, and reading them back from results' text."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["MODULE_FACTS", "PACKAGE_FACTS", "parse_facts"]

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
