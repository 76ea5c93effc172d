"""The graph's width against max_concurrency: measured, and told to the user."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from clearance import Task
from clearance._state.graph_shape import concurrency_notice, graph_shape
from clearance.cli import app


def layered(layers: int, width: int) -> list[Task]:
    """Every task of a layer depends on every task of the layer before."""
    tasks: list[Task] = []
    for layer in range(layers):
        before = [f"t{layer - 1}-{j}" for j in range(width)] if layer else []
        tasks += [
            Task(id=f"t{layer}-{i}", title="t", description="d", assignee="a", depends_on=before)
            for i in range(width)
        ]
    return tasks


def test_levels_width_and_critical_path() -> None:
    shape = graph_shape(layered(10, 50))
    assert shape.level_widths == (50,) * 10
    assert (shape.width, shape.critical_path) == (50, 10)
    assert shape.rounds(4) == 130  # 13 rounds of 4 slots per level of 50
    assert shape.rounds(50) == 10


def test_a_task_sits_on_its_longest_chain_level() -> None:
    tasks = [
        Task(id="a", title="a", description="d", assignee="x"),
        Task(id="b", title="b", description="d", assignee="x", depends_on=["a"]),
        Task(id="c", title="c", description="d", assignee="x", depends_on=["a", "b"]),
        Task(id="d", title="d", description="d", assignee="x"),
    ]
    assert graph_shape(tasks).level_widths == (2, 1, 1)


def test_a_long_chain_does_not_recurse() -> None:
    chain = [Task(id="t0", title="t", description="d", assignee="a")]
    chain += [
        Task(id=f"t{i}", title="t", description="d", assignee="a", depends_on=[f"t{i - 1}"])
        for i in range(1, 10_000)
    ]
    shape = graph_shape(reversed(chain))
    assert (shape.width, shape.critical_path) == (1, 10_000)


def test_notice_only_when_wider_than_the_limit() -> None:
    tasks = layered(10, 50)
    notice = concurrency_notice(tasks, 4)
    assert notice is not None
    assert "50 tasks wide" in notice and "max_concurrency is 4" in notice
    assert "13.0x its critical path (10 tasks long)" in notice
    assert "\n" not in notice
    assert concurrency_notice(tasks, 50) is None
    assert concurrency_notice([], 4) is None


def _team(tmp_path, width: int, max_concurrency: int):
    spec = {
        "name": "wide",
        "max_concurrency": max_concurrency,
        "agents": [{"name": "a", "instructions": "x"}],
        "tasks": [
            {"id": f"t{i}", "title": f"T{i}", "description": "d", "assignee": "a"}
            for i in range(width)
        ],
    }
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(("width", "told"), [(12, True), (4, False)])
def test_graph_estimate_and_run_state_width_against_max_concurrency(tmp_path, width, told):
    runner = CliRunner()
    team = _team(tmp_path, width, 4)
    estimate = runner.invoke(app, ["graph", str(team), "--estimate"])
    assert estimate.exit_code == 0, estimate.output
    assert f"width {width}, critical path 1 tasks, max_concurrency 4" in estimate.output
    assert (f"the task graph is {width} tasks wide" in estimate.output) is told

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run = runner.invoke(app, ["run", str(team), "--model", "fake:m", "--db", db])
    assert run.exit_code == 0, run.output
    assert (f"the task graph is {width} tasks wide but max_concurrency is 4" in run.output) is told
    wider = runner.invoke(
        app, ["run", str(team), "--model", "fake:m", "--db", db, "--max-concurrency", "16"]
    )
    assert "tasks wide" not in wider.output
