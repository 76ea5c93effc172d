"""A process that runs many runs keeps no thread, file, child process or memo per run.

A service embedding the library runs one run after another in one process: each run's
threads (lease keepers, memory calls), files (the store's and memory's databases) and MCP
server processes end with the run, and the module-level memos stay bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger, RunServices, RunSpec, run_spec
from clearance.models._base import ModelRequest, ToolCall
from clearance.testing import FunctionModel

SERVER = Path(__file__).parents[1] / "agents" / "mcp_server.py"
RUNS = 24


def spec(tmp_path: Path, *, mcp: bool) -> RunSpec:
    tools = ["store_get", *(["mcp:m/lookup"] if mcp else [])]
    data: dict[str, Any] = {
        "name": "many",
        "model": "test:function",
        "store": f"sqlite:///{tmp_path / 'store.db'}",
        "memory": {"url": f"sqlite:///{tmp_path / 'memory.db'}"},
        "agents": [
            {
                "name": "w",
                "instructions": "You work.",
                "tools": tools,
                "store_grants": {"notes/*": "read"},
                "memory": {"recall": 3, "record": "result"},
            }
        ],
        "tasks": [
            {"id": "a", "title": "A", "description": "Do a.", "assignee": "w"},
            {"id": "b", "title": "B", "description": "Do b.", "assignee": "w", "depends_on": ["a"]},
        ],
    }
    if mcp:
        data["mcp_servers"] = {"m": {"command": [sys.executable, str(SERVER), "stdio"]}}
    return RunSpec.model_validate(data)


def answer(request: ModelRequest) -> Any:
    if not request.prompt.manifest.subject.startswith("task:"):
        return "The report."
    if "## Results of your tool calls" in request.prompt.messages[-1].content:
        return "done"
    if "mcp__m__lookup" in str(request.tools):
        return [ToolCall(id="c1", name="mcp__m__lookup", arguments={"term": "x"})]
    return [ToolCall(id="c1", name="store_get", arguments={"key": "notes/x"})]


def fail(request: ModelRequest) -> Any:
    raise RuntimeError("the model is down")


def open_files() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(found)


def children() -> list[int]:
    me = str(os.getpid())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if stat[1] == me:
            found.append(int(pid))
    return found


def clearance_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("clearance"))


async def one_run(tmp_path: Path, ledger: RunLedger, i: int) -> str:
    model = FunctionModel(fail if i % 6 == 5 else answer)
    running = run_spec(
        spec(tmp_path, mcp=i % 8 == 0),
        ledger=ledger,
        services=RunServices(models={"test:function": model}),
    )
    if i % 6 == 4:  # cancelled while it runs
        task = asyncio.ensure_future(running)
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return "cancelled"
    return (await running).status


@pytest.mark.network
def test_many_runs_in_one_process_leave_no_thread_file_or_process(tmp_path: Path) -> None:
    from clearance._core import clock
    from clearance._state.db import fastpath
    from clearance._state.ledger import rows

    gc.collect()
    files, threads, kids = open_files(), clearance_threads(), children()
    statuses: list[str] = []
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        for i in range(RUNS):
            statuses.append(asyncio.run(one_run(tmp_path, ledger, i)))
            if i == RUNS // 2 - 1:
                compiled = len(fastpath._COMPILED)
    gc.collect()
    assert {"completed", "failed", "cancelled"} <= set(statuses), statuses
    assert clearance_threads() == threads
    assert open_files() == files
    assert children() == kids
    db = sqlite3.connect(tmp_path / "runs.db")
    try:  # the MCP server did run, and answered
        named = {name for (name,) in db.execute("SELECT name FROM tool_calls")}
    finally:
        db.close()
    assert {"mcp__m__lookup", "store_get"} <= named
    # The memos are keyed by statements and values, never by runs: the second half of the
    # runs compiled nothing new, and each memo is capped.
    assert len(fastpath._COMPILED) == compiled
    assert len(clock._ISO_TEXTS) <= clock._MEMO_SIZE
    assert len(rows._DEPENDS_ON) <= rows._MEMO_SIZE
