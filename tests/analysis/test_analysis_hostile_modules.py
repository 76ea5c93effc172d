"""What a hostile module's text can put in its facts and brief.

Before: a docstring's terminal escapes (``\\x1b]0;...``) and bidirectional overrides went
into the module's ``purpose`` raw, and from there into the report (a file, and the
terminal when the report is shown); and a function name of any length went into the brief
whole (Python sets no limit on a name), so three names of 20,000 characters made a brief of
about 35,000 tokens that `step_result_tokens` bounds at 550.
"""

from __future__ import annotations

import json

from clearance.analysis import StepInput, module_facts, review_brief, step_result_tokens
from clearance.analysis._brief import BRIEF_NAME_CHARS
from clearance.tokens import heuristic_tokens

LONG = "f" * 20_000


def facts_of(source: str) -> dict[str, object]:
    return module_facts(StepInput(task_id="f", title="t", description="d", files={"m.py": source}))


def test_a_docstrings_control_characters_are_shown_escaped_in_the_purpose() -> None:
    facts = facts_of('"""Parses \x1b]0;owned\x07 input \u202egnp.exe."""\n')
    purpose = str(facts["purpose"])
    assert purpose == "Parses \\x1b]0;owned\\x07 input \\u202egnp.exe."
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F or c == "\u202e" for c in purpose)


def test_a_brief_stays_within_its_bound_whatever_the_names() -> None:
    source = "".join(
        f"def {LONG}{i}(x):\n    if x:\n        return 1\n    return 2\n" for i in range(3)
    )
    facts = facts_of('"""Long names."""\n' + source)
    brief = review_brief(
        StepInput(task_id="b", title="t", description="d", results={"f": json.dumps(facts)})
    )
    bound = step_result_tokens("review_brief", 1)
    assert bound is not None and heuristic_tokens(brief) <= bound
    data = json.loads(brief)
    assert all(len(name) <= BRIEF_NAME_CHARS for name in data["symbols"])
    assert len(data["functions"]) == 3
