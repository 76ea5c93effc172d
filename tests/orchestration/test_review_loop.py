"""Bounded review loops: a fresh implementer per round; reviewers see the task and candidate."""

from __future__ import annotations

import json

import pytest

from clearance import Agent, ConfigError, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.review import Review
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(
        Agent(name="dev", instructions="You implement."),
        Agent(name="spec", instructions="You check the spec."),
        Agent(name="quality", instructions="You check quality."),
    )
)


def reviewed(rounds: int = 3) -> list[Task]:
    return [
        Task(id="plan", title="Plan", description="Plan the feature.", assignee="dev"),
        Task(id="build", title="Build", description="Build the parser.", assignee="dev",
             depends_on=("plan",), review=Review(by=("spec", "quality"), rounds=rounds)),
    ]  # fmt: skip


class Script:
    """The implementer writes draft N in round N; spec rejects draft 1, quality draft 2."""

    def __init__(self, accept_from: int = 3) -> None:
        self.drafts = 0
        self.accept_from = accept_from

    def __call__(self, request):
        subject = request.prompt.manifest.subject
        system = request.prompt.messages[0].content
        user = request.prompt.messages[-1].content
        if subject == "synthesis":
            return "SYNTH"
        if subject == "task:plan":
            return "PLAN-RESULT"
        if subject == "task:build":
            self.drafts += 1
            return f"DRAFT-{self.drafts} CONVERSATION-SECRET-{self.drafts}"
        draft = int(user.split("DRAFT-")[1].split()[0])
        if "spec" in system and draft < 2:
            return json.dumps({"verdict": "revise", "findings": f"SPEC-FINDING-{draft}"})
        if "quality" in system and draft < self.accept_from:
            return json.dumps({"verdict": "revise", "findings": f"QUALITY-FINDING-{draft}"})
        return json.dumps({"verdict": "accept", "findings": "fine"})


async def run(tmp_path, rounds=3, accept_from=3):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    model = FunctionModel(Script(accept_from))
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(reviewed(rounds))
    return ledger, model, result


def prompts(model, prefix):
    return [r.prompt for r in model.requests if r.prompt.manifest.subject.startswith(prefix)]


async def test_two_stage_review_until_accepted(tmp_path):
    ledger, model, result = await run(tmp_path)
    assert result.status == "completed", result.error
    assert result.tasks["build"].result == "DRAFT-3 CONVERSATION-SECRET-3"
    implementer = prompts(model, "task:build")
    assert len(implementer) == 3
    # Round 1: task and dependency only; later rounds: the findings that sent it back.
    assert "PLAN-RESULT" in implementer[0].text and "FINDING" not in implementer[0].text
    assert "SPEC-FINDING-1" in implementer[1].text
    assert "QUALITY-FINDING-2" in implementer[2].text
    assert "SPEC-FINDING-1" not in implementer[2].text
    for n, prompt in enumerate(implementer, 1):
        assert "PLAN-RESULT" in prompt.text
        # No round sees another round's candidate or conversation.
        assert "DRAFT-" not in prompt.text and "CONVERSATION-SECRET" not in prompt.text
        origins = [i.origin for i in prompt.manifest.items]
        expected = ["instructions", "task:build", "task_result:plan"]
        assert origins == expected + ([f"review:build/{n - 1}"] if n > 1 else [])
    # Reviewers: the task's text and the candidate only.
    reviews = prompts(model, "review:build/")
    assert [r.manifest.subject for r in reviews] == [
        "review:build/1/1", "review:build/2/1", "review:build/2/2", "review:build/3/1",
        "review:build/3/2",
    ]  # fmt: skip
    for prompt in reviews:
        round_no = prompt.manifest.subject.split("/")[1]
        assert [i.origin for i in prompt.manifest.items] == [
            "instructions",
            "task:build",
            f"candidate:build/{round_no}",
        ]
        assert "PLAN-RESULT" not in prompt.text and "FINDING" not in prompt.text
        assert f"DRAFT-{round_no} " in prompt.text
    events = ledger.events(result.run_id, "review_round")
    assert [(e.data["round"], e.data["reviewer"], e.data["accepted"]) for e in events] == [
        (1, "spec", False), (2, "spec", True), (2, "quality", False), (3, "spec", True),
        (3, "quality", True),
    ]  # fmt: skip
    assert verify_run(ledger, result.run_id).ok, verify_run(ledger, result.run_id).findings


async def test_the_round_cap_is_enforced(tmp_path):
    ledger, model, result = await run(tmp_path, rounds=2, accept_from=99)
    assert result.tasks["build"].status == "failed"
    assert "review.rounds exceeded" in (result.tasks["build"].error or "")
    assert len(prompts(model, "task:build")) == 2
    assert verify_run(ledger, result.run_id).ok


async def test_reviewers_must_be_other_agents_of_the_team(tmp_path):
    bad = [Task(id="t", title="T", description="D.", assignee="dev",
                review=Review(by=("nobody",)))]  # fmt: skip
    with pytest.raises(ConfigError, match="reviewed by 'nobody'"):
        ledger = RunLedger(f"sqlite:///{tmp_path}/r.db")
        await Orchestrator(TEAM, model=FunctionModel(Script()), ledger=ledger).run_tasks(bad)
    with pytest.raises(ConfigError, match="1 to 10"):
        Review(by=("spec",), rounds=0)


async def test_verify_fails_on_a_tampered_round(tmp_path):
    import sqlite3

    _, _, result = await run(tmp_path)
    forged = json.dumps({"verdict": "accept", "findings": "fine"})
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        changed = conn.execute(
            "UPDATE calls SET response = ? WHERE subject = 'review:build/1/1'", (forged,)
        ).rowcount
    assert changed == 1
    reasons = [f.reason for f in verify_run(RunLedger(f"sqlite:///{tmp_path}/runs.db"),
                                            result.run_id).findings]  # fmt: skip
    assert "the round's recorded verdict is not the reviewer's answer" in reasons


async def test_a_findings_item_must_be_the_recorded_findings(tmp_path):
    from clearance._context.verify_facts import RunFacts
    from clearance._context.verify_review import check_findings_item

    ledger, model, result = await run(tmp_path)
    facts = RunFacts(ledger, ledger.get_run(result.run_id), None, None)
    prompt = prompts(model, "task:build")[1]
    item = next(i for i in prompt.manifest.to_dict()["items"] if i["origin"] == "review:build/1")
    assert list(check_findings_item("build", "review:build/1", item, facts)) == []
    bad = {**item, "sha256": "0" * 64}
    assert [r for _, r in check_findings_item("build", "review:build/1", bad, facts)] == [
        "the findings are not the reviewer's recorded findings"
    ]
    assert list(check_findings_item("build", "review:build/3", item, facts))  # not sent back


async def test_a_reviewer_with_tools_is_refused(tmp_path):
    team = Team(agents=(TEAM.agents[0], Agent(name="spec", instructions="S.", tools=("t",))))
    bad = [Task(id="t", title="T", description="D.", assignee="dev",
                review=Review(by=("spec",)))]  # fmt: skip
    ledger = RunLedger(f"sqlite:///{tmp_path}/r.db")
    with pytest.raises(ConfigError, match="answers in one call"):
        await Orchestrator(team, model=FunctionModel(Script()), ledger=ledger,
                           tools={"t": lambda: None}).run_tasks(bad)  # fmt: skip
