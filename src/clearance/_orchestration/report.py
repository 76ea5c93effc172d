"""The code review report: assembled deterministically from a run's structured results.

Facts come from the ``module_facts`` steps (ast and ruff); model reviews (JSON answers of
the tasks that depend on a module's facts) are shown labelled as the model's, with any
symbol they name checked against the module's real names; the coordinator's synthesis is a
labelled summary on top. The same run always gives the same report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from clearance._context.answers import REPEAT_MARK, TRUNCATED_MARK
from clearance._core.spec import Task
from clearance._orchestration.result import RunResult
from clearance._state.queue import TaskStatus
from clearance.analysis import (
    COMPLEXITY_NAME,
    MODULE_FACTS,
    fan_in,
    look_here_first,
    module_slug,
)

__all__ = ["CodeReport", "build_report"]

_SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeReport:
    """A report, in Markdown and as data.

    Attributes:
        markdown: The report as Markdown.
        data: The same content as JSON-ready data (``modules``, ``look_here_first``,
            ``summary``, ``incomplete``, ``run``).
    """

    markdown: str
    data: dict[str, Any]


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _marks(text: str | None) -> list[str]:
    marks = []
    if text and TRUNCATED_MARK in text:
        marks.append("cut off at the output limit")
    if text and REPEAT_MARK in text:
        marks.append("repetition removed")
    return marks


def _one_line(text: Any, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _code(text: Any) -> str:
    return "`" + str(text).replace("`", "'") + "`"


def _public_name(entry: Mapping[str, Any]) -> str:
    kind = str(entry.get("kind", ""))
    if kind == "re-export":
        kind = f"re-export from {entry.get('from', '?')}"
    where = f", line {entry['line']}" if entry.get("line") else ""
    return f"{_code(entry.get('name', ''))} ({kind}{where})"


def _review_of(value: Any, facts: Mapping[str, Any]) -> dict[str, Any] | None:
    """A model review checked against the facts.

    A symbol it names that is not one of the module's real names is flagged, never kept
    silently.
    """
    if not isinstance(value, dict):
        return None
    names = {str(p.get("name")) for p in facts.get("public", ())}
    names |= {str(f.get("name")) for f in facts.get("most_complex", ())}
    names |= {n.rsplit(".", 1)[-1] for n in names}
    findings: list[dict[str, Any]] = []
    for entry in value.get("findings", ()) if isinstance(value.get("findings"), list) else ():
        if not isinstance(entry, dict):
            continue
        symbol = str(entry.get("symbol", "")).strip()
        findings.append(
            {
                "severity": str(entry.get("severity", "low")),
                "category": str(entry.get("category", "")),
                "symbol": symbol,
                "symbol_found": bool(symbol) and symbol.strip("`()") in names,
                "note": _one_line(entry.get("note", ""), 240),
            }
        )
    findings.sort(key=lambda f: _SEVERITY_RANK.get(f["severity"], 3))
    return {"summary": _one_line(value.get("summary", ""), 300), "findings": findings}


def build_report(
    result: RunResult,
    tasks: Iterable[Task],
    *,
    model_id: str,
    title: str = "Code review",
) -> CodeReport:
    """Assemble the report of a code review run.

    Args:
        result: The run's result.
        tasks: The run's tasks (their dependencies link a review to its module's facts).
        model_id: The model that wrote the reviews and the summary, named in their labels.
        title: The report's first heading.

    Returns:
        The report. A module whose facts task failed is listed with the reason; a module
        whose review failed keeps its facts.
    """
    tasks = list(tasks)
    outcomes = result.tasks
    facts_by_task: dict[str, dict[str, Any]] = {}
    for task in tasks:
        outcome = outcomes.get(task.id)
        value = _json(outcome.result) if outcome is not None else None
        if isinstance(value, dict) and value.get("kind") == MODULE_FACTS:
            facts_by_task[task.id] = value
    reviews: dict[str, tuple[str, dict[str, Any] | None, str | None]] = {}
    other_text: list[tuple[Task, str]] = []
    for task in tasks:
        if task.id in facts_by_task or task.run is not None:
            continue
        outcome = outcomes.get(task.id)
        module_deps = [d for d in task.depends_on if d in facts_by_task]
        if len(module_deps) == 1:
            module_name = str(facts_by_task[module_deps[0]].get("module"))
            text = outcome.result if outcome is not None else None
            error = None
            if outcome is None or outcome.status is not TaskStatus.COMPLETED:
                error = (outcome.error if outcome is not None else None) or "did not run"
            reviews[module_name] = (
                task.id,
                _review_of(_json(text), facts_by_task[module_deps[0]]),
                error,
            )
        elif (
            outcome is not None
            and outcome.status is TaskStatus.COMPLETED
            and outcome.result
            and _json(outcome.result) is None
        ):
            other_text.append((task, outcome.result))
    modules = sorted(facts_by_task.values(), key=lambda m: str(m.get("module")))
    fans = fan_in(modules)
    importers: dict[str, list[str]] = {}
    for module in modules:
        for target in module.get("imports", ()):
            importers.setdefault(str(target), []).append(str(module.get("module")))
    ranked = look_here_first(modules, limit=10)
    incomplete = [
        {"task": o.task_id, "status": str(o.status), "reason": o.error or ""}
        for o in outcomes.values()
        if o.status is not TaskStatus.COMPLETED
    ]

    lines: list[str] = [f"# {title}", ""]
    package = next((str(m.get("package")) for m in modules if m.get("package")), "")
    lines.append(
        f"Package {_code(package or '?')}: {len(modules)} modules. Run {result.run_id} "
        f"({result.status}); model {model_id}; {result.usage.requests} model calls, "
        f"{result.usage.prompt_tokens} prompt tokens."
    )
    lines += ["", f"## Summary (written by the coordinator, {model_id}; check it below)", ""]
    if result.synthesis:
        lines.append(result.synthesis.strip())
        marks = _marks(result.synthesis)
        if marks:
            lines += ["", f"_Note: the summary was {' and '.join(marks)}._"]
    else:
        lines.append(f"_No summary: {result.error or 'the synthesis did not complete'}._")
    lines += ["", "## Look here first (from the analysis)", ""]
    if ranked:
        for i, entry in enumerate(ranked, 1):
            symbol = f" {_code(entry['symbol'])}" if entry["symbol"] else ""
            lines.append(
                f"{i}. {_code(entry['module'] + ':' + str(entry['line']))}{symbol}: {entry['why']}"
            )
    else:
        lines.append("Nothing stands out: no complex function and no finding.")
    for task, text in other_text:
        lines += ["", f"## {task.title} (by {task.assignee}, {model_id})", "", text.strip()]
        marks = _marks(text)
        if marks:
            lines += ["", f"_Note: this answer was {' and '.join(marks)}._"]
    lines += ["", "## Modules", ""]
    data_modules = []
    for module in modules:
        name = str(module.get("module"))
        slug = str(module.get("slug", module_slug(name)))
        purpose = module.get("purpose") or "(no docstring)"
        lines += [f"### {_code(name)}: {_one_line(purpose, 160)}", ""]
        if "parse_error" in module:
            lines.append(f"- Does not parse: {module['parse_error']}")
        public = module.get("public", [])
        shown = ", ".join(_public_name(p) for p in public[:12])
        more = module.get("public_count", len(public)) - min(len(public), 12)
        declared = " (its `__all__`)" if module.get("all_declared") else ""
        lines.append(
            f"- {module.get('lines')} lines, {module.get('functions', 0)} functions; "
            f"{module.get('public_count', len(public))} public names{declared}"
            + (f": {shown}" if shown else "")
            + (f" and {more} more" if more > 0 else "")
        )
        imports = [i for i in module.get("imports", ()) if i in fans]
        typed = [i for i in module.get("type_imports", ()) if i in fans]
        users = importers.get(slug, [])
        uses = ", ".join(_code(i or "__init__") for i in imports) or "none"
        used_by = ", ".join(_code(u) for u in users) or "none"
        type_only = (
            f"; for type checking only: {', '.join(_code(i or '__init__') for i in typed)}"
            if typed
            else ""
        )
        lines.append(
            f"- Imports from the package: {uses}{type_only}; imported by "
            f"{fans.get(slug, 0)}: {used_by}"
        )
        complex_ = module.get("most_complex", [])[:3]
        if complex_:
            lines.append(
                f"- Most complex ({COMPLEXITY_NAME}): "
                + ", ".join(
                    f"{_code(f['name'])} (line {f['line']}, complexity {f['complexity']}, "
                    f"{f['lines']} lines)"
                    for f in complex_
                )
            )
        findings = list(module.get("findings", ()))  # most severe first
        if module.get("lint_problem"):
            lines.append(f"- Linter: {module['lint_problem']}")
        elif findings:
            total = int(module.get("findings_total", len(findings)))
            shown_n = min(len(findings), 8)
            counted = (
                f"{shown_n} of {total} shown, most severe first"
                if total > shown_n
                else (str(total))
            )
            lines.append(f"- Findings (ruff, {counted}):")
            for f in findings[:shown_n]:
                lines.append(
                    f"  - {f['severity']}: line {f['line']} {f['code']} {_one_line(f['message'])}"
                )
        else:
            lines.append("- Findings (ruff): none")
        review_id, review, error = reviews.get(name, ("", None, None))
        if error is not None:
            lines.append(f"- Model review ({review_id}) did not complete: {_one_line(error)}")
        elif review is not None:
            lines.append(f"- Model review ({model_id}): {review['summary'] or '(no summary)'}")
            for f in review["findings"]:
                check = "" if f["symbol_found"] else " (symbol not found in the module)"
                symbol = f" {_code(f['symbol'])}" if f["symbol"] else ""
                lines.append(f"  - {f['severity']} {f['category']}{symbol}{check}: {f['note']}")
        lines.append("")
        data_modules.append({"facts": module, "review": review, "review_error": error})
    if incomplete:
        lines += ["## Tasks that did not complete", ""]
        for entry in incomplete:
            lines.append(f"- {entry['task']} ({entry['status']}): {_one_line(entry['reason'])}")
        lines.append("")
    data = {
        "run": {
            "run_id": result.run_id,
            "status": result.status,
            "model": model_id,
            "usage": result.usage.to_dict(),
        },
        "summary": result.synthesis,
        "look_here_first": ranked,
        "modules": data_modules,
        "incomplete": incomplete,
    }
    return CodeReport(markdown="\n".join(lines).rstrip() + "\n", data=data)
