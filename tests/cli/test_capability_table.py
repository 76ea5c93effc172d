"""The capability-by-path table, cell by cell (``docs/architecture.md``).

Every declared capability crossed with every call path either works in a run — it is in
what the model was sent or in the ledger, ``clearance inspect`` shows the run and ``clearance
verify`` passes it — or the team file is refused at load with exit 2 and a line naming the key.

The "works" cells are read off two runs of one team file that exercises every path at once
(the second run recalls what the first recorded), plus one ``clearance chat`` session; the
"refused" cells each load a team file that declares the capability where its path cannot
apply it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import ContextStore, RunLedger
from clearance.cli._app import app

pytestmark = pytest.mark.network

SECRET = "SALARY-ALICE-93000"
PATHS = ("task", "isolated", "child", "delegate", "coordinator", "chat")
CAPABILITIES = ("tools", "store_grants", "memory", "workspace", "limits_sampling", "approval")

TOOLS = '''\
from pathlib import Path

def page(n: int) -> str:
    """Read a page."""
    return f"PAGE-{n} " + " ".join(f"w{n}x{i}" for i in range(20))

def remove(path: str) -> str:
    """Remove a file."""
    with open(Path(__file__).parent / "ran.log", "a") as log:
        log.write(path + "\\n")
    return f"REMOVED {path}"
'''

TEAM = """\
name: table
store: sqlite:///{tmp}/store.db
memory: {{url: "sqlite:///{tmp}/memory.db"}}
tools:
  page: {{function: "table_tools:page"}}
  remove: {{function: "table_tools:remove", approval: required}}
agents:
  - name: worker
    instructions: You are the worker.
    tools: [store_get, write_output, page, remove]
    store_grants: {{"notes/*": read}}
    can_delegate_to: [helper]
    can_spawn: [kid]
    memory: {{recall: 3, record: result}}
    limits: {{max_output_tokens: 71, compact_tool_steps: 1, max_steps: 8}}
    sampling: {{temperature: 0.1}}
  - name: helper
    instructions: You are the helper.
    tools: [store_get, page, remove]
    store_grants: {{"notes/*": read, "hr/*": read}}
    limits: {{max_output_tokens: 72, compact_tool_steps: 1}}
    sampling: {{temperature: 0.2}}
  - name: kid
    instructions: You are the kid.
    tools: [store_get, page, remove]
    store_grants: {{"notes/*": read, "hr/*": read}}
    limits: {{max_output_tokens: 73, compact_tool_steps: 1}}
    sampling: {{temperature: 0.3}}
  - name: iso
    instructions: You are the isolated reviewer.
    memory: {{recall: 3, record: result}}
    limits: {{max_output_tokens: 74}}
    sampling: {{temperature: 0.4}}
coordinator:
  name: boss
  instructions: You are the boss.
  limits: {{max_output_tokens: 75}}
  sampling: {{temperature: 0.5}}
tasks:
  - {{id: work, title: Work on the notes, description: Work on the notes., assignee: worker}}
  - {{id: review, title: Review the notes, description: Review the notes., assignee: iso,
     mode: isolated, depends_on: [work]}}
