"""``clearance graph``: the estimate of an isolated task's files, and what the command imports.

``graph --estimate`` counted an isolated task's files at their full size although the run
reads them within ``isolation.file_caps`` (cut under ``truncate``, the task failed under
``error``). And ``graph`` imported SQLAlchemy, the ledger and the store at startup (through
the tool sections and the run's modules), though it reads no database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]

TEAM = (
    "model: fake:x\n"
    "agents: [{{name: a, instructions: You work.}}]\n"
    "tasks: [{{id: t, title: T, description: Go., assignee: a, mode: isolated,"
    " files: [one.txt, two.txt, three.txt]}}]\n"
    "input: {{default: '{tmp}'}}\n"
    "isolation: {{file_caps: {{max_total_bytes: 9000, on_oversize: {policy}}}}}\n"
)


def team(tmp_path: Path, policy: str) -> Path:
    for name in ("one", "two", "three"):
        (tmp_path / f"{name}.txt").write_text(name.upper() + "-" + "y" * 3990 + "-END\n")
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(tmp=tmp_path, policy=policy))
    return path


def estimate_cells(path: Path) -> tuple[int, list[str], str]:
    result = runner.invoke(app, ["graph", str(path), "--estimate"], terminal_width=300)
    (row,) = [line for line in result.output.splitlines() if line.startswith("│ t ")]
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    return result.exit_code, cells, " ".join(result.output.split())


def test_the_estimate_counts_an_isolated_tasks_files_as_the_run_cuts_them(tmp_path: Path) -> None:
    path = team(tmp_path, "truncate")
    code, (_, estimate, *_rest, verdict), _ = estimate_cells(path)
    assert (code, verdict) == (0, "ok")
    db = f"sqlite:///{tmp_path}/runs.db"
    ran = runner.invoke(app, ["run", str(path), "--db", db])
    assert ran.exit_code == 0, ran.output
    with RunLedger(db) as ledger:
        (record,) = ledger.list_runs()
        (call,) = [c for c in ledger.calls(record.run_id) if c.subject == "isolated:t"]
    sent = int(call.manifest["total_tokens"])
    # Before: about 3000 file tokens (12 000 bytes) against about 2250 sent.
    assert abs(int(estimate) - sent) <= sent * 0.1, (estimate, sent)  # before: about 30% over


def test_the_estimate_says_error_where_the_run_would_fail_the_task(tmp_path: Path) -> None:
    code, cells, output = estimate_cells(team(tmp_path, "error"))
    assert code == 1
    assert cells[-1].startswith("error: three.txt"), cells
    assert "isolation.file_caps.max_total_b" in output, output


@pytest.mark.parametrize("command", [["graph"], ["graph", "--estimate"]])
def test_graph_imports_no_database_nor_provider(command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "clearance", *command,
         str(ROOT / "examples" / "code_review.yaml")],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    modules = [line.split("|")[-1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:")]  # fmt: skip
    assert "clearance.cli._graph" in modules
    heavy = ("sqlalchemy", "ray", "mcp", "opentelemetry", "anthropic", "openai")
    loaded = [m for m in modules if m.split(".")[0] in heavy]
    assert loaded == [], loaded[:10]
