"""Capabilities on every call path, end to end: `clearance run`, `inspect`, `verify`.

The model is a scripted OpenAI-compatible server on 127.0.0.1; each test asserts on what the
model was actually sent (the server keeps every request body) and on the ledger.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import ContextStore, RunLedger
from clearance._state.grants import StoreGrants
from clearance.cli._app import app

pytestmark = pytest.mark.network

SECRET = "SALARY-ALICE-93000"

TOOL_MODULE = '''\
from pathlib import Path

def remove(path: str) -> str:
    """Remove a file."""
    with open(Path(__file__).parent / "ran.log", "a") as log:
        log.write(path + "\\n")
    return f"REMOVED {path}"

def listing(folder: str) -> str:
    """List a folder."""
    return "\\n".join(f"{folder}/file_{n:03d}.txt" for n in range(300))

def page(n: int) -> str:
    """Read a page."""
    return f"PAGE-{n} " + " ".join(f"word{n}x{i}" for i in range(150))
'''


@pytest.fixture
def env(tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)  # workspaces land under ./.clearance/workspaces
    (tmp_path / "cap_tools_mod.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cap_tools_mod", raising=False)

    def serve(reply: Any) -> str:
        url = openai_server(reply)
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        return url

    return {"tmp": tmp_path, "db": f"sqlite:///{tmp_path / 'runs.db'}", "serve": serve}


def cli(env: dict[str, Any], *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", env["db"]])


def run_team(env: dict[str, Any], team: str) -> tuple[Any, str | None]:
    path = env["tmp"] / "team.yaml"
    path.write_text(team)
    result = cli(env, "run", str(path), "--model", "openai:m")
    found = re.search(r"run id: (\S+)", result.output)
    return result, found.group(1) if found else None


def sent(url: Any) -> list[str]:
    """Every prompt the model received, as one text each."""
    return ["\n".join(m.get("content") or "" for m in b["messages"]) for b in url.bodies]


# -- no capability is lent ------------------------------------------------------------------

DEPUTY = """\
name: deputy
store: sqlite:///{tmp}/store.db
agents:
  - {{name: asker, instructions: You answer questions., can_delegate_to: [hr_bot]}}
  - name: hr_bot
    instructions: You read HR records.
    tools: [store_get]
    store_grants: {{"hr/*": read}}
tasks:
  - {{id: ask, title: Ask, description: Say what alice earns., assignee: asker}}
"""


def deputy_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "You read HR records." in system:
        if "## Results of your tool calls" not in user:
            return [("store_get", {"namespace": "hr/salaries", "key": "alice"})]
        return f"alice earns {SECRET}" if SECRET in user else "I may not read it."
    if "You answer questions." not in system:
        return "the synthesis"
    if "## Results of your tool calls" not in user:
        return [("delegate", {"agent": "hr_bot", "task": "Read hr/salaries alice."})]
    return "done"


def deputy_env(env: dict[str, Any]) -> Any:
    with ContextStore(f"sqlite:///{env['tmp'] / 'store.db'}") as store:
        store.set("hr/salaries", "alice", SECRET, "hr")
    return env["serve"](deputy_reply)


def test_a_delegate_never_reads_what_its_delegator_may_not(env) -> None:
    url = deputy_env(env)
    result, run_id = run_team(env, DEPUTY.format(tmp=env["tmp"]))
    assert result.exit_code == 0, result.output
    assert not any(SECRET in text for text in sent(url))  # the value reached no prompt
    with RunLedger(env["db"]) as ledger:
        (withheld,) = [e for e in ledger.events(run_id) if e.kind == "grant_withheld"]
        assert withheld.data["namespace"] == "hr/salaries"
        assert withheld.data["agent"] == "hr_bot" and withheld.data["chain"] == ["asker", "hr_bot"]
        read = next(t for t in ledger.tool_calls(run_id) if t.name == "store_get")
        assert read.is_error and "may not read" in read.result
    assert "grant_withheld" in cli(env, "inspect", run_id, "--no-prompt").output
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


def test_verify_flags_a_run_where_a_delegate_lent_its_grant(env, monkeypatch) -> None:
    # The run as it went before grants were intersected: the delegate used its own grant.
    monkeypatch.setattr(StoreGrants, "intersect", lambda self, ceiling: self)
    url = deputy_env(env)
    result, run_id = run_team(env, DEPUTY.format(tmp=env["tmp"]))
    assert result.exit_code == 0, result.output
    assert any(SECRET in text for text in sent(url))  # the confused deputy, reproduced
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 1, verify.output
    assert "'hr_bot' could read 'hr/salaries' acting for 'asker'" in verify.output


# -- a delegate spawns with its own capabilities, never its delegator's ----------------------

DELEGATE_SPAWN = """\
name: delegate-spawn
store: sqlite:///{tmp}/store.db
agents:
  - name: boss
    instructions: You are the boss.
    can_delegate_to: [mid]
    can_spawn: [kid_a]
    tools: [store_get]
    store_grants: {{"hr/*": read}}
  - name: mid
    instructions: You are the middle manager.
    can_spawn: [kid_b]
    tools: [store_get]
    store_grants: {{"notes/*": read}}
  - name: kid_a
    instructions: You are kid A.
    tools: [store_get]
    store_grants: {{"hr/*": read}}
  - name: kid_b
    instructions: You are kid B.
    tools: [store_get]
    store_grants: {{"hr/*": read, "notes/*": read}}
