"""A failure's text is bounded before it reaches a dependent's prompt, the synthesis or the ledger.

A failing step (or a provider, or an executor) may raise with an enormous message: the repr of
a request holding a whole prompt, an error page. With ``after_failure: proceed`` the reason is
shown to the dependent; it must arrive cut, not whole.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._core.reasons import MAX_FAILURE_CHARS
from clearance.cli import app

HUGE = 75_000

STEP = f"""\
def boom(step):
    raise RuntimeError("Could not serialize ModelRequest(" + "p" * {HUGE} + ")")
"""

TEAM = """\
name: reasons
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - {id: a, title: A, description: Gather., assignee: writer, run: "python:boom_steps:boom"}
  - {id: b, title: B, description: Go on., assignee: writer, depends_on: [a],
     after_failure: proceed}
"""


def test_a_huge_failure_reason_reaches_the_dependent_cut(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "boom_steps.py").write_text(STEP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "boom_steps", raising=False)
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "fake:m", "--db", db]
    )
    run_id = re.search(r"run id: (\S+)", result.output).group(1)
    with RunLedger(db) as ledger:
        failed = next(t for t in ledger.tasks(run_id) if t.task_id == "a")
        (call,) = [c for c in ledger.calls(run_id) if c.subject == "task:b"]
        synthesis = [c for c in ledger.calls(run_id) if c.subject.startswith("synthesis")]
    assert failed.status == "failed" and failed.error is not None
    assert len(failed.error) <= MAX_FAILURE_CHARS + 40
    assert "[cut: " in failed.error
    prompt = "\n".join(m["content"] for m in call.messages)
    assert "Could not serialize" in prompt  # the reason is there, cut
    assert "p" * (MAX_FAILURE_CHARS + 100) not in prompt
    assert len(prompt) < 10_000
    assert synthesis
    for s in synthesis:
        assert "p" * (MAX_FAILURE_CHARS + 100) not in "\n".join(m["content"] for m in s.messages)
    assert len(result.output) < 20_000  # the terminal is not flooded either


@pytest.mark.parametrize("limit", [10, MAX_FAILURE_CHARS])
def test_bounded_reason_keeps_short_text_and_cuts_long_text(limit: int) -> None:
    from clearance._core.reasons import bounded_reason

    assert bounded_reason("x" * limit, limit) == "x" * limit
    cut = bounded_reason("x" * (limit + 1), limit)
    assert cut.startswith("x" * limit) and cut.endswith(f"[cut: {limit + 1} characters]")
