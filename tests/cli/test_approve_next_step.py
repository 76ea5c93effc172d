"""``clearance approve`` / ``deny`` name the next step the run's recorded status calls for.

Both always ended with "continue the run with: clearance resume RUN", also for a run that
had completed (``resume`` refuses it: the decision will never act) or one still running
(``resume`` refuses while its process lives). Now the line follows the run's status:
``interrupted`` (paused) and ``failed`` runs are resumed, a ``completed`` run has nothing
left to act on the decision, and a ``running`` one is resumed once its process has stopped.
The paused run is a real one (`test_approval_cli`): a scripted model server on 127.0.0.1,
a real tool, a real SQLite ledger, its status then changed through `RunLedger`.
"""

from __future__ import annotations

import pytest
from test_approval_cli import cli, env, pending, start

from clearance import RunLedger
from clearance.models import Usage

pytestmark = pytest.mark.network

__all__ = ["env"]  # the fixture, used by name


def paused(env) -> tuple[str, str]:
    run = start(env)
    assert run.exit_code == 3, run.output
    run_id, (call_id,) = pending(run.output)
    return run_id, call_id


def one_line(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.parametrize("command", ["approve", "deny"])
def test_a_paused_run_is_continued_with_resume(env, command: str) -> None:
    run_id, call_id = paused(env)
    decided = cli(env, command, run_id, call_id)
    assert decided.exit_code == 0, decided.output
    assert f"continue the run with: clearance resume {run_id}" in one_line(decided.output)


@pytest.mark.parametrize("command", ["approve", "deny"])
def test_a_completed_run_is_not_sent_to_resume(env, command: str) -> None:
    run_id, call_id = paused(env)
    with RunLedger(env["db"]) as ledger:
        ledger.finish_run(run_id, status="completed", synthesis="done", usage=Usage(), error=None)
    decided = cli(env, command, run_id, call_id)
    assert decided.exit_code == 0, decided.output  # the decision is recorded all the same
    said = one_line(decided.output)
    assert "clearance resume" not in said
    assert f"run {run_id} has already completed" in said
    assert cli(env, "resume", run_id).exit_code == 2  # what it used to advise is refused


def test_a_failed_run_is_resumed_to_act_on_the_decision(env) -> None:
    run_id, call_id = paused(env)
    with RunLedger(env["db"]) as ledger:
        ledger.finish_run(run_id, status="failed", synthesis=None, usage=Usage(), error="boom")
    decided = cli(env, "approve", run_id, call_id)
    assert decided.exit_code == 0, decided.output
    said = one_line(decided.output)
    assert f"run {run_id} failed" in said and f"clearance resume {run_id}" in said


def test_a_run_still_running_is_resumed_only_once_its_process_stopped(env) -> None:
    run_id, call_id = paused(env)
    with RunLedger(env["db"]) as owner:
        owner.reopen_run(run_id)  # this process runs it now, and holds its lease
        decided = cli(env, "approve", run_id, call_id)
        refused = cli(env, "resume", run_id)
    assert decided.exit_code == 0, decided.output
    said = one_line(decided.output)
    assert f"run {run_id} is still running" in said
    assert "continue the run with:" not in said
    assert f"once its process has stopped, continue it with: clearance resume {run_id}" in said
    assert refused.exit_code == 2, refused.output  # resuming it now is refused, as said
