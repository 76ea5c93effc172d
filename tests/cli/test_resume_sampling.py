"""`clearance resume` runs every agent with the sampling its team file declared.

The run records its `RunSpec` (sampling included) and resume rebuilds from it; before, the
recorded agents lost ``sampling`` and a resumed run decoded with the provider's defaults.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import ModelError, RunLedger
from clearance.cli import app
from clearance.models import ModelRequest, ModelResponse
from clearance.testing import FakeModel

TEAM = """\
agents:
  - name: writer
    instructions: You write.
    sampling: {temperature: 0.7, top_p: 0.9, stop: [END]}
tasks:
  - {id: a, title: A, description: Write a., assignee: writer}
  - {id: b, title: B, description: Write b., assignee: writer, depends_on: [a]}
"""


def test_resume_keeps_every_agents_sampling(tmp_path: Path, monkeypatch) -> None:
    seen: list[tuple[str, float, float | None, tuple[str, ...]]] = []
    fail = {"b"}
    original = FakeModel.request

    async def recording(self: FakeModel, request: ModelRequest) -> ModelResponse:
        subject = request.prompt.manifest.subject
        seen.append((subject, request.temperature, request.top_p, request.stop))
        if any(subject.endswith(f":{t}") for t in fail):
            fail.clear()
            raise ModelError("the server went away")
        return await original(self, request)

    monkeypatch.setattr(FakeModel, "request", recording)
    team = tmp_path / "team.yaml"
    team.write_text(TEAM, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    runner = CliRunner()
    first = runner.invoke(app, ["run", str(team), "--model", "fake:m", "--db", db])
    assert first.exit_code == 1, first.output  # task b failed: the run can be resumed
    with RunLedger(db) as ledger:
        run_id = ledger.list_runs(limit=1)[0].run_id
    before = len(seen)
    resumed = runner.invoke(app, ["resume", run_id, "--db", db])
    assert resumed.exit_code == 0, resumed.output
    task_calls = [s for s in seen[before:] if s[0].endswith(":b")]
    assert task_calls, seen[before:]
    for _, temperature, top_p, stop in task_calls:
        assert (temperature, top_p, stop) == (pytest.approx(0.7), pytest.approx(0.9), ("END",))
