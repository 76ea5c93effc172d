"""User hooks (`RunHooks`): each hook point is told, in order, and cannot touch a prompt."""

from __future__ import annotations

from clearance import (
    Agent,
    AgentLimits,
    ModelCallInfo,
    Orchestrator,
    RunHooks,
    RunInfo,
    RunLedger,
    RunServices,
    Task,
    TaskInfo,
    Team,
    ToolCallInfo,
)
from clearance._context.verify import verify_run
from clearance.models import ToolCall
from clearance.testing import FunctionModel


def word_count(text: str) -> dict[str, int]:
    """Count the words of a text."""
    return {"words": len(text.split())}


class Recorder(RunHooks):
    """Writes down every hook point it is told about (async and sync methods mixed)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.prompts: list[str] = []

    async def before_run(self, run: RunInfo) -> None:
        self.seen.append(("before_run", run.goal))

    def after_run(self, run: RunInfo, *, status: str, error: str | None) -> None:
        self.seen.append(("after_run", status))

    async def before_task(self, task: TaskInfo) -> None:
        self.seen.append(("before_task", task.task_id))

    def after_task(self, task: TaskInfo, *, result: str | None, error: str | None) -> None:
        self.seen.append(("after_task", f"{task.task_id}={result or error}"))

    def before_model_call(self, call: ModelCallInfo) -> str:
        self.prompts.append(call.prompt.text)
        self.seen.append(("before_model_call", call.subject))
        return "INJECTED BY A HOOK"  # ignored: a hook cannot add to a prompt

    def after_model_call(self, call: ModelCallInfo, *, text, usage, error) -> None:
        self.seen.append(("after_model_call", f"{call.subject}:{text is not None}"))

    async def before_tool_call(self, call: ToolCallInfo) -> None:
        call.arguments["text"] = "changed"  # type: ignore[index]  # a copy: no effect
        self.seen.append(("before_tool_call", call.name))

    def after_tool_call(self, call: ToolCallInfo, *, result: str, is_error: bool) -> None:
        self.seen.append(("after_tool_call", result))


def tool_team() -> Team:
    return Team(agents=(Agent(name="alice", instructions="A.", tools=("word_count",)),))


def answers():
    turns = iter([ToolCall(id="a", name="word_count", arguments={"text": "one two"}), "FINAL"])

    def answer(request):
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTH"
        return next(turns)

    return FunctionModel(answer)


async def test_every_hook_point_is_told_in_order(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    hooks = Recorder()
    model = answers()
    orchestrator = Orchestrator(
        tool_team(),
        model=model,
        ledger=ledger,
        tools=[word_count],
        services=RunServices(hooks=(hooks,)),
    )
    task = Task(id="t", title="Count", description="Count the words.", assignee="alice")
    result = await orchestrator.run_tasks([task], goal="Count.")
    assert result.status == "completed"
    assert hooks.seen == [
        ("before_run", "Count."),
        ("before_task", "t"),
        ("before_model_call", "task:t"),
        ("after_model_call", "task:t:True"),
        ("before_tool_call", "word_count"),
        ("after_tool_call", '{"words": 2}'),
        ("before_model_call", "task:t"),
        ("after_model_call", "task:t:True"),
        ("after_task", "t=FINAL"),
        ("before_model_call", "synthesis"),
        ("after_model_call", "synthesis:True"),
        ("after_run", "completed"),
    ]
    # What the hooks saw is exactly what the model received; nothing a hook returned or
    # changed reached a prompt or a tool.
    assert hooks.prompts == [r.prompt.text for r in model.requests]
    assert not any("INJECTED" in r.prompt.text for r in model.requests)
    assert ledger.tool_calls(result.run_id)[0].result == '{"words": 2}'
    assert verify_run(ledger, result.run_id).ok


async def test_a_failing_call_and_task_are_told_with_the_error(tmp_path):
    hooks = Recorder()

    def fail(request):
        raise RuntimeError("boom")

    team = Team(agents=(Agent(name="alice", instructions="A.", limits=AgentLimits(retries=0)),))
    orchestrator = Orchestrator(
        team, model=FunctionModel(fail), ledger=RunLedger(f"sqlite:///{tmp_path}/r.db"),
        services=RunServices(hooks=(hooks,)),
    )  # fmt: skip
    task = Task(id="t", title="T", description="Do.", assignee="alice")
    result = await orchestrator.run_tasks([task])
    assert result.status == "failed"
    assert ("after_model_call", "task:t:False") in hooks.seen
    told = dict(hooks.seen)["after_task"]
    assert told.startswith("t=") and "boom" in told
    assert hooks.seen[-1] == ("after_run", "failed")


async def test_a_hook_that_raises_fails_the_task(tmp_path):
    class Strict(RunHooks):
        def before_task(self, task: TaskInfo) -> None:
            raise ValueError(f"task {task.task_id} is not allowed today")

    team = Team(agents=(Agent(name="alice", instructions="A."),))
    model = FunctionModel(lambda request: "ok")
    orchestrator = Orchestrator(
        team,
        model=model,
        ledger=RunLedger(f"sqlite:///{tmp_path}/r.db"),
        services=RunServices(hooks=(Strict(),)),
    )
    result = await orchestrator.run_tasks([Task(id="t", title="T", description="D.",
                                                assignee="alice")])  # fmt: skip
    assert result.tasks["t"].status == "failed"
    assert "not allowed today" in (result.tasks["t"].error or "")
    assert all(r.prompt.manifest.subject != "task:t" for r in model.requests)


def test_hooks_are_optional_methods():
    class Partial:  # not a RunHooks: only what it needs
        def before_run(self, run: RunInfo) -> None:
            pass

    hooks = (Partial(),)
    orchestrator = Orchestrator(
        tool_team(), model=FunctionModel(lambda r: "x"), services=RunServices(hooks=hooks)
    )
    assert orchestrator.services.hooks == hooks


class Glossary(RunHooks):
    """Offers a glossary entry to task "t" only."""

    async def task_context(self, task: TaskInfo):
        return [("Glossary", "A slug is a URL-safe name.")] if task.task_id == "t" else None


async def test_hook_context_enters_through_the_builder_with_its_origin(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    model = FunctionModel(lambda request: "ok")
    team = Team(agents=(Agent(name="alice", instructions="A."),))
    tasks = [
        Task(id="t", title="T", description="Do.", assignee="alice"),
        Task(id="u", title="U", description="Do too.", assignee="alice"),
    ]
    result = await Orchestrator(
        team, model=model, ledger=ledger, services=RunServices(hooks=(Glossary(),))
    ).run_tasks(tasks)
    assert result.status == "completed"
    by_subject = {r.prompt.manifest.subject: r.prompt for r in model.requests}
    t_prompt = by_subject["task:t"]
    assert "hook:Glossary/1" in t_prompt.manifest.origins
    assert "## From hooks" in t_prompt.text and "A slug is a URL-safe name." in t_prompt.text
    assert t_prompt.manifest.clearance["hooks"] == ["Glossary/1"]
    assert "A slug" not in by_subject["task:u"].text  # offered to t only
    assert ledger.events(result.run_id, "hook_context")[0].subject == "task:t"
    assert verify_run(ledger, result.run_id).ok


async def test_verify_flags_a_hook_item_that_was_not_recorded(tmp_path):
    from clearance._context.verify_hooks import check_hook_item, hooks_shown

    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    team = Team(agents=(Agent(name="alice", instructions="A."),))
    result = await Orchestrator(
        team,
        model=FunctionModel(lambda r: "ok"),
        ledger=ledger,
        services=RunServices(hooks=(Glossary(),)),
    ).run_tasks([Task(id="t", title="T", description="Do.", assignee="alice")])
    events = ledger.events(result.run_id)
    call = next(c for c in ledger.calls(result.run_id) if c.subject == "task:t")
    item = next(i for i in call.manifest["items"] if i["origin"] == "hook:Glossary/1")
    assert list(check_hook_item(events, "t", "hook:Glossary/1", item)) == []
    forged = {**item, "sha256": "0" * 64}
    assert list(check_hook_item(events, "t", "hook:Glossary/1", forged))
    assert list(check_hook_item(events, "t", "hook:Other/1", item))
    assert hooks_shown(events, "t", {"hooks": ["Other/1"]}) is None


async def test_a_hook_offering_something_else_than_pairs_fails_the_task(tmp_path):
    class Bad(RunHooks):
        def task_context(self, task):
            return ["just text"]

    team = Team(agents=(Agent(name="alice", instructions="A."),))
    result = await Orchestrator(
        team, model=FunctionModel(lambda r: "ok"), ledger=RunLedger(f"sqlite:///{tmp_path}/r.db"),
        services=RunServices(hooks=(Bad(),)),
    ).run_tasks([Task(id="t", title="T", description="Do.", assignee="alice")])  # fmt: skip
    assert result.tasks["t"].status == "failed"
    assert "(title, text) pairs" in (result.tasks["t"].error or "")


async def test_a_resumed_task_whose_hook_offers_other_text_still_verifies(tmp_path):
    """Each session's prompt holds what the hook offered in that session: both verify, and
    an item matching neither offer is still a finding."""
    from clearance._context.verify_hooks import check_hook_item

    class Session(RunHooks):
        offered = 0

        def task_context(self, task: TaskInfo):
            Session.offered += 1
            return [("Session", f"this is session {Session.offered}")]

    def empty_first(request):  # the task's first answer is empty: it fails, then resumes
        return "" if request.prompt.manifest.subject == "task:t" else "SYNTH"

    team = Team(agents=(Agent(name="alice", instructions="A."),))
    tasks = [Task(id="t", title="T", description="Do.", assignee="alice")]
    with RunLedger(f"sqlite:///{tmp_path}/runs.db") as ledger:
        hooks = RunServices(hooks=(Session(),))
        first = await Orchestrator(
            team, model=FunctionModel(empty_first), ledger=ledger, services=hooks
        ).run_tasks(tasks)
        assert first.tasks["t"].status == "failed"
        resumed = await Orchestrator(
            team, model=FunctionModel(lambda r: "DONE"), ledger=ledger, services=hooks
        ).resume(first.run_id)
        assert resumed.status == "completed", resumed.error
        calls = [c for c in ledger.calls(first.run_id) if c.subject == "task:t"]
        assert len(calls) == 2
        report = verify_run(ledger, first.run_id)
        assert report.ok, report.findings
        events = ledger.events(first.run_id)
        item = next(i for i in calls[0].manifest["items"] if i["origin"] == "hook:Session/1")
        assert list(check_hook_item(events, "t", "hook:Session/1", {**item, "sha256": "0" * 64}))
