"""``--ray-*`` options are checked as the team file's ``executor:`` is, before a run starts.

Before, `executor_spec` applied them with ``model_copy(update=...)``, which checks nothing:
65 ``--ray-env`` names (the team file allows 64) started the run, and the run's recorded spec
could then not be rebuilt, so ``clearance resume`` refused the run for good.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import ConfigError, RunLedger
from clearance.cli import app
from clearance.cli._executor import ExecutorName, executor_spec
from clearance.runs import ExecutorKind, ExecutorSpec

NAMES = [f"CLEARANCE_TEST_VAR_{i}" for i in range(65)]


def test_too_many_ray_env_names_are_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in NAMES:
        monkeypatch.setenv(name, "x")
    team = tmp_path / "team.yaml"
    team.write_text(
        "name: t\nagents:\n  - {name: alpha, instructions: A.}\n"
        "tasks:\n  - {id: a, title: A, description: Do A., assignee: alpha}\n"
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env_args = [arg for name in NAMES for arg in ("--ray-env", name)]
    args = ["run", str(team), "--model", "fake:m", "--db", db, "--executor", "ray", *env_args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--ray-env" in result.output and "64" in result.output
    assert "Traceback" not in result.output
    with RunLedger(db) as ledger:
        assert ledger.list_runs() == []


def test_the_options_give_a_spec_that_reads_back() -> None:
    spec = executor_spec(ExecutorSpec(), ExecutorName.ray, "head:6379", 3, None)
    assert spec == ExecutorSpec(kind=ExecutorKind.RAY, address="head:6379", workers=3)
    assert ExecutorSpec.model_validate(spec.model_dump()) == spec
    with pytest.raises(ConfigError) as info:
        executor_spec(ExecutorSpec(), ExecutorName.ray, "", None, None)
    assert info.value.field == "--ray-address"
