"""Capability parity, the cells `test_capability_table.py` does not reach.

Each test runs ``clearance run`` or ``clearance chat`` on a team file against a scripted
OpenAI-compatible server on 127.0.0.1, and asserts on what the model was sent (the server
keeps every request body) and on what the ledger recorded, and that ``clearance verify``
passes; or that a team file declaring a capability its only path cannot apply is refused at
load in one line with exit 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli._app import app

pytestmark = pytest.mark.network


def cli(tmp: Path, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp / 'runs.db'}"], input=input)


@pytest.fixture
def serve(tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)

    def start(reply: Any) -> Any:
        url = openai_server(reply)
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        return url

    return start


def chat_run_id(result: Any) -> str:
    found = re.search(r"chat run (\S+):", result.output)
    assert found is not None, result.output
    return found.group(1)


# -- chat: limits.max_prompt_tokens bounds every prompt, as on every other path ------------

CHAT_TEAM = """\
name: talk
agents:
  - name: talker
    instructions: You are the talker.
    limits: {max_output_tokens: 40, max_prompt_tokens: 400}
"""


def test_a_chat_turn_keeps_its_prompt_within_max_prompt_tokens(tmp_path: Path, serve) -> None:
    url = serve(lambda messages: "ok")
    (tmp_path / "team.yaml").write_text(CHAT_TEAM)
    lines = [f"message {n}: " + " ".join(f"word{n}x{i}" for i in range(40)) for n in range(12)]
    result = cli(tmp_path, "chat", "team.yaml", "--agent", "talker", "--model", "openai:m",
                 "--context-window", "100000", input="".join(f"{x}\n" for x in lines))  # fmt: skip
    assert result.exit_code == 0, result.output
    run_id = chat_run_id(result)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        calls = ledger.calls(run_id)
    turns = [c for c in calls if c.subject == "conversation:talker"]
    assert len(turns) == len(lines)
    assert max(c.manifest["total_tokens"] for c in turns) <= 400
    # The newest message always reaches the model whole; older ones were compressed away.
    assert lines[-1] in str(url.bodies[-1]["messages"])
    assert lines[0] not in str(url.bodies[-1]["messages"])
    verify = cli(tmp_path, "verify", run_id)
    assert verify.exit_code == 0, verify.output


SUMMARY_TEAM = """\
name: talk
agents:
  - name: talker
    instructions: You are the talker.
    limits: {max_output_tokens: 40}
    sampling: {temperature: 0.3}
"""


def test_a_chat_summary_asks_for_no_more_than_max_output_tokens(tmp_path: Path, serve) -> None:
    url = serve(lambda messages: "a short summary" if "ummar" in str(messages) else "ok")
    (tmp_path / "team.yaml").write_text(SUMMARY_TEAM)
    lines = [f"message {n}: " + " ".join(f"word{n}x{i}" for i in range(40)) for n in range(12)]
    result = cli(tmp_path, "chat", "team.yaml", "--agent", "talker", "--model", "openai:m",
                 "--context-window", "1000", "--strategy", "summarize",
                 input="".join(f"{x}\n" for x in lines))  # fmt: skip
    assert result.exit_code == 0, result.output
    run_id = chat_run_id(result)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        calls = ledger.calls(run_id)
    assert any(c.subject == "summary:talker" for c in calls)  # the conversation was summarized
    # Every call of the agent, its summaries included, under its limits and sampling.
    assert {b.get("max_tokens") for b in url.bodies} == {40}
    assert {b.get("temperature") for b in url.bodies} == {0.3}
    assert {(c.parameters or {}).get("max_tokens") for c in calls} == {40}
    verify = cli(tmp_path, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- a spawned child never spawns: can_spawn on an agent that only runs as one is refused ---

CHILD_SPAWNS = """\
name: nest
agents:
  - {{name: worker, instructions: You work., can_spawn: [kid]}}
  - {{name: kid, instructions: You help., can_spawn: [grandkid]{kid}}}
  - {{name: grandkid, instructions: You help more.}}
tasks:
  - {{id: t, title: T, description: Do it., assignee: worker{task}}}
