"""``clearance run --interactive`` with a stdin it cannot read: one line, never a traceback.

Closed (``0<&-``): refused before the run starts (exit 2). Open but unreadable (opened
write-only): read as the end of input, so an approval stays open and a question goes
unanswered, as without ``--interactive``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance.cli import _approve, _run

SRC = Path(__file__).parents[2] / "src"


def test_a_run_with_stdin_closed_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(
        "agents:\n  - {name: w, instructions: You work.}\n"
        "tasks:\n  - {id: t, title: T, description: Do it., assignee: w}\n"
    )
    command = [sys.executable, "-m", "clearance", "run", "team.yaml", "--interactive",
               "--model", "fake:x", "--db", f"sqlite:///{tmp_path / 'runs.db'}"]  # fmt: skip
    result = subprocess.run(
        ["sh", "-c", 'exec "$@" 0<&-', "sh", *command], cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(SRC)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --interactive: stdin is closed: the answers are read from it"
    )


class _Unreadable:
    async def readline(self) -> bytes:
        raise OSError(9, "Bad file descriptor")


async def test_an_unreadable_stdin_leaves_an_approval_open(monkeypatch: Any) -> None:
    from clearance import ApprovalPending, ApprovalRequest

    monkeypatch.setattr(_approve, "stdin_lines", lambda: _Unreadable())
    ask = _approve.terminal_approver()
    request = ApprovalRequest(call_id="apr_1", run_id="run_1", kind="tool", task_id="t",
                              agent="w", tool="rm", arguments={"path": "x"})  # fmt: skip
    with pytest.raises(ApprovalPending):
        await ask(request)


async def test_an_unreadable_stdin_answers_no_question(monkeypatch: Any) -> None:
    monkeypatch.setattr(_run, "stdin_lines", lambda: _Unreadable())
    assert await _run._ask_at_terminal("t", "Which database?") == ""
