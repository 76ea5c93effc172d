"""What README.md and docs/*.md show a user is what the code does, checked mechanically.

A user types what the pages show. So every team-file block of the pages loads (a fragment
completed only with the agents and tasks it names but does not declare), every
``clearance ...`` command line names a real command and real options, every Python block
imports public names and calls public functions with keywords they take, and every default
number a page states is the constant the code uses. A page edit that breaks one of these
fails here, naming the page and the line.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from clearance import ConfigError, NullLedger, Orchestrator, RunSpec
from clearance.cli import app

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
GENERATED = {"team-file.md"}  # written by `clearance schema --markdown`, checked elsewhere
PAGES = [ROOT / "README.md", *(p for p in sorted(DOCS.glob("*.md")) if p.name not in GENERATED)]


def fences(page: Path) -> Iterator[tuple[str, str, int]]:
    """``(language, body, line)`` of each fenced block of ``page``, in order."""
    language: str | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            if language is None:
                language, body, start = line[3:].strip(), [], number
            else:
                yield language, "\n".join(body) + "\n", start
                language = None
        elif language is not None:
            body.append(line)


def blocks(language: str) -> list[tuple[str, str]]:
    """``(page:line, body)`` of every ``language`` block of the pages."""
    return [
        (f"{page.name}:{line}", body)
        for page in PAGES
        for lang, body, line in fences(page)
        if lang == language
    ]


# --- team-file blocks ------------------------------------------------------------------------

TASK_KEYS = {"depends_on", "review", "fan_out", "mode", "output_schema", "approval", "when"}
"""Keys a block may show alone that belong to one task (``depends_on: [...]``)."""


def _agent_names(value: Any, found: set[str]) -> None:
    """The agent names ``value`` refers to: assignees, reviewers, delegates, group members."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("assignee", "agent", "from", "to") and isinstance(item, str):
                found.add(item)
            if key in ("by", "can_delegate_to", "can_spawn", "agents") and isinstance(item, list):
                found.update(name for name in item if isinstance(name, str))
            _agent_names(item, found)
    elif isinstance(value, list):
        for item in value:
            _agent_names(item, found)


def completed(block: str) -> dict[str, Any]:
    """A team file of ``block``: only what it names but leaves out is added.

    Agents it refers to but does not declare get one line of instructions; a block without
    tasks gets one for its first agent; a task's dependency on a task the block does not
    show gets that task (answering the schema its condition reads); a block with prices
    runs the model priced. Nothing the block says is changed.
    """
    team = yaml.safe_load(block)
    assert isinstance(team, dict), block
    if set(team) <= TASK_KEYS:
        team = {"tasks": [{"id": "t", "title": "T", "description": "D.", "assignee": "w", **team}]}
    team.setdefault("name", "docs")
    if "prices" in team and "model" not in team:
        team["model"] = next(iter(team["prices"]))
    agents = team.setdefault("agents", [])
    declared = {agent["name"] for agent in agents} | {(team.get("coordinator") or {}).get("name")}
    named: set[str] = set()
    _agent_names(team, named)
    agents.extend({"name": n, "instructions": "Go."} for n in sorted(named - declared - {None}))
    if not agents:
        agents.append({"name": "w", "instructions": "Go."})
    tasks = team.setdefault("tasks", [])
    if not tasks:
        tasks.append({"id": "t", "title": "T", "description": "D.", "assignee": agents[0]["name"]})
    for task in list(tasks):
        for edge in task.get("depends_on", []):
            upstream = edge["task"] if isinstance(edge, dict) else edge
            if "{" in upstream or upstream in {t["id"] for t in tasks}:
                continue
            schema = {"type": "object", "properties": {key.strip("/"): {} for key in edge.get(
                "when", {})} if isinstance(edge, dict) else {}}  # fmt: skip
            tasks.insert(0, {"id": upstream, "title": upstream, "description": "D.",
                             "assignee": agents[0]["name"], "output_schema": schema})  # fmt: skip
    return team