"""


@pytest.mark.parametrize(
    ("kid", "task"),
    [("", ""), ("", ", fan_out: {agent: kid, goals: [one]}"),
     (", limits: {max_children: 2}", "")],
)  # fmt: skip
def test_can_spawn_on_an_agent_that_only_runs_as_a_child_is_refused_at_load(
    tmp_path: Path, kid: str, task: str
) -> None:
    (tmp_path / "team.yaml").write_text(CHILD_SPAWNS.format(kid=kid, task=task))
    result = cli(tmp_path, "run", str(tmp_path / "team.yaml"), "--model", "fake:m")
    assert result.exit_code == 2, result.output
    assert "agents.kid.can_spawn" in result.output
    assert "a spawned child never spawns" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs.db").exists()  # refused before anything was opened


def test_can_spawn_on_a_child_that_is_also_a_tasks_assignee_is_kept(tmp_path: Path, serve) -> None:
    url = serve(lambda messages: "done")
    team = CHILD_SPAWNS.format(kid="", task="") + (
        "  - {id: u, title: U, description: Do more., assignee: kid}\n"
    )
    (tmp_path / "team.yaml").write_text(team)
    result = cli(tmp_path, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert result.exit_code == 0, result.output
    kid = [b for b in url.bodies if b["messages"][0]["content"].startswith("You help.")]
    assert kid and all(  # as task u's assignee it is offered spawn
        "spawn" in {t["function"]["name"] for t in b.get("tools", ())} for b in kid
    )


# -- nor does a delegate acting within a spawned child's run (its tool loop offers no spawn) --

CHILD_DELEGATE_SPAWNS = """\
name: nest
agents:
  - {{name: worker, instructions: You work., can_spawn: [kid]{worker}}}
  - {{name: kid, instructions: You help., can_delegate_to: [helper]}}
  - {{name: helper, instructions: You assist., can_delegate_to: [deep]{helper}}}
  - {{name: deep, instructions: You assist more.{deep}}}
  - {{name: grandkid, instructions: You help more.}}
tasks:
  - {{id: t, title: T, description: Do it., assignee: worker{task}}}
"""


@pytest.mark.parametrize(
    ("where", "task"),
    [("helper", ""), ("deep", ""), ("helper", ", fan_out: {agent: kid, goals: [one]}")],
)
def test_can_spawn_on_an_agent_that_only_runs_as_a_childs_delegate_is_refused_at_load(
    tmp_path: Path, where: str, task: str
) -> None:
    # worker spawns kid; kid delegates to helper, helper to deep: helper and deep only ever
    # run within kid's tool loop, which offers no spawn, so can_spawn there was ignored.
    spawns = ", can_spawn: [grandkid]"
    team = CHILD_DELEGATE_SPAWNS.format(
        worker="", helper=spawns if where == "helper" else "",
        deep=spawns if where == "deep" else "", task=task,
    )  # fmt: skip
    (tmp_path / "team.yaml").write_text(team)
    result = cli(tmp_path, "run", str(tmp_path / "team.yaml"), "--model", "fake:m")
    assert result.exit_code == 2, result.output
    assert f"agents.{where}.can_spawn" in result.output
    assert "a spawned child never spawns" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs.db").exists()  # refused before anything was opened


def test_can_spawn_on_a_childs_delegate_that_is_also_a_tasks_delegate_is_kept(
    tmp_path: Path, serve
) -> None:
    def reply(messages: list[dict[str, Any]]) -> Any:
        system, user = messages[0]["content"], messages[-1]["content"]
        if not system.startswith("You work.") or "## Results of your tool calls" in user:
            return "done"
        return [("delegate", {"agent": "helper", "task": "Assist."})]

    url = serve(reply)
    team = CHILD_DELEGATE_SPAWNS.format(
        worker=", can_delegate_to: [helper]", helper=", can_spawn: [grandkid]", deep="", task=""
    )
    (tmp_path / "team.yaml").write_text(team)
    result = cli(tmp_path, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert result.exit_code == 0, result.output
    helper = [b for b in url.bodies if b["messages"][0]["content"].startswith("You assist.")]
    assert helper and all(  # as the task's assignee's delegate it is offered spawn
        "spawn" in {t["function"]["name"] for t in b.get("tools", ())} for b in helper
    )


# -- limits.max_model_calls binds a delegate and a child too (within its caller's task) -----

CALLS_TEAM = """\
name: calls
tools:
  page: {{function: "parity_tools:page"}}
agents:
  - {{name: worker, instructions: You are the worker., tools: [page], {who}: [helper]}}
  - name: helper
    instructions: You are the helper.
    tools: [page]
    limits: {{max_model_calls: 2}}
tasks:
  - {{id: t, title: T, description: Do it., assignee: worker}}
