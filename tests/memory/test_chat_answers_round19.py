"""``clearance chat`` keeps a model's answer as every call path does (`kept_answer`).

- An answer cut off at the output limit (``finish_reason: length``) was printed, kept in the
  conversation, posted to the group's shared conversation and remembered as a whole answer:
  every other path (a task, a delegate, a child, a clarification) marks it and records an
  ``answer_marked`` event. A summary cut off at its ``max_tokens`` was kept as a whole
  summary too.
- An empty answer was printed as an empty line, kept as a turn and posted to the shared
  conversation (the other members read ``a:`` and nothing): a task's empty completion is a
  `ModelError`; a chat turn's is one too, and nothing empty is kept or posted.

Through the product path: a team file, ``clearance chat`` as a subprocess fed on stdin, a
real scripted OpenAI-compatible server on 127.0.0.1, a real SQLite ledger and memory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from clearance import Agent, AgentChat, AgentLimits, RunLedger
from clearance._context.answers import TRUNCATED_MARK
from clearance._context.verify import verify_run
from clearance._core.vocabulary import EventKind
from clearance.memory import list_memories
from clearance.testing import FunctionModel

SRC = str(Path(__file__).parents[2] / "src")
CUT = "The launch code is 12 and the rest is"


class Cut(str):
    """An answer the server finishes with ``finish_reason: length`` (cut off)."""

    finish_reason = "length"


def write_team(tmp_path: Path) -> None:
    limits = {"max_output_tokens": 32}
    body = {
        "name": "lab",
        "memory_groups": [
            {"name": "lab", "agents": ["a", "b"], "shared_conversation": {"window": 5}}
        ],
        "agents": [
            {"name": "a", "instructions": "You are A.", "limits": limits},
            {"name": "b", "instructions": "You are B.", "limits": limits},
        ],
    }
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(body))


def chat(tmp_path: Path, url: str, agent: str, stdin: str) -> tuple[Any, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARANCE_", "OTEL_"))}
    env.update(PYTHONPATH=SRC, OPENAI_BASE_URL=url, OPENAI_API_KEY="test")
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", agent,
         "--model", "openai:m", "--context-window", "4000",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    match = re.search(r"chat run (\S+):", result.stderr)
    return result, match.group(1) if match else ""


def verify(tmp_path: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARANCE_", "OTEL_"))}
    env["PYTHONPATH"] = SRC
    return subprocess.run(
        [sys.executable, "-m", "clearance", "verify", run_id,
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def shared_records_by(tmp_path: Path, author: str) -> list[str]:
    """The contents of the records ``author`` posted to group ``lab``, oldest first."""
    records = list_memories(f"sqlite:///{tmp_path / 'memory.db'}", limit=100)
    return [r.content for r in reversed(records) if r.scope == "group:lab" and r.author == author]


def test_a_cut_off_answer_is_marked_everywhere_it_is_kept(tmp_path, openai_server):
    write_team(tmp_path)
    url = openai_server(lambda messages: Cut(CUT))
    result, run_id = chat(tmp_path, url, "a", "hello\nand then?\n")
    assert result.returncode == 0, result.stderr
    # Printed with its mark, behind the gutter of a several-line answer.
    assert TRUNCATED_MARK in result.stdout
    # The next prompt holds the answer with its mark, never as a whole answer.
    second = json.dumps(url.bodies[1]["messages"])
    assert CUT in second and TRUNCATED_MARK in second
    # The group's members read it marked.
    posted = shared_records_by(tmp_path, "a")
    assert posted and all(TRUNCATED_MARK in text for text in posted)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}", read_only=True) as ledger:
        events = ledger.events(run_id)
    marked = [e for e in events if e.kind == EventKind.ANSWER_MARKED]
    assert [e.subject for e in marked] == ["conversation:a", "conversation:a"]
    checked = verify(tmp_path, run_id)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # Bob's shared view shows the mark too.
    seen: list[str] = []
    bob = openai_server(lambda messages: seen.append(messages[-1]["content"]) or "ok")
    result, _ = chat(tmp_path, bob, "b", "what did a say?\n")
    assert result.returncode == 0, result.stderr
    assert CUT in seen[0] and TRUNCATED_MARK in seen[0]


def test_an_empty_answer_is_a_model_error_and_nothing_empty_is_kept(tmp_path, openai_server):
    write_team(tmp_path)
    answers = iter(["first answer", "  \n "])
    url = openai_server(lambda messages: next(answers))
    result, run_id = chat(tmp_path, url, "a", "hello\nsay nothing\nnever read\n")
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == ["first answer"]  # no empty answer line
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: openai:m: the model returned an empty completion"]
    assert len(url.bodies) == 2  # the session ended; "never read" was never sent
    assert shared_records_by(tmp_path, "a") == ["a: first answer"]  # nothing empty posted
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}", read_only=True) as ledger:
        run = ledger.get_run(run_id)
    assert (
        run.status == "failed" and run.error == "openai:m: the model returned an empty completion"
    )
    checked = verify(tmp_path, run_id)
    assert checked.returncode == 0, checked.stdout + checked.stderr


class CutSummaries(FunctionModel):
    """Every summary it writes stops at its output limit (``finish_reason: length``)."""

    async def request(self, request):  # type: ignore[no-untyped-def]
        response = await super().request(request)
        if request.prompt.manifest.subject.startswith("summary:"):
            return dataclasses.replace(response, finish_reason="length")
        return response


async def test_a_cut_off_summary_is_kept_marked_and_verifies(tmp_path):
    def reply(request):
        if request.prompt.manifest.subject == "summary:alice":
            return "the user likes ultramarine and"
        return "noted " * 30

    agent = Agent(name="alice", instructions="Alice.", limits=AgentLimits(max_output_tokens=64))
    model = CutSummaries(reply, model_id="test:function")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        chat = AgentChat(agent=agent, model=model, ledger=ledger, context_window=800,
                         strategy="summarize")  # fmt: skip
        for n in range(8):
            await chat.say(f"message {n}: " + "words about the weather " * 10)
        chat.finish()
        assert any(r.summary_id for r in chat.compressions)
        summaries = [t for t in chat.conversation.get_messages() if t.id.startswith("summary_")]
        assert summaries and all(t.content.endswith(TRUNCATED_MARK) for t in summaries)
        events = [e for e in ledger.events(chat.run_id) if e.kind == EventKind.ANSWER_MARKED]
        assert {e.subject for e in events} >= {"summary:alice"}
        report = verify_run(ledger, chat.run_id)
        assert report.ok, [str(f) for f in report.findings]