"""

# Each helper-like agent: reads the store (one granted namespace, one its caller lacks),
# pages, asks for an approval tool, then answers.
SUB_STEPS: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [
    ("", [("store_get", {"namespace": "notes/a", "key": "k"}),
          ("store_get", {"namespace": "hr/salaries", "key": "alice"})]),
    ("entry notes/a/k read", [("page", {"n": 7})]),
    ("PAGE-7", [("remove", {"path": "{who}.txt"})]),
]  # fmt: skip
WORKER_STEPS: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [
    ("", [("store_get", {"namespace": "notes/a", "key": "k"}), ("page", {"n": 1})]),
    ("PAGE-1", [("write_output", {"name": "out.md", "content": "hello"}), ("page", {"n": 2})]),
    ("wrote outputs/out.md", [("delegate", {"agent": "helper", "task": "Help with notes."})]),
    ("HELPER-ANSWER", [("spawn", {"agent": "kid", "goal": "Check one note."})]),
    ("ended: ok", [("remove", {"path": "worker.txt"})]),
]  # fmt: skip


def scripted(steps: list[tuple[str, list[Any]]], user: str, who: str, done: str) -> Any:
    """The calls of the latest step whose marker is in the prompt; ``done`` after the last."""
    answer: Any = steps[0][1]
    for marker, calls in steps[1:]:
        if marker not in user:
            break
        answer = calls
    else:
        if f"REMOVED {who}.txt" in user:
            return done
    return [(name, {k: str(v).replace("{who}", who) if isinstance(v, str) else v
                    for k, v in args.items()}) for name, args in answer]  # fmt: skip


def reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "You are the worker." in system:
        return scripted(WORKER_STEPS, user, "worker", "Work on the notes: WORKER-DONE")
    if "You are the helper." in system:
        leaked = " " + SECRET if SECRET in user else ""
        return scripted(SUB_STEPS, user, "helper", "HELPER-ANSWER" + leaked)
    if "You are the kid." in system:
        leaked = " " + SECRET if SECRET in user else ""
        return scripted(SUB_STEPS, user, "kid", "KID-ANSWER" + leaked)
    if "You are the isolated reviewer." in system:
        return "Review the notes: ISO-FINDING\nSTATUS: done"
    return "Work on the notes: the synthesis"


def cli(tmp: Path, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp / 'runs.db'}"], input=input)


@pytest.fixture(scope="module")
def table_run(tmp_path_factory, openai_server_module) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("table")
    mp = pytest.MonkeyPatch()
    try:
        mp.chdir(tmp)
        (tmp / "table_tools.py").write_text(TOOLS)
        mp.syspath_prepend(str(tmp))
        mp.delitem(sys.modules, "table_tools", raising=False)
        url = openai_server_module(reply)
        mp.setenv("OPENAI_BASE_URL", url)
        mp.setenv("OPENAI_API_KEY", "test")
        with ContextStore(f"sqlite:///{tmp / 'store.db'}") as store:
            store.set("notes/a", "k", "a note", "seed")
            store.set("hr/salaries", "alice", SECRET, "seed")
        (tmp / "team.yaml").write_text(TEAM.format(tmp=tmp))
        outputs, first = [], 0
        for _ in range(2):  # the second run recalls what the first recorded
            first = len(url.bodies)
            run = cli(tmp, "run", "team.yaml", "--model", "openai:m", "--interactive",
                      input="y\n" * 12)  # fmt: skip
            assert run.exit_code == 0, run.output
            outputs.append(run.output)
        run_id = re.findall(r"run id: (\S+)", outputs[-1])[-1]
        chat = cli(tmp, "chat", "team.yaml", "--agent", "iso", "--model", "openai:m",
                   "--context-window", "8000",
                   input="Review the notes please\n")  # fmt: skip
        assert chat.exit_code == 0, chat.output
        verify = cli(tmp, "verify", run_id)
        inspect = cli(tmp, "inspect", run_id, "--no-prompt")
        with RunLedger(f"sqlite:///{tmp / 'runs.db'}") as ledger:
            recorded = {
                "calls": ledger.calls(run_id),
                "tool_calls": ledger.tool_calls(run_id),
                "events": ledger.events(run_id),
            }
        yield {
            "tmp": tmp, "run_id": run_id, "bodies": url.bodies[first:], "all": url.bodies,
            "verify": verify, "inspect": inspect.output, "chat": chat, **recorded,
        }  # fmt: skip
    finally:
        mp.undo()


def bodies_of(run: dict[str, Any], system: str) -> list[dict[str, Any]]:
    return [b for b in run["bodies"] if system in (b["messages"][0]["content"] or "")]


def tool_names(run: dict[str, Any], kind: str) -> set[str]:
    return {t.name for t in run["tool_calls"] if t.subject.startswith(kind + ":")}


def events(run: dict[str, Any], kind: str, subject_kind: str) -> list[Any]:
    return [e for e in run["events"] if e.kind == kind and e.subject.startswith(subject_kind)]


def user_texts(run: dict[str, Any], system: str) -> list[str]:
    return [b["messages"][-1]["content"] for b in bodies_of(run, system)]


def sampled(run: dict[str, Any], system: str, temperature: float, max_tokens: int) -> bool:
    found = bodies_of(run, system)
    return bool(found) and all(
        b.get("temperature") == temperature and b.get("max_tokens") == max_tokens for b in found
    )


def approved(run: dict[str, Any], agent: str) -> bool:
    decided = [e for e in run["events"] if e.kind == "approval_decided"]
    ran = (run["tmp"] / "ran.log").read_text().splitlines()
    ok = any(e.data["agent"] == agent and e.data["decision"] == "approved" for e in decided)
    return ok and f"{agent}.txt" in ran


def lent_nothing(run: dict[str, Any], kind: str) -> bool:
    withheld = events(run, "grant_withheld", kind)
    reads = [t for t in run["tool_calls"] if t.subject.startswith(kind + ":") and t.store_reads]
    return (
        bool(withheld)
        and all(e.data["namespace"] == "hr/salaries" for e in withheld)
        and {r["namespace"] for t in reads for r in t.store_reads} == {"notes/a"}
        and not any(SECRET in str(b) for b in run["all"])
    )


WORKS: dict[tuple[str, str], Callable[[dict[str, Any]], bool]] = {
    ("tools", "task"): lambda r: (
        {"store_get", "write_output", "page", "delegate", "spawn", "remove"}
        <= tool_names(r, "task")
    ),
    ("tools", "child"): lambda r: {"store_get", "page", "remove"} <= tool_names(r, "child"),
    ("tools", "delegate"): lambda r: {"store_get", "page", "remove"} <= tool_names(r, "delegation"),
    ("store_grants", "task"): lambda r: any(
        t.store_reads and t.subject == "task:work" for t in r["tool_calls"]
    ),
    ("store_grants", "child"): lambda r: lent_nothing(r, "child"),
    ("store_grants", "delegate"): lambda r: lent_nothing(r, "delegation"),
    ("memory", "task"): lambda r: any(
        "## From memory" in u and "WORKER-DONE" in u for u in user_texts(r, "You are the worker.")
    ),
    ("memory", "isolated"): lambda r: any(
        "## From memory" in u and "ISO-FINDING" in u
        for u in user_texts(r, "You are the isolated reviewer.")
    ),
    ("memory", "chat"): lambda r: (
        "ISO-FINDING" in str(r["all"][-1]["messages"])
    ),  # the chat turn recalls the runs' records
    ("workspace", "task"): lambda r: (
        bool(events(r, "compacted", "task:"))
        and bool(list(r["tmp"].glob(".clearance/workspaces/*/task_work*/outputs/out.md")))
    ),
    ("workspace", "child"): lambda r: bool(events(r, "compacted", "child:")),
    ("workspace", "delegate"): lambda r: bool(events(r, "compacted", "delegation:")),
    ("limits_sampling", "task"): lambda r: sampled(r, "You are the worker.", 0.1, 71),
    ("limits_sampling", "delegate"): lambda r: sampled(r, "You are the helper.", 0.2, 72),
    ("limits_sampling", "child"): lambda r: sampled(r, "You are the kid.", 0.3, 73),
    ("limits_sampling", "isolated"): lambda r: sampled(r, "isolated reviewer.", 0.4, 74),
    ("limits_sampling", "coordinator"): lambda r: sampled(r, "You are the boss.", 0.5, 75),
    ("limits_sampling", "chat"): lambda r: (
        r["all"][-1].get("temperature") == 0.4 and r["all"][-1].get("max_tokens") == 74
    ),
    ("approval", "task"): lambda r: approved(r, "worker"),
    ("approval", "child"): lambda r: approved(r, "kid"),
    ("approval", "delegate"): lambda r: approved(r, "helper"),
}

BASE = """\
name: refused
agents:
  - {{name: worker, instructions: You work.{worker}}}
  - {{name: helper, instructions: You help.{helper}}}
