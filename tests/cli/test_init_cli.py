"""``clearance init`` writes a commented starter team that runs, and runs once edited."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import yaml
from typer.testing import CliRunner

from clearance.cli._app import app
from clearance.runs import team_file_schema

runner = CliRunner()


def run(path: Path, db: str):
    result = runner.invoke(app, ["run", str(path), "--model", "fake:try", "--db", db])
    assert result.exit_code == 0, result.output
    return re.search(r"run id: (\S+)", result.output).group(1)


def test_init_writes_a_starter_that_runs_and_verifies(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    written = runner.invoke(app, ["init"])
    assert written.exit_code == 0, written.output
    assert "clearance run team.yaml --model fake:try" in written.output
    text = (tmp_path / "team.yaml").read_text()
    first, second = text.splitlines()[:2]
    assert first == "# yaml-language-server: $schema=team-file.schema.json"  # for editors
    assert second.startswith("# A starter team") and text.count("#") > 20  # commented
    schema = json.loads((tmp_path / "team-file.schema.json").read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(text))) == []
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id = run(tmp_path / "team.yaml", db)
    document = json.loads(runner.invoke(app, ["inspect", run_id, "--db", db, "--json"]).output)
    assert {t["task_id"]: t["status"] for t in document["tasks"]} == {
        "facts": "completed", "draft": "completed"
    }  # fmt: skip
    assert runner.invoke(app, ["verify", run_id, "--db", db]).exit_code == 0


def test_the_commented_structured_task_runs_once_uncommented(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    assert runner.invoke(app, ["init", str(path)]).exit_code == 0
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  # - id: verdict"))
    edited = [*lines[:start], *(line.replace("  # ", "  ", 1) for line in lines[start:])]
    path.write_text("\n".join(edited) + "\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id = run(path, db)
    document = json.loads(runner.invoke(app, ["inspect", run_id, "--db", db, "--json"]).output)
    verdict = next(t for t in document["tasks"] if t["task_id"] == "verdict")
    assert verdict["status"] == "completed" and json.loads(verdict["result"])["score"] == 0


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text("mine")
    refused = runner.invoke(app, ["init", str(path)])
    assert refused.exit_code == 2
    assert "exists: give another path, or --force" in refused.output
    assert path.read_text() == "mine"
    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "elsewhere.yaml")
    assert runner.invoke(app, ["init", str(link), "--force"]).exit_code == 2  # not followed
    assert not (tmp_path / "elsewhere.yaml").exists()
    assert runner.invoke(app, ["init", str(path), "--force"]).exit_code == 0
    assert path.read_text().splitlines()[1].startswith("# A starter team")


def test_init_keeps_an_existing_schema_file_without_force(tmp_path: Path) -> None:
    (tmp_path / "team-file.schema.json").write_text("{}")
    result = runner.invoke(app, ["init", str(tmp_path / "team.yaml")])
    assert result.exit_code == 0, result.output
    assert "kept" in result.output and (tmp_path / "team-file.schema.json").read_text() == "{}"
    forced = runner.invoke(app, ["init", str(tmp_path / "team.yaml"), "--force"])
    assert forced.exit_code == 0, forced.output
    assert json.loads((tmp_path / "team-file.schema.json").read_text()) == team_file_schema()


def test_schema_prints_the_committed_schema_and_reference() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    printed = runner.invoke(app, ["schema"])
    assert printed.exit_code == 0, printed.output
    assert printed.output == (docs / "team-file.schema.json").read_text()
    markdown = runner.invoke(app, ["schema", "--markdown"])
    assert markdown.output == (docs / "team-file.md").read_text()


def test_the_starters_comments_say_what_the_reference_says(tmp_path: Path) -> None:
    """A deadline is per model call (retries included), not per task; nothing is downloaded."""
    path = tmp_path / "team.yaml"
    assert runner.invoke(app, ["init", str(path)]).exit_code == 0
    text = path.read_text()
    (timeout,) = [line for line in text.splitlines() if "timeout_s:" in line]
    assert "one model call" in timeout and "per task" not in timeout
    assert "downloaded" not in text
    reference = (Path(__file__).parents[2] / "docs" / "team-file.md").read_text()
    assert "Deadline, in wall-clock seconds, of one model call" in reference


def _one_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    return line


def test_a_schema_target_init_cannot_write_leaves_no_team_file(tmp_path: Path) -> None:
    # Before: team.yaml was written, then the schema was refused (exit 2): half a starter.
    for name, make in (
        ("link", lambda p: p.symlink_to(tmp_path / "elsewhere.json")),
        ("folder", lambda p: p.mkdir()),
    ):
        folder = tmp_path / name
        folder.mkdir()
        make(folder / "team-file.schema.json")
        line = _one_line(runner.invoke(app, ["init", str(folder / "team.yaml"), "--force"]))
        assert line.startswith(f"error: path: '{folder / 'team-file.schema.json'}' is a "), line
        assert not (folder / "team.yaml").exists(), name
    assert not (tmp_path / "elsewhere.json").exists()


def test_init_refuses_a_file_name_with_a_control_character(tmp_path: Path) -> None:
    # Before: "a\nb.yaml" was written, and its "wrote"/"run it" lines broke in two.
    for name in ("a\nb.yaml", "e\x1b[2Jx.yaml", "r\u202elmy.yaml"):
        line = _one_line(runner.invoke(app, ["init", str(tmp_path / name)]))
        assert line.startswith("error: path: the file name "), line
        assert "holds a control character" in line, line
    assert list(tmp_path.iterdir()) == []


def test_init_quotes_the_path_in_the_commands_it_suggests(tmp_path: Path, monkeypatch) -> None:
    # Before: "clearance run my team.yaml", which runs "my" and fails.
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["init", "my team.yaml"])
    assert result.exit_code == 0, result.output
    assert "clearance run 'my team.yaml' --model fake:try" in result.output
    assert (tmp_path / "my team.yaml").exists()
