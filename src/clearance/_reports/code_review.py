"""The code review report (``report: step:code_review_report``), from a run's results.

Facts come from the ``module_facts`` steps (ast and ruff); the summary on top is written
from them by a template. Model text (each module's review, any other model task's answer,
the coordinator's summary) reaches the report only sentence by sentence, when it passes
grounding (`clearance.analysis.ground`); what fails is left out and counted. The same run
always gives the same report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from clearance._core.spec import Task
from clearance._core.vocabulary import NameKind
from clearance._orchestration.result import RunResult, TaskOutcome
from clearance._reports.base import Report, marks, one_line, parse_json, plain
from clearance._reports.review_checks import checked_review, checked_text
from clearance._reports.sarif import sarif_log
from clearance._reports.summary import fact_summary
from clearance._state.queue import TaskStatus
from clearance.analysis import (
    COMPLEXITY_NAME,
    Known,
    checked_facts,
    fan_in,
    look_here_first,
    module_slug,
)

__all__ = ["code_review_report"]

SHOWN_FINDINGS = 8
"""Findings listed per module in the Markdown (the most severe; all are in the data)."""


def _code(text: Any) -> str:
    return "`" + str(text).replace("`", "'") + "`"


def _public_name(entry: Mapping[str, Any]) -> str:
    kind = str(entry.get("kind", ""))
    if kind == NameKind.RE_EXPORT:
        kind = f"re-export from {entry.get('from', '?')}"
    where = f", line {entry['line']}" if entry.get("line") else ""
    return f"{_code(entry.get('name', ''))} ({kind}{where})"


def _module_lines(
    module: Mapping[str, Any], fans: Mapping[str, int], importers: Mapping[str, list[str]]
) -> list[str]:
    """The facts of one module, as Markdown list items."""
    name = str(module.get("module"))
    slug = str(module.get("slug", module_slug(name)))
    lines: list[str] = []
    if "parse_error" in module:
        lines.append(f"- Does not parse: {module['parse_error']}")
    public = module.get("public", [])
    shown = ", ".join(_public_name(p) for p in public[:12])
    count = int(module.get("public_count", len(public)))
    more = count - min(len(public), 12)
    declared = " (its `__all__`)" if module.get("all_declared") else ""
    lines.append(
        f"- {module.get('lines')} lines, {module.get('functions', 0)} functions; "
        f"{count} public names{declared}"
        + (f": {shown}" if shown else "")
        + (f" and {more} more" if more > 0 else "")
    )
    imports = [i for i in module.get("imports", ()) if i in fans]
    typed = [i for i in module.get("type_imports", ()) if i in fans]
    uses = ", ".join(_code(i or "__init__") for i in imports) or "none"
    used_by = ", ".join(_code(u) for u in importers.get(slug, [])) or "none"
    type_only = (
        f"; for type checking only: {', '.join(_code(i or '__init__') for i in typed)}"
        if typed
        else ""
    )
    lines.append(
        f"- Imports from the package: {uses}{type_only}; imported by {fans.get(slug, 0)}: {used_by}"
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
    total = int(module.get("findings_total", len(findings)))
    if module.get("lint_problem"):
        lines.append(f"- Linter: {module['lint_problem']}")
    elif findings:
        shown_n = min(len(findings), SHOWN_FINDINGS)
        counted = f"{shown_n} of {total} shown, most severe first" if total > shown_n else total
        lines.append(f"- Findings (ruff, {counted}):")
        groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for f in findings[:shown_n]:  # one line per rule: "PLW2901 at lines 3, 5 (2x)"
            groups.setdefault((str(f["severity"]), str(f["code"])), []).append(f)
        for (severity, code), group in groups.items():
            at = ", ".join(str(f["line"]) for f in group)
            times = f" ({len(group)}x)" if len(group) > 1 else ""
            where = "lines" if len(group) > 1 else "line"
            message = one_line(group[0]["message"])
            lines.append(f"  - {severity}: {where} {at} {code}{times} {message}")
    else:
        lines.append("- Findings (ruff): none")
    return lines


def code_review_report(
    result: RunResult,
    tasks: Sequence[Task],
    *,
    model_id: str,
    team_name: str = "",
) -> Report:
    """Assemble the report of a code review run.

    Args:
        result: The run's result.
        tasks: The run's tasks (a review is linked to its module through its dependencies).
        model_id: The model that wrote the reviews and the summary, named in their labels.
        team_name: The team file's name, in the first heading.

    Returns:
        The report with its SARIF log. A module whose facts task failed is listed under
        the tasks that did not complete; a module whose review failed keeps its facts.
    """
    outcomes = result.tasks
    facts_by_task, malformed = _step_facts(tasks, outcomes)
    module_of = _module_of_task(tasks, facts_by_task)
    modules = sorted(facts_by_task.values(), key=lambda m: str(m.get("module")))
    known = Known.from_facts(modules)
    dropped: Counter[str] = Counter()
    reviews: dict[str, tuple[str, dict[str, Any] | None, str | None]] = {}
    other_text: list[tuple[Task, str]] = []
    for task in tasks:
        if task.run is not None:
            continue
        outcome = outcomes.get(task.id)
        facts = module_of.get(task.id)
        if facts is not None:
            error = None
            if outcome is None or outcome.status is not TaskStatus.COMPLETED:
                error = (outcome.error if outcome is not None else None) or "did not run"
            text = outcome.result if outcome is not None else None
            review = checked_review(parse_json(text), facts, known, dropped)
            if review is None and error is None and text:
                dropped["not a JSON object"] += 1  # said, not silently lost
            reviews[str(facts.get("module"))] = (task.id, review, error)
        elif outcome is not None and outcome.status is TaskStatus.COMPLETED and outcome.result:
            other_text.append((task, outcome.result))
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
    ] + malformed
    package = next((str(m.get("package")) for m in modules if m.get("package")), "")
    lines: list[str] = ["# Code review" + (f" ({team_name})" if team_name else ""), ""]
    lines.append(
        f"Package {_code(package or '?')}: {len(modules)} modules. Run {result.run_id} "
        f"({result.status}); model {model_id}; {result.usage.requests} model calls, "
        f"{result.usage.prompt_tokens} prompt tokens."
    )
    summary_facts = fact_summary(modules, fans, ranked)
    lines += ["", "## Summary (from the analysis)", "", " ".join(summary_facts)]
    summary = checked_text(result.synthesis, known, dropped)
    if summary:
        lines += ["", f"Coordinator ({model_id}, sentences that pass grounding): {summary}"]
        if found := marks(result.synthesis):
            lines += ["", f"_Note: the coordinator's answer was {' and '.join(found)}._"]
    lines += ["", f"## Look here first (from the analysis; {COMPLEXITY_NAME})", ""]
    for i, entry in enumerate(ranked, 1):
        symbol = f" {_code(entry['symbol'])}" if entry["symbol"] else ""
        where = _code(f"{entry['module']}:{entry['line']}")
        lines.append(f"{i}. {where}{symbol}: {entry['why']}")
    if not ranked:
        lines.append("Nothing stands out: no complex function and no finding.")
    kept_other: list[dict[str, str]] = []
    for task, text in other_text:
        grounded = checked_text(text, known, dropped)
        kept_other.append({"task": task.id, "text": grounded})
        if grounded:
            lines += ["", f"## {task.title} (by {task.assignee}, {model_id}; grounded)", ""]
            lines.append(grounded)
    lines += ["", "## Modules", ""]
    data_modules = []
    for module in modules:
        name = str(module.get("module"))
        purpose = module.get("purpose") or "(no docstring)"
        lines += [f"### {_code(name)}: {plain(one_line(purpose, 160))}", ""]
        lines += _module_lines(module, fans, importers)
        review_id, review, error = reviews.get(name, ("", None, None))
        if error is not None:
            reason = plain(one_line(error))  # a schema error quotes the model's answer
            lines.append(f"- Model review ({review_id}) did not complete: {reason}")
        elif review is not None and (review["summary"] or review["findings"]):
            lines.append(f"- Model review ({model_id}): {review['summary'] or '(no summary)'}")
            for f in review["findings"]:
                symbol = f" {_code(f['symbol'])}" if f["symbol"] else ""
                rule = f" {f['rule']}" if f["rule"] else ""
                category = plain(f["category"])
                lines.append(f"  - {f['severity']} {category}{rule}{symbol}: {f['note']}")
        lines.append("")
        data_modules.append({"facts": module, "review": review, "review_error": error})
    if dropped:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(dropped.items()))
        lines += [
            "## Model output left out",
            "",
            f"{sum(dropped.values())} model sentences or findings failed grounding and are "
            f"not shown ({reasons}).",
            "",
        ]
    if incomplete:
        lines += ["## Tasks that did not complete", ""]
        for entry in incomplete:
            reason = plain(one_line(entry["reason"]))
            lines.append(f"- {entry['task']} ({entry['status']}): {reason}")
        lines.append("")
    data = {
        "run": {
            "run_id": result.run_id,
            "status": result.status,
            "model": model_id,
            "usage": result.usage.to_dict(),
        },
        "summary": summary_facts,
        "coordinator_summary": summary,
        "look_here_first": ranked,
        "modules": data_modules,
        "other_reviews": kept_other,
        "left_out": dict(sorted(dropped.items())),
        "incomplete": incomplete,
    }
    markdown = "\n".join(lines).rstrip() + "\n"
    return Report(markdown=markdown, data=data, sarif=sarif_log(modules, package=package))


def _step_facts(
    tasks: Sequence[Task], outcomes: Mapping[str, TaskOutcome]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """The ``module_facts`` results of the run's steps, each checked field by field.

    Only a step's result is taken for facts: a model's answer that says it is module facts
    (``{"kind": "module_facts", "module": "../../etc/passwd", ...}``) is a model's text,
    and never reaches the report's facts or its SARIF log. A step's result of that kind
    whose fields have the wrong types is left out and listed with the tasks that did not
    complete, naming the first bad field.

    Returns:
        The facts by task id, and the entries for the malformed ones.
    """
    facts: dict[str, dict[str, Any]] = {}
    malformed: list[dict[str, str]] = []
    for task in tasks:
        outcome = outcomes.get(task.id)
        if task.run is None or outcome is None or outcome.status is not TaskStatus.COMPLETED:
            continue
        try:
            found = checked_facts({task.id: outcome.result or ""})
        except ValueError as exc:
            malformed.append({"task": task.id, "status": "malformed", "reason": str(exc)})
            continue
        if found:
            facts[task.id] = found[0]
    return facts, malformed


def _module_of_task(
    tasks: Sequence[Task], facts_by_task: Mapping[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """For each model task that reviews one module: that module's facts.

    A task reviews a module when its dependencies reach exactly one module's facts,
    directly or through steps (a review that reads a brief of the facts).
    """
    by_id = {t.id: t for t in tasks}

    def reached(task_id: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if task_id in facts_by_task:
            return {task_id}
        task = by_id.get(task_id)
        if task is None or task_id in seen:
            return set()
        found: set[str] = set()
        for dep in task.depends_on:
            dep_task = by_id.get(dep)
            if dep in facts_by_task or (dep_task is not None and dep_task.run is not None):
                found |= reached(dep, seen | {task_id})
        return found

    out: dict[str, dict[str, Any]] = {}
    for task in tasks:
        if task.run is None:
            found = reached(task.id)
            if len(found) == 1:
                out[task.id] = facts_by_task[found.pop()]
    return out
