from pathlib import Path

import pytest

from clearance import ConfigError, TaskGraph
from clearance._core.teamfile import load_team_file, resolve_input

EXAMPLE = Path(__file__).parents[2] / "examples" / "code_review.yaml"


def write(tmp_path, text):
    path = tmp_path / "team.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_example_expands_one_task_per_module(tmp_path):
    src = tmp_path / "pkg"
    (src / "sub").mkdir(parents=True)
    (src / "a.py").write_text("A = 1\n")
    (src / "b.py").write_text("B = 2\n")
    (src / "sub" / "c.py").write_text("C = 3\n")
    (src / "notes.txt").write_text("not python")
    loaded = load_team_file(EXAMPLE, input_dir=src)
    ids = [t.id for t in loaded.tasks]
    # One analysis step, one brief and one review per top-level *.py, sorted; then the
    # package step.
    assert ids == ["facts-a", "facts-b", "brief-a", "brief-b", "review-a", "review-b", "package"]
    graph = TaskGraph(loaded.tasks)
    assert graph.get("brief-a").depends_on == ("facts-a",)  # its own module's facts only
    assert graph.get("review-a").depends_on == ("brief-a",)  # and its review that brief
    assert graph.get("package").depends_on == ("facts-a", "facts-b")
    assert graph.get("facts-a").files == ("a.py",)
    assert "a.py" in graph.get("review-a").description
    assert loaded.input_root == src


def test_default_input_is_the_stdlib_json_package():
    loaded = load_team_file(EXAMPLE)
    assert loaded.input_root == resolve_input("python:json")
    assert {"review-decoder", "review-encoder", "review-scanner"} <= {t.id for t in loaded.tasks}