"""

PAGE_TOOL = '''\
def page(n: int) -> str:
    """Read a page."""
    return f"PAGE-{n}"
'''


def calls_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "You are the helper." in system:  # pages on and on: only its limit stops it
        return [("page", {"n": user.count("PAGE-") + 1})]
    if "You are the worker." not in system:
        return "the synthesis"
    if "## Results of your tool calls" in user:  # its delegate's answer, or its child's end
        return "WORKER-DONE"
    if "spawn" in str(messages):  # the spawn tool is listed in its prompt
        return [("spawn", {"agent": "helper", "goal": "Read pages."})]
    return [("delegate", {"agent": "helper", "task": "Read pages."})]


@pytest.mark.parametrize(("who", "subject"), [("can_delegate_to", "delegation:"),
                                              ("can_spawn", "child:")])  # fmt: skip
def test_a_delegate_or_child_makes_at_most_its_max_model_calls(
    tmp_path: Path, serve, monkeypatch: pytest.MonkeyPatch, who: str, subject: str
) -> None:
    (tmp_path / "parity_tools.py").write_text(PAGE_TOOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "parity_tools", raising=False)
    url = serve(calls_reply)
    (tmp_path / "team.yaml").write_text(CALLS_TEAM.format(who=who))
    result = cli(tmp_path, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert result.exit_code == 0, result.output
    run_id = re.findall(r"run id: (\S+)", result.output)[-1]
    helper = [b for b in url.bodies if "You are the helper." in b["messages"][0]["content"]]
    assert len(helper) == 2  # its own cap, not the task's 64 (nor its loop's 8 steps)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        breaches = [e for e in ledger.events(run_id) if e.kind == "limit_exceeded"]
        tool_calls = ledger.tool_calls(run_id)
    assert any(e.data.get("limit") == "max_model_calls" for e in breaches) or any(
        "max_model_calls" in (t.result or "") for t in tool_calls
    )
    verify = cli(tmp_path, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- the coordinator's limits and sampling on each of its calls: plan, clarification,
#    synthesis ----------------------------------------------------------------------------

COORDINATED = """\
name: led
goal: Review the notes.
agents:
  - {name: iso, instructions: You are the isolated reviewer., limits: {max_output_tokens: 74}}
coordinator:
  name: boss
  instructions: You are the boss.
  limits: {max_output_tokens: 75}
  sampling: {temperature: 0.5, top_p: 0.9, stop: [END-OF-BOSS]}
"""

PLAN = (
    '{"tasks": [{"id": "review", "title": "Review the notes", "description": "Review them.",'
    ' "assignee": "iso", "depends_on": []}]}'
)


def coordinated_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "You are the isolated reviewer." in system:
        if "## Clarification" not in user and "BOSS-ANSWER" not in user:
            return "I need to know.\nSTATUS: needs_context\nQUESTION: Which notes?"
        return "Review the notes: ISO-FINDING\nSTATUS: done"
    if "Which notes?" in user:
        return "BOSS-ANSWER: the blue ones"
    if '"tasks"' in user or ("plan" in user.lower() and "assignee" in user):
        return PLAN
    return "the synthesis"


ISOLATED_TASK = """\
isolation: {max_rounds: 2}
tasks:
  - {id: review, title: Review the notes, description: Review them., assignee: iso,
     mode: isolated}
"""


@pytest.mark.parametrize(
    ("extra", "paths"),
    [("", {"plan", "synthesis"}), (ISOLATED_TASK, {"clarification", "synthesis"})],
)
def test_the_coordinators_limits_and_sampling_hold_on_each_of_its_calls(
    tmp_path: Path, serve, extra: str, paths: set[str]
) -> None:
    url = serve(coordinated_reply)
    (tmp_path / "team.yaml").write_text(COORDINATED + extra)
    result = cli(tmp_path, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert result.exit_code == 0, result.output
    run_id = re.findall(r"run id: (\S+)", result.output)[-1]
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        calls = ledger.calls(run_id)
    by_subject = {c.subject.split(":")[0]: c for c in calls if c.agent == "boss"}
    assert paths <= set(by_subject)
    boss = [b for b in url.bodies if "You are the boss." in str(b["messages"])]
    assert len(boss) >= len(paths)
    for body in boss:
        assert body.get("max_tokens") == 75
        assert body.get("temperature") == 0.5 and body.get("top_p") == 0.9
        assert body.get("stop") == ["END-OF-BOSS"]
    for call in by_subject.values():
        assert (call.parameters or {}).get("max_tokens") == 75
    verify = cli(tmp_path, "verify", run_id)
    assert verify.exit_code == 0, verify.output
