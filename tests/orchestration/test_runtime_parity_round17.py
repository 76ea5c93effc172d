"""One runtime: limits declared on an agent mean the same on every call path.

Each test runs ``clearance run`` (or ``clearance chat``) on a team file against a scripted
OpenAI-compatible server on 127.0.0.1 that keeps every request body, and asserts on what the
model was sent and on what the ledger recorded (and that ``clearance verify`` passes).
Round 16 covered tools, grants, loops and depth on task, delegate and child
(``test_delegation_caps_round16.py``); these cover the limits a caller lends: a delegate or
child never acts with more than its caller may.
"""

from __future__ import annotations

import re
import sys
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
    (tmp_path / "parity17_tools.py").write_text(PAGE_TOOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "parity17_tools", raising=False)

    def start(reply: Any) -> Any:
        url = openai_server(reply)
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        return url

    return start


PAGE_TOOL = '''\
def page(n: int) -> str:
    """Read a page."""
    return f"PAGE-{n}"
'''


def run_team(tmp: Path, team: str, *extra: str) -> tuple[Any, str]:
    (tmp / "team.yaml").write_text(team)
    result = cli(tmp, "run", str(tmp / "team.yaml"), "--model", "openai:m", *extra)
    found = re.findall(r"run id: (\S+)", result.output)
    return result, found[-1] if found else ""


def bodies_of(url: Any, system: str) -> list[dict[str, Any]]:
    return [b for b in url.bodies if system in (b["messages"][0]["content"] or "")]


# -- a delegate's max_model_calls bounds what its delegation causes, its children included --

DELEGATE_SPAWNS = """\
name: lend
tools:
  page: {{function: "parity17_tools:page"}}
agents:
  - {{name: worker, instructions: You are the worker., tools: [page], can_delegate_to: [helper]}}
  - name: helper
    instructions: You are the helper.
    tools: [page]
    can_spawn: [kid]
    limits: {{max_model_calls: {calls}}}
  - {{name: kid, instructions: You are the kid.{kid}}}
tasks:
  - {{id: t, title: T, description: Do it., assignee: worker}}
"""


def delegate_spawns_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "You are the kid." in system:
        return "KID-ANSWER"
    if "You are the helper." in system:
        if "## Results of your tool calls" in user:  # its children's ends
            return "HELPER-DONE"
        return [("spawn", {"agent": "kid", "goal": f"Check note {n}."}) for n in range(3)]
    if "You are the worker." in system:
        if "## Results of your tool calls" in user:
            return "WORKER-DONE"
        return [("delegate", {"agent": "helper", "task": "Check the notes."})]
    return "the synthesis"


@pytest.mark.parametrize("kid", ["", ", tools: [page]"])
def test_a_delegates_children_count_toward_the_delegates_max_model_calls(
    tmp_path: Path, serve, kid: str
) -> None:
    # helper may make 2 model calls per delegation: its spawn turn and one more. Its three
    # children's calls are calls its delegation causes, as a task's children's are the task's.
    url = serve(delegate_spawns_reply)
    result, run_id = run_team(tmp_path, DELEGATE_SPAWNS.format(calls=2, kid=kid))
    assert result.exit_code == 0, result.output
    helper, kids = bodies_of(url, "You are the helper."), bodies_of(url, "You are the kid.")
    assert len(helper) + len(kids) <= 2, (len(helper), len(kids))
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        calls = ledger.calls(run_id)
        events = ledger.events(run_id)
    sent = [c for c in calls if c.subject.startswith(("delegation:", "child:"))]
    assert len([c for c in sent if c.response is not None]) <= 2
    refused = [e for e in events if e.kind == "limit_exceeded"]
    assert any(e.data.get("limit") == "max_model_calls" for e in refused)
    verify = cli(tmp_path, "verify", run_id)
    assert verify.exit_code == 0, verify.output


