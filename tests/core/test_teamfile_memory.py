"""Team-file memory keys: parsed into specs, or refused with the field named."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import ConfigError
from clearance._core.memory_spec import AgentMemory
from clearance._core.teamfile import load_team_file
from clearance.cli import app

EXAMPLE = Path(__file__).parents[2] / "examples" / "team_memory.yaml"

BASE = """\
memory_groups:
  - {name: g, agents: [a, b]}
agents:
  - name: a
    instructions: A.
"""


def write(tmp_path: Path, agent_extra: str, top: str = "") -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(top + BASE + agent_extra + "  - {name: b, instructions: B.}\n")
    return path


def test_the_example_declares_memory_settings_groups_and_url():
    loaded = load_team_file(EXAMPLE)
    assert loaded.team.agent("scout").memory == AgentMemory(
        recall=3, record="task_and_result", record_to="research"
    )
    assert loaded.team.agent("auditor").memory == AgentMemory(recall=3, record="result")
    assert loaded.spec.memory_settings.url == "sqlite:///.clearance/example-memory.db"
    assert loaded.spec.memory_settings.on_error == "fail"


def test_short_form_memory_url_and_defaults(tmp_path):
    loaded = load_team_file(write(tmp_path, "    memory: {}\n", "memory: sqlite:///m.db\n"))
    assert loaded.spec.memory_settings.url == "sqlite:///m.db"
    assert loaded.team.agent("a").memory == AgentMemory()
    assert loaded.team.agent("b").memory is None


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("    memory: {recall: -1}\n", r"agents\.0\.memory\.recall"),
        ("    memory: {recall: 51}\n", r"agents\.0\.memory\.recall"),
        ("    memory: {record: everything}\n", r"agents\.0\.memory\.record"),
        ("    memory: {remember: true}\n", r"agents\.0\.memory\.remember"),
        ("    memory: {record_to: other}\n", r"agents\.a\.memory\.record_to"),
        ("    store_read_extends_ttl_s: 0\n", r"agents\.0\.store_read_extends_ttl_s"),
    ],
)
def test_bad_memory_settings_name_the_field(tmp_path, extra, field):
    with pytest.raises(ConfigError, match=field):
        load_team_file(write(tmp_path, extra))


def test_bad_on_error_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"memory"):
        load_team_file(write(tmp_path, "", "memory: {on_error: ignore}\n"))


@pytest.mark.parametrize(
    "path", ["no_such_module_here:f", "os.path:not_there", "not a path", "os:sep"]
)
def test_a_team_file_tool_that_cannot_be_imported_is_one_line_exit_2(tmp_path, path):
    # a's memory: keeps the shared memory group valid, so the tool entry is what is refused
    team = write(tmp_path, "    tools: [t]\n    memory: {}\n", f"tools: {{t: '{path}'}}\n")
    result = CliRunner().invoke(app, ["run", str(team), "--model", "fake:m", "--goal", "G",
                                      "--db", f"sqlite:///{tmp_path / 'runs.db'}"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "tools.t" in result.output and len(result.output.strip().splitlines()) == 1
