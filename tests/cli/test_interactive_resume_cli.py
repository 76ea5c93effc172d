"""`clearance resume --interactive` after a person answered an isolated subagent's question.

`clearance run --interactive` is SIGKILLed by the model server on the dispatch after the
person's answer (a real OpenAI-compatible server on 127.0.0.1). `clearance resume
--interactive` reuses the recorded answer to the same question: the person is not asked
again, the subagent's next request holds the answer byte for byte, and `verify` passes. A
question with no recorded answer is asked of the person at the terminal (not answered
by the coordinator): here, one left unanswered before the kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger

pytestmark = pytest.mark.network

SRC = Path(__file__).resolve().parents[2] / "src"
TEAM = """\
name: asked
input: {default: project, include: ["*.py"]}
agents:
  - {name: scribe, instructions: "You review."}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: lines, mode: isolated, title: Lines, description: "Review a.py.", assignee: scribe,
     files: [a.py]}
"""
ANSWER = "Python 3.11 \u2014 the one  in CI"


class Script:
    """The model's answers; kills the CLI process on the first dispatch that shows an answer."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.kill = True
        self.question = "Which Python version is this for?"
        self.users: list[str] = []

    def reply(self, messages: list[dict[str, Any]]) -> str:
        system, user = messages[0]["content"], messages[-1]["content"]
        if system != "You review.":
            return "COORDINATOR ANSWER" if "## Question from the subagent" in user else "summary"
        self.users.append(user)
        if "### Clarification 1" not in user:
            return f"STATUS: needs_context\nQUESTION: {self.question}"
        if self.kill and self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
        return "- a.py defines alpha().\nSTATUS: done"


def _cli(tmp: Path, url: str, script: Script, *args: str, stdin: str) -> tuple[int, str]:
    environ = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "test",
               "PYTHONPATH": str(SRC), "COLUMNS": "250"}  # fmt: skip
    environ.pop("CLEARANCE_LEDGER_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{tmp / 'r.db'}"],
        cwd=tmp, env=environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, encoding="utf-8",
    )  # fmt: skip
    script.pid = proc.pid
    out, _ = proc.communicate(stdin, timeout=120)
    return proc.returncode, out


def _killed_after_the_answer(
    tmp: Path, openai_server: Any, answer: str = ANSWER
) -> tuple[Script, str, str]:
    script = Script()
    url = openai_server(lambda messages: script.reply(messages))
    (tmp / "project").mkdir()
    (tmp / "project" / "a.py").write_text("def alpha():\n    return 1\n")
    (tmp / "team.yaml").write_text(TEAM)
    code, out = _cli(tmp, url, script, "run", str(tmp / "team.yaml"), "--model", "openai:m",
                     "--interactive", stdin=f"{answer}\n")  # fmt: skip
    assert code == -signal.SIGKILL, out
    assert out.count("asks:") == 1, out
    with RunLedger(f"sqlite:///{tmp / 'r.db'}") as ledger:
        (run,) = ledger.list_runs()
    script.kill = False
    return script, url, run.run_id


def test_a_resumed_run_does_not_ask_the_person_again(tmp_path: Path, openai_server) -> None:
    script, url, rid = _killed_after_the_answer(tmp_path, openai_server)
    code, out = _cli(tmp_path, url, script, "resume", rid, "--interactive",
                     stdin="A SECOND ANSWER\n")  # fmt: skip
    assert code == 0, out
    assert "asks:" not in out, out
    assert f"### Clarification 1\n~~~~\n{ANSWER}\n~~~~\n" in script.users[-1]
    assert all("A SECOND ANSWER" not in u for u in script.users)
    code, out = _cli(tmp_path, url, script, "verify", rid, stdin="")
    assert code == 0, out


def test_a_question_left_unanswered_is_asked_at_the_terminal_on_resume(
    tmp_path: Path, openai_server
) -> None:
    """Not answered by the coordinator: `resume --interactive` asks the person too."""
    script, url, rid = _killed_after_the_answer(tmp_path, openai_server, answer="")
    code, out = _cli(tmp_path, url, script, "resume", rid, "--interactive",
                     stdin="3.12.1\n")  # fmt: skip
    assert code == 0, out
    assert "the subagent of task lines asks: Which Python version is this for?" in out, out
    assert "### Clarification 1\n~~~~\n3.12.1\n~~~~\n" in script.users[-1]
    assert all("COORDINATOR ANSWER" not in u for u in script.users)
    code, out = _cli(tmp_path, url, script, "verify", rid, stdin="")
    assert code == 0, out