def test_a_delegates_children_within_its_max_model_calls_all_run(tmp_path: Path, serve) -> None:
    url = serve(delegate_spawns_reply)
    result, run_id = run_team(tmp_path, DELEGATE_SPAWNS.format(calls=5, kid=""))
    assert result.exit_code == 0, result.output
    assert len(bodies_of(url, "You are the kid.")) == 3
    assert len(bodies_of(url, "You are the helper.")) == 2
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        events = ledger.events(run_id)
    assert not [e for e in events if e.kind == "limit_exceeded"]
    assert [e.data["status"] for e in events if e.kind == "child"] == ["ok"] * 3


# -- a limit that stops an agent is on record, whatever its path ---------------------------

EVERY_PATH = """\
name: every
tools:
  page: {{function: "parity17_tools:page"}}
agents:
  - {{name: worker, instructions: You are the worker., tools: [page], can_delegate_to: [helper],
     can_spawn: [kid]{worker}}}
  - {{name: helper, instructions: You are the helper.{helper}}}
  - {{name: kid, instructions: You are the kid.{kid}}}
  - {{name: iso, instructions: You are the isolated reviewer.{iso}}}
coordinator: {{name: boss, instructions: You are the boss.{boss}}}
tasks:
  - {{id: work, title: Work, description: Work on it., assignee: worker}}
  - {{id: review, title: Review, description: Review it., assignee: iso, mode: isolated}}
"""


def every_path_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "You are the worker." in system:
        if "## Results of your tool calls" not in user:
            return [("delegate", {"agent": "helper", "task": "Help."}),
                    ("spawn", {"agent": "kid", "goal": "Check."})]  # fmt: skip
        return "WORKER-DONE"
    if "You are the isolated reviewer." in system:
        return "ISO-DONE\nSTATUS: done"
    return "ANSWER"


TOO_LONG = ", limits: {max_tokens_per_step: 20}"
STOPPED = [  # (the agent given the limit, the recorded subject's start)
    ("worker", "task:work"), ("helper", "delegation:"), ("kid", "child:"),
    ("iso", "isolated:review"), ("boss", "synthesis"),
]  # fmt: skip


@pytest.mark.parametrize(("who", "subject"), STOPPED)
def test_a_breached_call_limit_is_recorded_on_every_path(
    tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch, who: str, subject: str
) -> None:
    # Every answer reports 100 completion tokens; only ``who`` may generate at most 20.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parity17_tools.py").write_text(PAGE_TOOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "parity17_tools", raising=False)
    usage = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110}
    url = openai_server(every_path_reply, usage)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    parts = {name: TOO_LONG if name == who else "" for name, _ in STOPPED}
    result, run_id = run_team(tmp_path, EVERY_PATH.format(**parts))
    assert run_id, result.output
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        events = ledger.events(run_id)
    breaches = [e for e in events if e.kind == "limit_exceeded"]
    assert [(e.data["limit"], e.data["maximum"]) for e in breaches] == [
        ("max_tokens_per_step", 20)
    ], breaches
    assert breaches[0].subject.startswith(subject), breaches[0].subject
    verify = cli(tmp_path, "verify", run_id)
    assert verify.exit_code == 0, verify.output


CHAT_TEAM = """\
name: talk
agents:
  - name: talker
    instructions: You are the talker.
    limits: {max_output_tokens: 40, max_tokens_per_step: 20}
"""


def test_a_breached_call_limit_is_recorded_in_chat_as_in_a_run(
    tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    usage = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110}
    url = openai_server(lambda messages: "ok", usage)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    (tmp_path / "team.yaml").write_text(CHAT_TEAM)
    result = cli(tmp_path, "chat", "team.yaml", "--agent", "talker", "--model", "openai:m",
                 "--context-window", "8000", input="hello\n")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "max_tokens_per_step" in result.output
    assert [b["max_tokens"] for b in url.bodies] == [20]  # its own cap, sent
    found = re.search(r"chat run (\S+):", result.output)
    assert found is not None, result.output
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        events = ledger.events(found.group(1))
    breaches = [e for e in events if e.kind == "limit_exceeded"]
    assert [(e.subject, e.data["limit"], e.data["maximum"]) for e in breaches] == [
        ("conversation:talker", "max_tokens_per_step", 20)
    ]
    verify = cli(tmp_path, "verify", found.group(1))
    assert verify.exit_code == 0, verify.output


