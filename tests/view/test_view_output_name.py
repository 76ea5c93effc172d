"""``clearance view`` without ``--output`` names its file after the run: only in this folder.

The default file was ``Path(f"{run id}.html")``, the run id as the ledger holds it. A ledger
is not trusted, and a run id in it may be ``../../x`` or ``/home/me/.bashrc``: the page was
written outside the current folder, wherever the ledger's author chose. Now a run id that
is not a plain file name is refused in one line that asks for ``--output``, and nothing is
written; with ``--output`` the run's page is written where the user says.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app
from clearance.models import Usage

runner = CliRunner()


def ledger_with_run(tmp_path: Path, run_id: str) -> str:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(db) as ledger:
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=None)
        ledger.finish_run(run_id, status="completed", synthesis=None, usage=Usage(), error=None)
    return db


@pytest.mark.parametrize(
    "run_id", ["../../escaped", "run_x/../../../escaped", "..", "run\x00x", "run\nx", "-rf"]
)
def test_a_run_id_that_is_not_a_file_name_is_refused_without_output(tmp_path, monkeypatch,
                                                                     run_id):  # fmt: skip
    db = ledger_with_run(tmp_path, run_id)
    here = tmp_path / "a" / "b"
    (here / "run_x").mkdir(parents=True)
    monkeypatch.chdir(here)
    before = sorted(p for p in tmp_path.rglob("*") if p.name != "runs.db-wal")
    result = runner.invoke(app, ["view", "--db", db, "--", run_id[:2]])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --output: "), result.output
    assert "not a plain file name" in lines[0] and "give --output" in lines[0]
    after = sorted(p for p in tmp_path.rglob("*") if p.name != "runs.db-wal")
    assert [p for p in after if p.suffix == ".html"] == []
    assert [p for p in after if p not in before and p.name != "runs.db-shm"] == []
    # Named by the user, the page is written where they say.
    result = runner.invoke(app, ["view", "--db", db, "-o", "page.html", "--", run_id[:2]])
    assert result.exit_code == 0, result.output
    assert (here / "page.html").read_text().startswith("<!DOCTYPE html>")


def test_a_plain_run_id_still_names_the_file_here(tmp_path, monkeypatch):
    db = ledger_with_run(tmp_path, "run_0123abcd")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["view", "run_0123", "--db", db])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run_0123abcd.html").read_text().startswith("<!DOCTYPE html>")
