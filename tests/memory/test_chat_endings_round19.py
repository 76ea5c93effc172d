"""How a ``clearance chat`` session ends is recorded as a run's end is.

- Ctrl-C (or SIGTERM) while a message waited for its answer was recorded ``completed``, as a
  session ended with ``/quit``: a run stopped so is recorded ``interrupted``, and so is the
  session now, its error naming the signal and the message left unanswered.
- A session whose process was killed (SIGKILL: nothing runs) stayed listed ``running`` by
  ``clearance runs`` and ``inspect`` for ever, and so did a killed run: the chat recorded no
  owning process (a run does, ``process_identity``), and neither listing told a live owner
  from a gone one. Both now show ``running (process gone)`` once the owner is dead on this
  host or its lease lapsed, as ``resume`` judges it (`process_gone`).

Through the product path: a team file, ``clearance chat`` as a subprocess fed on stdin, a
real scripted OpenAI-compatible server on 127.0.0.1 that stalls so the signal lands during
the call, a real SQLite ledger; then ``clearance runs``, ``inspect`` and ``verify``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clearance import RunLedger
from killed_runs import held_server, kill, stalled_run

SRC = str(Path(__file__).parents[2] / "src")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _env(url: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARANCE_", "OTEL_"))}
    env.update(PYTHONPATH=SRC, OPENAI_BASE_URL=url, OPENAI_API_KEY="test")
    return env


def _team(tmp_path: Path) -> None:
    body = {
        "name": "lab",
        "agents": [
            {"name": "a", "instructions": "You are A.", "limits": {"max_output_tokens": 32}}
        ],
    }
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(body))


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _stalled_chat(tmp_path: Path, openai_server: Any) -> tuple[subprocess.Popen[str], Any]:
    """A chat whose first message reached the server, which holds it unanswered."""
    _team(tmp_path)
    url, arrived, release = held_server(openai_server)
    process = subprocess.Popen(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "a",
         "--model", "openai:m", "--context-window", "4000",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=_env(url), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert process.stdin is not None
    process.stdin.write("what is the launch code?\n")
    process.stdin.flush()  # stdin stays open: the session waits for the answer, not for EOF
    if not arrived.wait(60):
        process.kill()
        pytest.fail(f"the message never reached the server: {process.communicate()}")
    return process, release


def _row(listing: str, run_id: str) -> list[str]:
    """The cells of ``run_id``'s row in ``clearance runs`` (two spaces apart)."""
    (row,) = [line for line in listing.splitlines() if line.startswith(run_id)]
    return re.split(r"\s{2,}", row.strip())


def _only_run(tmp_path: Path) -> Any:
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}", read_only=True) as ledger:
        (run,) = ledger.list_runs()
        return run, ledger.calls(run.run_id)


@pytest.mark.parametrize(
    ("stop", "exit_code", "said"), [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")]
)
def test_a_signal_during_a_call_records_the_session_interrupted(
    tmp_path, openai_server, stop, exit_code, said
):
    process, release = _stalled_chat(tmp_path, openai_server)
    try:
        process.send_signal(getattr(signal, stop))
        stdout, stderr = process.communicate(timeout=30)
    finally:
        release.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == exit_code, stderr
    assert stdout == ""  # no answer came, none is shown
    run, calls = _only_run(tmp_path)
    assert run.status == "interrupted", (run.status, run.error)
    assert run.error == (
        f"{said} while a message waited for its answer (not answered); "
        "a chat session is not resumed"
    )
    assert run.finished_at is not None and run.lease_expires_at is None
    (call,) = calls
    assert call.error is not None and call.error.endswith("cancelled")
    listing = _cli(tmp_path, "runs")
    assert listing.returncode == 0
    assert _row(listing.stdout, run.run_id)[2] == "interrupted", listing.stdout
    shown = _cli(tmp_path, "inspect", run.run_id, "--no-pager")
    assert shown.returncode == 0 and "interrupted" in shown.stdout, shown.stdout
    checked = _cli(tmp_path, "verify", run.run_id)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "recorded as running" not in checked.stdout
    resumed = _cli(tmp_path, "resume", run.run_id)
    assert resumed.returncode == 2
    assert (
        resumed.stderr.strip() == f"error: run {run.run_id} is a chat session; it cannot be resumed"
    )


def test_a_killed_session_is_listed_as_gone_not_running(tmp_path, openai_server):
    process, release = _stalled_chat(tmp_path, openai_server)
    try:
        process.kill()  # SIGKILL: no handler runs, nothing is recorded at the end
        process.communicate(timeout=30)
    finally:
        release.set()
    run, _ = _only_run(tmp_path)
    assert run.status == "running"  # what the ledger holds: nothing recorded the end
    assert run.config["process"]["pid"] == process.pid  # its owner, as a run records it
    listing = _cli(tmp_path, "runs")
    assert listing.returncode == 0
    assert _row(listing.stdout, run.run_id)[2] == "running (process gone)", listing.stdout
    shown = _cli(tmp_path, "inspect", run.run_id, "--no-pager")
    assert shown.returncode == 0 and "running (process gone)" in shown.stdout, shown.stdout


def test_a_live_session_is_listed_running(tmp_path, openai_server):
    process, release = _stalled_chat(tmp_path, openai_server)
    try:
        run, _ = _only_run(tmp_path)
        listing = _cli(tmp_path, "runs")
        assert _row(listing.stdout, run.run_id)[2] == "running", listing.stdout
    finally:
        release.set()
        process.kill()
        process.communicate(timeout=30)  # reaped: its process is gone now
    listing = _cli(tmp_path, "runs")
    assert _row(listing.stdout, run.run_id)[2] == "running (process gone)", listing.stdout


def test_a_killed_run_of_tasks_is_listed_by_the_same_rule(tmp_path, openai_server):
    # One rule for both: the run path records its process too, and its listing showed a
    # killed run `running` for ever as well.
    with stalled_run(tmp_path, openai_server, _env) as (process, run_id):
        assert _row(_cli(tmp_path, "runs").stdout, run_id)[2] == "running"
        kill(process)
    run, _ = _only_run(tmp_path)
    assert run.status == "running"
    assert _row(_cli(tmp_path, "runs").stdout, run.run_id)[2] == "running (process gone)"


def test_another_hosts_run_is_gone_once_its_lease_lapsed():
    from datetime import UTC, datetime, timedelta

    from clearance.models import Usage
    from clearance.runs import RunRecord, process_gone, shown_status

    now = datetime(2026, 1, 1, tzinfo=UTC)

    def record(status: str, lease: datetime | None) -> RunRecord:
        return RunRecord(
            run_id="run_x", team="chat:a", goal=None, status=status, graph=None,
            config={"process": {"host": "elsewhere.invalid", "pid": 4242}}, synthesis=None,
            error=None, usage=Usage(), created_at=now, finished_at=None, lease_expires_at=lease,
        )  # fmt: skip

    lapsed, held = now - timedelta(seconds=1), now + timedelta(seconds=5)
    assert process_gone(record("running", lapsed), now=now)
    assert shown_status(record("running", lapsed), now=now) == "running (process gone)"
    assert not process_gone(record("running", held), now=now)  # may be alive: not judged
    assert not process_gone(record("running", None), now=now)
    assert shown_status(record("interrupted", lapsed), now=now) == "interrupted"
