"""The built-in analysis steps (``run: step:<name>`` in a team file)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clearance._core.errors import ConfigError
from clearance._core.step_input import StepInput
from clearance.analysis._facts import module_structure
from clearance.analysis._lint import lint_source

__all__ = [
    "MODULE_FACTS",
    "PACKAGE_FACTS",
    "STEPS",
    "fan_in",
    "look_here_first",
    "module_facts",
    "package_facts",
    "parse_facts",
]

MODULE_FACTS = "module_facts"
"""``kind`` of a `module_facts` result."""
PACKAGE_FACTS = "package_facts"
"""``kind`` of a `package_facts` result."""
MAX_LOOK_HERE = 8
"""Entries of the "look here first" list."""
_WEIGHT = {"high": 30, "medium": 12, "low": 4}


def module_facts(step: StepInput) -> dict[str, Any]:
    """Facts about the task's one module: `module_structure` plus ruff's findings.

    Returns:
        The structure mapping with ``kind`` ``"module_facts"``, ``package``, ``findings``
        (see `lint_source`) and ``lint_problem`` when ruff gave nothing to trust.

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
    findings, problem = lint_source(path, source)
    facts["findings"] = findings
    if problem is not None:
        facts["lint_problem"] = problem
    return facts


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


def fan_in(modules: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many other modules of the package import each module, by slug."""
    modules = list(modules)
    slugs = {str(m.get("slug", "")) for m in modules}
    counts = dict.fromkeys(slugs, 0)
    for module in modules:
        own = module.get("slug", "")
        for target in {i for i in module.get("imports", ()) if isinstance(i, str)}:
            if target in slugs and target != own:
                counts[target] += 1
    return counts


def look_here_first(
    modules: Iterable[Mapping[str, Any]], *, limit: int = MAX_LOOK_HERE
) -> list[dict[str, Any]]:
    """Where a maintainer should look first, ranked by signal times how much depends on it.

    A security or likely-bug finding weighs 30 or 12, a complexity or size finding 4, a
    function its cyclomatic complexity (from 10 up); each is multiplied by 1 + the module's
    fan-in (how many modules of the package import it).

    Returns:
        Up to ``limit`` entries ``{"module", "line", "symbol", "why", "score"}``, highest
        score first (ties in module and line order).
    """
    modules = list(modules)
    fans = fan_in(modules)
    entries: list[dict[str, Any]] = []
    for module in modules:
        name = str(module.get("module", ""))
        fan = fans.get(str(module.get("slug", "")), 0)
        used = f"; imported by {fan} other module(s)" if fan else ""
        for function in module.get("most_branching", ()):
            if function.get("branches", 0) >= 10:
                entries.append(
                    {
                        "module": name,
                        "line": function["line"],
                        "symbol": function["name"],
                        "why": f"cyclomatic complexity {function['branches']} over "
                        f"{function['lines']} lines{used}",
                        "score": function["branches"] * (1 + fan),
                    }
                )
        for finding in module.get("findings", ()):
            if finding.get("code") in ("C901", "PLR0912", "PLR0915", "PLR0911"):
                continue  # the function entry above says it with numbers
            entries.append(
                {
                    "module": name,
                    "line": finding["line"],
                    "symbol": "",
                    "why": f"{finding['code']} {finding['message']}{used}",
                    "score": _WEIGHT.get(finding.get("severity", "low"), 4) * (1 + fan),
                }
            )
    entries.sort(key=lambda e: (-e["score"], e["module"], e["line"]))
    return entries[:limit]


def package_facts(step: StepInput) -> dict[str, Any]:
    """Facts about the package from its modules' facts (the task's admitted results).

    Returns:
        ``{"kind": "package_facts", "package", "modules": [...], "look_here_first": [...],
        "missing": [...]}``: per module its path, purpose, lines, fan-in, imports, highest
        complexity and number of findings; the ranked list of `look_here_first`; and the
        admitted tasks that failed (ids only).

    Raises:
        ValueError: A result that says it is module facts has fields of the wrong types
            (a model's answer, say); the message names the task and the first bad field.
    """
    modules = _checked_facts(step.results)
    fans = fan_in(modules)
    return {
        "kind": PACKAGE_FACTS,
        "package": step.input_name,
        "modules": [
            {
                "module": m.get("module"),
                "purpose": m.get("purpose", ""),
                "lines": m.get("lines"),
                "fan_in": fans.get(str(m.get("slug", "")), 0),
                "imports": m.get("imports", []),
                "max_branches": max(
                    (f.get("branches", 0) for f in m.get("most_branching", ())), default=0
                ),
                "findings": len(m.get("findings", ())),
            }
            for m in modules
        ],
        "look_here_first": look_here_first(modules),
        "missing": sorted(step.failed),
    }


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Branching(_Strict):
    name: str
    line: int
    lines: int
    branches: int


class _Finding(_Strict):
    code: str
    message: str
    line: int
    severity: str = "low"


class _ModuleFacts(_Strict):
    module: str
    slug: str
    lines: int | None = None
    purpose: str = ""
    imports: list[str] = Field(default_factory=list)
    most_branching: list[_Branching] = Field(default_factory=list)
    findings: list[_Finding] = Field(default_factory=list)


def _checked_facts(results: Mapping[str, str]) -> list[dict[str, Any]]:
    """`parse_facts` of the results, each checked to have the fields of `module_facts`.

    Raises:
        ValueError: A result of kind ``module_facts`` has a missing or mistyped field.
    """
    found = []
    for task_id, text in results.items():
        for facts in parse_facts([text]):
            try:
                _ModuleFacts.model_validate(facts)
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(part) for part in error["loc"]) or "(the result)"
                raise ValueError(
                    f"the result of task {task_id!r} claims to be module facts but {where}: "
                    f"{error['msg']}"
                ) from None
            found.append(facts)
    return found


StepFunction = Callable[[StepInput], Any]
"""A built-in step: a function of the step's input, returning JSON-ready data."""

STEPS: Mapping[str, StepFunction] = {
    MODULE_FACTS: module_facts,
    PACKAGE_FACTS: package_facts,
}
"""The built-in steps by name (``run: step:<name>``)."""