tasks:
  - {{id: work, title: Work, description: Get the work done., assignee: boss}}
"""


def delegate_spawn_reply(child: str) -> Any:
    """The boss delegates to mid; mid asks for a child of agent ``child``; kids read HR."""

    def reply(messages: list[dict[str, Any]]) -> Any:
        system, user = messages[0]["content"], messages[-1]["content"]
        called = "## Results of your tool calls" in user
        if "You are the boss." in system:
            return "boss done" if called else [("delegate", {"agent": "mid", "task": "Work."})]
        if "You are the middle manager." in system:
            return "mid done" if called else [("spawn", {"agent": child, "goal": "Read HR."})]
        if "You are kid" in system:
            if not called:
                return [("store_get", {"namespace": "hr/salaries", "key": "alice"})]
            return f"kid saw {SECRET}" if SECRET in user else "kid saw nothing"
        return "the synthesis"

    return reply


def delegate_spawn_run(env: dict[str, Any], child: str) -> tuple[Any, str, Any]:
    with ContextStore(f"sqlite:///{env['tmp'] / 'store.db'}") as store:
        store.set("hr/salaries", "alice", SECRET, "hr")
    url = env["serve"](delegate_spawn_reply(child))
    result, run_id = run_team(env, DELEGATE_SPAWN.format(tmp=env["tmp"]))
    assert result.exit_code == 0, result.output
    assert run_id is not None
    return result, run_id, url


def test_a_delegate_may_not_spawn_what_only_its_delegator_may(env) -> None:
    # kid_a is in the boss's can_spawn, not in mid's: mid acting for the boss may not use it.
    _result, run_id, url = delegate_spawn_run(env, "kid_a")
    assert not any(SECRET in text for text in sent(url))
    assert not any("You are kid A." in text for text in sent(url))  # no child ran
    with RunLedger(env["db"]) as ledger:
        (spawn,) = [t for t in ledger.tool_calls(run_id) if t.name == "spawn"]
        assert spawn.agent == "mid" and spawn.is_error
        assert "'kid_a' is not in can_spawn (kid_b)" in spawn.result
        assert not [e for e in ledger.events(run_id) if e.kind == "spawn"]
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


def test_a_delegates_child_acts_within_the_delegate_and_its_delegator(env, rechain) -> None:
    # kid_b is mid's to spawn; its grants are cut to kid_b's, mid's and the boss's together:
    # mid has no HR grant, so neither has its child, though kid_b's own grants include HR.
    _result, run_id, url = delegate_spawn_run(env, "kid_b")
    assert not any(SECRET in text for text in sent(url))
    assert any("You are kid B." in text for text in sent(url))  # the child ran
    with RunLedger(env["db"]) as ledger:
        (event,) = [e for e in ledger.events(run_id) if e.kind == "spawn"]
        assert event.data["parent_agent"] == "mid"
        assert event.data["parent_subject"].startswith("delegation:")
        read = next(t for t in ledger.tool_calls(run_id) if t.name == "store_get")
        assert read.agent == "kid_b" and read.is_error and "may not read" in read.result
        (spawn,) = [t for t in ledger.tool_calls(run_id) if t.name == "spawn"]
        assert "ended: ok; its result:\nkid saw nothing" in spawn.result  # mid gets it
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output
    # A forger who moves the spawn to the boss (whose can_spawn does not name kid_b):
    forged = forge(env, "UPDATE events SET data = json_set(data, '$.parent_agent', 'boss') "
                   "WHERE kind = 'spawn' AND run_id = ?", run_id, rechain)  # fmt: skip
    assert forged.exit_code == 1, forged.output
    assert "spawned by 'boss', whose can_spawn does not name it" in forged.output


def test_verify_flags_a_delegates_child_recorded_as_the_tasks_own(env, rechain) -> None:
    # Without its delegation, the child's chain of callers would skip mid's grants.
    _result, run_id, _url = delegate_spawn_run(env, "kid_b")
    forged = forge(env, "UPDATE events SET data = json_set(data, '$.parent_subject', "
                   "'delegation:tool_forged') WHERE kind = 'spawn' AND run_id = ?", run_id,
                   rechain)  # fmt: skip
    assert forged.exit_code == 1, forged.output
    assert "which is not a delegation to 'mid'" in forged.output


# -- a delegate or child is given only the tools its caller may call ---------------------------

TOOL_CEILING = """\
name: tool-ceiling
agents:
  - {name: asker, instructions: You ask for tidying., can_delegate_to: [janitor]}
  - {name: janitor, instructions: You tidy up., tools: [remove, write_output]}
