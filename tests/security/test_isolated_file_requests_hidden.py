"""A subagent's ``FILE:`` request is not given what the project's listing leaves out.

The listing an isolated subagent is shown never holds version-control folders, nor what
the project's root ``.gitignore`` hides; a request for them was served all the same:
``.git/config`` (a remote's URL may hold a token) and a gitignored ``.env``. Now they are
refused with a reason the model reads and the ledger records; `input.include`, the user's
own choice, still gives a gitignored file it names, never version-control metadata; and
``verify`` reports a served file of a version-control folder (an edited ledger).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

CANARIES = ("GIT-TOKEN-CANARY", "ENV-CANARY", "BUILD-CANARY", "HG-CANARY")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(
        '[remote "origin"]\n\turl = https://me:GIT-TOKEN-CANARY@example.com/repo.git\n'
    )
    (root / ".hg").mkdir()
    (root / ".hg" / "hgrc").write_text("HG-CANARY\n")
    (root / ".env").write_text("API_KEY=ENV-CANARY\n")
    (root / "build").mkdir()
    (root / "build" / "out.txt").write_text("BUILD-CANARY\n")
    (root / ".gitignore").write_text(".env\nbuild/\n")
    return root


def run_asking(project: Path, tmp_path: Path, asked: list[str], **options):
    paths = iter(asked)

    def answer(request: ModelRequest) -> str:
        if request.prompt.manifest.subject != "isolated:t":
            return "S"
        path = next(paths, None)
        return f"STATUS: needs_context\nFILE: {path}" if path else "fine\nSTATUS: done"

    model = FunctionModel(answer)
    team = Team(agents=(Agent(name="worker", instructions="You review code."),),
                coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        orchestrator = Orchestrator(
            team, model=model, ledger=ledger,
            options=RunOptions(project_root=options.pop("project_root", project),
                               input_root=options.pop("input_root", None),
                               clarification_rounds=len(asked) + 1,
                               workspace_root=options.pop("workspace_root", tmp_path / "ws"),
                               **options),
        )  # fmt: skip
        result = asyncio.run(
            orchestrator.run_tasks(
                [Task(id="t", title="T", description="Review.", assignee="worker", mode="isolated")]
            )
        )
        assert result.tasks["t"].result == "fine", result.error
        rounds = [e.data for e in ledger.events(result.run_id) if e.kind == "clarification"]
        report = verify_run(ledger, result.run_id)
    return model, rounds, report, db, result.run_id


def test_version_control_metadata_and_gitignored_files_are_refused(project, tmp_path) -> None:
    asked = [".git/config", "./.git/config", ".GIT/config", ".hg/hgrc", ".env", "build/out.txt",
             "src/../.git/config", "src/app.py"]  # fmt: skip
    model, rounds, report, _, _ = run_asking(project, tmp_path, asked)
    assert [r["served"] for r in rounds] == [False] * 7 + [True]
    answers = [r["answer"] for r in rounds[:-1]]
    for answer in answers[:4]:
        assert answer.endswith("it is version-control metadata, which the project's listing "
                               "leaves out"), answer  # fmt: skip
    assert answers[4].endswith("the project's .gitignore leaves it out")
    assert answers[5].endswith("the project's .gitignore leaves it out")
    assert "cannot be given" in answers[6]
    for request in model.requests:  # no prompt ever held a secret
        assert not any(canary in request.prompt.text for canary in CANARIES)
    assert "print('hi')" in model.requests[-2].prompt.text  # the ordinary file was given
    assert report.ok, [str(f) for f in report.findings]


def test_input_include_gives_a_gitignored_file_it_names_never_vcs_metadata(
    project, tmp_path
) -> None:
    model, rounds, report, _, _ = run_asking(
        project, tmp_path, [".env", ".git/config"], input_root=project,
        input_include=("*.py", ".env", ".git/*"),
    )  # fmt: skip
    assert [r["served"] for r in rounds] == [True, False]
    last = [r for r in model.requests if r.prompt.manifest.subject == "isolated:t"][-1]
    assert "ENV-CANARY" in last.prompt.text
    assert "GIT-TOKEN-CANARY" not in last.prompt.text
    assert report.ok, [str(f) for f in report.findings]


def test_verify_reports_a_served_file_of_a_version_control_folder(
    project, tmp_path, rechain
) -> None:
    _, _, report, db, run_id = run_asking(project, tmp_path, ["src/app.py"])
    assert report.ok
    conn = sqlite3.connect(db)  # a forger records the file as .git/config
    ((event_id, data),) = conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'clarification'", (run_id,)
    ).fetchall()
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?",
                 (json.dumps({**json.loads(data), "path": ".git/config"}), event_id))  # fmt: skip
    conn.execute(
        "UPDATE calls SET response = replace(response, 'FILE: src/app.py', 'FILE: .git/config') "
        "WHERE run_id = ?",
        (run_id,),
    )
    conn.commit()
    conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        findings = [str(f) for f in verify_run(ledger, run_id).findings]
    assert any("'.git/config' is version-control metadata, which is never given" in f
               for f in findings), findings  # fmt: skip
