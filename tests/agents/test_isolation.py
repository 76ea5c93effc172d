import asyncio
from pathlib import Path
from typing import Any

import pytest

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    FileCaps,
    LimitExceeded,
    PathEscapeError,
    RunLedger,
)
from clearance._agents.isolation import parse_status
from clearance._context.render import parse_user_message
from clearance.subagents import ArchitecturalContext, ContextIsolationManager, IsolatedContext
from clearance.testing import FunctionModel, ScriptedModel

WORKER = Agent(name="worker", instructions="You implement one task.")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def alpha():\n    return 'ALPHA-CONTENT'\n")
    (root / "pkg" / "b.py").write_text("def beta():\n    return 'BETA-CONTENT'\n")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "proj"\ndependencies = ["typer>=0.12"]\n'
    )
    (root / "blob.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    (root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    return root


def test_to_prompt_holds_task_files_clarifications_and_nothing_about_other_tasks(
    project: Path,
) -> None:
    manager = ContextIsolationManager(project)
    mine = manager.create_isolated_context(
        "task-007", "Rename alpha to first.", ["pkg/a.py"], constraints=["Keep the API."]
    )
    manager.create_isolated_context("task-008", "SIBLING-SECRET: delete beta.", ["pkg/b.py"])
    mine = manager.add_clarification("task-007", "Yes, also rename the tests.")
    text = mine.to_prompt()
    assert "task-007" in text and "Rename alpha to first." in text
    assert "### pkg/a.py" in text and "ALPHA-CONTENT" in text
    assert "Keep the API." in text and "Yes, also rename the tests." in text
    assert "Project proj" in text and "typer >=0.12" in text  # architectural context
    for leaked in ("task-008", "SIBLING-SECRET", "BETA-CONTENT", "pkg/b.py"):
        assert leaked not in text
    assert "2 tasks" not in text and "of 2" not in text


@pytest.mark.parametrize("bad", ["../outside.txt", "pkg/../../outside.txt", "pkg/../pkg/a.py"])
def test_dotdot_paths_are_refused(project: Path, bad: str) -> None:
    (project.parent / "outside.txt").write_text("secret")
    manager = ContextIsolationManager(project)
    with pytest.raises(PathEscapeError) as info:
        manager.create_isolated_context("t", "x", [bad])
    assert info.value.path == bad


def test_absolute_paths_are_refused(project: Path) -> None:
    manager = ContextIsolationManager(project)
    with pytest.raises(PathEscapeError):
        manager.create_isolated_context("t", "x", [str(project / "pkg" / "a.py")])


def test_symlink_escaping_the_root_is_refused_and_inside_is_allowed(
    project: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("TOP-SECRET")
    (project / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (project / "alias.py").symlink_to(project / "pkg" / "a.py")
    manager = ContextIsolationManager(project)
    with pytest.raises(PathEscapeError):
        manager.create_isolated_context("t", "x", ["escape.txt"])
    context = manager.create_isolated_context("u", "x", ["alias.py"])
    assert "ALPHA-CONTENT" in context.file_contents["alias.py"]


@pytest.mark.parametrize("name", ["blob.bin", "latin1.txt"])
def test_binary_files_are_refused(project: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="binary"):
        ContextIsolationManager(project).create_isolated_context("t", "x", [name])


def test_per_file_cap_errors_by_default(project: Path) -> None:
    (project / "big.txt").write_text("x" * 5000)
    manager = ContextIsolationManager(project, file_caps=FileCaps(max_file_bytes=1000))
    with pytest.raises(LimitExceeded) as info:
        manager.create_isolated_context("t", "x", ["big.txt"])
    assert (info.value.limit, info.value.value, info.value.maximum) == (
        "max_file_bytes",
        5000,
        1000,
    )


def test_per_file_cap_truncates_with_a_visible_marker_when_configured(project: Path) -> None:
    (project / "big.txt").write_text("line\n" * 1000)
    caps = FileCaps(max_file_bytes=1000, on_oversize="truncate")
    context = ContextIsolationManager(project, file_caps=caps).create_isolated_context(
        "t", "x", ["big.txt"]
    )
    content = context.file_contents["big.txt"]
    assert len(content.encode()) <= 1000
    assert content.startswith("line\nline\n")
    assert "[clearance: truncated big.txt: showing the first" in content
    assert "of 5000 bytes]" in content
    assert "[clearance: truncated big.txt" in context.to_prompt()


def test_total_cap_covers_all_files_of_a_context(project: Path) -> None:
    for name in ("one.txt", "two.txt", "three.txt"):
        (project / name).write_text("y" * 400)
    files = ["one.txt", "two.txt", "three.txt"]
    strict = ContextIsolationManager(project, file_caps=FileCaps(max_total_bytes=1000))
    with pytest.raises(LimitExceeded) as info:
        strict.create_isolated_context("t", "x", files)
    assert (info.value.limit, info.value.value, info.value.subject) == (
        "max_total_bytes",
        1200,
        "three.txt",
    )
    lenient = ContextIsolationManager(
        project, file_caps=FileCaps(max_total_bytes=1000, on_oversize="truncate")
    )
    context = lenient.create_isolated_context("t", "x", files)
    assert sum(len(c.encode()) for c in context.file_contents.values()) <= 1000
    assert "truncated three.txt" in context.file_contents["three.txt"]
    # Adding a file later counts against the same budget.
    with pytest.raises(LimitExceeded):
        strict.create_isolated_context("u", "x", ["one.txt", "two.txt"])
        strict.add_file_content("u", "three.txt")


def test_architecture_is_computed_once_per_manager(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = ArchitecturalContext.from_project

    def counting(root: Path, **kw: object) -> ArchitecturalContext:
        calls.append(root)
        return real(root)

    monkeypatch.setattr(ArchitecturalContext, "from_project", staticmethod(counting))
    manager = ContextIsolationManager(project)
    first = manager.create_isolated_context("a", "x")
    second = manager.create_isolated_context("b", "y")
    assert len(calls) == 1
    assert first.architectural_context is second.architectural_context


def test_cache_holds_until_completion(project: Path) -> None:
    manager = ContextIsolationManager(project)
    manager.create_isolated_context("t", "x")
    manager.add_file_content("t", "pkg/b.py")
    assert "BETA-CONTENT" in manager.get_context("t").file_contents["pkg/b.py"]
    assert manager.active_task_ids == ("t",)
    manager.complete("t")
    assert manager.active_task_ids == ()
    with pytest.raises(ConfigError, match="no active isolated context"):
        manager.add_clarification("t", "late")


async def test_dispatch_goes_through_the_builder_and_needs_context_round_trip(
    project: Path, ledger: RunLedger
) -> None:
    ledger.start_run(run_id="run_iso", team="t", goal=None, graph=None)
    model = ScriptedModel(
        [
            "I cannot tell which file defines beta.\nSTATUS: needs_context\n"
            "QUESTION: Where is beta defined?",
            "Renamed beta in pkg/b.py.\nSTATUS: done",
        ]
    )
    manager = ContextIsolationManager(project, model=model, ledger=ledger, run_id="run_iso")
    context = manager.create_isolated_context("task-001", "Rename beta.", constraints=["Be brief"])
    first = await manager.dispatch(context, WORKER)
    assert first.status == "needs_context"
    assert first.question == "Where is beta defined?"
    assert manager.active_task_ids == ("task-001",)  # kept for the re-dispatch

    manager.add_clarification("task-001", "beta is in pkg/b.py")
    context = manager.add_file_content("task-001", "pkg/b.py")
    second = await manager.dispatch(context, WORKER)
    assert second.status == "done" and second.result == "Renamed beta in pkg/b.py."
    assert manager.active_task_ids == ()  # dropped on completion

    # What the model received is exactly the builder's rendering of the context.
    request = model.requests[1]
    system, user = (m.content for m in request.prompt.messages)
    assert system == WORKER.instructions
    assert user == context.to_prompt()
    assert request.prompt.manifest.origins == (
        "instructions",
        "arch",
        "task:task-001",
        "file:pkg/b.py",
        "constraint:1",
        "clarification:1",
    )
    assert request.prompt.manifest.subject == "isolated:task-001"
    sections, _ = parse_user_message(user)
    assert [s.heading for s in sections] == [
        "## Project architecture",
        "# Task",
        "## Files",
        "## Constraints",
        "## Clarifications",
    ]
    # Fresh subagent: the second prompt carries no trace of the first answer.
    assert "cannot tell which file" not in request.prompt.text
    calls = ledger.calls("run_iso")
    assert [c.subject for c in calls] == ["isolated:task-001", "isolated:task-001"]
    assert calls[1].manifest["clearance"]["files"] == ["pkg/b.py"]


async def test_dispatch_passes_limits_and_times_out(project: Path) -> None:
    async def slow(request: object) -> str:
        await asyncio.sleep(5)
        return "late"

    agent = Agent(name="w", instructions="i", limits=AgentLimits(timeout_s=0.05))
    manager = ContextIsolationManager(project, model=FunctionModel(slow))
    with pytest.raises(LimitExceeded) as info:
        await manager.dispatch(manager.create_isolated_context("t", "x"), agent)
    assert info.value.limit == "timeout_s"

    model = ScriptedModel(["ok\nSTATUS: done"])
    agent = Agent(name="w", instructions="i", limits=AgentLimits(max_tokens_per_step=33))
    await ContextIsolationManager(project, model=model).dispatch(IsolatedContext(
        task_id="t", task_description="x"), agent)  # fmt: skip
    assert model.requests[0].max_tokens == 33
    wordy = ScriptedModel(["z" * 400 + "\nSTATUS: done"])  # ~100 tokens for the fake
    with pytest.raises(LimitExceeded) as info:
        await ContextIsolationManager(project, model=wordy).dispatch(IsolatedContext(
            task_id="t", task_description="x"), agent)  # fmt: skip
    assert (info.value.limit, info.value.maximum) == ("max_tokens_per_step", 33)


@pytest.mark.parametrize(
    ("answer", "status", "result", "question", "concerns"),
    [
        ("All good.\nSTATUS: done", "done", "All good.", None, None),
        ("Did it.\n**Status:** DONE_WITH_CONCERNS\nTests are slow.",
         "done_with_concerns", "Did it.", None, "Tests are slow."),
        ("STATUS: needs_context\nWhich database?", "needs_context", "", "Which database?", None),
        ("Cannot.\nSTATUS: blocked\nNo write access.", "blocked", "Cannot.", None,
         "No write access."),
        ("No status at all.", "done_with_concerns", "No status at all.", None,
         "the answer has no STATUS line"),
    ],
)  # fmt: skip
def test_parse_status(
    answer: str, status: str, result: str, question: str | None, concerns: str | None
) -> None:
    assert parse_status(answer) == (status, result, question, concerns)


async def test_verify_accepts_isolated_dispatches_and_catches_a_foreign_item(
    project: Path, ledger: RunLedger, tmp_path: Path, rewrite_prompt: Any
) -> None:
    import sqlite3

    from clearance._context.verify import verify_run

    ledger.start_run(run_id="run_v", team="t", goal=None, graph=None)
    model = ScriptedModel(["done\nSTATUS: done"])
    manager = ContextIsolationManager(project, model=model, ledger=ledger, run_id="run_v")
    manager.create_isolated_context("t1", "Read a.", ["pkg/a.py"], ["Be brief."])
    await manager.dispatch(manager.add_clarification("t1", "Only a."), WORKER)
    report = verify_run(ledger, "run_v")
    assert report.calls_checked == 1
    assert report.ok, [str(f) for f in report.findings]

    # A forger relabels the file as another task's text and re-signs the record.
    call = ledger.calls("run_v")[0]

    def relabel(manifest: dict[str, Any]) -> None:
        manifest["items"][2]["origin"] = "task:t2"

    conn = sqlite3.connect(tmp_path / "runs.db")
    try:
        rewrite_prompt(conn, call.subject, lambda block, item: block, relabel, call_id=call.call_id)
        conn.commit()
    finally:
        conn.close()
    reasons = [str(f) for f in verify_run(ledger, "run_v").findings]
    assert any("not the subagent's own task" in r for r in reasons), reasons


def test_truncating_with_no_total_budget_left_names_the_total_cap(tmp_path: Path) -> None:
    from clearance._agents.files import load_text_file

    (tmp_path / "big.md").write_text("x" * 3000)
    caps = FileCaps(max_file_bytes=2000, max_total_bytes=2400, on_oversize="truncate")
    cut = load_text_file(tmp_path, "big.md", caps=caps, budget=2400)
    assert cut.endswith("[clearance: truncated big.md: showing the first 1927 of 3000 bytes]")
    assert len(cut.encode()) <= 2000
    with pytest.raises(LimitExceeded) as info:
        load_text_file(tmp_path, "big.md", caps=caps, budget=0)
    assert info.value.limit == "max_total_bytes"
