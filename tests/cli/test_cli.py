import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance.cli import app
from clearance.testing import FunctionModel

EXAMPLE = Path(__file__).parents[2] / "examples" / "code_review.yaml"
runner = CliRunner()


def test_graph_prints_the_expanded_example():
    result = runner.invoke(app, ["graph", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert "review-decoder" in result.output and "package" in result.output
    # The package step depends on every module's facts; each review on its own module's
    # brief (a step over that module's facts).
    assert "depends on: facts-__init__, facts-decoder" in " ".join(result.output.split())
    assert "review-decoder  [module_reviewer]" in result.output
    review = result.output.split("review-decoder  [module_reviewer]", 1)[1]
    assert review.split("\n")[1].strip(" │├└─") == "depends on: brief-decoder"
    brief = result.output.split("brief-decoder  [step]", 1)[1]
    assert brief.split("\n")[1].strip(" │├└─") == "depends on: facts-decoder"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("agents: [{name: a}]", "agents.0.instructions: Field required"),
        (
            "agents: [{name: a, instructions: x}]\ntasks:\n"
            "  - {id: p, title: P, description: d, assignee: a, depends_on: [q]}\n"
            "  - {id: q, title: Q, description: d, assignee: a, depends_on: [p]}\n",
            "dependency cycle: ",
        ),
        (
            "agents: [{name: a, instructions: x}]\ntasks:\n"
            "  - {id: p, title: P, description: d, assignee: a, depends_on: [nope]}\n",
            "task 'p' depends on unknown task 'nope'",
        ),
        (  # a second tasks: list would silently replace the first
            "agents: [{name: a, instructions: x}]\ntasks:\n"
            "  - {id: p, title: P, description: d, assignee: a}\ntasks:\n"
            "  - {id: q, title: Q, description: d, assignee: a}\n",
            "the key 'tasks' is given twice (lines 2 and 4)",
        ),
    ],
)
def test_bad_team_files_and_graphs_give_one_line_and_exit_2(tmp_path, content, fragment):
    path = tmp_path / "team.yaml"
    path.write_text(content)
    for command in (["graph", str(path)], ["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
        assert "Traceback" not in result.output


def test_run_without_tasks_or_goal_is_a_usage_error(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text("agents: [{name: a, instructions: x}]\n")
    result = runner.invoke(app, ["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 2
    assert "give --goal" in result.output


def test_unknown_model_provider_is_a_one_line_error(tmp_path):
    result = runner.invoke(
        app, ["run", str(EXAMPLE), "--model", "nosuch:thing", "--db", f"sqlite:///{tmp_path}/r.db"]
    )
    assert result.exit_code == 2, result.output
    assert "unknown model provider 'nosuch'" in result.output


async def test_inspect_shows_items_origins_tokens_and_prompts(tmp_path):
    db = f"sqlite:///{tmp_path}/runs.db"
    team = Team(agents=(Agent(name="w", instructions="SYSTEM-TEXT"),), name="demo")
    model = FunctionModel(lambda r: f"ANSWER-{r.prompt.manifest.subject}")
    with RunLedger(db) as ledger:
        result = await Orchestrator(team, model=model, ledger=ledger).run_tasks(
            [
                Task(id="a", title="First", description="DESC-A", assignee="w"),
                Task(id="b", title="Second", description="DESC-B", assignee="w", depends_on=["a"]),
            ]
        )
    out = runner.invoke(app, ["inspect", result.run_id[:20], "--db", db])
    assert out.exit_code == 0, out.output
    text = out.output
    assert "task:b" in text and "task_result:a" in text and "instructions" in text
    assert "DESC-B" in text and "SYSTEM-TEXT" in text and "ANSWER-task:a" in text
    only_a = runner.invoke(app, ["inspect", result.run_id, "--task", "a", "--db", db]).output
    assert "DESC-A" in only_a and "DESC-B" not in only_a
    missing = runner.invoke(app, ["inspect", "run_nope", "--db", db])
    assert missing.exit_code == 2 and "run_nope" in missing.output
    listing = runner.invoke(app, ["runs", "--db", db])
    assert result.run_id in listing.output


@pytest.mark.embedded
def test_run_on_the_embedded_model_end_to_end(tmp_path):
    pytest.importorskip("llama_cpp")
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "adder.py").write_text('def add(a, b):\n    """Add two numbers."""\n    return a + b\n')
    (src / "greeter.py").write_text('def greet(name):\n    return f"Hello, {name}!"\n')
    db = f"sqlite:///{tmp_path}/runs.db"
    proc = subprocess.run(
        [sys.executable, "-m", "clearance", "run", str(EXAMPLE), "--input", str(src), "--db", db],
        capture_output=True,
        text=True,
        timeout=600,
    )
    # A review the small model cannot fit to its schema fails alone: the report keeps every
    # module with its facts.
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "completed  facts-adder" in proc.stdout
    assert "completed  package" in proc.stdout
    assert "Synthesis" in proc.stdout
    assert "adder.py" in proc.stdout and "greeter.py" in proc.stdout
    with RunLedger(db) as ledger:
        run = ledger.list_runs()[0]
        assert verify_run(ledger, run.run_id).ok
        calls = {c.subject: c for c in ledger.calls(run.run_id)}
    # each module reviewer saw only its own module's brief, never a whole file
    adder = calls["task:review-adder"]
    origins = [i["origin"] for i in adder.manifest["items"]]
    assert origins == ["instructions", "task:review-adder", "task_result:brief-adder"]
    assert "greet" not in "".join(m["content"] for m in adder.messages)
    synthesis = [i["origin"] for i in calls["synthesis"].manifest["items"]]
    assert "task_result:package" in synthesis


def test_an_error_quoting_line_breaks_is_still_one_line(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text('agents: [{name: a, instructions: x}]\ninput: {"bad\\nkey\\u2028x": 1}\n')
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    # The key is quoted as it is (each line break escaped), so it is one line and exact.
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "input.'bad\\nkey\\u2028x': Extra inputs are not permitted" in lines[0]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--store", "sqlite:///{tmp}/s.db", "error: --store: has no effect: no agent has a store"),
        ("--input", "{tmp}/missing", "error: --input: input folder '{tmp}/missing' does not exist"),
    ],
)
def test_a_bad_value_given_on_the_command_line_is_named_as_its_option(
    tmp_path, option, value, message
):
    # Not as the team file's key: the team file does not hold the value.
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents: [{name: a, instructions: x}]\n"
        "tasks: [{id: t, title: T, description: d, assignee: a}]\n"
    )
    db = f"sqlite:///{tmp_path}/r.db"
    args = ["run", str(path), "--model", "fake:x", "--db", db, option, value.format(tmp=tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(message.format(tmp=tmp_path)), lines


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["runs", "--limit", "0"], "error: Invalid value for '--limit': "),
        (
            ["run", "team.yaml", "--bogus"],
            "error: No such option: --bogus (see clearance run --help)",
        ),
        (["store", "get"], "error: Missing argument 'namespace'."),
        (["nosuch"], "error: No such command 'nosuch'."),
        (["runs", "--\x1b[2J"], "No such option: --\\x1b[2J"),  # shown, not obeyed
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args, expected):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and expected in line
    assert "\x1b" not in result.output


def test_no_arguments_still_prints_the_help():
    result = CliRunner().invoke(app, [])
    assert "Usage: clearance" in result.output and "Commands" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "team.yaml", "--model", ""], "Invalid value for '--model': model id ''"),
        (["run", "team.yaml", "--model", "a b"], "model id 'a b' must look like 'provider:name'"),
        (["plan", "team.yaml", "--model", "x"], "Invalid value for '--model'"),
        (["resume", "run_x", "--model", ":x"], "Invalid value for '--model'"),
        (["chat", "team.yaml", "--agent", "w", "--model", ""], "Invalid value for '--model'"),
        (["run", "team.yaml", "--max-concurrency", "0"], "must be 1 to 100000, got 0"),
        (["run", "team.yaml", "--max-concurrency", "1" + "0" * 30], "must be 1 to 100000"),
        (["run", "team.yaml", "--input", ""], "Invalid value for '--input': is empty"),
        (["run", "team.yaml", "--store", " "], "Invalid value for '--store': is empty"),
        (["run", "team.yaml", "--memory", ""], "Invalid value for '--memory': is empty"),
        (["verify", "run_x", "--memory", ""], "Invalid value for '--memory': is empty"),
    ],
)
def test_an_empty_or_malformed_option_is_refused_not_taken_as_absent(tmp_path, args, expected):
    # `--model ""` ran on the embedded default model; `--input ""` read the current folder.
    (tmp_path / "team.yaml").write_text(
        "agents: [{name: w, instructions: W.}]\ntasks: [{id: a, title: A, description: D, "
        "assignee: w}]\n",
        encoding="utf-8",
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, [*args, "--db", db])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and expected in line
    assert not (tmp_path / "runs.db").exists()  # refused before anything was opened
