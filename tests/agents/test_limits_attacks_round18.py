"""Limits declared on an agent hold on every call path, against a server that stalls.

Each test runs ``clearance run`` on a team file against an OpenAI-compatible server on
127.0.0.1 that answers every agent at once except one, which it stalls (headers, then a byte
a second). The stalled agent's ``limits.timeout_s`` must end its call, whatever the path
that calls it (a task, a delegate, a spawned child, an isolated task, the coordinator's
synthesis), with a ``limit_exceeded`` event naming ``timeout_s``; the run ends within a few
times the deadline, and what other agents finished stays recorded.
``max_prompt_tokens`` is checked the same way: the agent's prompt over it is refused before
anything is sent, and recorded.
(``test_runtime_parity_round17.py`` covers ``max_model_calls`` and ``max_tokens_per_step``.)
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli._app import app

pytestmark = pytest.mark.network

Reply = Callable[[list[dict[str, Any]]], Any]


class StallingServer:
    """An OpenAI-compatible server: ``reply(messages)`` answers, ``None`` stalls forever.

    A stalled answer sends its head, then one byte a second until the client hangs up
    (a slow-loris). Every request body is kept in ``bodies``; ``hung_up`` counts the stalled
    answers whose client went away.
    """

    def __init__(self, reply: Reply) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.hung_up = 0
        self._reply = reply
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, rest = data.split(b"\r\n\r\n", 1)
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                 if line.lower().startswith(b"content-length:")), 0,
            )  # fmt: skip
            while len(rest) < length:
                rest += conn.recv(65536)
            body = json.loads(rest)
            self.bodies.append(body)
            answer = self._reply(body["messages"])
            if answer is None:
                self._stall(conn)
                return
            conn.sendall(whole(answer))

    def _stall(self, conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
        )
        try:
            for _ in range(600):
                conn.sendall(b" ")
                time.sleep(1)
        except OSError:
            self.hung_up += 1

    def close(self) -> None:
        self._sock.close()


def whole(answer: Any) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if isinstance(answer, str):
        message["content"], finish = answer, "stop"
    else:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(answer)
        ]  # fmt: skip
        finish = "tool_calls"
    body = json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }).encode()  # fmt: skip
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


@pytest.fixture
def stalling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "limits18_tools.py").write_text(PAGE_TOOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "limits18_tools", raising=False)
    servers: list[StallingServer] = []

    def start(reply: Reply) -> StallingServer:
        servers.append(StallingServer(reply))
        monkeypatch.setenv("OPENAI_BASE_URL", servers[-1].url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        return servers[-1]

    yield start
    for server in servers:
        server.close()


PAGE_TOOL = '''\
def page(n: int) -> str:
    """Read a page."""
    return f"PAGE-{n}"
'''

EVERY_PATH = """\
name: every
tools:
  page: {{function: "limits18_tools:page"}}
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

SYSTEMS = {"worker": "You are the worker.", "helper": "You are the helper.",
           "kid": "You are the kid.", "iso": "You are the isolated reviewer.",
           "boss": "You are the boss."}  # fmt: skip

STOPPED = [  # (the agent given the limit, the recorded subject's start)
    ("worker", "task:work"), ("helper", "delegation:"), ("kid", "child:"),
    ("iso", "isolated:review"), ("boss", "synthesis"),
]  # fmt: skip


def every_path_reply(stalled: str) -> Reply:
    def reply(messages: list[dict[str, Any]]) -> Any:
        system, user = messages[0]["content"], messages[-1]["content"]
        if SYSTEMS.get(stalled, "\0") in system:
            return None
        if "You are the worker." in system:
            if "## Results of your tool calls" not in user:
                return [("delegate", {"agent": "helper", "task": "Help."}),
                        ("spawn", {"agent": "kid", "goal": "Check."})]  # fmt: skip
            return "WORKER-DONE"
        if "You are the isolated reviewer." in system:
            return "ISO-DONE\nSTATUS: done"
        return "ANSWER"

    return reply


def run_team(tmp: Path, team: str) -> tuple[Any, str, float]:
    (tmp / "team.yaml").write_text(team)
    started = time.monotonic()
    result = CliRunner().invoke(app, ["run", str(tmp / "team.yaml"), "--model", "openai:m",
                                      "--db", f"sqlite:///{tmp / 'runs.db'}"])  # fmt: skip
    elapsed = time.monotonic() - started
    found = re.findall(r"run id: (\S+)", result.output)
    return result, found[-1] if found else "", elapsed


def verify(tmp: Path, run_id: str) -> Any:
    return CliRunner().invoke(app, ["verify", run_id, "--db", f"sqlite:///{tmp / 'runs.db'}"])


@pytest.mark.parametrize(("who", "subject"), STOPPED)
def test_a_stalled_server_is_stopped_by_timeout_s_on_every_path(
    tmp_path: Path, stalling: Any, who: str, subject: str
) -> None:
    server = stalling(every_path_reply(who))
    limits = ", limits: {timeout_s: 2, retries: 0}"
    parts = {name: limits if name == who else "" for name, _ in STOPPED}
    result, run_id, elapsed = run_team(tmp_path, EVERY_PATH.format(**parts))
    assert run_id, result.output
    assert elapsed < 20, elapsed  # a 2 s deadline, not the stalled server's 600 s
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        events = ledger.events(run_id)
        calls = ledger.calls(run_id)
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
    breaches = [e for e in events if e.kind == "limit_exceeded"]
    assert [(e.data["limit"], e.data["maximum"]) for e in breaches] == [("timeout_s", 2)], breaches
    assert breaches[0].subject.startswith(subject), breaches[0].subject
    stalled = [c for c in calls if c.agent == who]
    assert stalled and all(c.response is None for c in stalled)
    assert [c.error for c in stalled] == [
        f"attempt 1 of 1: {stalled[0].subject}: timeout_s exceeded: "
        f"{breaches[0].data['value']} > 2.0"
    ]
    # what the others finished is kept
    if who != "worker":
        assert tasks["work"].status == "completed", tasks["work"]
        assert tasks["work"].result == "WORKER-DONE"
    if who != "iso":
        assert tasks["review"].status == "completed", tasks["review"]
    assert verify(tmp_path, run_id).exit_code == 0
    time.sleep(1.5)  # the stalled answer's next byte finds the connection closed
    assert server.hung_up >= 1


@pytest.mark.parametrize(("who", "subject"), STOPPED)
def test_max_prompt_tokens_refuses_the_prompt_before_it_is_sent_on_every_path(
    tmp_path: Path, stalling: Any, who: str, subject: str
) -> None:
    # No agent is stalled here: every answer comes at once.
    server = stalling(every_path_reply("nobody"))
    parts = {name: ", limits: {max_prompt_tokens: 8}" if name == who else "" for name, _ in STOPPED}
    result, run_id, _ = run_team(tmp_path, EVERY_PATH.format(**parts))
    assert run_id, result.output
    assert not [b for b in server.bodies if SYSTEMS[who] in (b["messages"][0]["content"] or "")]
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        events = ledger.events(run_id)
        calls = ledger.calls(run_id)
    assert not [c for c in calls if c.agent == who]  # refused before it was recorded as sent
    breaches = [e for e in events if e.kind == "limit_exceeded"]
    assert [(e.data["limit"], e.data["maximum"]) for e in breaches] == [("max_prompt_tokens", 8)], (
        breaches
    )
    assert breaches[0].subject.startswith(subject), breaches[0].subject
    assert verify(tmp_path, run_id).exit_code == 0
