"""Cut-off answers of agents that use tools, and approved tools that are not replayed.

Through the CLI, against a real OpenAI-compatible server on 127.0.0.1 answering by script,
a real tool module named in the team file, and a real SQLite ledger.

- A task, delegate or child whose agent has tools runs a tool loop; when the model server
  ends its final answer at the output limit (``finish_reason: length``), whoever receives
  the answer (the dependent task and the synthesis, the delegating caller, the parent) gets
  it marked, never as whole, an ``answer_marked`` event of the call's subject is recorded,
  and ``clearance verify`` passes.
- A tool with ``approval: required`` and ``replay: false`` that ran once under a person's
  approval, in a run then killed (inside the tool, or after its result was recorded), is
  not run again on resume under that earlier approval: the resume asks (a ``rerun``
  request, "may have run"), and runs it again only once a person approves (a denial leaves
  the side effect single); a tool declared ``idempotent`` runs again without asking.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.answers import TRUNCATED_MARK
from clearance.cli._app import app

pytestmark = pytest.mark.network

CUT = "The first half of the tool user's answer, and then"

TOOLS = '''\
import time
from pathlib import Path

HERE = Path(__file__).parent


def look(what: str) -> str:
    """Look at something."""
    return f"LOOKED AT {what}"


def remove(path: str) -> str:
    """Remove a file."""
    with open(HERE / "ran.log", "a") as log:
        log.write(path + "\\n")
    while (HERE / "hang").exists():  # the test kills the process here
        time.sleep(0.05)
    return f"REMOVED {path}"
'''


class Cut(str):
    """An answer the server finishes with ``finish_reason: length`` (cut off)."""

    finish_reason = "length"


def cli(db: str, *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", db])


def run_id_of(output: str) -> str:
    return re.search(r"run id: (\S+)", output).group(1)  # type: ignore[union-attr]


def joined(messages: list[dict[str, Any]]) -> str:
    return "\n".join(m.get("content") or "" for m in messages)


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "round17_k_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "round17_k_tools", raising=False)
    return tmp_path


# -- 1. a tool loop's cut-off final answer ---------------------------------------------------

WORKER = "You work with tools."


def tool_user(messages: list[dict[str, Any]]) -> Any:
    """The tool-using agent: look once, then answer cut off."""
    if "LOOKED AT it" in joined(messages):
        return Cut(CUT)
    return [("look", {"what": "it"})]


TASK_TEAM = f"""\
name: cut
agents:
  - {{name: worker, instructions: "{WORKER}", tools: [look]}}
  - {{name: writer, instructions: "You write."}}
tools:
  look: {{function: "round17_k_tools:look"}}
tasks:
  - {{id: a, title: Look, description: Look at it., assignee: worker}}
  - {{id: b, title: Write, description: Write it up., assignee: writer, depends_on: [a]}}
"""


def task_reply(messages: list[dict[str, Any]]) -> Any:
    system = messages[0]["content"] or ""
    if system.startswith(WORKER):
        return tool_user(messages)
    return "written" if system.startswith("You write.") else "the summary"


DELEGATE_TEAM = f"""\
name: cut
agents:
  - {{name: lead, instructions: "You lead.", can_delegate_to: [helper], tools: [look]}}
  - {{name: helper, instructions: "{WORKER}", tools: [look]}}
tools:
  look: {{function: "round17_k_tools:look"}}
tasks:
  - {{id: a, title: Sum, description: Sum it up., assignee: lead}}
"""


def delegate_reply(messages: list[dict[str, Any]]) -> Any:
    system = messages[0]["content"] or ""
    if system.startswith(WORKER):
        return tool_user(messages)
    if system.startswith("You lead."):
        return (
            "summed"
            if CUT in joined(messages)
            else [("delegate", {"agent": "helper", "task": "Look."})]
        )
    return "the summary"


CHILD_TEAM = f"""\
name: cut
agents:
  - {{name: lead, instructions: "You lead.", can_spawn: [helper], tools: [look]}}
  - {{name: helper, instructions: "{WORKER}", tools: [look]}}
