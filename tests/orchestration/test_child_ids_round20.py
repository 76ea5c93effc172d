"""Children's ids and goals: one namespace per task, ids that fit, goals of bounded length.

A task's children are ``<prefix>.<n>``, the prefix its id with ``:`` as ``_``
(`child_prefix`): two tasks ``a:b`` and ``a_b`` would share one numbering, so a team file
(or tasks given in code, or a plan) holding both is refused before anything runs. A child's
id is also its agent id and the name of its workspace folder (``<id>.<k>`` when a resumed
session spawns it again), each at most 128 characters: a task that may have children and
whose id leaves no room for them is refused when loaded, instead of every child failing
mid-run. A spawned child's goal heads its result in the parent's prompt on one line, so it
is capped (`MAX_GOAL_CHARS`): a ``fan_out`` goal over the cap is refused when loaded, a
``spawn`` call's is a tool error the model sees, and nothing of the refused spawn is
recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._agents.workspace import check_agent_id
from clearance._context.verify import verify_run
from clearance._context.verify_children import child_id, max_spawning_id_chars
from clearance._core.errors import ConfigError, ModelError
from clearance._core.spec import FanOut
from clearance._core.task_spec import MAX_GOAL_CHARS
from clearance.cli import app
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

runner = CliRunner()


def _team_file(tmp_path: Path, tasks: list[dict[str, object]], **lead: object) -> Path:
    data = {
        "name": "ids20",
        "model": "fake:try",
        "agents": [
            {"name": "lead", "instructions": "You lead.", "can_spawn": ["helper"], **lead},
            {"name": "helper", "instructions": "You help."},
            {"name": "plain", "instructions": "You write."},
        ],
        "tasks": tasks,
    }
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _refused(path: Path, tmp_path: Path) -> str:
    """``clearance graph`` and ``clearance run`` both exit 2 with one error line: that line."""
    graph = runner.invoke(app, ["graph", str(path)])
    assert graph.exit_code == 2, graph.output
    lines = [line for line in graph.output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, graph.output
    db = f"sqlite:///{tmp_path}/runs.db"
    run = runner.invoke(app, ["run", str(path), "--model", "fake:try", "--db", db])
    assert run.exit_code == 2, run.output
    assert lines[0] in run.output.splitlines(), run.output
    return lines[0]


def _task(task_id: str, title: str, **more: object) -> dict[str, object]:
    return {"id": task_id, "title": title, "description": "Do it.", "assignee": "lead", **more}


# -- 1. two tasks, one child-id prefix -------------------------------------------------------


def test_two_tasks_whose_ids_give_one_child_prefix_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _team_file(tmp_path, [_task("a:b", "First"), _task("a_b", "Second")])
    line = _refused(path, tmp_path)
    assert line == (
        f"error: {path}: tasks.a_b: tasks 'a:b' and 'a_b' would number their children "
        "alike ('a_b.1', 'a_b.2', ...): ':' is '_' in a child's id, so rename one"
    ), line


async def test_tasks_given_in_code_sharing_a_child_prefix_are_refused(tmp_path: Path) -> None:
    team = Team(agents=(Agent(name="lead", instructions="L.", can_spawn=("helper",)),
                        Agent(name="helper", instructions="H.")))  # fmt: skip
    tasks = [
        Task(id="x:1", title="One", description="D.", assignee="lead",
             fan_out=FanOut(agent="helper", goals=("g",))),
        Task(id="x_1", title="Two", description="D.", assignee="lead",
             fan_out=FanOut(agent="helper", goals=("g",))),
    ]  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=FunctionModel(lambda r: "x"), ledger=ledger,
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        with pytest.raises(ConfigError, match=r"tasks 'x:1' and 'x_1' would number"):
            await orchestrator.run_tasks(tasks)
        assert ledger.list_runs() == []  # nothing ran, nothing recorded


# -- 2. a task id with no room for its children's ids -----------------------------------------


def test_the_longest_id_that_may_spawn_leaves_room_for_every_child_and_folder() -> None:
    for most in (1, 8, 9, 10, 99, 100, 1_000):
        longest = "t" * max_spawning_id_chars(most)
        # The last child of a session, in the last folder a resumed session may get.
        assert check_agent_id(f"{child_id(longest, most)}.999")
        with pytest.raises(ConfigError):
            check_agent_id(f"{child_id(longest + 't', most)}.999")
    assert max_spawning_id_chars(8) == 122


def test_a_spawning_task_whose_id_is_too_long_is_refused_when_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    long_id = "t" * 123
    path = _team_file(tmp_path, [_task(long_id, "Long")])
    line = _refused(path, tmp_path)
    assert line == (
        f"error: {path}: tasks.{long_id}: task {long_id!r} may have children, and its id "
        "has 123 characters: at most 122 leave room for its children's ids (up to "
        f"'{long_id}.8', its assignee's max_children) and their workspace folders"
    ), line


def test_a_long_id_is_refused_when_a_delegate_may_spawn_and_kept_when_nobody_may(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    long_id = "d" * 128
    boss = {"name": "boss", "instructions": "B.", "can_delegate_to": ["lead"]}
    data = yaml.safe_load(_team_file(tmp_path, [_task(long_id, "Long")]).read_text())
    data["agents"].append(boss)
    data["tasks"][0]["assignee"] = "boss"
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert f"task {long_id!r} may have children" in _refused(path, tmp_path)
    data["tasks"][0]["assignee"] = "plain"  # nobody in reach may spawn: 128 is fine
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 0, result.output


async def test_a_task_of_the_longest_id_that_may_spawn_runs_its_children(tmp_path: Path) -> None:
    longest = "t" * max_spawning_id_chars(2)
    team = Team(agents=(
        Agent(name="lead", instructions="L.", can_spawn=("helper",),
              limits=AgentLimits(max_children=2)),
        Agent(name="helper", instructions="H."),
    ))  # fmt: skip
    task = Task(id=longest, title="Long", description="D.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=("one", "two")))  # fmt: skip

    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        return f"answer of {subject}" if subject.startswith("child:") else "combined"

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                    options=RunOptions(workspace_root=tmp_path / "ws"),
                                    ).run_tasks([task])  # fmt: skip
        assert result.status == "completed", result.error
        children = [e.data for e in ledger.events(result.run_id, "child")]
        assert [(c["child_id"], c["status"]) for c in children] == [
            (f"{longest}.1", "ok"),
            (f"{longest}.2", "ok"),
        ]
        report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


# -- 3. a spawned child's goal is capped -------------------------------------------------------


def test_a_fan_out_goal_over_the_cap_is_refused_when_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    goals = ["short", "g" * (MAX_GOAL_CHARS + 1)]
    path = _team_file(tmp_path, [_task("p", "P", fan_out={"agent": "helper", "goals": goals})])
    line = _refused(path, tmp_path)
    assert line == (
        f"error: {path}: tasks.p.fan_out.goals: goal 2 has 4,001 characters: a child's "
        "goal may have at most 4,000 (it heads the child's result in its parent's prompt)"
    ), line
    goals[1] = "g" * MAX_GOAL_CHARS  # at the cap: accepted
    path = _team_file(tmp_path, [_task("p", "P", fan_out={"agent": "helper", "goals": goals})])
    assert runner.invoke(app, ["graph", str(path)]).exit_code == 0


async def test_a_spawn_call_with_a_goal_over_the_cap_is_a_tool_error_and_records_no_spawn(
    tmp_path: Path,
) -> None:
    team = Team(agents=(Agent(name="lead", instructions="L.", can_spawn=("helper",)),
                        Agent(name="helper", instructions="H.")))  # fmt: skip
    huge = "q" * (MAX_GOAL_CHARS + 1)
    seen: list[str] = []

    def answer(request: ModelRequest) -> str | ToolCall:
        manifest = request.prompt.manifest
        if manifest.agent == "helper":
            return "the helper's finding"
        results = [i for i in manifest.items if i.origin.startswith("tool:")]
        if not results:
            return ToolCall(id="s1", name="spawn", arguments={"agent": "helper", "goal": huge})
        text = "\n".join(m.content or "" for m in request.prompt.messages)
        seen.append(text)
        if len(results) == 1:
            return ToolCall(id="s2", name="spawn", arguments={"agent": "helper", "goal": "look"})
        return "done"

    task = Task(id="p", title="P", description="D.", assignee="lead")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                    options=RunOptions(workspace_root=tmp_path / "ws"),
                                    ).run_tasks([task])  # fmt: skip
        assert result.tasks["p"].result == "done", result.tasks["p"].error
        refusal = (
            "error: a spawn goal may have at most 4,000 characters (this one has 4,001): shorten it"
        )
        assert refusal in seen[0], seen[0][-500:]
        spawns = [e.data for e in ledger.events(result.run_id, "spawn")]
        assert [(s["child_id"], s["goal"]) for s in spawns] == [("p.1", "look")]
        calls = [(t.result, t.is_error) for t in ledger.tool_calls(result.run_id)]
        assert calls[0] == (refusal, True), calls
        assert len(calls) == 2 and calls[1][0].startswith("child p.1 (helper) ended: ok"), calls
        report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_fan_out_goal_over_the_cap_given_in_code_is_refused_before_a_run(
    tmp_path: Path,
) -> None:
    team = Team(agents=(Agent(name="lead", instructions="L.", can_spawn=("helper",)),
                        Agent(name="helper", instructions="H.")))  # fmt: skip
    task = Task(id="p", title="P", description="D.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=("g" * (MAX_GOAL_CHARS + 1),)))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=FunctionModel(lambda r: "x"), ledger=ledger,
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        with pytest.raises(ConfigError, match="goal 1 has 4,001 characters"):
            await orchestrator.run_tasks([task])
        assert ledger.list_runs() == []


# -- a coordinator's plan is held to the same rules (one repair) --------------------------------


async def test_a_plan_of_two_tasks_sharing_a_child_prefix_is_sent_back_for_repair(
    tmp_path: Path,
) -> None:
    team = Team(
        agents=(Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
                Agent(name="helper", instructions="You help.")),
        coordinator=Agent(name="editor", instructions="You plan."),
    )  # fmt: skip

    def plan(*ids: str) -> str:
        return json.dumps({"tasks": [
            {"id": i, "title": f"T {n}", "description": "D.", "assignee": "lead",
             "depends_on": []} for n, i in enumerate(ids)
        ]})  # fmt: skip

    plans = iter([plan("a:b", "a_b"), plan("a", "b")])
    prompts: list[str] = []

    def answer(request: ModelRequest) -> str:
        if request.prompt.manifest.subject == "plan":
            prompts.append(request.prompt.text)
            return next(plans)
        return "done"

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                    options=RunOptions(workspace_root=tmp_path / "ws"),
                                    ).run_team("Do it.")  # fmt: skip
        assert result.status == "completed", result.error
        assert sorted(result.tasks) == ["a", "b"]
        assert len(prompts) == 2
        assert "tasks 'a:b' and 'a_b' would number their children alike" in prompts[1]
        report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_run_recorded_before_the_rule_with_such_tasks_verifies_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its record is its rule: verify accepts it as it ran, and a resume is not refused.

    (Known limit of such old runs, the reason for the rule: the resumed session numbers
    ``x_y``'s child ``x_y.1`` again, the id ``x:y``'s child had, so verify then reports
    ``x:y``'s recorded prompt as showing a child of another task.)
    """
    from clearance._orchestration import graph_check

    team = Team(agents=(Agent(name="lead", instructions="L.", can_spawn=("helper",)),
                        Agent(name="helper", instructions="H.")))  # fmt: skip
    tasks = [
        Task(id="x:y", title="One", description="D.", assignee="lead",
             fan_out=FanOut(agent="helper", goals=("Look alpha.",))),
        Task(id="x_y", title="Two", description="D.", assignee="lead", depends_on=("x:y",),
             fan_out=FanOut(agent="helper", goals=("Look omega.",))),
    ]  # fmt: skip
    failing = {"task:x_y"}

    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        if subject in failing:
            raise ModelError("down for now", model_id="fake")
        return f"answer of {subject}"

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    options = RunOptions(workspace_root=tmp_path / "ws")
    with monkeypatch.context() as patch:  # as a version before the rule ran it
        patch.setattr(
            "clearance._orchestration.orchestrator.check_new_tasks",
            lambda graph, team: graph_check.check_titles(graph),
        )
        with RunLedger(db) as ledger:
            first = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                       options=options).run_tasks(tasks)  # fmt: skip
    assert first.tasks["x_y"].status == "failed"
    with RunLedger(db) as ledger:
        report = verify_run(ledger, first.run_id)
    assert report.ok, [str(f) for f in report.findings]
    failing.clear()
    with RunLedger(db) as ledger:
        resumed = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                     options=options).resume(first.run_id)  # fmt: skip
        assert resumed.status == "completed", resumed.error
