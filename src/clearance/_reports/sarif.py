"""A code review's findings as a SARIF 2.1.0 log, for CI code scanning.

One run whose tool is ruff as Clearance drove it: every finding the module facts keep
(the most severe per module), with its rule, level and location relative to the package
root (``uriBaseId`` ``PACKAGE_ROOT``), and one result per function over the complexity
threshold, under the rule ``clearance/complexity``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clearance.analysis import COMPLEXITY_NAME

__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "sarif_log"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
COMPLEXITY_RULE = "clearance/complexity"
COMPLEX_FROM = 10
_LEVEL = {"high": "error", "medium": "warning", "low": "note", "context": "note"}


def _result(
    rule: str, level: str, text: str, module: str, line: int, symbol: str = ""
) -> dict[str, Any]:
    location: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": module, "uriBaseId": "PACKAGE_ROOT"},
            "region": {"startLine": max(int(line), 1)},
        }
    }
    if symbol:
        location["logicalLocations"] = [{"fullyQualifiedName": symbol, "kind": "function"}]
    return {"ruleId": rule, "level": level, "message": {"text": text}, "locations": [location]}


def sarif_log(modules: Sequence[Mapping[str, Any]], *, package: str = "") -> dict[str, Any]:
    """The SARIF 2.1.0 log of the modules' facts (``module_facts`` results).

    Returns:
        A JSON-ready SARIF log with one run.
    """
    rules: dict[str, str] = {}
    results: list[dict[str, Any]] = []
    for module in modules:
        path = str(module.get("module", ""))
        for finding in module.get("findings", ()):
            code = str(finding.get("code"))
            rules.setdefault(code, str(finding.get("message", code)))
            results.append(
                _result(
                    code,
                    _LEVEL.get(str(finding.get("severity")), "warning"),
                    str(finding.get("message", code)),
                    path,
                    int(finding.get("line", 1)),
                )
            )
        for function in module.get("most_complex", ()):
            if int(function.get("complexity", 0)) < COMPLEX_FROM:
                continue
            rules.setdefault(COMPLEXITY_RULE, f"{COMPLEXITY_NAME} of {COMPLEX_FROM} or more")
            results.append(
                _result(
                    COMPLEXITY_RULE,
                    "note",
                    f"{function['name']} has complexity {function['complexity']} over "
                    f"{function['lines']} lines",
                    path,
                    int(function["line"]),
                    str(function["name"]),
                )
            )
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
