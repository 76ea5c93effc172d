"""Model output PostgreSQL's ``text`` cannot hold is recorded, and used, as on SQLite.

A model's answer, a tool's result or a tool call's arguments may hold NUL. SQLite stores it;
PostgreSQL's ``text`` cannot, and a run on a PostgreSQL ledger stopped (``interrupted``, exit
2) with the call's outcome unrecorded when a model answered with one. The rule is one for both
databases: such text is stored losslessly (`NulText`: escaped on PostgreSQL behind a mark, read
back as it was, digests over the original), reaches its dependents byte for byte and verifies.
A lone surrogate (which no UTF-8 column holds) in an answer is refused as malformed, the same
on both. Through ``clearance run`` against a real OpenAI-compatible server on 127.0.0.1 and a
real ledger on each database.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._state.db.nul_text import MARK, escaped, unescaped
from clearance.cli._app import app

pytestmark = pytest.mark.network

TEAM = """\
name: nul
agents:
  - {name: w, instructions: "Work."}
  - {name: u, instructions: "Use."}
tasks:
  - {id: a, title: A, description: SAY-IT., assignee: w}
  - {id: b, title: B, description: USE-IT., assignee: u, depends_on: [a]}
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger URL on a fresh SQLite file, or on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def cli(db: str, *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", db])


def run(tmp: Path, url: str, db: str, team: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    (tmp / "team.yaml").write_text(team)
    return cli(db, "run", str(tmp / "team.yaml"), "--model", "openai:m")


def run_id_of(output: str) -> str:
    return re.search(r"run id: (\S+)", output).group(1)  # type: ignore[union-attr]


def user_texts(url: Any, marker: str) -> list[str]:
    return [b["messages"][-1]["content"] for b in url.bodies if marker in str(b["messages"])]


@pytest.mark.parametrize(
    "answer",
    ["a\x00b", "\x00", MARK + "x\\0y\x00\\", MARK + "\\q"],
    ids=["nul", "only-nul", "mark-and-escapes", "mark-not-escaped"],
)
def test_an_answer_holding_nul_is_recorded_and_reaches_its_dependent_byte_for_byte(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, db_url: str,
    answer: str,
) -> None:  # fmt: skip
    url = openai_server(lambda m: answer if "SAY-IT." in m[-1]["content"] else "ok")
    done = run(tmp_path, url, db_url, TEAM, monkeypatch)
    assert done.exit_code == 0, done.output[-2000:]
    run_id = run_id_of(done.output)
    (use,) = user_texts(url, "USE-IT.")
    assert f"~~~~ A (by w)\n{answer}\n~~~~" in use
    with RunLedger(db_url, create=False) as ledger:
        assert ledger.get_run(run_id).status == "completed"  # type: ignore[union-attr]
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        assert tasks["a"].result == answer and tasks["b"].result == "ok"
        responses = [c.response for c in ledger.calls(run_id)]
        assert answer in responses
    verified = cli(db_url, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_an_answer_holding_a_lone_surrogate_is_refused_alike_on_both_databases(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    url = openai_server(lambda m: "a\ud800b" if "SAY-IT." in m[-1]["content"] else "ok")
    done = run(tmp_path, url, db_url, TEAM, monkeypatch)
    assert done.exit_code == 1, done.output[-2000:]
    assert "not valid Unicode (surrogates not allowed at position 1)" in done.output
    run_id = run_id_of(done.output)
    assert user_texts(url, "USE-IT.") == []
    with RunLedger(db_url, create=False) as ledger:
        assert ledger.get_run(run_id).status == "failed"  # type: ignore[union-attr]
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        assert tasks["a"].status == "failed" and tasks["b"].status == "skipped"
        assert "surrogates not allowed at position 1" in (tasks["a"].error or "")
    verified = cli(db_url, "verify", run_id)
    assert verified.exit_code == 0, verified.output


TOOL_TEAM = """\
name: nultools
agents:
  - {name: worker, instructions: "You work with tools.", tools: [look]}
tools:
  look: {function: "round20_nul_tools:look"}
tasks:
  - {id: a, title: Look, description: Look at it., assignee: worker}
"""

TOOLS = '''\
def look(what: str) -> str:
    """Look at something."""
    return "LOOKED\\x00AT " + what
'''


def test_tool_arguments_and_results_holding_nul_are_recorded_and_heard(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    (tmp_path / "round20_nul_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "round20_nul_tools", raising=False)
    turns = iter([[("look", {"what": "x\x00y"})], "looked"])

    def reply(messages: list[dict[str, Any]]) -> Any:
        system = messages[0]["content"] or ""
        return next(turns) if system.startswith("You work with tools.") else "the summary"

    url = openai_server(reply)
    done = run(tmp_path, url, db_url, TOOL_TEAM, monkeypatch)
    assert done.exit_code == 0, done.output[-2000:]
    run_id = run_id_of(done.output)
    heard = [m.get("content") or "" for m in url.bodies[1]["messages"]]  # type: ignore[attr-defined]
    assert any("LOOKED\x00AT x\x00y" in text for text in heard), heard
    with RunLedger(db_url, create=False) as ledger:
        assert ledger.get_run(run_id).status == "completed"  # type: ignore[union-attr]
        (call,) = ledger.tool_calls(run_id)
        assert call.arguments == {"what": "x\x00y"}
        assert call.result == "LOOKED\x00AT x\x00y"
    verified = cli(db_url, "verify", run_id)
    assert verified.exit_code == 0, verified.output


@pytest.mark.parametrize(
    "text",
    ["", "plain \\0 text", "a\x00b", "\\\x00\\0", MARK, MARK + "\\0", MARK + "\x00"],
)
def test_the_escaped_form_reads_back_as_written(text: str) -> None:
    stored = escaped(text)
    assert "\x00" not in stored and unescaped(stored) == text
    assert stored == text or stored.startswith(MARK)


def test_a_row_written_before_the_escape_reads_as_stored() -> None:
    for old in ["plain", MARK + "\\q", MARK + "ends in \\"]:  # no escaped form after the mark
        assert unescaped(old) == old


# -- long-term memory ---------------------------------------------------------------------


@pytest.fixture
def memory_engine(db_url: str) -> Any:
    import sqlalchemy as sa

    engine = sa.create_engine(db_url)
    yield engine
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS clearance_memories"))
        conn.execute(sa.text("DROP TABLE IF EXISTS memory_schema_version"))
        conn.execute(sa.text("DROP TABLE IF EXISTS clearance_memories_fts"))
    engine.dispose()


def test_a_memory_record_holding_nul_is_kept_and_recalled_as_written(memory_engine: Any) -> None:
    from clearance._state.memory import PersistentMemory

    content = "swordfish backups\x00run nightly " + MARK + "\\0"
    memory = PersistentMemory(memory_engine, agent="alice")
    (record,) = memory.record(content)
    assert record.content == content
    assert [r.content for r in memory.retrieve("swordfish backups")] == [content]
    assert memory.get(record.id).content == content  # type: ignore[union-attr]


def test_a_record_of_the_cap_holding_nul_throughout_is_read_back_whole(memory_engine: Any) -> None:
    """Escaped on PostgreSQL it is stored about twice as long: the cap holds what is read."""
    from clearance._state.memory import PersistentMemory
    from clearance._state.memory_records import MAX_RECORD_CHARS

    content = "\x00\\" * (MAX_RECORD_CHARS // 2)
    memory = PersistentMemory(memory_engine, agent="alice")
    (record,) = memory.record(content)
    assert len(record.content) == MAX_RECORD_CHARS
    assert memory.get(record.id).content == content  # type: ignore[union-attr]
    assert [r.content for r in memory.recent()] == [content]
