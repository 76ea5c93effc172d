"""`clearance run --executor ray --stream`: the streaming sink stays in the orchestrator's process.

The sink that shows a call's text is a closure: sent to a Ray worker inside the request, it
could not be serialized and every call failed, with the whole prompt in the error. It is now
kept here, and the worker's answer reaches the stream in one piece.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from clearance import RunOptions, RunServices
from clearance._orchestration.ray_executor import LOCAL_RAY_ENV

for _key, _value in {**LOCAL_RAY_ENV, "RAY_AUTH_MODE": "disabled"}.items():
    os.environ.setdefault(_key, _value)  # before Ray is imported

pytest.importorskip("ray", reason="Ray is not installed (pip install 'clearance[ray]')")

from typer.testing import CliRunner  # noqa: E402

from clearance import RunLedger  # noqa: E402
from clearance.cli import app  # noqa: E402

pytestmark = pytest.mark.ray

TEAM = """\
name: streamed
agents:
  - {name: alpha, instructions: "You are Alpha."}
tasks:
  - {id: a, title: Gather, description: Gather the facts., assignee: alpha}
  - {id: b, title: Judge, description: Judge them., assignee: alpha, depends_on: [a],
     after_failure: proceed}
"""


def test_streaming_over_ray_completes_and_shows_the_text(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(
        app,
        [
            "run", str(tmp_path / "team.yaml"), "--model", "fake:m", "--db", db,
            "--executor", "ray", "--ray-workers", "1", "--stream",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    assert "Could not serialize" not in result.output
    run_id = re.search(r"run id: (\S+)", result.output).group(1)
    with RunLedger(db) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        assert {t.status for t in tasks.values()} == {"completed"}
        a_result = tasks["a"].result
    assert a_result and a_result.startswith("m result for")
    assert a_result in result.output.replace("\n", "")  # the streamed text was shown


def test_the_text_streams_from_the_worker_piece_by_piece(tmp_path: Path) -> None:
    import asyncio

    from clearance import Agent, Orchestrator, RayExecutor, Task, Team

    events = []
    team = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))

    async def run() -> None:
        with (
            RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger,
            RayExecutor(workers=1) as executor,
        ):
            orch = Orchestrator(
                team,
                model="fake:m",
                ledger=ledger,
                options=RunOptions(stream_text=True),
                services=RunServices(executor=executor, on_event=events.append),
            )
            tasks = [Task(id="a", title="Gather", description="Gather.", assignee="alpha")]
            result = await orch.run_tasks(tasks)
            assert result.status == "completed", result.error
            assert result.tasks["a"].result is not None
            pieces = [e.detail for e in events if e.kind == "text" and e.subject == "task:a"]
            assert len(pieces) > 1  # word by word, as the worker's model produced them
            assert "".join(pieces) == result.tasks["a"].result

    asyncio.run(run())