tools:
  look: {{function: "round17_k_tools:look"}}
tasks:
  - {{id: a, title: Sum, description: Sum it up., assignee: lead,
     fan_out: {{agent: helper, goals: [Look.]}}}}
"""


def child_reply(messages: list[dict[str, Any]]) -> Any:
    system = messages[0]["content"] or ""
    if system.startswith(WORKER):
        return tool_user(messages)
    return "summed" if system.startswith("You lead.") else "the summary"


PATHS = {
    # path: (team, reply, the cut call's subject prefix, whose request receives the answer)
    "task": (TASK_TEAM, task_reply, "task:a", "You write."),
    "delegate": (DELEGATE_TEAM, delegate_reply, "delegation:", "You lead."),
    "child": (CHILD_TEAM, child_reply, "child:", "You lead."),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_tool_loops_cut_off_answer_reaches_its_receivers_marked_and_is_recorded(
    tools_module: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    team, reply, prefix, receiver = PATHS[path]
    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tools_module / "team.yaml").write_text(team + f"workspace: {tools_module / 'ws'}\n")
    db = f"sqlite:///{tools_module / 'runs.db'}"
    run = cli(db, "run", str(tools_module / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 0, run.output
    run_id = run_id_of(run.output)

    marked = f"{CUT}\n\n{TRUNCATED_MARK}"
    bodies = url.bodies  # type: ignore[attr-defined]
    received = [joined(b["messages"]) for b in bodies
                if (b["messages"][0]["content"] or "").startswith(receiver)]  # fmt: skip
    # The receiver's request after the answer holds it marked; none holds it as whole.
    assert any(marked in text for text in received), received
    for text in received:
        assert text.count(CUT) == text.count(marked), text
    (synthesis,) = [joined(b["messages"]) for b in bodies
                    if "# Goal" in (b["messages"][-1]["content"] or "")]  # fmt: skip
    assert synthesis.count(CUT) == synthesis.count(marked) == (path == "task"), synthesis

    with RunLedger(db, create=False) as ledger:
        (cut,) = [c for c in ledger.calls(run_id)
                  if c.subject.startswith(prefix) and c.finish_reason == "length"]  # fmt: skip
        events = [(e.subject, e.data) for e in ledger.events(run_id)
                  if e.kind == "answer_marked"]  # fmt: skip
        results = {t.task_id: t.result for t in ledger.tasks(run_id)}
    assert events == [(cut.subject, {"truncated": True, "repetitive": False})]
    if path == "task":
        assert results["a"] == marked
    verified = cli(db, "verify", run_id)
    assert verified.exit_code == 0, verified.output


# -- 2. an approved tool that is not replayed, on resume -------------------------------------

APPROVAL_TEAM = """\
name: approvals
agents:
  - {name: janitor, instructions: "You tidy up.", tools: [remove]}
