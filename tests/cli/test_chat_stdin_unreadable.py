"""``clearance chat`` with a stdin it cannot read says so in one line, never a traceback.

A chat started with stdin closed (``0<&-``: ``sys.stdin`` is ``None``) is refused before
anything starts (exit 2); one whose stdin is open but not readable (opened write-only) ends
its session with one line naming the failure (exit 1, the run finished as failed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clearance import RunLedger

SRC = Path(__file__).parents[2] / "src"


def chat(tmp_path: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "team.yaml").write_text(
        "agents:\n"
        "  - {name: carol, instructions: You are Carol., limits: {max_output_tokens: 32}}\n"
    )
    (tmp_path / "written.txt").write_text("")
    command = [
        sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "carol",
        "--model", "fake:x", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
        "--context-window", "4000",
    ]  # fmt: skip
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {stdin}', "sh", *command],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_chat_with_stdin_closed_is_refused_in_one_line(tmp_path):
    result = chat(tmp_path, "0<&-")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: stdin is closed: clearance chat reads the messages from it"
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell's redirection")
def test_a_chat_whose_stdin_cannot_be_read_ends_in_one_line(tmp_path):
    result = chat(tmp_path, "0>written.txt")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: cannot read stdin: Bad file descriptor"]
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        (run,) = ledger.list_runs(limit=5)
    assert run.status == "failed" and "cannot read stdin" in (run.error or "")