def test_braces_in_descriptions_are_left_alone(tmp_path):
    (tmp_path / "x.py").write_text("")
    path = write(
        tmp_path,
        """
agents: [{name: a, instructions: hi}]
input: {default: "."}
tasks:
  - id: "t-{stem}"
    for_each_file: "*.py"
    title: "T {name}"
    description: 'Reply as {"ok": true} about {path}'
    assignee: a
""",
    )
    loaded = load_team_file(path, input_dir=tmp_path)
    assert loaded.tasks[0].description == 'Reply as {"ok": true} about x.py'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("agents: [", "not valid YAML (line"),
        ("- just a list", "must hold a mapping"),
        ("agents: []", "agents: List should have at least 1 item"),
        ("agents: [{name: a}]", "agents.0.instructions: Field required"),
        ("agents: [{name: a, instructions: x, colour: red}]", "agents.0.colour: Extra inputs"),
        (
            "agents: [{name: a, instructions: x}]\ntasks: [{id: t, title: T, description: d, "
            "assignee: a, memory_scope: everything}]",
            "tasks.0.memory_scope",
        ),
        ("agents: [{name: 'bad name!', instructions: x}]", "agent name 'bad name!' is not valid"),
        ("agents: [{name: a, instructions: x}]\ninput: {default: /no/such/dir}", "does not exist"),
        (
            "agents: [{name: a, instructions: x}]\ntasks: [{id: t, title: T, description: d, "
            "assignee: a}]\ntasks: [{id: u, title: U, description: e, assignee: a}]",
            "the key 'tasks' is given twice (lines 2 and 3)",
        ),
        (
            "agents: [{name: a, instructions: x, instructions: y}]",
            "the key 'instructions' is given twice (line 1)",
        ),
    ],
)
def test_bad_files_name_the_file_field_and_problem(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_team_file(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message
    assert "\n" not in message


def test_retries_and_timeout_per_agent(tmp_path):
    from clearance import ConfigError
    from clearance._core.teamfile import load_team_file

    path = tmp_path / "team.yaml"
    path.write_text("agents: [{name: a, instructions: x, limits: {retries: 5, timeout_s: 2.5}}]\n")
    limits = load_team_file(path).team.agents[0].limits
    assert (limits.retries, limits.timeout_s) == (5, 2.5)
    path.write_text("agents: [{name: a, instructions: x, limits: {retries: -1}}]\n")
    with pytest.raises(ConfigError, match=r"agents\.0\.limits\.retries"):
        load_team_file(path)


# -- python: input names and tool entries: one-line errors, no code run ----------------------


@pytest.mark.parametrize("name", ["..", ".json", "a..b", "json.", "js on", "this.x", "os.path"])
def test_a_python_input_that_is_no_package_name_is_one_config_error(name):
    with pytest.raises(ConfigError, match=r"^input: .* (not a Python package name|not an insta)"):
        resolve_input(f"python:{name}")


def test_a_python_input_runs_no_package_code(capsys, monkeypatch):
    # `this` prints the Zen of Python when imported; naming it must import nothing.
    monkeypatch.delitem(__import__("sys").modules, "this", raising=False)
    with pytest.raises(ConfigError):
        resolve_input("python:this.x")
    assert "Zen" not in capsys.readouterr().out
    assert "this" not in __import__("sys").modules


def test_a_python_input_may_name_a_subpackage():
    import email.mime

    assert resolve_input("python:email.mime") == Path(email.mime.__file__).parent


TOOL_TEAM = """\
agents:
  - {{name: w, instructions: You write., tools: [x]}}
tasks:
  - {{id: a, title: A, description: Do A., assignee: w}}
tools:
  x: {entry}
"""


@pytest.mark.parametrize(
    "entry",
    [
        "{function: 'os:getcwd', approval: required}",
        "{function: 'os:getcwd', idempotent: true}",
        "{function: 'os:getcwd', replay: false}",
    ],
)
def test_a_builtin_function_may_be_a_marked_tool(tmp_path, entry):
    import os

    from clearance._orchestration.run_config import spec_tools

    loaded = load_team_file(write(tmp_path, TOOL_TEAM.format(entry=entry)))
    tools = spec_tools(loaded.spec)
    assert tools["x"]() == os.getcwd()  # a wrapper that calls it
    assert not hasattr(os.getcwd, "__clearance_tool__")  # the built-in itself is untouched


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("collections:OrderedDict", "is not a function"),
        ("os:sep", "is not a function"),
        ("'sys:exit'", "parameter 'status' has no type hint"),
    ],
)
def test_a_tool_entry_that_cannot_be_a_tool_is_one_config_error(tmp_path, entry, problem):
    from typer.testing import CliRunner

    from clearance.cli import app

    path = write(tmp_path, TOOL_TEAM.format(entry=entry))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(app, ["run", str(path), "--model", "fake:try", "--db", db])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {path}: ") and problem in line
    assert "Traceback" not in result.output


# -- a task's files are checked before anything runs --------------------------------------------


@pytest.mark.parametrize(
    ("listed", "problem"),
    [
        ("nope.txt", "'nope.txt' does not exist under"),
        ("{path}", "'{path}' does not exist under"),  # a placeholder outside for_each_file
        ("sub", "is not a regular file (a folder)"),
        ("out.txt", "escapes"),  # a link to a file outside the folder
        ("/etc/passwd", "it is absolute"),
    ],
)
def test_a_task_file_that_cannot_be_read_is_refused_naming_the_task(tmp_path, listed, problem):
    from typer.testing import CliRunner

    from clearance.cli import app

    folder = tmp_path / "inp"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("outside", encoding="utf-8")
    (folder / "out.txt").symlink_to(tmp_path / "secret.txt")
    path = write(
        tmp_path,
        "agents: [{name: w, instructions: W.}]\n"
        f"input: {{default: '{folder}'}}\n"
        f"tasks:\n- {{id: a, title: A, description: D, assignee: w, files: ['{listed}']}}\n",
    )
    result = CliRunner().invoke(app, ["graph", str(path)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {path}: tasks.a.files: ") and problem in line
