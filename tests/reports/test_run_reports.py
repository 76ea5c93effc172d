"""Reports belong to the team file: the code review names its own, others get the generic one."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from clearance.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "code_review.yaml"
SARIF_SCHEMA = ROOT / "tests" / "data" / "sarif-schema-2.1.0.json"

TEAM = """\
name: plain
agents:
  - name: writer
    instructions: Write.
tasks:
  - {id: draft, title: Draft, description: Write a draft., assignee: writer}
  - {id: edit, title: Edit, description: Edit it., assignee: writer, depends_on: [draft]}
"""


def run(tmp_path: Path, *args: str):
    return CliRunner().invoke(
        app, ["run", *args, "--model", "fake:echo", "--db", f"sqlite:///{tmp_path / 'r.db'}"],
        terminal_width=200,
    )  # fmt: skip


def test_a_team_without_a_report_gets_the_generic_run_report(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text(TEAM, encoding="utf-8")
    out, js = tmp_path / "report.md", tmp_path / "report.json"
    shown = run(tmp_path, str(team), "--output", str(out), "--json", str(js))
    assert shown.exit_code == 0, shown.output
    md = out.read_text(encoding="utf-8")
    assert md.startswith("# Run report (plain)\n")
    assert "## Synthesis (written by the coordinator" in md
    assert "## Draft (draft, by writer)" in md and "## Edit (edit, by writer)" in md
    assert "Code review" not in md and "Look here first" not in md
    data = json.loads(js.read_text(encoding="utf-8"))
    assert [t["task_id"] for t in data["tasks"]] == ["draft", "edit"]
    assert data["synthesis"]


def test_sarif_is_refused_for_a_report_without_findings(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text(TEAM, encoding="utf-8")
    shown = run(tmp_path, str(team), "--sarif", str(tmp_path / "x.sarif"))
    assert shown.exit_code == 2
    assert "--sarif needs a team whose report has findings" in shown.output


def test_an_unknown_report_is_refused_in_one_line(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text(TEAM + "report: step:nope\n", encoding="utf-8")
    shown = run(tmp_path, str(team))
    assert shown.exit_code == 2
    assert "unknown report 'nope'" in shown.output
    team.write_text(TEAM + "report: code review\n", encoding="utf-8")
    assert run(tmp_path, str(team)).exit_code == 2


def test_the_code_reviews_sarif_validates_against_the_published_schema(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Pkg."""\nfrom .a import f as f\n', encoding="utf-8")
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(12))
    (pkg / "a.py").write_text(
        f'"""A."""\nimport os\n\n\ndef f(x):\n{branches}    return eval(x)\n', encoding="utf-8"
    )
    sarif = tmp_path / "review.sarif"
    shown = run(tmp_path, str(EXAMPLE), "--input", str(pkg), "--sarif", str(sarif))
    assert shown.exit_code in (0, 1), shown.output  # fake models cannot answer the schema
    log = json.loads(sarif.read_text(encoding="utf-8"))
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema).validate(log)
    results = log["runs"][0]["results"]
    by_rule = {r["ruleId"]: r for r in results}
    assert by_rule["S307"]["level"] == "error"
    assert by_rule["F401"]["locations"][0]["physicalLocation"]["region"]["startLine"] == 2
    assert by_rule["clearance/complexity"]["message"]["text"] == "f has complexity 13 over 26 lines"
    # Broken logs fail the same validation (the check can fail).
    del log["runs"][0]["tool"]
    try:
        jsonschema.Draft4Validator(schema).validate(log)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("a SARIF log without its tool validated")
