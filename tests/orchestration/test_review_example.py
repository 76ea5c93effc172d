"""The two-stage review example runs on the fake model; canaries show what each call sees."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from clearance import Orchestrator, RunLedger
from clearance._context.verify import verify_run
from clearance._core.teamfile import load_team_file
from clearance.cli import app
from clearance.testing import CanaryModel

CANARY = re.compile(r"CANARY-[A-Za-z0-9:/_.-]+?-[0-9a-f]{8}")
EXAMPLE = Path(__file__).parents[2] / "examples" / "review_loop.yaml"


def test_the_example_runs_on_the_fake_model_verifies_and_shows_its_rounds(tmp_path):
    db = f"sqlite:///{tmp_path}/runs.db"
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(EXAMPLE), "--model", "fake:demo", "--db", db])
    assert result.exit_code == 0, result.output
    (run,) = RunLedger(db).list_runs()
    assert runner.invoke(app, ["verify", run.run_id, "--db", db]).exit_code == 0
    shown = runner.invoke(app, ["inspect", run.run_id, "--db", db], env={"COLUMNS": "250"}).output
    assert "review:slugify/1/1" in shown and "review:slugify/1/2" in shown
    assert "round 1: spec_reviewer accepts" in shown


async def test_canaries_no_round_sees_another_and_reviewers_see_task_and_candidate(tmp_path):
    loaded = load_team_file(EXAMPLE)
    model = CanaryModel(revise={"review:slugify/1/1", "review:slugify/2/2"})
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    result = await Orchestrator(loaded.team, model=model, ledger=ledger).run_tasks(loaded.tasks)
    assert result.status == "completed", result.error
    calls = ledger.calls(result.run_id)
    rounds = [c for c in calls if c.subject == "task:slugify"]
    reviews = [c for c in calls if c.subject.startswith("review:")]
    assert [c.subject for c in reviews] == [
        "review:slugify/1/1", "review:slugify/2/1", "review:slugify/2/2",
        "review:slugify/3/1", "review:slugify/3/2",
    ]  # fmt: skip
    candidates = [CANARY.findall(c.response or "")[0] for c in rounds]
    findings = {c.subject: CANARY.findall(c.response or "")[0] for c in reviews}
    assert len(candidates) == 3
    for n, call in enumerate(rounds, 1):
        text = "\n".join(m["content"] for m in call.messages)
        # No round sees another round's answer; a later round sees only the findings that
        # sent the previous candidate back.
        sent_back = {2: findings["review:slugify/1/1"], 3: findings["review:slugify/2/2"]}
        assert set(CANARY.findall(text)) == ({sent_back[n]} if n > 1 else set())
    for call in reviews:
        text = "\n".join(m["content"] for m in call.messages)
        round_no = int(call.subject.split("/")[1])
        # The reviewer sees the task and its round's candidate: no other canary at all.
        assert set(CANARY.findall(text)) == {candidates[round_no - 1]}
    assert result.tasks["slugify"].result.endswith(candidates[2])
    assert verify_run(ledger, result.run_id).ok
