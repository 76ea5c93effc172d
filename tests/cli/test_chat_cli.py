"""``clearance chat`` end to end: a subprocess fed on stdin, its ledger, ``verify``, memory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clearance import RunLedger

SRC = str(Path(__file__).parents[2] / "src")

TEAM = {
    "name": "chatters",
    "memory_groups": [
        {"name": "lab", "agents": ["alice", "bob"], "shared_conversation": {"window": 5}}
    ],
    "agents": [
        {"name": "alice", "instructions": "You are Alice.", "limits": {"max_output_tokens": 32}},
        {"name": "bob", "instructions": "You are Bob.", "limits": {"max_output_tokens": 32}},
        {"name": "carol", "instructions": "You are Carol.", "limits": {"max_output_tokens": 32}},
    ],
}


def clearance(
    cwd: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ, **(env or {}))
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (SRC, environment.get("PYTHONPATH")) if p
    )
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        cwd=cwd, env=environment, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def team(tmp_path: Path) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(TEAM))
    return path


def chat(tmp_path: Path, agent: str, lines: list[str], *extra: str):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = clearance(
        tmp_path, "chat", "team.yaml", "--agent", agent, "--model", "fake:x", "--db", db,
        *extra, stdin="".join(f"{line}\n" for line in lines),
    )  # fmt: skip
    match = re.search(r"chat run (\S+):", result.stderr)
    return result, (match.group(1) if match else None), db


def test_answers_are_printed_recorded_as_one_run_and_verified(tmp_path, team):
    result, run_id, db = chat(
        tmp_path, "carol", ["first question", "", "second question", "/quit", "never sent"],
        "--context-window", "4000",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answers = result.stdout.splitlines()
    assert len(answers) == 2 and all(a.startswith("x result for") for a in answers)
    with RunLedger(db, read_only=True) as ledger:
        run = ledger.get_run(run_id)
        calls = ledger.calls(run_id)
    assert run.team == "chat:carol" and run.status == "completed"
    assert [c.subject for c in calls] == ["conversation:carol"] * 2
    assert [c.response for c in calls] == answers
    assert "second question" in json.dumps(calls[1].messages)
    assert "never sent" not in json.dumps([c.messages for c in calls])
    # The team's memory database, at the same default place as runs, is recorded.
    assert run.config["memory"]["url"] == f"sqlite:///{tmp_path / 'memory.db'}"
    verify = clearance(tmp_path, "verify", run_id, "--db", db)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "2 model calls verified" in verify.stdout


def test_a_message_too_large_for_the_window_is_refused_and_the_session_goes_on(tmp_path, team):
    # It ended the session; now it is refused before it is sent or kept, in one line.
    huge = "word " * 5000
    result, run_id, db = chat(
        tmp_path, "carol", ["first question", huge, "second question"],
        "--context-window", "4000",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
    refused = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(refused) == 1 and refused[0].endswith("; the message was not sent")
    assert "target_ratio exceeded" in refused[0] and "context window of 4000" in refused[0]
    with RunLedger(db, read_only=True) as ledger:
        calls = ledger.calls(run_id)
    assert len(calls) == 2 and "word word" not in json.dumps([c.messages for c in calls])
    verify = clearance(tmp_path, "verify", run_id, "--db", db)
    assert verify.returncode == 0, verify.stdout + verify.stderr


FILLER = [f"filler line {n} about the weather and nothing else whatsoever" for n in range(10)]


def test_a_second_session_recalls_what_compression_recorded_and_verifies(tmp_path, team):
    first, first_id, db = chat(
        tmp_path, "carol", ["my favourite colour is ultramarine", *FILLER],
        "--context-window", "300",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    with RunLedger(db, read_only=True) as ledger:
        compressed = [c for c in ledger.calls(first_id) if c.manifest.get("compression")]
    assert compressed, "the tiny window forced compression"
    assert "ultramarine" not in json.dumps(ledger_last_messages(db, first_id))

    second, second_id, _ = chat(
        tmp_path, "carol", ["what is my favourite colour?"], "--context-window", "300"
    )
    assert second.returncode == 0, second.stderr
    with RunLedger(db, read_only=True) as ledger:
        (call,) = ledger.calls(second_id)
    recalled = [i for i in call.manifest["items"] if i["origin"].startswith("memory:")]
    assert recalled and "ultramarine" in json.dumps(call.messages)
    verify = clearance(tmp_path, "verify", second_id, "--db", db)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # verify checked the memory item against the recorded database: without it, it cannot.
    (tmp_path / "memory.db").rename(tmp_path / "moved.db")
    gone = clearance(tmp_path, "verify", second_id, "--db", db)
    assert gone.returncode == 2 and "memory" in gone.stderr and "unreachable" in gone.stderr


def ledger_last_messages(db: str, run_id: str) -> list[dict[str, str]]:
    with RunLedger(db, read_only=True) as ledger:
        return ledger.calls(run_id)[-1].messages


def test_members_of_a_shared_conversation_see_each_others_answers(tmp_path, team):
    first, _, db = chat(tmp_path, "alice", ["the sample is in fridge seven"],
                               "--context-window", "2000")  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "shared conversation of group lab" in first.stderr
    alice_answer = first.stdout.strip()
    second, second_id, _ = chat(tmp_path, "bob", ["where is it?"], "--context-window", "2000")
    third, third_id, _ = chat(tmp_path, "carol", ["where is it?"], "--context-window", "2000")
    assert second.returncode == 0 and third.returncode == 0, second.stderr + third.stderr
    with RunLedger(db, read_only=True) as ledger:
        (bob_call,) = ledger.calls(second_id)
        (carol_call,) = ledger.calls(third_id)
    assert alice_answer in json.dumps(bob_call.messages)  # a member sees it, attributed
    assert alice_answer not in json.dumps(carol_call.messages)  # a non-member never does
    verify = clearance(tmp_path, "verify", second_id, "--db", db)
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--agent", "mallory", "--context-window", "500"), "mallory"),
        (("--agent", "alice"), "--context-window"),  # the fake model's window is unknown
        (("--agent", "alice", "--context-window", "10"), "max_output_tokens"),
        (("--agent", "alice", "--context-window", "500", "--strategy", "forget"), "strategy"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, team, args, named):
    result = clearance(
        tmp_path, "chat", "team.yaml", "--model", "fake:x", "--db",
        f"sqlite:///{tmp_path / 'runs.db'}", *args, stdin="hello\n",
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and named in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_a_bad_team_file_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "team.yaml").write_text("agents: [{name: a}]\n")
    result = clearance(tmp_path, "chat", "team.yaml", "--agent", "a", stdin="hi\n")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "team.yaml" in result.stderr


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[1A\u202eevil[bold]x[/bold]"


@pytest.fixture
def hostile_server(openai_server):
    return openai_server(lambda messages: HOSTILE)


@pytest.mark.network
def test_a_hostile_answer_is_printed_escaped(tmp_path, team, hostile_server):
    result = clearance(
        tmp_path, "chat", "team.yaml", "--agent", "carol", "--model", "openai:scripted",
        "--context-window", "4000", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
        stdin="hello\n", env={"OPENAI_BASE_URL": hostile_server, "OPENAI_API_KEY": "test"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\u202e" not in result.stdout
    assert r"\x1b]0;pwned\x07\x1b[2J\x1b[1A\u202eevil[bold]x[/bold]" in result.stdout


def test_run_warns_in_one_line_that_shared_conversation_has_no_effect_there(tmp_path):
    task = {"id": "t", "title": "T", "description": "Do t.", "assignee": "alice"}
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    (tmp_path / "team.yaml").write_text(yaml.safe_dump({**TEAM, "tasks": [task]}))
    result = clearance(tmp_path, "run", "team.yaml", "--model", "fake:x", "--db", db)
    assert result.returncode == 0, result.stdout + result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "memory_groups.lab.shared_conversation" in warnings[0]
    assert "no effect in clearance run" in warnings[0] and "clearance chat" in warnings[0]

    plain = {**TEAM, "memory_groups": [{"name": "lab", "agents": ["alice", "bob"]}]}
    plain["agents"] = [{**TEAM["agents"][0], "memory": {}}, *TEAM["agents"][1:]]  # a group needs
    # a member with memory: (else it is refused as having no effect)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump({**plain, "tasks": [task]}))
    result = clearance(tmp_path, "run", "team.yaml", "--model", "fake:x", "--db", db)
    assert result.returncode == 0 and "warning" not in result.stderr


def test_a_line_that_is_not_utf8_is_refused_and_the_session_goes_on(tmp_path, team):
    # Surrogates from the undecodable byte reached token counting: a traceback, and the
    # chat's run left "running" forever.
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    environment = dict(os.environ, PYTHONPATH=SRC)
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "carol",
         "--model", "fake:x", "--context-window", "4000", "--db", db],
        cwd=tmp_path, env=environment, input=b"first\ncaf\xe9\nsecond\n",
        capture_output=True, timeout=120,
    )  # fmt: skip
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "Traceback" not in stderr
    refused = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert refused == [
        "error: the line is not valid UTF-8 (byte 0xe9 at position 3); the message was not sent"
    ]
    answers = result.stdout.decode().splitlines()
    assert len(answers) == 2 and all(a.startswith("x result for") for a in answers)
    run_id = re.search(r"chat run (\S+):", stderr).group(1)
    with RunLedger(db, read_only=True) as ledger:
        assert ledger.get_run(run_id).status == "completed"
        assert len(ledger.calls(run_id)) == 2


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
@pytest.mark.parametrize(("stop", "exit_code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_at_the_prompt_ends_the_session_at_once_with_its_run_closed(
    tmp_path, team, stop, exit_code
):
    # The summary was printed, but the process waited for another line: the read of stdin
    # blocked in a thread the event loop (and then the interpreter) waited for. SIGTERM (a
    # service manager stopping the process) ended it without closing its run.
    import pty
    import select
    import signal
    import time

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main, secondary = pty.openpty()
    environment = dict(os.environ, PYTHONPATH=SRC)
    process = subprocess.Popen(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "carol",
         "--model", "fake:x", "--context-window", "4000", "--db", db],
        cwd=tmp_path, env=environment, stdin=secondary, stdout=secondary, stderr=secondary,
        start_new_session=True,
    )  # fmt: skip
    os.close(secondary)
    seen = b""

    def read_until(marker: bytes, timeout_s: float) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout_s
        while marker not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(main, 4096)
                except OSError:
                    return

    try:
        read_until(b"you> ", 60)
        os.write(main, b"hello there\n")
        read_until(b"x result for", 60)
        assert b"x result for" in seen, seen
        read_until(b"you> ", 10)
        process.send_signal(getattr(signal, stop))
        code = process.wait(timeout=10)  # at once, not after another line
        read_until(b"check it with", 5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(main)
    assert code == exit_code, seen
    match = re.search(rb"chat run (\S+):", seen)
    assert match, seen
    with RunLedger(db, read_only=True) as ledger:
        run = ledger.get_run(match.group(1).decode())
    assert run.status == "completed" and run.finished_at is not None
