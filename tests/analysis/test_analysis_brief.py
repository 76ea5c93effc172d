"""What a reviewer reads: the brief of a module's facts, small and only from the facts."""

from __future__ import annotations

import json
from pathlib import Path

from clearance.analysis import StepInput, brief, module_facts, review_brief

JSON_DIR = Path(json.__file__).parent


def facts_of(name: str) -> dict:
    source = (JSON_DIR / name).read_text(encoding="utf-8")
    return module_facts(StepInput(task_id="t", title="t", description="d",
                                  files={name: source}, input_name="json"))  # fmt: skip


def test_the_brief_quotes_code_not_docstrings_and_lists_what_a_review_may_cite():
    facts = facts_of("__init__.py")
    value = brief(facts)
    excerpt = value["excerpt"]
    assert excerpt.startswith("# loads, lines 299-") and "docstring of" in excerpt
    assert "Deserialize" not in excerpt  # the docstring of ``loads`` is left out
    assert "def loads(" in excerpt
    assert value["symbols"] == sorted(f["name"] for f in facts["most_complex"][:3])
    assert set(value["rules"]) <= set(facts["rule_counts"])
    for name in sorted(p.name for p in JSON_DIR.glob("*.py")):
        text = review_brief(
            StepInput(task_id="b", title="b", description="d",
                      results={"facts": json.dumps(facts_of(name))})
        )  # fmt: skip
        assert len(text) < 2200, name  # about 600 tokens, against 4000+ for the facts
        assert json.loads(text)["module"] == name


def test_a_class_method_excerpt_is_dedented(tmp_path):
    source = "class A:\n    def m(self, x):\n        '''Doc.'''\n" + "".join(
        f"        if x == {i}:\n            return {i}\n" for i in range(3)
    )
    facts = module_facts(StepInput(task_id="t", title="t", description="d",
                                   files={"a.py": source}))  # fmt: skip
    excerpt = brief(facts)["excerpt"]
    assert excerpt.splitlines()[1] == "def m(self, x):"
    assert "Doc." not in excerpt and "(docstring of 1 lines left out)" in excerpt
