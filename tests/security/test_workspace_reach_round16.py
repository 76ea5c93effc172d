"""What an isolated subagent and a ``for_each_file`` pattern reach of other agents' work: round 16.

- A ``workspace:`` root inside the project folder (``workspace: work`` with the project the
  input folder) was listed to an isolated subagent and served on its ``FILE:`` request:
  another agent's outputs, this run's and an earlier run's, reached it. Now the workspace
  root, however it is spelled (case, ``..``, a link to it), is never listed nor given: the
  refusal is what the model reads and the ledger records.
- A ``for_each_file`` pattern (``**/*.md``) matched files under the workspace root and
  ``.clearance/``: a model's output of an earlier run became a new task's input. They are
  left out.
- ``clearance verify`` reported a served file of a version-control folder, but not one of
  ``.clearance/`` or of the workspace root (an edited ledger).
- ``clearance run`` started with a ``workspace:`` that cannot be a folder (a file at its
  path, a path under a file) and failed later; now it is refused in one line, exit 2,
  before any model call.

Through the real product path: a team file, ``clearance run``, a scripted model on a real
OpenAI-compatible server on 127.0.0.1, a real SQLite ledger.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.verify import verify_run
from clearance.cli._app import app

pytestmark = pytest.mark.network

CANARY = "EARLIER-RUN-CANARY"
FRESH = "THIS-RUN-OUTPUT-CANARY"
EARLIER = "work/earlier/writer/outputs/secret.md"
REFUSAL = "it is the run's workspace folder (agents' outputs), which no subagent is given"

TEAM = """\
name: reach
input: {default: %(input)s}
workspace: %(workspace)s
isolation: {max_rounds: 8}
agents:
  - {name: writer, instructions: "You write.", tools: [write_output]}
  - {name: reviewer, instructions: "You review."}
tasks:
  - {id: a, title: A, description: Write the notes., assignee: writer}
  - {id: b, title: B, description: Review the code., assignee: reviewer, mode: isolated,
     depends_on: [a]}
"""


def texts(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project (the input folder, the working folder) holding an earlier run's workspace."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / EARLIER).parent.mkdir(parents=True)
    (root / EARLIER).write_text(f"{CANARY}\n")
    monkeypatch.chdir(root)
    return root


def run(tmp_path: Path, openai_server, monkeypatch, asked: list[str], **team: str) -> Any:
    """``clearance run`` of `TEAM`; the isolated subagent asks for ``asked`` in turn.

    ``{fresh}`` in a path is the writer's output of this run, found where it was written.
    """
    paths = iter(asked)
    seen: list[str] = []

    def reply(messages: list[dict[str, Any]]) -> Any:
        text = texts(messages)
        seen.append(text)
        if "Write the notes." in text:
            if ("notes.md" in text and "Tool" in text) or "wrote" in text.lower():
                return "notes written"
            return [("write_output", {"name": "notes.md", "content": f"{FRESH}\n"})]
        if "Review the code." in text and "STATUS" in text:
            path = next(paths, None)
            if path is None:
                return "fine\nSTATUS: done"
            if "{fresh}" in path:
                (found,) = Path.cwd().glob("work*/*/*/outputs/notes.md")
                path = path.replace("{fresh}", found.relative_to(Path.cwd()).as_posix())
            return f"STATUS: needs_context\nFILE: {path}"
        return "S"

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    values = {"input": ".", "workspace": "work", **team}
    (tmp_path / "team.yaml").write_text(TEAM % values)
    db = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", f"sqlite:///{db}"]
    )
    return result, seen, db


def rounds_of(db: Path) -> tuple[str, list[dict[str, Any]]]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        (run_id,) = [r.run_id for r in ledger.list_runs()]
        events = [e.data for e in ledger.events(run_id) if e.kind == "clarification"]
    return run_id, events


def test_a_workspace_root_in_the_project_is_never_listed_nor_given(
    project: Path, tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "real").symlink_to(project / "work")  # a link to it is no way in
    asked = [EARLIER, "./" + EARLIER, EARLIER.replace("work", "WORK"), "src/../" + EARLIER,
             "real/earlier/writer/outputs/secret.md", "{fresh}", "src/app.py"]  # fmt: skip
    result, seen, db = run(tmp_path, openai_server, monkeypatch, asked)
    assert result.exit_code == 0, result.output
    run_id, rounds = rounds_of(db)
    assert [r["served"] for r in rounds] == [False] * 6 + [True], rounds
    for data in rounds[:4] + rounds[5:6]:
        assert data["answer"].endswith(REFUSAL), data
    isolated = [t for t in seen if "Review the code." in t and "STATUS" in t]
    assert any(REFUSAL in t for t in isolated)  # the model read the refusal
    for text in isolated:  # no prompt showed another agent's output
        assert CANARY not in text and FRESH not in text
    assert "app.py" in isolated[0]  # the project's listing, without the workspace folder
    assert "work/" not in isolated[0] and "earlier/" not in isolated[0]
    assert "print('hi')" in isolated[-1]
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id)
    assert report.ok, [str(f) for f in report.findings]


def test_a_workspace_root_spelled_through_dots_and_a_link_is_still_left_out(
    project: Path, tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "outside").symlink_to(project)  # the workspace, named through a link to it
    workspace = os.path.relpath(tmp_path / "outside" / "src" / ".." / "work", project)
    result, seen, db = run(tmp_path, openai_server, monkeypatch, [EARLIER, "{fresh}"],
                           workspace=workspace)  # fmt: skip
    assert result.exit_code == 0, result.output
    _, rounds = rounds_of(db)
    assert [r["served"] for r in rounds] == [False, False], rounds
    assert all(r["answer"].endswith(REFUSAL) for r in rounds)
    assert not any(CANARY in t or FRESH in t for t in seen if "Review the code." in t)


FOR_EACH = """\
name: each
input: {default: "."}
workspace: %s
agents:
  - {name: writer, instructions: "You write.", tools: [write_output]}
