"""Killing a ``clearance`` process mid-run, for the tests of what a killed run leaves behind.

``from killed_runs import ...`` works from every test folder (``tests/`` is on the path, as
the folder of the root ``conftest.py``).

- `held_server` and `stalled_run`: a ``clearance run`` whose one task's call reached a real
  OpenAI-compatible server on 127.0.0.1, which holds it unanswered; `kill` SIGKILLs it.
- `KILL_AFTER_RECORDS_HOOK`: the end of a tool module (source text written next to a team
  file) that SIGKILLs its process once it committed its K-th ledger record.
- `scribe_turn`: the next line the scripted scribe of those fuzzes asks to append.
- `CommandLog`: what each command of a kill-and-resume harness printed, and its one run.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger

ONE_TASK_TEAM = (
    "name: lab\nagents:\n  - {name: a, instructions: You are A.}\n"
    "tasks:\n  - {id: t0, title: Step, description: Do it., assignee: a}\n"
)
"""A team file of one agent and one task (``t0``)."""


def held_server(openai_server: Any) -> tuple[str, threading.Event, threading.Event]:
    """A server (the ``openai_server`` fixture) that holds each call it gets unanswered.

    Returns:
        Its base URL; an event set once a call reached it; the event that lets it answer
        (``"late"``; it answers after 60 s anyway).
    """
    arrived, release = threading.Event(), threading.Event()

    def reply(messages: list[dict[str, Any]]) -> str:
        arrived.set()
        release.wait(60)
        return "late"

    return openai_server(reply), arrived, release


@contextmanager
def stalled_run(
    tmp_path: Path, openai_server: Any, env: Callable[[str], dict[str, str]]
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A ``clearance run`` of `ONE_TASK_TEAM` whose task's call the server holds unanswered.

    Args:
        tmp_path: The run's folder; its ledger is ``runs.db`` there.
        openai_server: The ``openai_server`` fixture.
        env: The subprocess's environment, given the server's URL.

    Yields:
        The process (its own session) and its run's id. On leaving, the process is killed if
        it still runs, reaped, and the server's held call let go.
    """
    (tmp_path / "team.yaml").write_text(ONE_TASK_TEAM)
    url, arrived, release = held_server(openai_server)
    process = subprocess.Popen(
        [sys.executable, "-m", "clearance", "run", "team.yaml", "--model", "openai:m",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=env(url), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        if not arrived.wait(60):
            process.kill()
            pytest.fail(f"the task's call never reached the server: {process.communicate()}")
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}", read_only=True) as ledger:
            (run,) = ledger.list_runs()
        yield process, run.run_id
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)
        release.set()


def kill(process: subprocess.Popen[str]) -> None:
    """SIGKILL ``process`` (no handler runs, nothing records the run's end) and reap it."""
    process.kill()
    process.communicate(timeout=30)  # reaped: its process id names no process now


KILL_AFTER_RECORDS_HOOK = """
# KILL_AFTER_RECORDS=K: SIGKILL this process once its K-th ledger record is committed.
import os
import signal

_KILL_AFTER = int(os.environ.get("KILL_AFTER_RECORDS") or 0)
if _KILL_AFTER:
    from clearance._state.write_behind import WriteBehind

    _submit = WriteBehind.submit
    _submitted = [0]

    def submit(self, write):
        _submit(self, write)
        _submitted[0] += 1
        if _submitted[0] == _KILL_AFTER:
            self.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    WriteBehind.submit = submit
"""
"""Source text to end a tool module with: with ``KILL_AFTER_RECORDS=K`` in the environment
of the process that imports it, the process SIGKILLs itself once the K-th record it wrote to
the ledger is committed (flushed), before it records anything more."""


def scribe_turn(text: str, lines: Mapping[str, int]) -> tuple[str, str | None]:
    """What the scripted scribe of the kill fuzzes appends next, from the prompts it got.

    Args:
        text: The request's messages; a task's ``APPEND <prefix>:`` names the lines
            ``<prefix>0``, ``<prefix>1``, ... and each ``appended <line>`` counts one done.
        lines: How many lines each prefix has.

    Returns:
        The prefix, and the next line (``None`` once all are appended).
    """
    marker = re.search(r"APPEND (\w):", text)
    assert marker is not None, text
    prefix = marker.group(1)
    done = len(re.findall(rf"appended {prefix}\d", text))
    return prefix, (f"{prefix}{done}" if done < lines[prefix] else None)


class CommandLog:
    """What each ``clearance`` command of a kill-and-resume harness did, and the run they made.

    Args:
        db: The ledger's URL (``sqlite:///...``).
    """

    def __init__(self, db: str) -> None:
        self.db = db
        self.log: list[str] = []
        self.kills = 0

    def ended(self, args: tuple[str, ...], kill: Any, code: int, out: str) -> tuple[int, str]:
        """Log one command's end; its exit code and output. A traceback fails the test."""
        self.log.append(f"{' '.join(args[:2])} (kill {kill}): exit {code}\n{out}")
        self.kills += code == -signal.SIGKILL
        assert "Traceback" not in out, self.report()
        return code, out

    def report(self) -> str:
        """Every command's line and output so far (a failing assertion's message)."""
        return "\n".join(self.log)

    def run_id(self) -> str | None:
        """The id of the one run in the ledger; ``None`` before there is one (or a ledger)."""
        path = self.db.removeprefix("sqlite:///")
        if path != self.db and not Path(path).exists():
            return None  # not created here: the first command creates it
        with RunLedger(self.db) as ledger:
            runs = ledger.list_runs()
        assert len(runs) <= 1, self.report()
        return runs[0].run_id if runs else None
