"""The built-in analysis steps (``run: step:<name>`` in a team file)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from clearance._core.errors import ConfigError
from clearance._core.step_input import StepInput
from clearance.analysis._brief import REVIEW_BRIEF, review_brief
from clearance.analysis._facts import module_structure
from clearance.analysis._kinds import MODULE_FACTS, PACKAGE_FACTS, checked_facts, parse_facts
from clearance.analysis._lint import lint_source
from clearance.analysis._rank import fan_in, look_here_first
from clearance.analysis._target import python_target

__all__ = [
    "MODULE_FACTS",
    "package_data",
    "PACKAGE_FACTS",
    "STEPS",
    "module_facts",
    "package_facts",
    "parse_facts",
]


def module_facts(step: StepInput) -> dict[str, Any]:
    """Facts about the task's one module: `module_structure` plus ruff's findings.

    Ruff is told the package's oldest supported Python (`python_target`).

    Returns:
        The structure mapping with ``kind`` ``"module_facts"``, ``package``,
        ``python_target`` (``{"version", "source"}`` or ``None``), ``findings`` (the most
        severe `MAX_FINDINGS`, see `lint_source`), ``findings_total``, ``rule_counts``
        (findings per rule, over all of them) and ``lint_problem`` when ruff gave nothing
        to trust.

    Raises:
        ConfigError: The task does not list exactly one file.
    """
    if len(step.files) != 1:
        raise ConfigError(
            f"step:module_facts needs exactly one file, task {step.task_id!r} lists "
            f"{len(step.files)}",
            field=f"tasks.{step.task_id}.files",
        )
    path, source = next(iter(step.files.items()))
    facts: dict[str, Any] = {"kind": MODULE_FACTS, "package": step.input_name}
    facts.update(module_structure(path, source, package=step.input_name))
    target = python_target(step.input_name)
    facts["python_target"] = (
        {"version": target.version, "source": target.source} if target is not None else None
    )
    lint = lint_source(path, source, target_version=target.version if target else None)
    facts["findings"] = lint.findings
    facts["findings_total"] = lint.total
    facts["rule_counts"] = lint.counts
    if lint.problem is not None:
        facts["lint_problem"] = lint.problem
    return facts


def package_data(
    modules: list[dict[str, Any]], *, package: str = "", missing: Iterable[str] = ()
) -> dict[str, Any]:
    """Facts about the package from its modules' facts, as data.

    Returns:
        ``{"kind": "package_facts", "package", "modules": [...], "look_here_first": [...],
        "missing": [...]}``: per module its path, purpose, lines, fan-in (run-time imports
        only), imports and type-only imports (of the given modules only: ``from . import
        name`` of a name no module has is no edge), highest complexity and number of
        findings; the ranked list of `look_here_first`; and the admitted tasks that failed
        (ids only).
    """
    fans = fan_in(modules)  # by slug: the package's modules
    return {
        "kind": PACKAGE_FACTS,
        "package": package,
        "modules": [
            {
                "module": m.get("module"),
                "purpose": m.get("purpose", ""),
                "lines": m.get("lines"),
                "fan_in": fans.get(str(m.get("slug", "")), 0),
                "imports": [i for i in m.get("imports", []) if i in fans],
                "type_imports": [i for i in m.get("type_imports", []) if i in fans],
                "max_complexity": max(
                    (f.get("complexity", 0) for f in m.get("most_complex", ())), default=0
                ),
                "findings": m.get("findings_total", len(m.get("findings", ()))),
            }
            for m in modules
        ],
        "look_here_first": look_here_first(modules),
        "missing": sorted(missing),
    }


TEXT_LOOK_HERE = 5
"""Places to look first that the package facts' text lists (a summary names two or three)."""
SYMBOL_CHARS = 80
"""Most characters of a function's name the package facts' text shows (Python sets no limit
on a name's length; the text's size is bounded, `step_result_tokens`)."""


def _clip(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def package_facts(step: StepInput) -> str:
    """Facts about the package from its modules' facts (the task's admitted results).

    The text a model reads: one line per module (lines, what imports it, what it imports,
    its docstring's first sentence), then the first `TEXT_LOOK_HERE` places to look first
    (see `package_data` for all of it as data).

    Returns:
        Short Markdown text.

    Raises:
        ValueError: A result that says it is module facts has fields of the wrong types
            (a model's answer, say); the message names the task and the first bad field.
    """
    data = package_data(checked_facts(step.results), package=step.input_name, missing=step.failed)
    name = data["package"] or "the package"
    lines = [f"Package {name}: {len(data['modules'])} modules.", "", "Modules:"]
    for m in data["modules"]:
        imports = ", ".join(i or "__init__" for i in m["imports"]) or "nothing"
        purpose = f" {_clip(m['purpose'])}" if m["purpose"] else ""
        lines.append(
            f"- {m['module']} ({m['lines']} lines, imported by {m['fan_in']}; imports "
            f"{imports}).{purpose}"
        )
    lines += ["", "Look here first:"]
    for i, entry in enumerate(data["look_here_first"][:TEXT_LOOK_HERE], 1):
        symbol = f" {_clip(entry['symbol'], SYMBOL_CHARS)}" if entry["symbol"] else ""
        why = entry["why"].split("; imported by")[0]
        lines.append(f"{i}. {entry['module']}:{entry['line']}{symbol}: {why}")
    if data["missing"]:
        lines += ["", f"Not analysed: {', '.join(data['missing'])}."]
    return "\n".join(lines)


StepFunction = Callable[[StepInput], Any]
"""A built-in step: a function of the step's input, returning JSON-ready data."""

STEPS: Mapping[str, StepFunction] = {
    MODULE_FACTS: module_facts,
    PACKAGE_FACTS: package_facts,
    REVIEW_BRIEF: review_brief,
}
"""The built-in steps by name (``run: step:<name>``)."""