tools:
  remove: {function: "cap_tools_mod:remove"}
tasks:
  - {id: tidy, title: Tidy, description: Have old.txt removed., assignee: asker}
  # The janitor's own task: remove is its own there (and this keeps the tool in effect).
  - {id: greet, title: Greet, description: Say hello., assignee: janitor}
"""


def ceiling_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    called = "## Results of your tool calls" in user
    if "You tidy up." in system:
        if "Say hello." in user:
            return "hello"
        return "could not" if called else [("remove", {"path": "old.txt"})]
    if "You ask for tidying." in system:
        return "asked" if called else [("delegate", {"agent": "janitor", "task": "Remove it."})]
    return "the synthesis"


def test_a_delegate_is_not_given_a_tool_its_delegator_may_not_call(env) -> None:
    url = env["serve"](ceiling_reply)
    run, run_id = run_team(env, TOOL_CEILING)
    assert run.exit_code == 0, run.output
    assert not (env["tmp"] / "ran.log").exists()  # the janitor's remove never ran
    offered = [
        sorted(t["function"]["name"] for t in b.get("tools", ()))
        for b in url.bodies
        if "You tidy up." in b["messages"][0]["content"]
        and "Remove it." in b["messages"][-1]["content"]
    ]
    assert offered and all(o == ["write_output"] for o in offered), offered
    with RunLedger(env["db"]) as ledger:
        (event,) = [e for e in ledger.events(run_id) if e.kind == "tools_withheld"]
        assert event.data == {"agent": "janitor", "tools": ["remove"]}
        (call,) = [t for t in ledger.tool_calls(run_id) if t.name == "remove"]
        assert call.is_error and "withheld" in call.result
    shown = cli(env, "inspect", run_id, "--no-prompt")
    assert "tools_withheld" in shown.output, shown.output
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


def test_a_tool_no_caller_of_a_delegate_may_call_is_refused_at_load(env) -> None:
    team = TOOL_CEILING.replace(
        "  - {id: greet, title: Greet, description: Say hello., assignee: janitor}\n", ""
    )
    result, run_id = run_team(env, team)
    assert result.exit_code == 2, result.output
    assert run_id is None
    message = result.output.strip().splitlines()[-1]
    assert "agents.janitor.tools" in message and "'remove'" in message, result.output
    assert "delegate or child of 'asker'" in message, result.output


# -- a child's approval-required tool pauses --------------------------------------------------

CHILD_APPROVAL = """\
name: child-approval
agents:
  - {name: lead, instructions: You combine answers., can_spawn: [janitor], tools: [remove]}
  - {name: janitor, instructions: You tidy up., tools: [remove]}