TOOL_MODULE = '''\
def remove_file(path: str) -> str:
    """Remove a file."""
    return path


def read_file(path: str) -> str:
    """Read a file."""
    return path
'''
"""The ``mytools`` module the pages' ``tools:`` entries import (``mytools:remove_file``)."""

TEAM_BLOCKS = blocks("yaml")


def test_the_pages_show_team_file_blocks() -> None:
    assert len(TEAM_BLOCKS) >= 15  # the extraction finds them (a page reformatted: look here)


@pytest.mark.parametrize(("where", "block"), TEAM_BLOCKS, ids=[w for w, _ in TEAM_BLOCKS])
def test_every_team_file_block_of_the_pages_loads(
    where: str, block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mytools.py").write_text(TOOL_MODULE)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(completed(block), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    shown = CliRunner().invoke(app, ["graph", "team.yaml"], terminal_width=200)
    assert shown.exit_code == 0, f"{where}: {shown.output}"


# --- command lines ---------------------------------------------------------------------------

OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b")
STORE_COMMANDS = ("get", "set", "query", "cleanup")


@cache
def options_of(command: tuple[str, ...]) -> frozenset[str] | None:
    """The options ``clearance COMMAND --help`` lists (``None``: no such command)."""
    shown = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    if shown.exit_code != 0:
        return None
    return frozenset(OPTION.findall(shown.output.split("Options", 1)[-1]))


def command_lines() -> list[tuple[str, str]]:
    """``(page, line)`` of every ``clearance ...`` a page shows (blocks, inline, examples)."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        for language, body, line in fences(page):
            if language not in ("bash", "sh", ""):
                continue
            for text in body.replace("\\\n", " ").splitlines():
                shown = re.search(r"(?:^|\s|/)clearance ([a-z].*)", text.split(" #", 1)[0])
                if shown:
                    found.append((f"{page.name}:{line}", shown.group(1)))
        prose = " ".join(page.read_text(encoding="utf-8").split())
        found += [(page.name, m) for m in re.findall(r"`(?:\.venv/bin/)?clearance ([a-z][^`]*)`",
                                                     prose)]  # fmt: skip
    for example in sorted((ROOT / "examples").iterdir()):  # the commands their comments give
        for text in example.read_text(encoding="utf-8").splitlines():
            shown = re.match(r"#\s+clearance ([a-z].*)", text.strip())
            if shown:
                found.append((f"examples/{example.name}", shown.group(1).split(" #", 1)[0]))
    return found


COMMAND_LINES = command_lines()


def test_the_pages_show_command_lines() -> None:
    assert len(COMMAND_LINES) >= 150
    assert {line.split()[0] for _, line in COMMAND_LINES} >= {"run", "resume", "verify", "chat"}


@pytest.mark.parametrize(("where", "line"), COMMAND_LINES, ids=[w for w, _ in COMMAND_LINES])
def test_every_command_line_of_the_pages_names_a_command_and_its_options(
    where: str, line: str
) -> None:
    words = line.split()
    command: tuple[str, ...] = (words[0],)
    if words[0] == "store" and len(words) > 1 and words[1] in STORE_COMMANDS:
        command = ("store", words[1])
    options = options_of(command)
    assert options is not None, f"{where}: no command clearance {' '.join(command)}: {line}"
    if "|" in line and command[0] == "store":  # the README's synopsis of every store command
        options = frozenset().union(*(options_of(("store", c)) or () for c in STORE_COMMANDS))
    unknown = [option for option in OPTION.findall(line) if option not in options]
    assert not unknown, f"{where}: clearance {' '.join(command)} has no {unknown}: {line}"


# --- Python blocks ---------------------------------------------------------------------------

NAMESPACES = ("clearance", "clearance.runs", "clearance.subagents", "clearance.memory",
              "clearance.models", "clearance.testing", "clearance.tokens",
              "clearance.analysis")  # fmt: skip


@cache
def public_names() -> dict[str, Any]:
    names: dict[str, Any] = {}
    for namespace in NAMESPACES:
        module = importlib.import_module(namespace)
        for name in module.__all__:
            names.setdefault(name, getattr(module, name))
    return names


def parsed(code: str) -> ast.Module:
    """``code`` parsed; a snippet with ``await`` at its top level as the body of a coroutine."""
    try:
        return ast.parse(code)
    except SyntaxError:
        body = "\n".join(f"    {line}" for line in code.splitlines())
        return ast.parse(f"async def snippet():\n{body}")


def _parameters(function: Callable[..., Any]) -> set[str] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return set(signature.parameters)


PYTHON_BLOCKS = blocks("python")


@pytest.mark.parametrize(("where", "code"), PYTHON_BLOCKS, ids=[w for w, _ in PYTHON_BLOCKS])
def test_every_python_block_imports_public_names_and_passes_real_keywords(
    where: str, code: str
) -> None:
    tree = parsed(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clearance"):
            module = str(node.module)
            assert not any(part.startswith("_") for part in module.split(".")), (where, module)
            imported = importlib.import_module(module)
            for alias in node.names:
                assert hasattr(imported, alias.name), f"{where}: {module} has no {alias.name}"
        if not isinstance(node, ast.Call):
            continue
        called, label = None, ""
        if isinstance(node.func, ast.Name) and node.func.id in public_names():
            called, label = public_names()[node.func.id], node.func.id
        elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            owner = public_names().get(node.func.value.id)
            if owner is not None:
                label = f"{node.func.value.id}.{node.func.attr}"
                called = getattr(owner, node.func.attr, None)
                assert called is not None, f"{where}: no {label}"
        if called is None:
            continue
        parameters = _parameters(called)
        if parameters is None:
            continue
        for keyword in node.keywords:
            assert keyword.arg is None or keyword.arg in parameters, (
                f"{where}: {label} takes no {keyword.arg}="
            )


def test_the_pages_tell_users_of_no_private_function_to_call() -> None:
    """A page may name a private module to explain the design, never as what to call."""
    for page in PAGES:
        prose = " ".join(page.read_text(encoding="utf-8").split())
        called = re.findall(r"`(clearance(?:\.\w+)*\._\w+(?:\.\w+)*)\([^`]*\)`", prose)
        assert not called, f"{page.name} tells users to call {called}"


def test_an_orchestrator_made_in_an_event_loop_names_the_public_way_to_its_mcp_tools(
    tmp_path: Path,
) -> None:
    (tmp_path / "team.yaml").write_text(
        "name: mcp-in-loop\n"
        "mcp_servers: {glossary: {command: [python, server.py, stdio]}}\n"
        "agents: [{name: writer, instructions: Go., tools: ['mcp:glossary/lookup']}]\n"
        "tasks: [{id: t, title: T, description: D., assignee: writer}]\n"
    )
    spec = RunSpec.from_file(tmp_path / "team.yaml")

    async def made_in_a_loop() -> None:
        Orchestrator.from_spec(spec, ledger=NullLedger())

    with pytest.raises(ConfigError) as refused:
        asyncio.run(made_in_a_loop())
    message = str(refused.value)
    named = re.findall(r"clearance\.(\w+)", message)
    assert named, message  # it says what to use instead
    import clearance

    for name in named:  # and what it names exists, publicly
        assert name in clearance.__all__, message


def test_a_store_tool_without_a_store_tells_a_team_file_user_what_to_add(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(
        "name: no-store\n"
        "agents: [{name: w, instructions: Go., tools: [store_get]}]\n"
        "tasks: [{id: t, title: T, description: D., assignee: w}]\n"
    )
    shown = CliRunner().invoke(app, ["graph", str(tmp_path / "team.yaml")], terminal_width=400)
    assert shown.exit_code == 2
    line = " ".join(shown.output.split())
    assert "agents.w.tools: tool 'store_get' needs a context store" in line
    assert "store: in a team file" in line  # not only the Python spelling, store=ContextStore


# --- default numbers -------------------------------------------------------------------------


def _page(name: str) -> str:
    path = ROOT / name if name == "README.md" else DOCS / name
    return " ".join(path.read_text(encoding="utf-8").split())


def _number(text: str) -> float:
    return float(text.replace(",", "").replace(" ", ""))


def _constants() -> list[tuple[str, str, float]]:
    """``(page, pattern, value)``: the pattern's group, on the page, is the code's ``value``."""
    from clearance import AgentLimits, Orchestrator, RayExecutor, RetryPolicy, runs
    from clearance._agents import mcp, mcp_transport
    from clearance._agents.workspace_tools import READ_OUTPUT_LINES
    from clearance._context import project_scan as scan
    from clearance._context.plan_answer import MAX_PLAN_TASKS
    from clearance._context.project_ignore import MAX_IGNORE_PATTERNS
    from clearance._context.verify_delegation import DEFAULT_MAX_DEPTH
    from clearance._core.agent_spec import TOOL_TIMEOUT_S
    from clearance._core.hooks import HOOK_TIMEOUT_S, MAX_HOOK_ITEMS
    from clearance._core.mcp_spec import McpServerSpec
    from clearance._core.memory_spec import MAX_RECALL, MAX_SHARED_WINDOW, AgentMemory
    from clearance._core.review import MAX_REVIEW_ROUNDS
    from clearance._core.run_spec import MAX_ANSWER_TIMEOUT_S
    from clearance._orchestration.approval_request import MAX_DECIDER_CHARS
    from clearance._state.db.deadlines import MAX_QUERY_TIMEOUT_S, QUERY_TIMEOUT_S
    from clearance._state.db.opening import CONNECT_TIMEOUT_S, MAX_CONNECT_TIMEOUT_S
    from clearance._state.db.sqlite import BUSY_TIMEOUT_MS
    from clearance._view.clearance_list import HIDDEN_LISTED
    from clearance._view.runs import VerdictCache
    from clearance.cli._otel import MAX_EXPORT_TIMEOUT_S, MAX_RESOURCE_ATTRIBUTES
    from clearance.memory import ContextWindowMonitor, list_memories
    from clearance.models._llama_cpp import (
        BATCH_RANGE,
        CONTEXT_RANGE,
        DEFAULT_N_BATCH,
        THREADS_RANGE,
        LlamaCppModel,
    )
    from clearance.subagents import ArchitecturalContext

    def default(function: Callable[..., Any], name: str) -> float:
        return float(inspect.signature(function).parameters[name].default)

    mcp_fields = McpServerSpec.model_fields
    from_project = ArchitecturalContext.from_project
    # fmt: off
    return [
        ("README.md", r"context_window: 4096 # its n_ctx, (\d+) to", CONTEXT_RANGE[0]),
        ("README.md", r"its n_ctx, 128 to (\d+)", CONTEXT_RANGE[1]),
        ("README.md", r"its n_ctx, 128 to 131072 \(default (\d+)\)",
         default(LlamaCppModel, "n_ctx")),
        ("README.md", r"CPU threads for generation, 1 to (\d+)", THREADS_RANGE[1]),
        ("README.md", r"\(prefill\), 1 to (\d+)", THREADS_RANGE[1]),
        ("README.md", r"evaluated per step, 1 to (\d+)", BATCH_RANGE[1]),
        ("README.md", r"evaluated per step, 1 to 8192 \(default (\d+)\)", DEFAULT_N_BATCH),
        ("README.md", r"each call has a deadline: (\d+) s unless", TOOL_TIMEOUT_S),
        ("README.md", r"chains longer than (\d+) steps are refused", DEFAULT_MAX_DEPTH),
        ("README.md", r"`max_events` \(([\d ]+)\)", default(Orchestrator.stream, "max_events")),
        ("streaming.md", r"`max_events` \(default ([\d ]+)\)",
         default(Orchestrator.stream, "max_events")),
        ("README.md", r"does not answer within (\d+) seconds", CONNECT_TIMEOUT_S),
        ("README.md", r"`\?connect_timeout=S`, 1 to (\d+)\)", MAX_CONNECT_TIMEOUT_S),
        ("README.md", r"waits at most (\d+) seconds for another session's lock",
         BUSY_TIMEOUT_MS / 1000),
        ("README.md", r"each named up to (\d+) of them", HIDDEN_LISTED),
        ("README.md", r"verifies at most (\d+) runs per load",
         default(VerdictCache, "max_per_request")),
        ("README.md", r"http://127\.0\.0\.1:(\d+)/, a list of runs",
         default(importlib.import_module("clearance.cli._view").serve, "port")),
        ("approval.md", r"one line of at most (\d+) characters", MAX_DECIDER_CHARS),
        ("approval.md", r"a `--reason` over ([\d,]+) characters", runs.MAX_REASON_CHARS),
        ("approval.md", r"\(an hour by default, at most a (day)\)", MAX_ANSWER_TIMEOUT_S),
        ("tools.md", r"\| `connect_timeout_s` \| (\d+) \|",
         mcp_fields["connect_timeout_s"].default),
        ("tools.md", r"\| `timeout_s` \| (\d+) \|", mcp_fields["timeout_s"].default),
        ("tools.md", r"\| `max_result_bytes` \| (\d+) \|", mcp_fields["max_result_bytes"].default),
        ("tools.md", r"\| `max_schema_bytes` \| (\d+) \|", mcp_fields["max_schema_bytes"].default),
        ("tools.md", r"cut to (\d+) characters and prefixed", mcp.MAX_DESCRIPTION_CHARS),
        ("tools.md", r"At most (\d+) pages of the listing", mcp._MAX_PAGES),
        ("tools.md", r"listing at most (\d+) problems", mcp._PROBLEMS_SHOWN),
        ("tools.md", r"quoted at most (\d+) characters", mcp._ERROR_CHARS),
        ("tools.md", r"at most (\d+) requests \(`ping`", mcp_transport.MAX_SERVER_REQUESTS),
        ("tools.md", r"at most (\d+) seconds to answer a session's end", mcp_transport._CLOSE_S),
        ("memory.md", r"\| `recall` \| (\d+) \|", AgentMemory().recall),
        ("memory.md", r"before each task \(0\.\.(\d+)\)", MAX_RECALL),
        ("memory.md", r"`shared_conversation\.window` is an integer from 1 to ([\d,]+)",
         MAX_SHARED_WINDOW),
        ("memory.md", r"at (\d+)% of the window the oldest turns",
         100 * default(ContextWindowMonitor, "trigger_threshold")),
        ("memory.md", r"until the prompt is at most (\d+)% of it",
         100 * default(ContextWindowMonitor, "target_ratio")),
        ("memory.md", r"the memory's (\d+)-second deadline",
         default(ContextWindowMonitor, "memory_timeout_s")),
        ("memory.md", r"`list_memories\(url, limit=(\d+)\)`", default(list_memories, "limit")),
        ("control-flow.md", r"at most (\d+) tasks, ids that are names", MAX_PLAN_TASKS),
        ("control-flow.md", r"more than (\d+) items from one hook", MAX_HOOK_ITEMS),
        ("control-flow.md", r"`timeout_s` attribute \((\d+) seconds by default", HOOK_TIMEOUT_S),
        ("control-flow.md", r"the fix-loop cap \(1 to (\d+)\)", MAX_REVIEW_ROUNDS),
        ("subagents.md", r"max_lines=(\d+)\)", READ_OUTPUT_LINES),
        ("subagents.md", r"its first (\d+) patterns", MAX_IGNORE_PATTERNS),
        ("subagents.md", r"`max_depth` \((\d+)\)", default(from_project, "max_depth")),
        ("subagents.md", r"`max_entries` \((\d+);", default(from_project, "max_entries")),
        ("subagents.md", r"the first (\d+) are listed", scan.MAX_DEPENDENCIES),
        ("subagents.md", r"the first (\d+), then `\.\.\. N more conventions`",
         scan.MAX_CONVENTIONS),
        ("subagents.md", r"convention over (\d+) characters", scan.MAX_FIELD_CHARS),
        ("subagents.md", r"at most (\d+) KiB of each file", scan.MAX_READ_BYTES / 1024),
        ("subagents.md", r"at most ([\d,]+) entries are listed", scan.MAX_SCANNED_ENTRIES),
        ("ray.md", r"`\?connect_timeout=N` to connect \(default (\d+) s\)", CONNECT_TIMEOUT_S),
        ("ray.md", r"whole seconds, 1 to (\d+), default", MAX_QUERY_TIMEOUT_S),
        ("ray.md", r"1 to 86400, default (\d+)\)", QUERY_TIMEOUT_S),
        ("ray.md", r"up to `start_timeout_s` \((\d+) s\)", default(RayExecutor, "start_timeout_s")),
        ("telemetry.md", r"\(10 seconds by default, at most (\d+)\)", MAX_EXPORT_TIMEOUT_S),
        ("telemetry.md", r"at most (\d+) entries and 8,192", MAX_RESOURCE_ATTRIBUTES),
        ("resilience.md", r"`retries` \((\d+) by default\)", AgentLimits().retries),
        ("resilience.md", r"1 s, 2 s, 4 s\.\.\. up to (\d+) s", default(RetryPolicy, "max_s")),
        ("resilience.md", r"plus up to (\d+) s of jitter", default(RetryPolicy, "jitter_s")),
        ("resilience.md", r"A write waits up to (\d+) s for another process's write",
         BUSY_TIMEOUT_MS / 1000),
    ]
    # fmt: on


def test_every_default_a_page_states_is_the_constant_the_code_uses() -> None:
    for page, pattern, value in _constants():
        stated = re.search(pattern, _page(page))
        assert stated is not None, f"{page}: no longer says {pattern!r} (update this table)"
        text = stated.group(1)
        number = {"day": 86_400.0}.get(text) or _number(text)
        assert number == value, f"{page}: says {text} for {pattern!r}; the code has {value}"


def test_the_store_tool_table_gives_each_tools_arguments_and_defaults(tmp_path: Path) -> None:
    from clearance import ContextStore
    from clearance._agents.store_tools import store_tools

    page = (DOCS / "memory.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(store_\w+)\(([^)]*)\)` \|", page, re.MULTILINE))
    store = ContextStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        tools = store_tools(store.view("a", {"x": "read"}))
    finally:
        store.close()
    assert set(rows) == set(tools)  # every built-in store tool, and no other
    for name, shown in rows.items():
        properties = tools[name].parameters["properties"]
        written = [part.strip().split("=") for part in shown.split(",")]
        assert [part[0] for part in written] == list(properties), name
        for part in written:
            if len(part) == 2:
                assert ast.literal_eval(part[1]) == properties[part[0]]["default"], (name, part)
            else:
                assert "default" not in properties[part[0]], (name, part)


def test_the_streaming_page_lists_every_run_event_kind() -> None:
    from clearance import RunEventKind

    page = _page("streaming.md")
    listed = re.search(r"`RunEvent` kinds, in the order they happen: (.*?)\. `task_id`", page)
    assert listed is not None
    named = set(re.findall(r"`(\w+)`", listed.group(1)))
    assert named == {kind.value for kind in RunEventKind}


def test_the_architecture_map_names_every_command() -> None:
    layers = next(body for lang, body, _ in fences(DOCS / "architecture.md") if "cli  " in body)
    cli = layers.split("\npublic", 1)[0]
    named = {word for word in re.findall(r"\b[a-z]+\b", cli.split("clearance/cli/", 1)[1])}
    shown = CliRunner().invoke(app, ["--help"], terminal_width=200)
    commands = set(re.findall(r"^│ (\w+) ", shown.output.split("Commands", 1)[1], re.MULTILINE))
    assert named == commands
