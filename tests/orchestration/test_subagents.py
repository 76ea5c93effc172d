"""Isolated tasks and spawned children in orchestrated runs: protocol, limits, canaries, ledger."""

import asyncio
from pathlib import Path

import pytest

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.spec import FanOut
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

SIBLING_TASK = "SIBLING-TASK-CANARY-7f3a"
SIBLING_RESULT = "SIBLING-RESULT-CANARY-91bc"
NOTES = "NOTES-FILE-CONTENT-5d2e"


def subject(request):
    return request.prompt.manifest.subject


def user_text(request):
    return request.prompt.messages[-1].content


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return 42\n")
    (root / "docs" / "notes.md").write_text(f"# Notes\n{NOTES}\n")
    (root / "README.md").write_text("# Demo\nA demo project.\n")
    return root


@pytest.fixture
def ledger(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        yield ledger


TEAM = Team(
    agents=(
        Agent(name="worker", instructions="You review code."),
        Agent(
            name="lead",
            instructions="You lead.",
            can_spawn=("helper",),
            limits=AgentLimits(spawn_timeout_s=1.0),
        ),
        Agent(
            name="helper",
            instructions="You help.",
            tools=("write_output",),
            limits=AgentLimits(max_output_files=1, max_steps=3),
        ),
    ),
    coordinator=Agent(name="editor", instructions="You edit."),
)

TASKS = [
    Task(
        id="review",
        title="Review app",
        description="Review src/app.py.",
        assignee="worker",
        mode="isolated",
        constraints=("Name every function.",),
        files=("src/app.py",),
    ),
    Task(
        id="sibling",
        title="Sibling",
        description=f"Do the other thing. {SIBLING_TASK}",
        assignee="worker",
        mode="isolated",
    ),
    Task(
        id="parent",
        title="Parent",
        description="Summarize what the helpers found.",
        assignee="lead",
        depends_on=("review",),
        fan_out=FanOut(agent="helper", goals=("goal ok", "goal slow", "goal write")),
    ),
]


async def answer(request):
    s, text = subject(request), user_text(request)
    if s == "isolated:sibling":
        return f"{SIBLING_RESULT}\nSTATUS: done"
    if s == "isolated:review":
        if "Clarification 1" not in text:
            return "I need the purpose.\nSTATUS: needs_context\nQUESTION: What is the app for?"
        if NOTES not in text:
            return "STATUS: needs_context\nFILE: docs/notes.md"
        return "main() returns 42; all good.\nSTATUS: done"
    if s == "clarification:review":
        return "It is a demo app."
    if s.startswith("child:"):
        if "goal slow" in text:
            await asyncio.sleep(5)
        if "goal write" in text:
            return [
                ToolCall(id="a", name="write_output", arguments={"name": "a.txt", "content": "A"}),
                ToolCall(id="b", name="write_output", arguments={"name": "b.txt", "content": "B"}),
            ]
        return "- child finding A"
    if s == "task:parent":
        return "parent summary"
    return "SYNTHESIS"


async def run(project, ledger, tmp_path, model=None):
    model = model or FunctionModel(answer)
    orchestrator = Orchestrator(
        TEAM,
        model=model,
        ledger=ledger,
        options=RunOptions(input_root=project, workspace_root=tmp_path / "ws", max_concurrency=3),
    )
    return model, await orchestrator.run_tasks(TASKS)


async def test_isolated_tasks_and_children_run_and_verify(project, ledger, tmp_path):
    model, result = await run(project, ledger, tmp_path)
    assert result.tasks["review"].result == "main() returns 42; all good."
    assert result.tasks["parent"].result == "parent summary"
    assert result.status == "completed", result.error

    reviews = [r for r in model.requests if subject(r) == "isolated:review"]
    assert len(reviews) == 3  # asked a question, asked for a file, answered
    last = user_text(reviews[-1])
    assert "It is a demo app." in last and NOTES in last
    assert "## Project architecture" in last and "Name every function." in last
    origins = reviews[-1].prompt.manifest.origins
    assert {"arch", "task:review", "file:src/app.py", "file:docs/notes.md"} <= set(origins)
    assert {"constraint:1", "clarification:1"} <= set(origins)

    # The coordinator's clarification prompt holds the question and the task, nothing else.
    (clarify,) = [r for r in model.requests if subject(r) == "clarification:review"]
    assert "What is the app for?" in user_text(clarify)
    assert SIBLING_TASK not in clarify.prompt.text

    # Children: goal only; outcomes ok, timed out (cancelled), failed on max_output_files.
    events = ledger.events(result.run_id)
    outcomes = {e.data["child_id"]: e.data for e in events if e.kind == "child"}
    assert sorted(o["status"] for o in outcomes.values()) == ["failed", "ok", "timed_out"]
    failed = next(o for o in outcomes.values() if o["status"] == "failed")
    assert "max_output_files" in failed["error"]
    breaches = [e for e in events if e.kind == "limit_exceeded"]
    assert [b.data["limit"] for b in breaches] == ["max_output_files"]
    assert len([e for e in events if e.kind == "spawn"]) == 3
    assert len([e for e in events if e.kind == "clarification"]) == 2
    parent = next(r for r in model.requests if subject(r) == "task:parent")
    child_items = [o for o in parent.prompt.manifest.origins if o.startswith("child_result:")]
    assert len(child_items) == 3
    assert "[no result: the child timed out" in user_text(parent)

    # Each child wrote only under its own fresh folder.
    run_dir = tmp_path / "ws" / result.run_id
    writer = next(cid for cid, o in outcomes.items() if o["status"] == "failed")
    assert (run_dir / writer / "outputs" / "a.txt").read_text() == "A"
    assert not (run_dir / writer / "outputs" / "b.txt").exists()

    report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_no_isolated_or_child_prompt_holds_a_siblings_text(project, ledger, tmp_path):
    model, _ = await run(project, ledger, tmp_path)
    for request in model.requests:
        s = subject(request)
        if s in ("isolated:sibling", "synthesis"):
            continue
        assert SIBLING_TASK not in request.prompt.text, s
        assert SIBLING_RESULT not in request.prompt.text, s
        if s.startswith("child:"):
            # A child sees its goal: not the parent's task, results, or other children.
            assert "Summarize what the helpers found." not in request.prompt.text
            assert "main() returns 42" not in request.prompt.text
            assert (
                sum(g in request.prompt.text for g in ("goal ok", "goal slow", "goal write")) == 1
            )


async def test_verify_catches_a_siblings_result_smuggled_in_as_a_constraint(
    project, ledger, tmp_path, rewrite_prompt
):
    _, result = await run(project, ledger, tmp_path)
    forge_item(rewrite_prompt, ledger, "isolated:review", "Constraint 1", SIBLING_RESULT)
    report = verify_run(ledger, result.run_id)
    assert not report.ok
    assert any("constraint" in (f.origin or "") for f in report.findings)


async def test_verify_catches_a_forged_child_result(project, ledger, tmp_path, rewrite_prompt):
    _, result = await run(project, ledger, tmp_path)
    forge_item(rewrite_prompt, ledger, "task:parent", "Result of parent.", SIBLING_RESULT)
    report = verify_run(ledger, result.run_id)
    assert not report.ok
    assert any("child_result" in (f.origin or "") for f in report.findings)


def forge_item(rewrite_prompt, ledger, subject, heading_prefix, text):
    """Replace one item's content in a recorded prompt, digests recomputed as a forger would."""
    import sqlite3

    from clearance._context.render import Block
    from clearance._core.prompt import sha256_text

    found = []

    def edit(block, item):
        if not found and (block.heading or "").startswith(heading_prefix):
            found.append(block)
            item["sha256"] = sha256_text(text)
            return Block(heading=block.heading, content=text)
        return block

    ledger.flush()
    connection = sqlite3.connect(ledger._url.removeprefix("sqlite:///"))
    rewrite_prompt(connection, subject, edit)
    connection.commit()
    connection.close()
    assert found, f"no block headed {heading_prefix!r}"


def test_a_fan_out_to_an_agent_not_in_can_spawn_is_refused_before_the_run(project, ledger):
    tasks = [
        Task(
            id="p",
            title="P",
            description="p",
            assignee="worker",
            fan_out=FanOut(agent="helper", goals=("g",)),
        )
    ]
    from clearance import ConfigError

    model = FunctionModel(lambda r: "x")
    orchestrator = Orchestrator(TEAM, model=model, ledger=ledger)
    with pytest.raises(ConfigError, match="may spawn only: nobody"):
        asyncio.run(orchestrator.run_tasks(tasks))
    assert model.requests == []  # refused before anything ran


def test_constraints_without_isolated_mode_are_refused():
    from clearance import ConfigError

    with pytest.raises(ConfigError, match="isolated"):
        Task(id="t", title="T", description="d", assignee="a", constraints=("x",))


def test_a_workspace_of_a_run_is_never_reused(tmp_path):
    from clearance._orchestration.run_dir import new_run_dir as _new_run_dir

    first = _new_run_dir(tmp_path, "run-1")
    second = _new_run_dir(tmp_path, "run-1")
    assert first != second and first.is_dir() and second.is_dir()
    assert isinstance(first, Path)


async def test_a_childs_long_tool_output_is_offloaded_to_its_workspace(project, ledger, tmp_path):
    long_text = "\n".join(f"line {n} LONG-OUTPUT" for n in range(500))

    def fetch(topic: str) -> str:
        return long_text

    team = Team(
        agents=(
            Agent(
                name="lead", instructions="You lead.", can_spawn=("helper",), tools=("fetch",)
            ),  # a child calls only what its parent may
            Agent(name="helper", instructions="You help.", tools=("fetch",)),
        ),
        coordinator=Agent(name="editor", instructions="You edit."),
    )
    tasks = [
        Task(id="p", title="P", description="p", assignee="lead",
             fan_out=FanOut(agent="helper", goals=("goal fetch",))),
    ]  # fmt: skip

    def answer(request):
        s, text = subject(request), user_text(request)
        if s.startswith("child:") and "## Results of your tool calls" not in text:
            return ToolCall(id="f", name="fetch", arguments={"topic": "x"})
        return "done"

    model = FunctionModel(answer)
    orchestrator = Orchestrator(
        team,
        model=model,
        ledger=ledger,
        tools=[fetch],
        options=RunOptions(workspace_root=tmp_path / "ws"),
    )
    result = await orchestrator.run_tasks(tasks)
    assert result.status == "completed", result.error
    second = [r for r in model.requests if subject(r).startswith("child:")][-1]
    text = user_text(second)
    assert "line 0 LONG-OUTPUT" in text and "line 499 LONG-OUTPUT" not in text
    (event,) = [e for e in ledger.events(result.run_id) if e.kind == "offloaded"]
    stored = tmp_path / "ws" / result.run_id / "p.1" / event.data["reference"]
    assert stored.read_text() == long_text
    report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_concurrent_fan_outs_run_each_child_exactly_once(ledger, tmp_path):
    team = Team(
        agents=(
            Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
            Agent(name="helper", instructions="You help."),
        ),
        coordinator=Agent(name="editor", instructions="You edit."),
    )
    tasks = [
        Task(id=f"p{k}", title=f"P{k}", description="p", assignee="lead",
             fan_out=FanOut(agent="helper", goals=(f"goal {k}a", f"goal {k}b")))
        for k in range(3)
    ]  # fmt: skip

    async def answer(request):
        await asyncio.sleep(0.01)
        return "ok"

    model = FunctionModel(answer)
    orchestrator = Orchestrator(
        team,
        model=model,
        ledger=ledger,
        options=RunOptions(workspace_root=tmp_path / "ws", max_concurrency=3),
    )
    result = await orchestrator.run_tasks(tasks)
    assert result.status == "completed", result.error
    children = [subject(r) for r in model.requests if subject(r).startswith("child:")]
    assert sorted(children) == sorted(set(children)) and len(children) == 6
    outcomes = [e.data["status"] for e in ledger.events(result.run_id) if e.kind == "child"]
    assert outcomes == ["ok"] * 6


async def test_a_file_request_outside_the_project_is_refused_and_never_read(
    project, ledger, tmp_path
):
    secret = tmp_path / "secret.txt"
    secret.write_text("OUTSIDE-SECRET-CANARY")
    (project / "link.txt").symlink_to(secret)
    team = Team(agents=(Agent(name="worker", instructions="You review code."),),
                coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip
    tasks = [Task(id="t", title="T", description="Review.", assignee="worker", mode="isolated")]
    asked = iter(["../secret.txt", "link.txt", str(secret)])

    def answer(request):
        if subject(request) != "isolated:t":
            return "S"
        path = next(asked, None)
        return f"STATUS: needs_context\nFILE: {path}" if path else "fine\nSTATUS: done"

    model = FunctionModel(answer)
    orchestrator = Orchestrator(
        team,
        model=model,
        ledger=ledger,
        options=RunOptions(
            input_root=project, clarification_rounds=3, workspace_root=tmp_path / "ws"
        ),
    )
    result = await orchestrator.run_tasks(tasks)
    assert result.tasks["t"].result == "fine"
    assert all("OUTSIDE-SECRET-CANARY" not in r.prompt.text for r in model.requests)
    rounds = [e.data for e in ledger.events(result.run_id) if e.kind == "clarification"]
    assert [r["served"] for r in rounds] == [False, False, False]
    assert all("cannot be given" in r["answer"] for r in rounds)
    report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]
