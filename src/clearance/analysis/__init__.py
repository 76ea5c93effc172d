"""Facts from real analysis of Python source: the standard library's `ast` and ruff.

The built-in steps of a team file (``run: step:<name>``) live here: `module_facts` (one
module: names, sizes, imports, complexity, a focused excerpt, ruff's findings) and
`package_facts` (the package: fan-in, and where to look first), `review_brief` (what a
module's reviewer reads); and `ground`, the check a model's sentence passes to reach a
report.
"""

from clearance._core.step_input import StepInput
from clearance.analysis._brief import REVIEW_BRIEF, brief, review_brief
from clearance.analysis._complexity import COMPLEXITY_NAME, complexity
from clearance.analysis._facts import MAX_EXCERPT_CHARS, module_slug, module_structure
from clearance.analysis._grounding import Grounded, Known, ground
from clearance.analysis._kinds import checked_facts
from clearance.analysis._lint import CONTEXT_RULES, LINT_RULES, LintResult, lint_source
from clearance.analysis._rank import fan_in, look_here_first
from clearance.analysis._sizes import step_result_tokens
from clearance.analysis._steps import (
    MODULE_FACTS,
    PACKAGE_FACTS,
    STEPS,
    StepFunction,
    module_facts,
    package_data,
    package_facts,
    parse_facts,
)
from clearance.analysis._target import python_target

__all__ = [
    "COMPLEXITY_NAME",
    "CONTEXT_RULES",
    "Grounded",
    "Known",
    "LINT_RULES",
    "LintResult",
    "MAX_EXCERPT_CHARS",
    "MODULE_FACTS",
    "PACKAGE_FACTS",
    "REVIEW_BRIEF",
    "STEPS",
    "StepFunction",
    "StepInput",
    "brief",
    "checked_facts",
    "complexity",
    "fan_in",
    "ground",
    "lint_source",
    "look_here_first",
    "module_facts",
    "module_slug",
    "module_structure",
    "package_data",
    "package_facts",
    "parse_facts",
    "python_target",
    "review_brief",
    "step_result_tokens",
]
