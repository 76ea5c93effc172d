"""`clearance resume` and what names code: the record is checked before anything is imported.

A forger who can write the ledger file names a module of their own as a recorded tool's
function. Resume must refuse the run (its record no longer matches the hash chain) before it
imports anything the record names.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from test_resume_forgery import (
    IMPORTED_MODULE,
    TEAM,
    TOOL_MODULE,
    cli,
    paused_run,
    reply,
)

pytestmark = pytest.mark.network


@pytest.fixture
def env(tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tmp_path / "forged_tools_mod.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "forged_tools_mod", raising=False)
    (tmp_path / "team.yaml").write_text(TEAM)
    return {"tmp": tmp_path, "db": tmp_path / "runs.db", "log": tmp_path / "ran.log", "url": url}


def test_resume_imports_no_tool_module_of_a_record_that_fails_its_chain(env, monkeypatch):
    monkeypatch.delenv("CLEARANCE_LEDGER_KEY", raising=False)
    (env["tmp"] / "planted_mod.py").write_text(IMPORTED_MODULE)
    monkeypatch.delitem(sys.modules, "planted_mod", raising=False)
    run_id, _ = paused_run(env)
    conn = sqlite3.connect(env["db"])
    (config,) = conn.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    recorded = json.loads(config)
    assert recorded["tools"]["remove"]["function"] == "forged_tools_mod:remove"
    recorded["tools"]["remove"]["function"] = "planted_mod:step"
    conn.execute("UPDATE runs SET config = ? WHERE run_id = ?", (json.dumps(recorded), run_id))
    conn.commit()
    conn.close()

    resumed = cli(env, "resume", run_id)

    assert resumed.exit_code == 2, resumed.output
    assert "cannot be resumed" in resumed.output and "nothing was replayed or run" in resumed.output
    assert not (env["tmp"] / "imported.flag").exists()  # the planted module never ran
    assert "planted_mod" not in sys.modules
    assert not env["log"].exists()  # and no tool ran


# -- a team file given to resume runs the tools the run recorded ---------------------------

GATED_TASK = """\
name: gated
agents:
  - {name: janitor, instructions: "You tidy up.", tools: [remove]}
tools:
  remove: %s
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor,
     approval: required}
"""
PLAIN = '{function: "forged_tools_mod:remove"}'


def task_paused_run(env, entry: str = PLAIN) -> tuple[str, str]:
    """A run paused before its task starts (the task needs approval), approved."""
    team = env["tmp"] / "team.yaml"
    team.write_text(GATED_TASK % entry)
    run = cli(env, "run", str(team), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = run.output.split("run id: ")[1].split()[0]
    (call_id,) = [w for w in run.output.split() if w.startswith("apr_")][:1]
    assert cli(env, "approve", run_id, call_id).exit_code == 0
    return run_id, str(team)


@pytest.mark.parametrize(
    ("edited", "problem"),
    [
        ('{function: "forged_tools_mod:remove", approval: required}',
         "tools.remove: requires approval, the run's did not"),
        ('{function: "planted_mod:step"}',
         "tools.remove: imports 'planted_mod:step', the run imported 'forged_tools_mod:remove'"),
    ],
)  # fmt: skip
def test_resume_refuses_a_team_file_that_changes_a_recorded_tool(env, monkeypatch, edited, problem):
    monkeypatch.delenv("CLEARANCE_LEDGER_KEY", raising=False)
    (env["tmp"] / "planted_mod.py").write_text(IMPORTED_MODULE + "\nremove = step\n")
    monkeypatch.delitem(sys.modules, "planted_mod", raising=False)
    run_id, team = task_paused_run(env)
    sent = len(env["url"].bodies)
    (env["tmp"] / "edited.yaml").write_text(GATED_TASK % edited)

    refused = cli(env, "resume", run_id, "--team", str(env["tmp"] / "edited.yaml"))

    assert refused.exit_code == 2, refused.output
    assert problem in refused.output
    assert "a resumed run runs the tools it recorded" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert len(env["url"].bodies) == sent  # nothing was sent
    assert not env["log"].exists()  # the tool never ran ungated
    # The unchanged team file resumes the run: the approved task runs its tool once.
    resumed = cli(env, "resume", run_id, "--team", team)
    assert resumed.exit_code == 0, resumed.output
    assert env["log"].read_text() == "old.txt\n"


def test_a_team_file_may_change_a_tools_replay_flags_on_resume(env, monkeypatch):
    monkeypatch.delenv("CLEARANCE_LEDGER_KEY", raising=False)
    run_id, _ = task_paused_run(env)
    edited = env["tmp"] / "edited.yaml"
    edited.write_text(GATED_TASK % '{function: "forged_tools_mod:remove", idempotent: true}')
    resumed = cli(env, "resume", run_id, "--team", str(edited))
    assert resumed.exit_code == 0, resumed.output
    assert env["log"].read_text() == "old.txt\n"


@pytest.mark.parametrize(
    ("edits", "problem"),
    [
        ({"tools: [remove]}": "tools: [remove], can_delegate_to: [helper]}\n"
                              "  - {name: helper, instructions: H.}"},
         'agents.janitor.can_delegate_to: is ["helper"] in the team file, [] in the run'),
        ({"tools: [remove]": "tools: [remove, keep]",
          "tools:\n": 'tools:\n  keep: "forged_tools_mod:remove"\n'},
         'agents.janitor.tools: is ["keep", "remove"] in the team file, ["remove"] in the run'),
    ],
)  # fmt: skip
def test_resume_refuses_a_team_file_that_changes_an_agents_capabilities(
    env, monkeypatch, edits, problem
):
    monkeypatch.delenv("CLEARANCE_LEDGER_KEY", raising=False)
    run_id, _ = task_paused_run(env)
    sent = len(env["url"].bodies)
    text = GATED_TASK % PLAIN
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    (env["tmp"] / "edited.yaml").write_text(text)

    refused = cli(env, "resume", run_id, "--team", str(env["tmp"] / "edited.yaml"))

    assert refused.exit_code == 2, refused.output
    assert problem in refused.output and "acts with the capabilities it recorded" in refused.output
    assert len(env["url"].bodies) == sent and not env["log"].exists()
