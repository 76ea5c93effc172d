"""What a module's reviewer is shown: the few facts a review uses, in compact JSON.

The full facts (`module_facts`) feed the report; a model reads only this brief: the
module's purpose and size, its most complex functions, its most severe findings, and the
source of its most complex function. ``symbols`` and ``rules`` list the names and rule
codes a review may cite (a review's schema takes its enums from them, ``x-enum-from``).
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from clearance._core.step_input import StepInput
from clearance.analysis._kinds import checked_facts

__all__ = ["BRIEF_EXCERPT_CHARS", "BRIEF_FINDINGS", "REVIEW_BRIEF", "brief", "review_brief"]

REVIEW_BRIEF = "review_brief"
"""The step's name (``run: step:review_brief``)."""
BRIEF_FINDINGS = 5
"""Most findings a brief lists (the most severe)."""
BRIEF_FUNCTIONS = 3
"""Most functions a brief lists (the most complex)."""
BRIEF_EXCERPT_CHARS = 650
"""Most characters of source a brief quotes."""
BRIEF_NAME_CHARS = 80
"""Most characters of a function's name a brief shows (Python sets no limit on a name's
length: a module may hold a name of megabytes, and the brief's size is a bound)."""
BRIEF_PURPOSE_CHARS = 200
"""Most characters of the module's purpose a brief shows."""


def _short(message: str, limit: int = 80) -> str:
    return message if len(message) <= limit else message[: limit - 1].rsplit(" ", 1)[0] + "…"


def brief(facts: dict[str, Any]) -> dict[str, Any]:
    """The brief of one module's facts (see the module docstring).

    Returns:
        ``{"module", "purpose", "lines", "functions", "findings", "symbols", "rules",
        "excerpt"}`` (``findings`` as ``"line 12 F401 message"``; ``excerpt`` as text
        headed by the function's name and line range, dedented, its docstring left out).
    """
    functions = list(facts.get("most_complex", ()))[:BRIEF_FUNCTIONS]
    findings = [f for f in facts.get("findings", ()) if f.get("severity") != "context"][
        :BRIEF_FINDINGS
    ]
    total = int(facts.get("findings_total", len(findings)))
    names = [_short(str(f["name"]), BRIEF_NAME_CHARS) for f in functions]
    out: dict[str, Any] = {
        "module": facts.get("module"),
        "purpose": _short(str(facts.get("purpose", "")), BRIEF_PURPOSE_CHARS),
        "lines": facts.get("lines"),
        "functions": [
            f"{name} line {f['line']}: complexity {f['complexity']}, {f['lines']} lines"
            for name, f in zip(names, functions, strict=True)
        ],
        "findings": [f"line {f['line']} {f['code']} {_short(str(f['message']))}" for f in findings],
    }
    if total > len(findings):
        out["findings_not_shown"] = total - len(findings)
    out["symbols"] = sorted(set(names))
    out["rules"] = sorted({str(f["code"]) for f in findings})
    excerpt = facts.get("excerpt")
    if isinstance(excerpt, dict):
        text = textwrap.dedent(str(excerpt.get("text", "")))
        if len(text) > BRIEF_EXCERPT_CHARS:
            text = text[:BRIEF_EXCERPT_CHARS].rsplit("\n", 1)[0] + "\n# ... (cut)"
        doc = int(excerpt.get("docstring_lines") or 0)
        left_out = f" (docstring of {doc} lines left out)" if doc else ""
        out["excerpt"] = (
            f"# {_short(str(excerpt.get('symbol')), BRIEF_NAME_CHARS)}, lines "
            f"{excerpt.get('first_line')}-"
            f"{excerpt.get('last_line')}{left_out}\n{text}"
        )
    return out


def review_brief(step: StepInput) -> str:
    """The brief of the one module whose facts the task is admitted (compact JSON text).

    Raises:
        ValueError: The task is not admitted exactly one module's facts, or a result that
            says it is module facts has mistyped fields.
    """
    found = checked_facts(step.results)
    if len(found) != 1:
        raise ValueError(
            f"step:review_brief needs the facts of exactly one module, it was given {len(found)}"
        )
    return json.dumps(brief(found[0]), ensure_ascii=False, separators=(",", ":"))
