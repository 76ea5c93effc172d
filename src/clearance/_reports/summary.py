"""The summary on top of a code review, written from the package's facts by a template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clearance._core.vocabulary import RankedKind
from clearance._reports.base import plain
from clearance.analysis import COMPLEXITY_NAME

__all__ = ["fact_summary"]


def _code(text: Any) -> str:
    return "`" + str(text).replace("`", "'") + "`"


def fact_summary(
    modules: Sequence[Mapping[str, Any]],
    fans: Mapping[str, int],
    ranked: Sequence[Mapping[str, Any]],
) -> list[str]:
    """Three to five sentences about the package, each a fact from the analysis.

    Args:
        modules: The ``module_facts`` results.
        fans: Fan-in by module slug (`fan_in`).
        ranked: The `look_here_first` entries.

    Returns:
        The summary's sentences (Markdown).
    """
    if not modules:
        return ["No module was analysed."]
    package = next((str(m.get("package")) for m in modules if m.get("package")), "")
    lines = sum(int(m.get("lines") or 0) for m in modules)
    functions = sum(int(m.get("functions") or 0) for m in modules)
    findings = sum(int(m.get("findings_total", len(m.get("findings", ())))) for m in modules)
    name = f"Package {_code(package)}" if package else "The package"
    out = [
        f"{name} has {len(modules)} modules, {lines} lines and {functions} functions; "
        f"ruff reports {findings} findings."
    ]
    init = next((m for m in modules if m.get("slug") == ""), None)
    if init is not None and init.get("purpose"):
        out.append(f"Its docstring says: “{plain(init['purpose'])}”")
    by_slug = {str(m.get("slug")): m for m in modules}
    most = sorted(fans.items(), key=lambda kv: (-kv[1], kv[0]))
    if most and most[0][1] > 0:
        slug, count = most[0]
        path = by_slug.get(slug, {}).get("module", slug or "__init__.py")
        out.append(f"The most imported module is {_code(path)} (by {count} other modules).")
    functions_ranked = sorted(
        (e for e in ranked if e.get("kind") == RankedKind.FUNCTION),
        key=lambda e: (-int(e["complexity"]), str(e["module"]), int(e["line"])),
    )
    if functions_ranked:
        top = functions_ranked[:3]
        listed = ", ".join(
            f"{_code(e['symbol'])} in {_code(e['module'])} ({e['complexity']})" for e in top
        )
        out.append(f"The most complex functions ({COMPLEXITY_NAME}): {listed}.")
    high = sum(1 for m in modules for f in m.get("findings", ()) if f.get("severity") == "high")
    if high:
        out.append(f"{high} findings are security rules (ruff's S codes); see below.")
    return out
