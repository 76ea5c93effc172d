"""A code review's findings as a SARIF 2.1.0 log, for CI code scanning.

One run whose tool is ruff as Clearance drove it: every finding the module facts keep
(the most severe per module), with its rule, level and location relative to the package
root (``uriBaseId`` ``PACKAGE_ROOT``), and one result per function over the complexity
threshold, under the rule ``clearance/complexity``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from clearance._reports.base import one_line
from clearance.analysis import COMPLEXITY_NAME

__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "artifact_uri", "sarif_log"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
COMPLEXITY_RULE = "clearance/complexity"
COMPLEX_FROM = 10
_LEVEL = {"high": "error", "medium": "warning", "low": "note", "context": "note"}


_MAX_TEXT = 1000
"""Most characters of a result's message or a logical location's name."""
_MAX_LINE = 2**31 - 1
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")


def artifact_uri(path: str) -> str | None:
    """``path`` as a URI relative to the package root, or ``None`` when it is not one.

    A module's path is a relative POSIX path beneath the root: an absolute path, a ``..``
    or empty part, a backslash, a control character or nothing at all is refused. The
    rest is percent-encoded, so a name holding ``#``, ``?``, ``%``, a space or a colon
    (``http:x.py``) is a path, never a fragment, a query or a URI of its own.
    """
    parts = path.split("/")
    if not path or path.startswith("/") or _UNSAFE.search(path):
        return None
    if any(part in ("", ".", "..") for part in parts):
        return None
    return quote(path, safe="/")


def _line(value: object) -> int:
    """A 1-based line number from a fact: an integer clamped to SARIF's range, else 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 1
    return min(max(value, 1), _MAX_LINE)


def _result(
    rule: str, level: str, text: str, uri: str, line: object, symbol: str = ""
) -> dict[str, Any]:
    location: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": uri, "uriBaseId": "PACKAGE_ROOT"},
            "region": {"startLine": _line(line)},
        }
    }
    if symbol:
        name = one_line(symbol, _MAX_TEXT)
        location["logicalLocations"] = [{"fullyQualifiedName": name, "kind": "function"}]
    message = {"text": one_line(text, _MAX_TEXT)}
    return {"ruleId": rule, "level": level, "message": message, "locations": [location]}


def sarif_log(modules: Sequence[Mapping[str, Any]], *, package: str = "") -> dict[str, Any]:
    """The SARIF 2.1.0 log of the modules' facts (``module_facts`` results).

    A module whose path is not a relative path beneath the package root (`artifact_uri`)
    has no results; a line that is not an integer is line 1; messages are one line of at
    most 1000 characters; a result given twice is listed once.

    Returns:
        A JSON-ready SARIF log with one run.
    """
    rules: dict[str, str] = {}
    results: list[dict[str, Any]] = []
    for module in modules:
        uri = artifact_uri(str(module.get("module", "")))
        if uri is None:
            continue  # not a file beneath the package root: nothing to point at
        for finding in module.get("findings", ()):
            code = one_line(finding.get("code"), 100)
            rules.setdefault(code, str(finding.get("message", code)))
            level = _LEVEL.get(str(finding.get("severity")), "warning")
            text = str(finding.get("message", code))
            results.append(_result(code, level, text, uri, finding.get("line", 1)))
        for function in module.get("most_complex", ()):
            value = function.get("complexity", 0)
            if not isinstance(value, int) or value < COMPLEX_FROM:
                continue
            rules.setdefault(COMPLEXITY_RULE, f"{COMPLEXITY_NAME} of {COMPLEX_FROM} or more")
            name = str(function.get("name", ""))
            text = f"{name} has complexity {value} over {function.get('lines')} lines"
            results.append(_result(COMPLEXITY_RULE, "note", text, uri, function.get("line"), name))
    results = list({json.dumps(r, sort_keys=True): r for r in results}.values())  # no repeats
    driver = {
        "name": "clearance",
        "informationUri": "https://docs.astral.sh/ruff/rules/",
        "rules": [
            {"id": code, "shortDescription": {"text": text[:200] or code}}
            for code, text in sorted(rules.items())
        ],
    }
    run: dict[str, Any] = {
        "tool": {"driver": driver},
        "originalUriBaseIds": {"PACKAGE_ROOT": {"description": {"text": package or "input"}}},
        "results": results,
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
