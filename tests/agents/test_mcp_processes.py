"""A stdio MCP server's processes end with its session: the ones it starts too.

The SDK starts each stdio server in a process group of its own, but kills that group only
when the server itself outlives the grace period after its input closes: a server that exits
on time (as every SDK server does) left whatever it had started running, after every call,
for good. The server here is the SDK's (`mcp_server.py`, tool ``spawn``), the runs real
``clearance run`` commands, in this process and, to be interrupted, in a child process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")

from clearance import RunLedger
from clearance._agents.mcp import load_mcp_tools
from clearance._core.mcp_spec import McpServerSpec, McpToolRef
from clearance.cli import app

pytestmark = pytest.mark.network

SERVER = Path(__file__).with_name("mcp_server.py")
runner = CliRunner()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def reap() -> Any:
    """Pid files whose processes are killed after the test, whatever it found."""
    files: list[Path] = []
    yield files.append
    for path in files:
        if path.exists():
            pid = int(path.read_text())
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def server_spec(tmp_path: Path) -> dict[str, Any]:
    return {
        "command": [sys.executable, str(SERVER), "stdio"],
        "env": {
            "MCP_CHILD_PID_FILE": str(tmp_path / "child.pid"),
            "MCP_PID_FILE": str(tmp_path / "server.pid"),
        },
        "timeout_s": 120,
    }


def team(tmp_path: Path) -> dict[str, Any]:
    return {
        "name": "procs",
        "mcp_servers": {"procs": server_spec(tmp_path)},
        "agents": [{"name": "starter", "instructions": "You start.", "tools": ["mcp:procs/spawn"]}],
        "tasks": [{"id": "go", "title": "Go", "description": "Start it.", "assignee": "starter"}],
    }


def reply(hang: bool) -> Any:
    def answer(messages: list[dict[str, Any]]) -> Any:
        if "You start." not in messages[0]["content"]:
            return "The report."
        if "## Results of your tool calls" in messages[-1]["content"]:
            return "started"
        return [("mcp__procs__spawn", {"hang": hang})]

    return answer


async def test_a_process_a_stdio_server_started_is_stopped_after_the_call(tmp_path, reap):
    spec = McpServerSpec.model_validate(server_spec(tmp_path))
    tools = await load_mcp_tools({"procs": spec}, [McpToolRef("procs", "spawn")])
    reap(tmp_path / "child.pid")
    output = await tools["mcp__procs__spawn"].call({})
    assert output.content == "spawned" and not output.is_error
    assert gone_within(int((tmp_path / "child.pid").read_text()), 5)


def test_a_run_leaves_no_process_of_its_servers_running(
    tmp_path, monkeypatch, openai_server, reap
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply(hang=False)))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    reap(tmp_path / "child.pid")
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(team(tmp_path)))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = runner.invoke(app, ["run", str(path), "--model", "openai:m", "--db", db])
    assert result.exit_code == 0, result.output
    assert gone_within(int((tmp_path / "child.pid").read_text()), 5)
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        (call,) = ledger.tool_calls(run_id)
        assert (call.name, call.result) == ("mcp__procs__spawn", "spawned")
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output


def test_an_interrupted_run_stops_its_server_and_what_the_server_started(
    tmp_path, openai_server, reap
) -> None:
    reap(tmp_path / "child.pid")
    reap(tmp_path / "server.pid")
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(team(tmp_path)))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {
        **os.environ,
        "OPENAI_BASE_URL": openai_server(reply(hang=True)),
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": str(Path(__file__).parents[2] / "src"),
    }
    command = [sys.executable, "-m", "clearance", "run", str(path), "--model", "openai:m"]
    process = subprocess.Popen(
        [*command, "--db", db], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "child.pid").exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the tool never ran"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, (out, err)
    run_id = re.search(r"interrupted: run (\S+) is resumable", err).group(1)  # type: ignore[union-attr]
    assert gone_within(int((tmp_path / "server.pid").read_text()), 5)
    assert gone_within(int((tmp_path / "child.pid").read_text()), 5)
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output


def test_a_server_that_exits_mid_call_is_a_one_line_tool_error_and_the_run_goes_on(
    tmp_path, monkeypatch, openai_server
) -> None:
    spec = team(tmp_path)
    spec["agents"][0]["tools"] = ["mcp:procs/die"]
    seen: list[str] = []

    def answer(messages: list[dict[str, Any]]) -> Any:
        if "You start." not in messages[0]["content"]:
            return "The report."
        if "## Results of your tool calls" in messages[-1]["content"]:
            seen.append(messages[-1]["content"])
            return "it died"
        return [("mcp__procs__die", {})]

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(answer))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(spec))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    started = time.monotonic()
    result = runner.invoke(app, ["run", str(path), "--model", "openai:m", "--db", db])
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 30  # the call's deadline is 120 s
    error = "error: MCP server 'procs' failed to answer die: MCPError: Connection closed"
    assert error in seen[0]
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        (call,) = ledger.tool_calls(run_id)
        assert call.result == error
        (event,) = [e for e in ledger.events(run_id) if e.kind == "mcp_call"]
        assert (event.data["tool"], event.data["error"]) == ("die", "MCPError")
        assert ledger.get_run(run_id).synthesis == "The report."
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)
def test_a_killed_run_stops_its_server_and_what_the_server_started(
    tmp_path, openai_server, reap
) -> None:
    """SIGKILL gives `clearance run` no chance to clean up: its servers still end with it."""
    reap(tmp_path / "child.pid")
    reap(tmp_path / "server.pid")
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(team(tmp_path)))
    env = {
        **os.environ,
        "OPENAI_BASE_URL": openai_server(reply(hang=True)),
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": str(Path(__file__).parents[2] / "src"),
    }
    command = [sys.executable, "-m", "clearance", "run", str(path), "--model", "openai:m"]
    process = subprocess.Popen(
        [*command, "--db", f"sqlite:///{tmp_path / 'runs.db'}"], cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "child.pid").exists():
            assert process.poll() is None, "the run ended before its tool ran"
            assert time.monotonic() < deadline, "the tool never ran"
            time.sleep(0.05)
        server = int((tmp_path / "server.pid").read_text())
        child = int((tmp_path / "child.pid").read_text())
        assert alive(server) and alive(child)
        process.kill()  # SIGKILL: no handler, no cleanup in the run itself
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert gone_within(server, 5), "the server outlived its run"
    assert gone_within(child, 5), "what the server started outlived its run"