tools:
  remove: {function: "cap_tools_mod:remove", approval: required}
tasks:
  - id: tidy
    title: Tidy
    description: Have the old file removed.
    assignee: lead
    fan_out: {agent: janitor, goals: [Delete the file old.txt.]}
"""


def child_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "You tidy up." in system:
        return "removed it" if "REMOVED old.txt" in user else [("remove", {"path": "old.txt"})]
    return "tidied"


def test_a_childs_approval_required_tool_waits_for_a_person(env) -> None:
    env["serve"](child_reply)
    log = env["tmp"] / "ran.log"
    run, run_id = run_team(env, CHILD_APPROVAL)
    assert run.exit_code == 3, run.output
    assert not log.exists()  # paused before the tool ran
    (call_id,) = re.findall(r"apr_[0-9a-z_]+", run.output.split("awaiting approval:")[1])
    approved = cli(env, "approve", run_id, call_id, "--by", "alice")
    assert approved.exit_code == 0, approved.output
    assert "janitor in task tidy calls remove" in approved.output
    resumed = cli(env, "resume", run_id)
    assert resumed.exit_code == 0, resumed.output
    assert log.read_text() == "old.txt\n"
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- memory on an isolated task -------------------------------------------------------------

ISOLATED_MEMORY = """\
name: isolated-memory
memory: {{url: "sqlite:///{tmp}/memory.db"}}
agents:
  - name: reviewer
    instructions: You review modules.
    memory: {{recall: 3, record: result}}
tasks:
  - {{id: review, title: Review, description: Review the module., assignee: reviewer,
     mode: isolated}}
"""


def test_an_isolated_task_recalls_its_agents_memory_into_its_prompt(env) -> None:
    answers = iter(["Review of the module: REMEMBERED-FINDING-1\nSTATUS: done",
                    "second\nSTATUS: done"])  # fmt: skip
    url = env["serve"](lambda m: next(answers) if "You review" in m[0]["content"] else "ok")
    team = ISOLATED_MEMORY.format(tmp=env["tmp"])
    first, _ = run_team(env, team)
    assert first.exit_code == 0, first.output
    second, run_id = run_team(env, team)
    assert second.exit_code == 0, second.output
    isolated = [t for t in sent(url) if "Review the module." in t]
    assert "REMEMBERED-FINDING-1" not in isolated[0]
    assert "## From memory" in isolated[-1] and "REMEMBERED-FINDING-1" in isolated[-1]
    with RunLedger(env["db"]) as ledger:
        (call,) = [c for c in ledger.calls(run_id) if c.subject == "isolated:review"]
        assert any(i["origin"].startswith("memory:") for i in call.manifest["items"])
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- a task-level agent's workspace ---------------------------------------------------------

WRITER = """\
name: writer
agents:
  - {name: writer, instructions: You write notes., tools: [write_output, listing]}
tools:
  listing: {function: "cap_tools_mod:listing"}
tasks:
  - {id: notes, title: Notes, description: Write the notes., assignee: writer}
