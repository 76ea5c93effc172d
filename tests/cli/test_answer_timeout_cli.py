"""``--interactive`` with nobody answering: ``--answer-timeout`` leaves the approval open.

Before, the approval prompt waited on stdin forever (``asyncio.to_thread(input)``), and
the run with it. Now, past the deadline, the request stays open, the run pauses with the
command that decides it, and the process exits even though stdin was never closed.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_approval_cli import TEAM, TOOL_MODULE, cli, env, reply

from clearance.cli._stdin import StdinLines

__all__ = ["env"]  # the fixture, shared with the approval tests

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.network
def test_an_approval_nobody_answers_stays_open_at_the_deadline(tmp_path, openai_server) -> None:
    url = openai_server(reply)
    (tmp_path / "approval_tools_mod.py").write_text(TOOL_MODULE)
    (tmp_path / "team.yaml").write_text(TEAM % "approval: none")
    environment = {
        **os.environ,
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)]),
    }
    command = [sys.executable, "-m", "clearance", "run", "team.yaml", "--model", "openai:m",
               "--interactive", "--answer-timeout", "1", "--db", "sqlite:///runs.db"]  # fmt: skip
    started = time.monotonic()
    log = tmp_path / "output.txt"
    # stdin is a pipe held open and never written: a person who walked away.
    with log.open("wb") as sink, subprocess.Popen(
        command, cwd=tmp_path, env=environment, stdin=subprocess.PIPE, stdout=sink,
        stderr=subprocess.STDOUT,
    ) as process:  # fmt: skip
        try:
            process.wait(timeout=60)
        finally:
            process.kill()
            assert process.stdin is not None
            process.stdin.close()
    elapsed = time.monotonic() - started
    text = log.read_text()
    assert process.returncode == 3, text
    assert elapsed < 30, elapsed
    assert "no answer in time: approval apr_" in text
    run_id = re.search(r"run id: (\S+)", text).group(1)
    (call_id,) = re.findall(r"apr_[0-9a-z_]+", text.split("awaiting approval:")[1])
    assert f"clearance approve {run_id} {call_id}" in text
    assert not (tmp_path / "ran.log").exists(), "the tool ran without an approval"


@pytest.mark.network
def test_answer_timeout_is_checked_and_needs_interactive(env) -> None:
    team = env["tmp"] / "team.yaml"
    team.write_text(TEAM % "approval: none")
    for bad in ("0", "-5", "nan", "90000"):
        run = cli(env, "run", str(team), "--interactive", "--answer-timeout", bad)
        assert run.exit_code == 2, run.output
        assert "--answer-timeout" in run.output
    lone = cli(env, "run", str(team), "--model", "openai:m", "--answer-timeout", "5")
    assert lone.exit_code == 2, lone.output
    assert "--answer-timeout: only applies with --interactive" in lone.output
    assert not (env["tmp"] / "runs.db").exists() or "run id:" not in lone.output


async def test_a_read_abandoned_at_a_deadline_gives_its_line_to_the_next_reader() -> None:
    read_end, write_end = os.pipe()

    class Stdin:  # a terminal's stdin, as far as the reader can tell: a file descriptor
        def fileno(self) -> int:
            return read_end

    lines = StdinLines(Stdin())  # type: ignore[arg-type]
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lines.readline(), 0.1)  # nobody typed in time
        os.write(write_end, b"yes, the late answer\n")
        assert await asyncio.wait_for(lines.readline(), 5) == b"yes, the late answer\n"
        os.write(write_end, b"the next one\n")
        assert await asyncio.wait_for(lines.readline(), 5) == b"the next one\n"
    finally:
        os.close(write_end)
        os.close(read_end)
