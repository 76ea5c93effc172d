"""The README's and the docs' runnable examples run as written, and say what the code does.

Each test takes a snippet out of the page itself (so an edit of the page is what is tested),
runs it with the deterministic fake model in a temporary folder, and asserts on its result:
what the ledger recorded, what a prompt held, what was printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance.cli import app

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src"
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def blocks(page: Path, language: str, section: str | None = None) -> list[str]:
    """The ``language`` code blocks of ``page`` (of its ``## section`` only, when given)."""
    text = page.read_text(encoding="utf-8")
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in ``cwd``, with this checkout's clearance."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def clearance(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``clearance ARGS`` in ``cwd``, with this checkout's clearance."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def calls(cwd: Path, run_id: str) -> list[dict[str, object]]:
    """The model calls ``clearance inspect --json`` shows for ``run_id``."""
    shown = clearance(cwd, "inspect", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return list(json.loads(shown.stdout)["calls"])


def user_text(call: dict[str, object]) -> str:
    messages = call["messages"]
    assert isinstance(messages, list)
    return str(messages[-1]["content"])


# --- README: Library -------------------------------------------------------------------------


def test_the_readme_run_spec_snippet_runs_the_code_review_and_verifies(tmp_path: Path) -> None:
    code = blocks(README, "python", "Library")[0]
    model = 'spec = spec.model_copy(update={"model": "fake:readme"})\nwith RunLedger()'
    code = code.replace("with RunLedger()", model, 1)
    assert "fake:readme" in code
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    run = python(code, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["completed True"]
    assert (tmp_path / ".clearance" / "runs.db").exists()  # RunLedger()'s default, as said


def test_the_readme_orchestrator_and_typed_result_snippets_run(tmp_path: Path) -> None:
    team, typed = blocks(README, "python", "Library")[1:3]
    code = (team + typed).replace("llama-cpp:smollm2", "fake:readme")
    code += "print(type(verdict).__name__, result.tasks['rate'].status)\n"
    run = python(code, tmp_path)
    assert run.returncode == 0, run.stderr
    synthesis, typed_line = run.stdout.splitlines()
    assert re.fullmatch(r"readme result for Goal: [0-9a-f]{16} run_\w+", synthesis)
    assert typed_line == "Verdict completed"


# --- README: Team files ----------------------------------------------------------------------


def test_the_readme_team_file_runs_one_review_per_module_and_a_summary_of_all(
    tmp_path: Path,
) -> None:
    (tmp_path / "team.yaml").write_text(blocks(README, "yaml", "Team files")[0])
    run = clearance(tmp_path, "run", "team.yaml", "--model", "fake:t", "--json", "r.json")
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    statuses = {task["task_id"]: task["status"] for task in result["tasks"]}
    assert {"review-decoder", "review-encoder", "review-scanner", "summary"} <= set(statuses)
    assert set(statuses.values()) == {"completed"}
    recorded = calls(tmp_path, result["run"]["run_id"])
    summary = next(call for call in recorded if call["subject"] == "task:summary")
    origins = {item["origin"] for item in summary["manifest"]["items"]}  # type: ignore[index]
    reviews = {f"task_result:{task}" for task in statuses if task.startswith("review-")}
    assert reviews <= origins  # "depends on every copy of the task above"
    decoder = next(call for call in recorded if call["subject"] == "task:review-decoder")
    assert "Focus on error handling." in user_text(decoder)  # the message from editor
    assert "### decoder.py" in user_text(decoder)


# --- docs/subagents.md -----------------------------------------------------------------------


def test_the_subagents_team_file_reads_the_module_and_fans_out(tmp_path: Path) -> None:
    page = blocks(DOCS / "subagents.md", "yaml")[0]
    team = "name: subagents-doc\n" + page
    (tmp_path / "team.yaml").write_text(team)
    run = clearance(tmp_path, "run", "team.yaml", "--model", "fake:t", "--json", "r.json")
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    recorded = calls(tmp_path, result["run"]["run_id"])
    subjects = [call["subject"] for call in recorded]
    assert "isolated:review-decoder" in subjects
    assert {"child:questions.1", "child:questions.2"} <= set(subjects)
    isolated = recorded[subjects.index("isolated:review-decoder")]
    assert '### decoder.py\n~~~~\n"""Implementation of JSONDecoder' in user_text(isolated)
    lead = recorded[subjects.index("task:questions")]
    assert "### Result of questions.1" in user_text(lead)


def test_the_isolation_manager_snippet_asks_then_finishes(tmp_path: Path) -> None:
    snippet = blocks(DOCS / "subagents.md", "python")[0]
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.py").write_text("def beta():\n    return 2\n")
    body = "\n".join("    " + line for line in snippet.splitlines())
    code = f"""
import asyncio
from clearance import Agent, FileCaps
from clearance.subagents import ContextIsolationManager
from clearance.testing import ScriptedModel

model = ScriptedModel(
    ["STATUS: needs_context\\nQUESTION: Rename to what?", "Renamed.\\nSTATUS: done"]
)
agent = Agent(name="dev", instructions="You edit code.")

def answer_to(question):
    return "To gamma. (" + question + ")"

async def main():
{body}
    print(result.status, result.result)
    print("To gamma. (Rename to what?)" in model.requests[-1].prompt.messages[-1].content)
    print("def beta():" in model.requests[0].prompt.messages[-1].content)

asyncio.run(main())
"""
    run = python(code, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["done Renamed.", "True", "True"]


# --- docs/control-flow.md --------------------------------------------------------------------

AGENTS = """\
name: routing-doc
agents:
  - {name: triager, instructions: You rate bug reports.}
  - {name: developer, instructions: You fix bugs.}
"""


def test_the_routing_example_skips_the_branch_whose_condition_fails(tmp_path: Path) -> None:
    tasks = blocks(DOCS / "control-flow.md", "yaml", "Conditional routing")[0]
    deploy = "  - {id: deploy, title: Deploy, description: Ship it., assignee: developer, "
    deploy += "depends_on: [fix]}\n"
    (tmp_path / "team.yaml").write_text(AGENTS + tasks + deploy)
    # the fake model answers a schema with its first enum value: severity "low"
    run = clearance(tmp_path, "run", "team.yaml", "--model", "fake:t", "--json", "r.json")
    assert run.returncode == 0, run.stdout + run.stderr  # routed out is not a failure
    result = json.loads((tmp_path / "r.json").read_text())
    tasks_by_id = {task["task_id"]: task for task in result["tasks"]}
    assert tasks_by_id["note"]["status"] == "completed"
    assert tasks_by_id["fix"]["status"] == "skipped"
    # the reason, word for word as the page quotes it
    page = (DOCS / "control-flow.md").read_text(encoding="utf-8")
    quoted = re.search(r"`(skipped: condition not met: [^`]*)`", page)
    assert quoted is not None
    assert tasks_by_id["fix"]["error"] == quoted.group(1)
    cascade = re.search(r"`(skipped: dependency 'fix' was skipped)`", page)
    assert cascade is not None
    assert tasks_by_id["deploy"]["status"] == "skipped"
    assert tasks_by_id["deploy"]["error"] == cascade.group(1)
    assert result["run"]["status"] == "completed"
    assert clearance(tmp_path, "verify", result["run"]["run_id"]).returncode == 0


def test_the_hooks_snippet_is_told_of_each_task_and_model_call(tmp_path: Path) -> None:
    snippet = blocks(DOCS / "control-flow.md", "python", "Hooks")[0]
    snippet = snippet.replace(
        "Orchestrator(team, ", 'Orchestrator(team, model="fake:t", ledger=NullLedger(), '
    )
    code = f"""
import asyncio
from clearance import Agent, NullLedger, Task, Team
team = Team(agents=(Agent(name="writer", instructions="You write."),))
{snippet}
tasks = [Task(id="one", title="One", description="Say one.", assignee="writer")]
asyncio.run(orchestrator.run_tasks(tasks))
"""
    run = python(code, tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "start one"
    assert lines[1].startswith("task:one Usage(")
    assert lines[2].startswith("synthesis Usage(")


# --- docs/isolation.md -----------------------------------------------------------------------


def test_the_canary_snippet_asserts_what_draft_saw(tmp_path: Path) -> None:
    snippet = blocks(DOCS / "isolation.md", "python", "How to test your own team")[0]
    body = "\n".join("        " + line for line in snippet.splitlines())
    code = f"""
import asyncio
from clearance import Agent, Orchestrator, RunLedger, Task, Team
team = Team(agents=(Agent(name="writer", instructions="You write."),))
tasks = [
    Task(id="facts", title="Facts", description="List facts.", assignee="writer"),
    Task(id="other", title="Other", description="Unrelated.", assignee="writer"),
    Task(id="draft", title="Draft", description="Draft.", assignee="writer",
         depends_on=["facts"]),
]

async def main():
    with RunLedger("sqlite:///runs.db") as ledger:
{body}
        print(result.status)
        try:
            assert_saw(ledger, "draft", canary.canary_of("other"))
        except AssertionError:
            print("draft never saw other")

asyncio.run(main())
"""
    run = python(code, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["completed", "draft never saw other"]


# --- README: Command line --------------------------------------------------------------------


def _help(*command: str) -> str:
    shown = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    return shown.output


def _commands(text: str) -> list[str]:
    section = text.split("Commands", 1)[1]
    return re.findall(r"^│ (\w+) ", section, re.MULTILINE)


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text.split("Options", 1)[1])) - {"--help"}


@pytest.fixture(scope="module")
def synopsis() -> dict[str, str]:
    """The README's command-line block, as the lines of each command."""
    text = README.read_text(encoding="utf-8")
    body = text.split("\n## Command line\n", 1)[1]
    block = re.search(r"```\n(.*?)```", body, re.DOTALL)
    assert block is not None
    lines: dict[str, str] = {}
    current = ""
    for line in block.group(1).splitlines():
        found = re.match(r"clearance (store|\w+)", line)
        if found:
            current = found.group(1)
        lines[current] = lines.get(current, "") + line.split("#", 1)[0] + "\n"
    return lines


def test_the_readme_command_line_shows_every_command_and_option(
    synopsis: dict[str, str],
) -> None:
    commands = _commands(_help())
    assert set(commands) == set(synopsis)  # every command, and no other
    for command in commands:
        if command == "store":
            shown = {o for sub in _commands(_help("store")) for o in _options(_help("store", sub))}
        else:
            shown = _options(_help(command))
        written = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", synopsis[command]))
        written |= {"--" + option[5:] for option in written if option.startswith("--no-")}
        assert shown == written, command


# --- examples/ -------------------------------------------------------------------------------

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("team", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_every_example_team_runs_on_the_fake_model(tmp_path: Path, team: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    name = f"examples/{team.name}"
    run = clearance(tmp_path, "run", name, "--model", "fake:ex", "--json", "r.json")
    paused = team.stem == "approval"  # it stops for a person: exit 3, as its comment says
    assert run.returncode == (3 if paused else 0), run.stdout + run.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["run"]["status"] == ("awaiting_approval" if paused else "completed")
    statuses = {task["status"] for task in result["tasks"]}
    assert statuses <= {"completed", "interrupted" if paused else "completed"}


# --- docs/resilience.md ----------------------------------------------------------------------


def test_the_resilience_page_gives_the_limits_defaults_the_code_has() -> None:
    from clearance import AgentLimits

    page = " ".join((DOCS / "resilience.md").read_text(encoding="utf-8").split())
    limits = AgentLimits()
    deadline = re.search(
        r"`timeout_s` \(the deadline of one model call[^)]*; (\d+) s by default\)", page
    )
    assert deadline is not None and float(deadline.group(1)) == limits.timeout_s
    assert limits.attempt_timeout_s is None and "(the most one attempt" in page
    retries = re.search(r"`retries` \((\d+) by default\)", page)
    assert retries is not None and int(retries.group(1)) == limits.retries
    # the call's own deadline is not retried: the table must not list it as retried
    assert "or the agent's `timeout_s`) | yes |" not in page


# --- docs/telemetry.md -----------------------------------------------------------------------


def test_the_telemetry_snippet_sends_a_runs_spans_to_the_collector(tmp_path: Path) -> None:
    trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    names: list[str] = []

    class Collector(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = trace_service.ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    names.extend(span.name for span in scope.spans)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    snippet = blocks(DOCS / "telemetry.md", "python")[0]
    code = f"""{snippet}
import asyncio
from clearance import Agent, NullLedger, Orchestrator, Task, Team
team = Team(agents=(Agent(name="writer", instructions="You write."),))
tasks = [Task(id="one", title="One", description="Say one.", assignee="writer")]
asyncio.run(Orchestrator(team, model="fake:t", ledger=NullLedger()).run_tasks(tasks))
provider.shutdown()
"""
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"PYTHONPATH": str(SRC), "OTEL_EXPORTER_OTLP_ENDPOINT": url}
    try:
        run = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert run.returncode == 0, run.stderr
    assert any(name.startswith("invoke_workflow") for name in names), names
    assert any(name.startswith("invoke_agent") for name in names), names
    assert any(name.startswith("chat") for name in names), names


# --- docs/memory.md --------------------------------------------------------------------------

MEMORY_TASKS = """\
tasks:
  - {id: a, title: A, description: Find., assignee: scout}
  - {id: b, title: B, description: Read., assignee: analyst, depends_on: [a]}
  - {id: c, title: C, description: Check., assignee: auditor, depends_on: [b]}
"""


def test_the_memory_example_records_to_the_group_and_the_private_scopes(tmp_path: Path) -> None:
    team = blocks(DOCS / "memory.md", "yaml")[0].replace("instructions: ...", "instructions: Go.")
    (tmp_path / "team.yaml").write_text("name: memory-doc\n" + team + MEMORY_TASKS)
    run = clearance(tmp_path, "run", "team.yaml", "--model", "fake:m")
    assert run.returncode == 0, run.stdout + run.stderr
    listed = clearance(tmp_path, "memory", "team.yaml")
    assert listed.returncode == 0, listed.stderr
    scopes = re.findall(r"^mem_\w+\s+(\S+)\s+by (\w+)\s+fake run", listed.stdout, re.MULTILINE)
    # newest first: as the comments say, scout's record goes to its group, the others' stay private
    assert scopes == [("agent:auditor", "auditor"), ("agent:analyst", "analyst"),
                      ("group:research", "scout")]  # fmt: skip
    assert "Task: A" in listed.stdout  # record: task_and_result


def test_the_python_examples_import_only_public_names() -> None:
    private = re.compile(r"^\s*(?:from|import) clearance(?:\.\w+)*\._\w+", re.MULTILINE)
    for example in sorted((ROOT / "examples").glob("*.py")):
        found = private.findall(example.read_text(encoding="utf-8"))
        assert not found, f"{example.name} imports a private module: {found}"


BUDGET_TEAM = """\
name: budget-doc
budget: {tokens: 40}
agents:
  - {name: writer, instructions: You write.}
tasks:
  - {id: a, title: A, description: Say a., assignee: writer}
  - {id: b, title: B, description: Say b., assignee: writer, depends_on: [a]}
"""


def test_a_run_over_its_budget_prints_the_line_the_page_shows_and_resumes(tmp_path: Path) -> None:
    page = (DOCS / "control-flow.md").read_text(encoding="utf-8")
    sample = re.search(r"```\n\s*(error: run run_\.\.\. reached its budget.*?)```", page, re.DOTALL)
    assert sample is not None
    shown = " ".join(sample.group(1).split())
    pattern = re.escape(shown).replace(r"run_\.\.\.", r"run_\w+").replace("task:b", r"\S+")
    pattern = re.sub(r"\d+", r"\\d+", pattern.replace(r"\ ", " "))
    (tmp_path / "team.yaml").write_text(BUDGET_TEAM)
    run = clearance(tmp_path, "run", "team.yaml", "--model", "fake:b")
    assert run.returncode == 2, run.stdout + run.stderr
    line = " ".join(run.stderr.split())
    assert re.fullmatch(pattern, line), (pattern, line)
    run_id = re.search(r"clearance resume (run_\w+)", line)
    assert run_id is not None
    resumed = clearance(tmp_path, "resume", run_id.group(1), "--budget-tokens", "400000")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"run id: {run_id.group(1)}  status: completed" in resumed.stdout
