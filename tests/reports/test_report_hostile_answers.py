"""The code review report from hostile model answers: nesting, markup in free words, floods.

Before:
- a review answer nested thousands of lists deep (``[[[[...]]]]``) raised `RecursionError`
  in the report's JSON reading: the whole report was lost after the run (no ``--output``,
  no ``--sarif``), for one answer;
- an answer that was not a JSON object (plain text, a list) vanished from the report
  without a word;
- a finding's ``category`` reached the Markdown as written: an HTML tag, a Markdown image
  or link, a terminal escape;
- a review's error (which quotes the model's answer when it misses the output schema) and
  the reasons of tasks that did not complete reached the Markdown as written too;
- a review could list any number of findings: 50,000 findings of one answer were all
  checked and all shown.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from markdown_it import MarkdownIt

from clearance import Task, TaskOutcome, TaskStatus
from clearance._orchestration.result import RunResult
from clearance._reports import code_review_report, run_report
from clearance._reports.review_checks import MAX_REVIEW_FINDINGS, checked_review
from clearance.analysis import Known

FACTS: dict[str, Any] = {
    "kind": "module_facts",
    "package": "pkg",
    "module": "a.py",
    "slug": "a",
    "lines": 30,
    "functions": 1,
    "public_count": 1,
    "public": [{"name": "f", "kind": "function", "line": 5}],
    "purpose": "Does a.",
    "imports": [],
    "type_imports": [],
    "most_complex": [{"name": "f", "line": 5, "lines": 26, "complexity": 13}],
    "findings": [{"code": "S307", "message": "Use of eval", "line": 9, "severity": "high"}],
    "findings_total": 1,
    "rule_counts": {"S307": 1},
}
FACTS_TASK = Task(id="facts-a", title="f", description="d", assignee="", run="step:module_facts")
REVIEW_TASK = Task(id="review-a", title="R", description="d", assignee="w", depends_on=("facts-a",))
MARKUP = "<img src=https://evil.example/x> ![i](https://tracker.example/p) [c](https://e.example)"


def report_of(review: TaskOutcome) -> Any:
    facts = TaskOutcome(
        task_id="facts-a", assignee="", status=TaskStatus.COMPLETED, result=json.dumps(FACTS)
    )
    run = RunResult(
        run_id="r1",
        status="completed",
        synthesis=None,
        tasks={"facts-a": facts, "review-a": review},
    )
    return code_review_report(run, [FACTS_TASK, REVIEW_TASK], model_id="fake:m", team_name="t")


def answered(text: str) -> TaskOutcome:
    return TaskOutcome(task_id="review-a", assignee="w", status=TaskStatus.COMPLETED, result=text)


def rendered(markdown: str) -> list[Any]:
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [c for t in tokens if t.children for c in t.children] + tokens


def test_a_deeply_nested_answer_is_left_out_and_counted_the_report_is_made() -> None:
    report = report_of(answered("[" * 100_000 + "]" * 100_000))
    assert "### `a.py`" in report.markdown
    assert report.data["left_out"] == {"not a JSON object": 1}
    assert report.sarif["runs"][0]["results"]


def test_an_answer_that_is_not_a_json_object_is_counted_not_silently_lost() -> None:
    report = report_of(answered("The module a is fine."))
    assert report.data["modules"][0]["review"] is None
    assert report.data["left_out"] == {"not a JSON object": 1}
    assert "1 model sentences or findings failed grounding" in report.markdown


def test_a_findings_category_is_shown_as_text_never_as_markup() -> None:
    finding = {"severity": "high", "category": MARKUP + " \x1b[31m", "symbol": "f",
               "rule": "S307", "note": "Calling eval on input is unsafe."}  # fmt: skip
    answer = {"summary": "Module a does a.", "findings": [finding]}
    report = report_of(answered(json.dumps(answer)))
    nodes = rendered(report.markdown)
    assert not [n for n in nodes if n.type in ("image", "link_open", "html_inline", "html_block")]
    assert "\x1b" not in report.markdown
    [kept] = report.data["modules"][0]["review"]["findings"]
    assert kept["note"] == "Calling eval on input is unsafe."
    assert kept["category"].startswith("<img src")  # the data keeps the words, escaped in Markdown
    escaped = {**finding, "category": "bug \x1b[31m\u202e"}
    dropped: Counter[str] = Counter()
    checked = checked_review({"findings": [escaped]}, FACTS, Known.from_facts([FACTS]), dropped)
    assert checked is not None and checked["findings"][0]["category"] == "bug \\x1b[31m\\u202e"


def test_a_reviews_error_quoting_the_answer_is_text_in_the_markdown() -> None:
    failed = TaskOutcome(
        task_id="review-a", assignee="w", status=TaskStatus.FAILED,
        error=f"the JSON does not match the output schema at $.severity: '{MARKUP}' is not one "
        "of ['high', 'medium', 'low']",
    )  # fmt: skip
    report = report_of(failed)
    nodes = rendered(report.markdown)
    assert not [n for n in nodes if n.type in ("image", "link_open", "html_inline", "html_block")]
    shown = "".join(n.content for n in nodes if n.type == "text")
    assert MARKUP in shown  # said, as written


def test_the_run_reports_error_lines_are_text() -> None:
    failed = TaskOutcome(task_id="t", assignee="w", status=TaskStatus.FAILED, error=MARKUP)
    run = RunResult(run_id="r1", status="failed", synthesis=None, tasks={"t": failed})
    task = Task(id="t", title="T", description="d", assignee="w")
    report = run_report(run, [task], model_id="fake:m")
    nodes = rendered(report.markdown)
    assert not [n for n in nodes if n.type in ("image", "link_open", "html_inline", "html_block")]
    assert MARKUP in "".join(n.content for n in nodes if n.type == "text")


def test_a_review_keeps_at_most_its_cap_of_findings_and_counts_the_rest() -> None:
    notes = [f"The function f has problem number {i} here." for i in range(50_000)]
    answer = {
        "summary": "Module a does a.",
        "findings": [
            {"severity": "low", "category": "style", "symbol": "f", "rule": "", "note": n}
            for n in notes
        ],
    }
    dropped: Counter[str] = Counter()
    checked = checked_review(answer, FACTS, Known.from_facts([FACTS]), dropped)
    assert checked is not None
    assert [f["note"] for f in checked["findings"]] == notes[:MAX_REVIEW_FINDINGS]
    assert dropped == {"over the findings cap": 50_000 - MAX_REVIEW_FINDINGS}
