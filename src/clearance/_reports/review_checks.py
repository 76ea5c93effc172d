"""Model reviews checked against the facts: only grounded sentences and findings are kept."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from clearance._context.answers import REPEAT_MARK, TRUNCATED_MARK
from clearance._reports.base import one_line
from clearance.analysis import Known, ground

__all__ = ["MAX_REVIEW_FINDINGS", "checked_review", "checked_text"]

_SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}
MAX_CATEGORY_CHARS = 40
"""Most characters of a finding's category, on one line (a model's word, not a paragraph)."""
MAX_REVIEW_FINDINGS = 10
"""Most findings of one review checked and kept; the rest are counted as left out."""
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Control characters, DEL, C1 and the bidirectional overrides: kept as their escapes."""


def _category(value: Any) -> str:
    r"""A finding's category on one line, its control characters escaped (``\x1b``)."""
    text = one_line(value, MAX_CATEGORY_CHARS)
    return _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def checked_text(
    text: str | None, known: Known, dropped: Counter[str], seen: set[str] | None = None
) -> str:
    """The sentences of ``text`` that pass grounding; the others are added to ``dropped``.

    The orchestrator's marks (cut off, repetition removed) are not the model's sentences:
    they are removed first (the report says so in a note).
    """
    for mark in (REPEAT_MARK, TRUNCATED_MARK):
        text = text.replace(mark, "") if text else text
    grounded = ground(text, known, seen)
    dropped.update(grounded.dropped)
    return grounded.text


def checked_review(
    value: Any, facts: Mapping[str, Any], known: Known, dropped: Counter[str]
) -> dict[str, Any] | None:
    """A module review (the reviewer's JSON answer) with what fails grounding left out.

    A finding is kept only if its ``severity`` is ``high``, ``medium`` or ``low``, its
    ``symbol`` is empty or one of the module's own functions or names, its ``rule`` (if
    any) one of the module's findings, and its note has a sentence that passes grounding
    and repeats neither the summary nor another note. Its category is shown on one line,
    cut at `MAX_CATEGORY_CHARS`, control characters escaped (the report shows it as text,
    never as markup). At most `MAX_REVIEW_FINDINGS` findings are read. What is left out is
    counted in ``dropped`` (``"severity"``, ``"symbol"``, ``"rule code"``, ``"over the
    findings cap"``, and the reasons of `ground`).

    Returns:
        ``{"summary", "findings"}``, or ``None`` when ``value`` is not a JSON object.
    """
    if not isinstance(value, dict):
        return None
    own = Known.from_facts([facts])
    codes = own.codes
    seen: set[str] = set()
    summary = checked_text(str(value.get("summary", "")), known, dropped, seen)
    findings: list[dict[str, Any]] = []
    entries = value.get("findings")
    entries = entries if isinstance(entries, list) else []
    if len(entries) > MAX_REVIEW_FINDINGS:
        dropped["over the findings cap"] += len(entries) - MAX_REVIEW_FINDINGS
    for entry in entries[:MAX_REVIEW_FINDINGS]:
        if not isinstance(entry, dict):
            dropped["malformed"] += 1
            continue
        symbol = str(entry.get("symbol", "")).strip().strip("`").removesuffix("()")
        rule = str(entry.get("rule", "")).strip()
        severity = str(entry.get("severity", "low")).strip().lower()
        if severity not in _SEVERITY_RANK:
            dropped["severity"] += 1
            continue
        if symbol and symbol not in own.symbols:
            dropped["symbol"] += 1
            continue
        if rule and rule not in codes:
            dropped["rule code"] += 1
            continue
        note = checked_text(str(entry.get("note", "")), known, dropped, seen)
        if not note:
            continue
        findings.append(
            {
                "severity": severity,
                "category": _category(entry.get("category", "")),
                "symbol": symbol,
                "rule": rule,
                "note": one_line(note, 240),
            }
        )
    findings.sort(key=lambda f: _SEVERITY_RANK.get(f["severity"], 3))
    return {"summary": one_line(summary, 300), "findings": findings}