coordinator: {{name: boss, instructions: You lead.{boss}}}
tools:
  page: {{function: "os:getcwd"}}
tasks:
  - {{id: t, title: T, description: Do it., assignee: worker{task}}}
"""
ISOLATED = ", mode: isolated"
FAN_OUT = ", fan_out: {agent: helper, goals: [one]}"

# (capability, path): (the declaration, what the one-line error names; "chat" loads it with
# ``clearance chat --agent worker``, every other path with ``clearance run``)
REFUSED: dict[tuple[str, str], tuple[dict[str, str], str]] = {
    ("tools", "isolated"): ({"worker": ", tools: [page]", "task": ISOLATED}, "agents.worker.tools"),
    ("tools", "coordinator"): ({"boss": ", tools: [page]"}, "coordinator.tools"),
    ("tools", "chat"): ({"worker": ", tools: [page]"}, "agents.worker.tools"),
    ("store_grants", "isolated"): (
        {"worker": ', store_grants: {"n/*": read}', "task": ISOLATED},
        "agents.worker.store_grants",
    ),
    ("store_grants", "coordinator"): (
        {"boss": ', store_grants: {"n/*": read}'},
        "coordinator.store_grants",
    ),
    ("store_grants", "chat"): (
        {"worker": ', store_grants: {"n/*": read}'},
        "agents.worker.store_grants",
    ),
    ("memory", "child"): (
        {"helper": ", memory: {recall: 1}", "task": FAN_OUT},
        "agents.helper.memory",
    ),
    ("memory", "delegate"): (
        {"worker": ", tools: [page], can_delegate_to: [helper]", "helper": ", memory: {recall: 1}"},
        "agents.helper.memory",
    ),
    ("memory", "coordinator"): ({"boss": ", memory: {recall: 1}"}, "coordinator.memory"),
    ("workspace", "isolated"): (
        {"worker": ", limits: {compact_tool_steps: 2}", "task": ISOLATED},
        "limits.compact_tool_steps",
    ),
    ("workspace", "coordinator"): (
        {"boss": ", limits: {max_output_files: 2}"},
        "limits.max_output_files",
    ),
    # (The team file's `page` entry listed too: an entry no agent lists is refused first.)
    ("workspace", "chat"): ({"worker": ", tools: [write_output, page]"}, "agents.worker.tools"),
    ("approval", "isolated"): (
        {"worker": ", tools: [page]", "task": ISOLATED},
        "agents.worker.tools",
    ),
    ("approval", "coordinator"): ({"boss": ", tools: [page]"}, "coordinator.tools"),
    ("approval", "chat"): ({"worker": ", tools: [page]"}, "agents.worker.tools"),
}


def test_the_table_has_every_cell_once() -> None:
    cells = {(c, p) for c in CAPABILITIES for p in PATHS}
    assert set(WORKS) | set(REFUSED) == cells
    assert not set(WORKS) & set(REFUSED)


@pytest.mark.parametrize(("capability", "path"), sorted(WORKS))
def test_a_cell_that_works_is_in_the_run(table_run, capability: str, path: str) -> None:
    assert WORKS[(capability, path)](table_run)


def test_the_table_run_verifies_and_inspects(table_run) -> None:
    assert table_run["verify"].exit_code == 0, table_run["verify"].output
    shown = table_run["inspect"]
    for expected in ("grant_withheld", "compacted", "approval_decided", "memory_recall",
                     "delegation:", "child:", "isolated:review", "write_output"):  # fmt: skip
        assert expected in shown, expected


@pytest.mark.parametrize(("capability", "path"), sorted(REFUSED))
def test_a_cell_that_cannot_apply_is_refused_at_load(
    tmp_path: Path, capability: str, path: str
) -> None:
    parts, named = REFUSED[(capability, path)]
    team = BASE.format(**{k: parts.get(k, "") for k in ("worker", "helper", "boss", "task")})
    (tmp_path / "team.yaml").write_text(team)
    if path == "chat":
        result = cli(tmp_path, "chat", str(tmp_path / "team.yaml"), "--agent", "worker",
                     "--model", "fake:m", input="hi\n")  # fmt: skip
    else:
        result = cli(tmp_path, "run", str(tmp_path / "team.yaml"), "--model", "fake:m")
    assert result.exit_code == 2, result.output
    assert named in result.output
    assert len(result.output.strip().splitlines()) == 1