tools:
  remove: {function: "round17_k_tools:remove", approval: required, replay: false%s}
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor}
"""


class Holder:
    """The scripted model; it holds the request after the tool's result while ``hold`` is
    set (the test kills the client then: after the tool, its result recorded)."""

    def __init__(self, tmp: Path) -> None:
        self.hold = tmp / "hold"
        self.held = tmp / "held"

    def __call__(self, messages: list[dict[str, Any]]) -> Any:
        text = joined(messages)
        if "Delete the file old.txt." not in text:
            return "the summary"
        if "REMOVED old.txt" in text:
            if self.hold.exists():
                self.held.touch()
                deadline = time.monotonic() + 60
                while self.hold.exists() and time.monotonic() < deadline:
                    time.sleep(0.02)
            return "removed it"
        if "denied this call" in text or "may have run" in text:
            return "left it in place"
        return [("remove", {"path": "old.txt"})]


@pytest.fixture
def approvals(
    tools_module: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    model = Holder(tools_module)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(model))
    return {
        "tmp": tools_module,
        "db": f"sqlite:///{tools_module / 'runs.db'}",
        "log": tools_module / "ran.log",
        "model": model,
        "proc_env": {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    }


def ran(env: dict[str, Any]) -> list[str]:
    return env["log"].read_text().splitlines() if env["log"].exists() else []


def requests(output: str) -> list[str]:
    return re.findall(r"apr_[0-9a-z_]+", output.split("awaiting approval:")[1])


def killed_after_approval(env: dict[str, Any], where: str, extra: str = "") -> str:
    """Run (paused), approve, resume killed inside the tool or after its result: the run."""
    (env["tmp"] / "team.yaml").write_text(APPROVAL_TEAM % extra)
    run = cli(env["db"], "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = run_id_of(run.output)
    (call_id,) = requests(run.output)
    assert cli(env["db"], "approve", run_id, call_id, "--by", "alice").exit_code == 0
    flag = env["tmp"] / "hang" if where == "inside" else env["model"].hold
    flag.touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", "resume", run_id, "--db", env["db"]],
        env=env["proc_env"], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    reached = (lambda: ran(env)) if where == "inside" else env["model"].held.exists
    deadline = time.monotonic() + 60
    while not reached() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert reached(), proc.poll()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    flag.unlink()
    assert ran(env) == ["old.txt"]
    return run_id


@pytest.mark.parametrize("where", ["inside", "after"])
def test_an_approved_tool_not_replayed_asks_again_before_it_runs_again(
    approvals: dict[str, Any], where: str
) -> None:
    env = approvals
    run_id = killed_after_approval(env, where)

    asked = cli(env["db"], "resume", run_id)
    assert asked.exit_code == 3, asked.output
    assert ran(env) == ["old.txt"]  # not run again under the earlier approval
    (rerun,) = requests(asked.output)
    approved = cli(env["db"], "approve", run_id, rerun, "--by", "bob")
    assert approved.exit_code == 0 and "may have run" in approved.output, approved.output
    finished = cli(env["db"], "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt", "old.txt"]  # once more, as bob approved
    with RunLedger(env["db"], create=False) as ledger:
        decided = [e.data for e in ledger.events(run_id) if e.kind == "approval_decided"]
        assert [(d["kind"], d["decision"], d["by"]) for d in decided] == [
            ("tool", "approved", "alice"),
            ("rerun", "approved", "bob"),
        ]
        assert ledger.get_run(run_id).synthesis == "the summary"
    verified = cli(env["db"], "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_a_denied_rerun_of_an_approved_tool_not_replayed_leaves_one_side_effect(
    approvals: dict[str, Any],
) -> None:
    env = approvals
    run_id = killed_after_approval(env, "after")
    asked = cli(env["db"], "resume", run_id)
    assert asked.exit_code == 3, asked.output
    (rerun,) = requests(asked.output)
    assert cli(env["db"], "deny", run_id, rerun, "--by", "bob").exit_code == 0
    finished = cli(env["db"], "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt"]
    with RunLedger(env["db"], create=False) as ledger:
        (tidy,) = [t for t in ledger.tasks(run_id) if t.task_id == "tidy"]
    assert tidy.result == "left it in place"
    verified = cli(env["db"], "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_an_idempotent_approved_tool_not_replayed_runs_again_without_asking(
    approvals: dict[str, Any],
) -> None:
    env = approvals
    run_id = killed_after_approval(env, "after", ", idempotent: true")
    finished = cli(env["db"], "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt", "old.txt"]
    with RunLedger(env["db"], create=False) as ledger:
        kinds = [e.data["kind"] for e in ledger.events(run_id) if e.kind == "approval_decided"]
    assert kinds == ["tool"]
    verified = cli(env["db"], "verify", run_id)
    assert verified.exit_code == 0, verified.output
