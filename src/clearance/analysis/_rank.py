"""Where a maintainer should look first: complexity and size lead, repeats collapse.

The list is built from module facts only (``module_facts`` results):

- every function of McCabe complexity `COMPLEX_FROM` or more, scored by its complexity
  plus one point per `LINES_PER_POINT` lines; the `PINNED` most complex functions of the
  package always make the list;
- ruff's findings, one entry per rule per module ("24x F401 in compat.py"), weighted by
  severity; complexity and size rules are left to the function entries;
- never a rule that needs context the analysis lacks (`CONTEXT_RULES`), nor an unused
  import (``F401``) in a module that re-exports (a package's ``__init__``, a module with
  ``__all__``, or one whose other modules import the flagged name from it).

Fan-in (how many modules of the package import a module at run time) is shown, and
breaks ties, but does not multiply a score.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from clearance._core.vocabulary import RankedKind
from clearance.analysis._lint import CONTEXT_RULES

__all__ = ["COMPLEX_FROM", "MAX_LOOK_HERE", "PINNED", "fan_in", "look_here_first"]

MAX_LOOK_HERE = 10
"""Entries of the "look here first" list."""
COMPLEX_FROM = 10
"""Lowest complexity listed (ruff's default ``max-complexity``)."""
PINNED = 3
"""The package's most complex functions that always make the list."""
LINES_PER_POINT = 20
"""A function's size adds one point per this many lines."""
_WEIGHT = {"high": 16, "medium": 8, "low": 3}
_SIZE_RULES = frozenset({"C901", "PLR0911", "PLR0912", "PLR0915"})
_NAME = re.compile(r"`([^`]+)`")


def fan_in(modules: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many other modules of the package import each module at run time, by slug."""
    modules = list(modules)
    slugs = {str(m.get("slug", "")) for m in modules}
    counts = dict.fromkeys(slugs, 0)
    for module in modules:
        own = module.get("slug", "")
        for target in {i for i in module.get("imports", ()) if isinstance(i, str)}:
            if target in slugs and target != own:
                counts[target] += 1
    return counts


def _imported_from(modules: list[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Names other modules import from each module, by the module's slug."""
    found: dict[str, set[str]] = {}
    for module in modules:
        for target, names in (module.get("imported_names") or {}).items():
            if target != module.get("slug"):
                found.setdefault(str(target), set()).update(str(n) for n in names)
    return found


def _reexports(module: Mapping[str, Any], imported: set[str]) -> bool:
    """Whether an unused import in ``module`` is likely a re-export."""
    path = str(module.get("module", ""))
    if path == "__init__.py" or path.endswith("/__init__.py") or module.get("all_declared"):
        return True
    for finding in module.get("findings", ()):
        if finding.get("code") == "F401":
            match = _NAME.search(str(finding.get("message", "")))
            if match and match.group(1).rsplit(".", 1)[-1] in imported:
                return True
    return False


def _function_entries(module: Mapping[str, Any], used: str) -> list[dict[str, Any]]:
    entries = []
    for function in module.get("most_complex", ()):
        value = int(function.get("complexity", 0))
        if value < COMPLEX_FROM:
            continue
        lines = int(function.get("lines", 0))
        entries.append(
            {
                "kind": RankedKind.FUNCTION,
                "module": str(module.get("module", "")),
                "line": function["line"],
                "symbol": function["name"],
                "complexity": value,
                "why": f"complexity {value}, {lines} lines{used}",
                "score": value + lines // LINES_PER_POINT,
            }
        )
    return entries


def _finding_entries(module: Mapping[str, Any], used: str, reexports: bool) -> list[dict[str, Any]]:
    name = str(module.get("module", ""))
    first: dict[str, Mapping[str, Any]] = {}
    for finding in module.get("findings", ()):
        first.setdefault(str(finding.get("code")), finding)
    counts = dict(module.get("rule_counts") or {})
    for code in first:
        counts.setdefault(code, 1)
    entries = []
    for code, count in sorted(counts.items()):
        if code in CONTEXT_RULES or code in _SIZE_RULES or (code == "F401" and reexports):
            continue
        finding = first.get(code)
        if finding is None:  # beyond the findings kept: the count is still a fact
            continue
        weight = _WEIGHT.get(str(finding.get("severity", "low")), 3)
        message = str(finding.get("message", ""))
        if count > 1:
            why = f"{count}x {code} in {name} (first: {message}){used}"
        else:
            why = f"{code} {message}{used}"
        entries.append(
            {
                "kind": RankedKind.FINDING,
                "module": name,
                "line": finding["line"],
                "symbol": "",
                "code": code,
                "count": count,
                "why": why,
                "score": weight + min(count, 5) - 1,
            }
        )
    return entries


def look_here_first(
    modules: Iterable[Mapping[str, Any]], *, limit: int = MAX_LOOK_HERE
) -> list[dict[str, Any]]:
    """Where a maintainer should look first (see the module docstring for the rules).

    Returns:
        Up to ``limit`` entries ``{"kind", "module", "line", "symbol", "why", "score"}``
        (``kind`` ``"function"`` with ``complexity``, or ``"finding"`` with ``code`` and
        ``count``), highest score first; ties go to the module more of the package
        imports, then module and line order.
    """
    modules = list(modules)
    fans = fan_in(modules)
    imported = _imported_from(modules)
    functions: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    for module in modules:
        slug = str(module.get("slug", ""))
        fan = fans.get(slug, 0)
        used = f"; imported by {fan} other module(s)" if fan else ""
        reexports = _reexports(module, imported.get(slug, set()))
        own = _function_entries(module, used), _finding_entries(module, used, reexports)
        for entry in own[0] + own[1]:
            entry["fan_in"] = fan
        functions += own[0]
        findings += own[1]

    def order(entry: Mapping[str, Any]) -> tuple[int, int, str, int]:
        return (-int(entry["score"]), -int(entry["fan_in"]), entry["module"], entry["line"])

    by_complexity = sorted(functions, key=lambda e: (-e["complexity"], e["module"], e["line"]))
    pinned = by_complexity[: min(PINNED, limit)]
    rest = sorted([e for e in functions + findings if e not in pinned], key=order)
    chosen = sorted(pinned + rest[: limit - len(pinned)], key=order)
    for entry in chosen:
        del entry["fan_in"]
    return chosen
