"""examples/mcp_glossary.yaml as a user runs it: the venv's ``clearance``, venv not on PATH."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance._core.mcp_spec import McpServerSpec

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINT = Path(sys.executable).parent / "clearance"


def reply(seen: list[str]) -> Any:
    def answer(messages: list[dict[str, Any]]) -> Any:
        if "Look them up" not in messages[0]["content"]:
            return "The report."  # the synthesis
        seen.append(messages[-1]["content"])
        if "## Results of your tool calls" not in messages[-1]["content"]:
            return [("mcp__glossary__lookup", {"term": "clearance"})]
        return "Clearance is what one task may see."

    return answer


@pytest.mark.network
@pytest.mark.skipif(not ENTRY_POINT.exists(), reason="no clearance entry point next to Python")
def test_the_example_runs_from_the_entry_point_without_the_venv_on_path(tmp_path, openai_server):
    seen: list[str] = []
    url = openai_server(reply(seen))
    venv_bin = str(ENTRY_POINT.parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env |= {"PATH": path, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "test"}
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    command = [str(ENTRY_POINT), "run", "examples/mcp_glossary.yaml", "--model", "openai:m"]
    done = subprocess.run(
        [*command, "--db", db], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No module named" not in done.stdout + done.stderr
    assert "mcp__glossary__lookup" in seen[0]
    assert "what one task may see" in seen[1]  # the server's answer reached the model
    run_id = re.search(r"run id: (\S+)", done.stdout)
    assert run_id is not None
    inspected = subprocess.run(
        [str(ENTRY_POINT), "inspect", run_id.group(1), "--db", db, "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    events = json.loads(inspected.stdout)["events"]
    (call,) = [e for e in events if e["kind"] == "mcp_call"]
    assert call["data"]["server"] == "glossary" and call["data"]["tool"] == "lookup"


def test_python_as_the_program_is_the_interpreter_running_clearance():
    spec = McpServerSpec(command=["python3", "-u", "tools/server.py", "stdio"])
    script = str(Path.cwd() / "tools" / "server.py")  # found from the agent's own folder too
    assert spec.resolved_command() == [sys.executable, "-u", script, "stdio"]
    assert McpServerSpec(command=["python"]).resolved_command() == [sys.executable]
    module = McpServerSpec(command=["python", "-m", "my_server"])
    assert module.resolved_command() == [sys.executable, "-m", "my_server"]
    chosen = McpServerSpec(command=["/usr/bin/python3", "-V"])
    assert chosen.resolved_command() == ["/usr/bin/python3", "-V"]
