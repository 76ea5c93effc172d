"""A module whose expressions nest deeply (it parses) still gets its facts.

Before: `module_structure` walked every expression node recursively to find imports and
``def``s, and summed ``__all__ = [...] + [...] + ...`` recursively, so a file of
``x = 1 + 1 + ...`` with 1,500 terms (a generated table, or a file written to break the
review) raised `RecursionError` out of the ``module_facts`` step: the module was never
analysed, its brief and review were skipped. Now only statements are walked (they nest at
most 100 deep), and the sum is read without recursion.
"""

from __future__ import annotations

import ast
import json

import pytest

from clearance.analysis import StepInput, module_structure, review_brief
from clearance.analysis._steps import module_facts

TERMS = 1500


def long_sum(terms: int = TERMS) -> str:
    return " + ".join(["1"] * terms)


SOURCE = f'''\
"""Generated tables."""
from __future__ import annotations

from .other import helper

__all__ = {" + ".join(f"['n{i}']" for i in range(TERMS))}

TABLE = {long_sum()}


def outer(x):
    """Uses the table."""
    total = {long_sum()}
    if x:
        from . import sibling

        def inner():
            return sibling

        return inner
    return total + helper(x)
'''


def test_the_source_parses() -> None:
    ast.parse(SOURCE)  # the premise: Python itself accepts it


@pytest.mark.parametrize("package", ["", "pkg"])
def test_a_module_of_deep_expressions_gets_its_structure(package: str) -> None:
    facts = module_structure("gen.py", SOURCE, package=package)
    assert "parse_error" not in facts
    assert facts["imports"] == ["other", "sibling"]
    assert [f["name"] for f in facts["most_complex"]] == ["outer", "outer.inner"]
    assert facts["all_declared"] is True
    assert facts["public_count"] == TERMS
    assert facts["public"][0]["name"] == "n0"
    assert facts["purpose"] == "Generated tables."


def test_the_module_facts_step_and_the_brief_complete() -> None:
    step = StepInput(task_id="facts-gen", title="t", description="d", files={"gen.py": SOURCE})
    facts = module_facts(step)
    assert "parse_error" not in facts
    assert facts["most_complex"][0]["name"] == "outer"
    brief = review_brief(
        StepInput(task_id="brief-gen", title="t", description="d",
                  results={"facts-gen": json.dumps(facts)})
    )  # fmt: skip
    assert "outer" in json.dumps(brief)
