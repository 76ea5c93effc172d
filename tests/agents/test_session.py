import asyncio
import json
from pathlib import Path

import pytest

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    ContextBuilder,
    LimitExceeded,
    PathEscapeError,
)
from clearance.subagents import AgentSession, IsolatedContext, Workspace
from clearance.testing import FunctionModel, ScriptedModel

AGENT = Agent(name="researcher", instructions="You research.")


def prompt_for(goal: str):  # type: ignore[no-untyped-def]
    context = IsolatedContext(task_id="step", task_description=goal)
    return ContextBuilder(count_tokens=len).build_isolated_prompt(context, agent=AGENT)


def history(session: AgentSession) -> list[dict[str, object]]:
    files = sorted(session.workspace.history_dir.glob("*.json"))
    return [json.loads(f.read_text()) for f in files]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_workspace_has_history_and_outputs_and_confines_paths(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.txt").write_text("secret")
    ws = Workspace(tmp_path / "agent-a")
    assert ws.history_dir.is_dir() and ws.outputs_dir.is_dir()
    ws.write_output("notes.md", "hello")
    assert ws.read_text("outputs/notes.md") == "hello"
    (ws.root / "link").symlink_to(tmp_path / "elsewhere.txt")
    for bad in ("../elsewhere.txt", str(tmp_path / "elsewhere.txt"), "link", "outputs/../../x"):
        with pytest.raises(PathEscapeError):
            ws.read_text(bad)
    with pytest.raises(PathEscapeError):
        ws.write_output("../history/0001.json", "forged")


def test_child_starts_with_only_its_goal_and_parent_holds_one_spawn_step(tmp_path: Path) -> None:
    parent = AgentSession("parent", base_dir=tmp_path, goal="Survey the docs.")
    parent.record_step("tool", "listed 12 files; PARENT-PRIVATE-NOTE")
    parent.write_output("draft.md", "PARENT-DRAFT")
    child = parent.spawn_child("child-1", "Summarize the README.")

    assert [(s.kind, s.content) for s in child.steps] == [("goal", "Summarize the README.")]
    assert [h["kind"] for h in history(child)] == ["goal"]
    assert child.workspace.root == tmp_path / "child-1"  # a sibling folder
    assert child.workspace.outputs() == ()
    assert "PARENT-PRIVATE-NOTE" not in json.dumps(history(child))

    spawns = [s for s in parent.steps if s.kind == "spawn"]
    assert len(spawns) == 1 and spawns[0].data == {"child_id": "child-1"}

    child.record_step("tool", "CHILD-INTERNAL-STEP")
    child.write_output("scratch.txt", "CHILD-SCRATCH")
    assert parent.child_result("child-1") is None
    child.finish("README says: install with pip.")
    assert parent.child_result("child-1") == "README says: install with pip."
    # The parent's own record never holds the child's steps or files.
    assert "CHILD-INTERNAL-STEP" not in json.dumps(history(parent))
    assert parent.workspace.outputs() == ("draft.md",)
    assert [s.kind for s in parent.steps] == ["goal", "tool", "spawn"]


def test_spawn_refuses_unsafe_or_reused_child_ids(tmp_path: Path) -> None:
    parent = AgentSession("parent", base_dir=tmp_path)
    parent.spawn_child("c", "g")
    for bad in ("c", "parent", "../evil", "a/b", ""):
        with pytest.raises(ConfigError):
            parent.spawn_child(bad, "g")


def test_max_steps(tmp_path: Path) -> None:
    session = AgentSession("a", base_dir=tmp_path, goal="g", limits=AgentLimits(max_steps=2))
    session.record_step("tool", "one")
    session.record_step("tool", "two")
    with pytest.raises(LimitExceeded) as info:
        session.record_step("tool", "three")
    assert (info.value.limit, info.value.value, info.value.maximum) == ("max_steps", 3, 2)
    assert info.value.subject == "agent:a"
    last = history(session)[-1]
    assert last["kind"] == "limit_exceeded" and last["ok"] is False
    assert last["data"] == {"limit": "max_steps", "value": 3, "maximum": 2}


async def test_max_tokens_per_step_is_passed_to_the_model_and_checked(tmp_path: Path) -> None:
    model = ScriptedModel(["short", "x" * 400])  # the fake counts 1 token per 4 bytes
    session = AgentSession("a", base_dir=tmp_path, limits=AgentLimits(max_tokens_per_step=50))
    await session.call_model(model, prompt_for("first"))
    assert model.requests[0].max_tokens == 50
    with pytest.raises(LimitExceeded) as info:
        await session.call_model(model, prompt_for("second"))
    assert (info.value.limit, info.value.value, info.value.maximum) == (
        "max_tokens_per_step",
        100,
        50,
    )
    assert [s.kind for s in session.steps] == ["model", "limit_exceeded"]


def test_max_output_files_and_size(tmp_path: Path) -> None:
    limits = AgentLimits(max_output_files=2, max_output_size_bytes=100)
    session = AgentSession("a", base_dir=tmp_path, limits=limits)
    session.write_output("one.txt", "1" * 40)
    session.write_output("two.txt", "2" * 40)
    session.write_output("two.txt", "2" * 50)  # overwriting is not a new file
    with pytest.raises(LimitExceeded) as files:
        session.write_output("three.txt", "3")
    assert (files.value.limit, files.value.value, files.value.maximum) == ("max_output_files", 3, 2)
    with pytest.raises(LimitExceeded) as size:
        session.write_output("one.txt", "1" * 60)
    assert (size.value.limit, size.value.value, size.value.maximum) == (
        "max_output_size_bytes",
        110,
        100,
    )
    assert [h["data"]["limit"] for h in history(session)] == [  # type: ignore[index]
        "max_output_files",
        "max_output_size_bytes",
    ]
    assert session.workspace.outputs() == ("one.txt", "two.txt")


async def test_timeout_s_cuts_a_model_call_short(tmp_path: Path) -> None:
    async def hang(request: object) -> str:
        await asyncio.sleep(10)
        return "never"

    session = AgentSession("a", base_dir=tmp_path, limits=AgentLimits(timeout_s=0.05))
    with pytest.raises(LimitExceeded) as info:
        await session.call_model(FunctionModel(hang), prompt_for("g"))
    assert info.value.limit == "timeout_s" and info.value.value >= 0.05


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ConfigError, match="max_steps"):
        AgentLimits(max_steps=0)
    with pytest.raises(ConfigError, match="max_output_size_bytes"):
        AgentLimits(max_output_size_bytes=-1)


def test_team_files_declare_the_session_limits() -> None:
    from clearance._core.teamfile_models import AgentSpec

    spec = AgentSpec.model_validate(
        {"name": "a", "instructions": "i", "limits": {"max_steps": 5, "max_output_files": 2}}
    )
    limits = spec.to_agent().limits
    assert (limits.max_steps, limits.max_output_files, limits.max_tokens_per_step) == (5, 2, None)