tasks:
  - {id: "doc-{slug}", title: "Doc {name}", description: "Read {path}.", assignee: writer,
     for_each_file: "**/*.md", files: ["{path}"]}
"""


@pytest.mark.parametrize("workspace", ["work", "Work/../work", ".clearance/workspaces"])
def test_for_each_file_leaves_out_the_workspace_root_and_clearance_state(
    project: Path, tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch, workspace: str
) -> None:
    (project / "README.md").write_text("# readme\n")
    if not workspace.startswith("Work") and workspace != "work":  # then work/ is a project folder
        (project / EARLIER).unlink()
    state = project / ".clearance" / "workspaces" / "old" / "writer" / "outputs"
    state.mkdir(parents=True)
    (state / "x.md").write_text(f"{CANARY}\n")
    (project / "linked.md").symlink_to(state / "x.md")  # a link into the state: left out too
    seen: list[str] = []

    def reply(messages: list[dict[str, Any]]) -> Any:
        seen.append(texts(messages))
        return "read it"

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    (tmp_path / "team.yaml").write_text(FOR_EACH % workspace)
    db = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", f"sqlite:///{db}"]
    )
    assert result.exit_code == 0, result.output
    with RunLedger(f"sqlite:///{db}") as ledger:
        (run_id,) = [r.run_id for r in ledger.list_runs()]
        tasks = sorted(t.task_id for t in ledger.tasks(run_id))
    assert tasks == ["doc-README"], tasks  # no task of a model's earlier output
    assert not any(CANARY in text for text in seen)


def test_verify_reports_a_served_file_of_the_workspace_root_or_clearance_state(
    project: Path, tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch, rechain
) -> None:
    result, _, db = run(tmp_path, openai_server, monkeypatch, ["src/app.py"])
    assert result.exit_code == 0, result.output
    run_id, _ = rounds_of(db)
    for forged in (EARLIER, ".clearance/workspaces/r/writer/outputs/x.md"):
        copy = tmp_path / f"forged-{len(forged)}.db"
        copy.write_bytes(db.read_bytes())
        conn = sqlite3.connect(copy)  # a forger records the file as a workspace's
        ((event_id, data),) = conn.execute(
            "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'clarification'",
            (run_id,),
        ).fetchall()
        conn.execute("UPDATE events SET data = ? WHERE event_id = ?",
                     (json.dumps({**json.loads(data), "path": forged}), event_id))  # fmt: skip
        conn.execute(
            "UPDATE calls SET response = replace(response, 'FILE: src/app.py', ?) WHERE run_id = ?",
            (f"FILE: {forged}", run_id),
        )
        conn.commit()
        conn.close()
        rechain(copy, run_id)
        with RunLedger(f"sqlite:///{copy}") as ledger:
            findings = [str(f) for f in verify_run(ledger, run_id).findings]
        assert any(f"{forged!r} is in the run's workspace folder or Clearance's own state, "
                   "which is never given" in f for f in findings), findings  # fmt: skip
        out = CliRunner().invoke(app, ["verify", run_id, "--db", f"sqlite:///{copy}"])
        assert out.exit_code != 0 and "never given" in out.output, out.output


@pytest.mark.parametrize("make", ["file", "under_file"])
def test_an_unusable_workspace_is_refused_before_any_model_call(
    project: Path, tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch, make: str
) -> None:
    (project / "blocker").write_text("a file\n")
    workspace = "blocker" if make == "file" else "blocker/below"
    result, seen, db = run(tmp_path, openai_server, monkeypatch, [], workspace=workspace)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert "workspace" in lines[0] and "not a folder" in lines[0], lines
    assert seen == []  # no model call
    assert not db.exists() or not rounds_of_runs(db)


def rounds_of_runs(db: Path) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [r.run_id for r in ledger.list_runs()]


@pytest.mark.parametrize("workspace", [".", "..", "src/.."])
def test_a_workspace_that_holds_the_project_is_refused_before_any_model_call(
    project: Path, tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch, workspace: str
) -> None:
    result, seen, _ = run(tmp_path, openai_server, monkeypatch, [], workspace=workspace)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "holds the project folder" in lines[0], result.output
    assert seen == []