# -- every sampling key and the completion cap, as declared on each path's own agent -------


def own(n: int) -> str:
    return (f", limits: {{max_output_tokens: {60 + n}, max_tokens_per_step: {40 + n}}}, "
            f"sampling: {{temperature: 0.{n}, top_p: 0.{n}5, repeat_penalty: 1.{n}, "
            f"stop: [STOP-{n}]}}")  # fmt: skip


SYSTEMS = {"worker": "You are the worker.", "helper": "You are the helper.",
           "kid": "You are the kid.", "iso": "You are the isolated reviewer.",
           "boss": "You are the boss."}  # fmt: skip


def test_each_path_sends_its_own_agents_sampling_and_cap(tmp_path: Path, serve) -> None:
    url = serve(every_path_reply)
    numbers = {name: n for n, name in enumerate(SYSTEMS, 1)}
    result, run_id = run_team(
        tmp_path, EVERY_PATH.format(**{name: own(n) for name, n in numbers.items()})
    )
    assert result.exit_code == 0, result.output
    (tmp_path / "chat.yaml").write_text(EVERY_PATH.format(**{name: own(n) for name, n in
                                                             numbers.items()}))  # fmt: skip
    chat = cli(tmp_path, "chat", "chat.yaml", "--agent", "iso", "--model", "openai:m",
               "--context-window", "8000", input="hello\n")  # fmt: skip
    assert chat.exit_code == 0, chat.output
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        calls = ledger.calls(run_id)
    for name, n in numbers.items():
        bodies = bodies_of(url, SYSTEMS[name])
        assert bodies, name
        for body in bodies:
            got = (body.get("max_tokens"), body.get("temperature"), body.get("top_p"),
                   body.get("repeat_penalty"), body.get("stop"))  # fmt: skip
            want = (40 + n, float(f"0.{n}"), float(f"0.{n}5"), float(f"1.{n}"), [f"STOP-{n}"])
            assert got == want, name
        recorded = [c for c in calls if c.agent == name]
        assert recorded and all((c.parameters or {}).get("max_tokens") == 40 + n
                                for c in recorded), name  # fmt: skip
    assert len(bodies_of(url, SYSTEMS["iso"])) == 2  # the isolated dispatch and the chat turn
    verify = cli(tmp_path, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- memory.record_to: what chat records goes where a run's records go ----------------------

RECORD_TO = """\
name: desk
memory: {{url: "sqlite:///{tmp}/memory.db"}}
memory_groups:
  - {{name: desk, agents: [talker, editor]}}
agents:
  - name: talker
    instructions: You are the talker.
    limits: {{max_output_tokens: 20}}
    memory: {{recall: 3, record_to: desk}}
  - {{name: editor, instructions: You edit., memory: {{recall: 3}}}}
tasks:
  - {{id: t, title: T, description: Talk., assignee: talker}}
  - {{id: e, title: E, description: Edit., assignee: editor}}
"""


def test_chat_records_dropped_turns_where_memory_record_to_says(
    tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    monkeypatch.chdir(tmp_path)
    url = openai_server(lambda messages: "ok")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    (tmp_path / "team.yaml").write_text(RECORD_TO.format(tmp=tmp_path))
    lines = [f"message {n}: " + " ".join(f"word{n}x{i}" for i in range(30)) for n in range(8)]
    result = cli(tmp_path, "chat", "team.yaml", "--agent", "talker", "--model", "openai:m",
                 "--context-window", "600", input="".join(f"{x}\n" for x in lines))  # fmt: skip
    assert result.exit_code == 0, result.output
    with sqlite3.connect(tmp_path / "memory.db") as db:
        scopes = {s for (s,) in db.execute("select scope from clearance_memories")}
    # Dropped turns were recorded, into the group, as a run records a result (never private).
    assert scopes == {"group:desk"}, scopes
    found = re.search(r"chat run (\S+):", result.output)
    assert found is not None, result.output
    verify = cli(tmp_path, "verify", found.group(1))
    assert verify.exit_code == 0, verify.output
