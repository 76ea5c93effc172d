"""A request is on record before it is sent: a run killed (SIGKILL) at random points never
leaves a request the model server received without its recorded row."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import clearance
from clearance import RunLedger

SRC = Path(clearance.__file__).resolve().parents[1]

# A run of 40 tasks (8 chains of 5) against the server, 8 calls in flight at a time.
CHILD = """
import asyncio, sys
from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance.models import get_model

url, db = sys.argv[1], sys.argv[2]
team = Team(agents=(Agent(name="w", instructions="You work."),), name="t")
tasks = [
    Task(id=f"t{i}", title=f"T{i}", description=f"MARK-{i}-END", assignee="w",
         depends_on=(f"t{i - 8}",) if i >= 8 else ())
    for i in range(40)
]

async def main():
    model = get_model("openai:m", base_url=url, api_key="none")
    with RunLedger(f"sqlite:///{db}") as ledger:
        options = RunOptions(max_concurrency=8)
        await Orchestrator(team, model=model, ledger=ledger, options=options).run_tasks(tasks)

asyncio.run(main())
"""

MARK = re.compile(r"MARK-(\d+)-END")


def _marks(messages: list[dict[str, Any]]) -> set[str]:
    return set(MARK.findall(json.dumps(messages)))


@pytest.mark.network
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_every_request_the_server_received_is_recorded_after_a_sigkill(
    tmp_path: Path, openai_server: Any, seed: int
) -> None:
    rng = random.Random(seed)
    kill_at = rng.randint(1, 30)  # the request on whose arrival the run is killed
    delay_s = rng.choice([0.0, 0.0, rng.uniform(0, 0.01)])  # at once, or a moment later
    child: dict[str, int] = {}
    lock = threading.Lock()
    arrived = [0]
    killed = threading.Event()

    def reply(messages: list[dict[str, Any]]) -> str:
        with lock:
            arrived[0] += 1
            now = arrived[0] == kill_at
        if now:
            time.sleep(delay_s)
            os.kill(child["pid"], signal.SIGKILL)
            killed.set()
        return "done"

    url = openai_server(reply)
    db = tmp_path / "runs.db"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(url), str(db)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    child["pid"] = proc.pid
    _, err = proc.communicate(timeout=300)
    assert killed.is_set(), f"the run ended before request {kill_at}: {err}"
    assert proc.returncode == -signal.SIGKILL
    received = set().union(*(_marks(body["messages"]) for body in url.bodies))
    assert len(received) >= kill_at
    with RunLedger(f"sqlite:///{db}") as ledger:
        (run,) = ledger.list_runs()
        recorded = set().union(*(_marks(call.messages) for call in ledger.calls(run.run_id)))
    assert received - recorded == set()