"""


def writer_reply(messages: list[dict[str, Any]]) -> Any:
    user = messages[-1]["content"]
    if "You write notes." not in messages[0]["content"]:
        return "the synthesis"
    if "## Results of your tool calls" not in user:
        return [("write_output", {"name": "notes.md", "content": "hello"}),
                ("listing", {"folder": "src"})]  # fmt: skip
    return "written"


def test_write_output_and_offloading_work_for_a_task_level_agent(env) -> None:
    url = env["serve"](writer_reply)
    result, run_id = run_team(env, WRITER)
    assert result.exit_code == 0, result.output
    last = [t for t in sent(url) if "Write the notes." in t][-1]
    assert "wrote outputs/notes.md (5 bytes)" in last
    assert "src/file_000.txt" in last and "src/file_299.txt" not in last  # a preview only
    (notes,) = (env["tmp"] / ".clearance" / "workspaces").glob("*/task_notes/outputs/notes.md")
    assert notes.read_text() == "hello"
    with RunLedger(env["db"]) as ledger:
        (offloaded,) = [e for e in ledger.events(run_id) if e.kind == "offloaded"]
        full = notes.parent / offloaded.data["reference"].removeprefix("outputs/")
        assert full.read_text().endswith("src/file_299.txt")
    inspect = cli(env, "inspect", run_id, "--no-prompt").output
    assert "write_output" in inspect and "offloaded" in inspect
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- a tool-less fan_out verifies ------------------------------------------------------------

FAN_OUT = """\
name: fan-out
agents:
  - {name: lead, instructions: You combine answers., can_spawn: [helper]}
  - {name: helper, instructions: You answer one narrow question.}
tasks:
  - id: q
    title: Questions
    description: Combine the answers.
    assignee: lead
    fan_out: {agent: helper, goals: [first question, second question]}
"""


def test_verify_accepts_an_honest_run_whose_fan_out_children_have_no_tools(env) -> None:
    env["serve"](lambda m: "an answer" if "narrow" in m[0]["content"] else "combined")
    result, run_id = run_team(env, FAN_OUT)
    assert result.exit_code == 0, result.output
    with RunLedger(env["db"]) as ledger:
        agents = {c.agent for c in ledger.calls(run_id) if c.subject.startswith("child:")}
        assert agents == {"helper"}
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- a long tool loop is compacted instead of overflowing -----------------------------------

READER = """\
name: reader
agents:
  - name: reader
    instructions: You read pages.
    tools: [page]
    limits: {{max_prompt_tokens: 1200, max_steps: 6{policy}}}
tools:
  page: {{function: "cap_tools_mod:page"}}
tasks:
  - {{id: read, title: Read, description: Read pages one to four., assignee: reader}}
"""


def reader_reply(messages: list[dict[str, Any]]) -> Any:
    user = messages[-1]["content"]
    if "You read pages." not in messages[0]["content"]:
        return "the synthesis"
    for n in range(1, 5):
        if f"PAGE-{n} " not in user and f'page {{"n":{n}}}' not in user:
            return [("page", {"n": n})]
    return "read them all"


def test_a_tool_loop_that_would_overflow_is_compacted_when_the_policy_allows(env) -> None:
    url = env["serve"](reader_reply)
    failed, _ = run_team(env, READER.format(policy=""))
    assert failed.exit_code == 1 and "max_prompt_tokens" in failed.output

    result, run_id = run_team(env, READER.format(policy=", compact_tool_steps: 3"))
    assert result.exit_code == 0, result.output
    last = [t for t in sent(url) if "Read pages one to four." in t][-1]
    assert "[compacted earlier step: page ok" in last
    assert "PAGE-4 word4x0" in last  # the latest result verbatim
    with RunLedger(env["db"]) as ledger:
        events = [e for e in ledger.events(run_id) if e.kind == "compacted"]
        assert events and {e.data["reason"] for e in events} <= {"policy", "overflow"}
        assert "overflow" in {e.data["reason"] for e in events}
    assert "compacted" in cli(env, "inspect", run_id, "--no-prompt").output
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output


# -- verify checks the workspace records ----------------------------------------------------


def forge(env: dict[str, Any], sql: str, run_id: str, rechain: Any) -> Any:
    """Edit the run's rows as a forger could, rebuild its chain, and verify it."""
    db = env["tmp"] / "runs.db"
    conn = sqlite3.connect(db)
    conn.execute(sql, (run_id,))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    return cli(env, "verify", run_id)


