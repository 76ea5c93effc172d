"""Providers from installed packages: the ``clearance.models`` entry-point group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import clearance

PROVIDER = '''\
from clearance.models import ModelResponse, Usage


class EchoModel:
    """A third-party ChatModel: answers with its name and the task's first line."""

    def __init__(self, name, **options):
        self.model_id = f"myprov:{name}"
        self.context_window = 4096
        self.name = name

    async def request(self, request):
        task = request.prompt.messages[-1].content.splitlines()[1]
        text = f"myprov {self.name} answers {task}"
        return ModelResponse(text=text, usage=Usage(requests=1, prompt_tokens=3,
                             completion_tokens=4), model_id=self.model_id)

    def count_tokens(self, text):
        return len(text.split())


def not_a_model(name, **options):
    return "a string"
'''

TEAM = """\
name: third-party
model: myprov:tiny
agents:
  - {name: writer, instructions: You write.}
tasks:
  - {id: a, title: First, description: Write the first part., assignee: writer}
"""


def install(folder: Path, entries: str) -> None:
    """A distribution "installed" on ``folder``: a module and a dist-info with entry points."""
    (folder / "myprov_clearance.py").write_text(PROVIDER)
    info = folder / "myprov_clearance-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myprov-clearance\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[clearance.models]\n{entries}\n")


def clearance_cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    source = str(Path(clearance.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), source])}
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_team_file_reaches_a_provider_a_package_registers(tmp_path: Path) -> None:
    install(tmp_path, "myprov = myprov_clearance:EchoModel\nopenai = myprov_clearance:EchoModel")
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    done = clearance_cli(tmp_path, "run", "team.yaml", "--db", db)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "myprov tiny answers" in done.stdout
    run_id = done.stdout.split("run id: ")[1].split()[0]
    inspected = clearance_cli(tmp_path, "inspect", run_id, "--db", db, "--json")
    calls = json.loads(inspected.stdout)["calls"]
    assert {c["model_id"] for c in calls} == {"myprov:tiny"}
    assert clearance_cli(tmp_path, "verify", run_id, "--db", db).returncode == 0
    # A package cannot take over a built-in provider's name.
    code = textwrap.dedent("""
        from clearance.models import get_model
        from clearance.models._registry import installed_providers
        print(type(get_model("openai:gpt-4o-mini")).__name__, sorted(installed_providers()))
    """)
    source = str(Path(clearance.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), source])}
    env["OPENAI_API_KEY"] = "test"
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=60, check=True)  # fmt: skip
    assert shown.stdout.split() == ["OpenAIModel", "['myprov']"]


def test_a_provider_that_is_not_a_chat_model_is_one_line_exit_2(tmp_path: Path) -> None:
    install(tmp_path, "myprov = myprov_clearance:not_a_model")
    (tmp_path / "team.yaml").write_text(TEAM)
    done = clearance_cli(tmp_path, "run", "team.yaml", "--db", f"sqlite:///{tmp_path / 'r.db'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a ChatModel" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_an_unknown_provider_names_the_entry_point_group(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    done = clearance_cli(tmp_path, "run", "team.yaml", "--db", f"sqlite:///{tmp_path / 'r.db'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown model provider 'myprov'" in done.stderr + done.stdout
    assert "'clearance.models' entry-point group" in done.stderr + done.stdout