def test_verify_flags_an_offloaded_event_the_recorded_result_does_not_show(env, rechain) -> None:
    env["serve"](writer_reply)
    result, run_id = run_team(env, WRITER)
    assert result.exit_code == 0, result.output
    verify = forge(env, "UPDATE events SET data = json_set(data, '$.reference', "
                   "'outputs/other.txt') WHERE kind = 'offloaded' AND run_id = ?", run_id,
                   rechain)  # fmt: skip
    assert verify.exit_code == 1, verify.output
    assert "the tool's recorded result is not the offloaded preview" in verify.output


def test_verify_flags_a_compacted_result_no_compaction_was_recorded_for(env, rechain) -> None:
    env["serve"](reader_reply)
    result, run_id = run_team(env, READER.format(policy=", compact_tool_steps: 3"))
    assert result.exit_code == 0, result.output
    verify = forge(env, "DELETE FROM events WHERE kind = 'compacted' AND run_id = ?", run_id,
                   rechain)  # fmt: skip
    assert verify.exit_code == 1, verify.output
    assert "the content is not the recorded result of the tool call" in verify.output


# -- a withheld tool and an approval-required one, in one turn of a delegate, resumed -------

CEILING_APPROVAL = """\
name: ceiling-approval
agents:
  - {name: asker, instructions: You ask for tidying., can_delegate_to: [janitor], tools: [page]}
  - {name: janitor, instructions: You tidy up., tools: [remove, page]}
tools:
  remove: {function: "cap_tools_mod:remove"}
  page: {function: "cap_tools_mod:page", approval: required}
tasks:
  - {id: tidy, title: Tidy, description: Have old.txt removed., assignee: asker}
  - {id: greet, title: Greet, description: Say hello., assignee: janitor, depends_on: [tidy]}
"""


def ceiling_approval_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    called = "## Results of your tool calls" in user
    if "You tidy up." in system:
        if "Say hello." in user:
            return "hello"
        return "done" if called else [("remove", {"path": "old.txt"}), ("page", {"n": 1})]
    if "You ask for tidying." in system:
        return "asked" if called else [("delegate", {"agent": "janitor", "task": "Remove it."})]
    return "the synthesis"


def test_a_delegates_withheld_call_beside_an_approval_is_refused_again_on_resume(env) -> None:
    env["serve"](ceiling_approval_reply)
    run, run_id = run_team(env, CEILING_APPROVAL)
    assert run.exit_code == 3, run.output
    (call_id,) = re.findall(r"apr_[0-9a-z_]+", run.output.split("awaiting approval:")[1])
    approved = cli(env, "approve", run_id, call_id, "--by", "alice")
    assert approved.exit_code == 0, approved.output
    assert "calls page" in approved.output and "remove" not in approved.output
    resumed = cli(env, "resume", run_id)
    assert resumed.exit_code == 0, resumed.output
    assert not (env["tmp"] / "ran.log").exists()  # remove never ran
    with RunLedger(env["db"]) as ledger:
        calls = {t.name: t for t in ledger.tool_calls(run_id) if t.agent == "janitor"}
        assert "withheld" in calls["remove"].result
        assert calls["page"].result.startswith("PAGE-1 ")
    shown = cli(env, "inspect", run_id, "--no-prompt")
    assert shown.exit_code == 0 and "tools_withheld" in shown.output, shown.output
    verify = cli(env, "verify", run_id)
    assert verify.exit_code == 0, verify.output
