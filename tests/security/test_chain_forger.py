"""A forger with write access to the SQLite ledger, against `clearance verify` on the CLI.

Each attack edits the file with sqlite3; `clearance verify` must exit 1 naming the problem. A
run cut short consistently (the ledger rolled back to an earlier copy) cannot be told from
one that stopped there, except against a head noted earlier (`--head`).
"""

import asyncio
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._core.errors import ConfigError
from clearance._state.chain import (
    LEDGER_KEY_ENV,
    LEDGER_KEY_FILE_ENV,
    chain_sha256,
    load_ledger_key,
    payload_sha256,
)
from clearance.cli import app
from clearance.testing import FunctionModel

KEY = "5" * 64
TEAM = Team(
    agents=(Agent(name="alice", instructions="Alice."), Agent(name="bob", instructions="Bob.")),
    coordinator=Agent(name="lead", instructions="Lead."),
)
TASKS = [
    Task(id="a", title="A", description="Do a.", assignee="alice"),
    Task(id="b", title="B", description="Do b.", assignee="bob", depends_on=["a"]),
]


def copy_db(source: Path, target: Path) -> None:
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    src.backup(dst)
    dst.close()
    src.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A keyed ledger of two finished runs, and a copy taken before the first one's synthesis."""
    folder = tmp_path_factory.mktemp("ledger")
    db, early = folder / "runs.db", folder / "early.db"
    snapshot = {"taken": False}

    def answer(request):
        subject = request.prompt.manifest.subject
        if subject == "synthesis" and not snapshot["taken"]:
            copy_db(db, early)
            snapshot["taken"] = True
        return f"RESULT of {subject}"

    async def run(goal):
        with RunLedger(f"sqlite:///{db}") as ledger:
            orch = Orchestrator(TEAM, model=FunctionModel(answer), ledger=ledger)
            return (await orch.run_tasks(TASKS, goal=goal)).run_id

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(LEDGER_KEY_ENV, KEY)
        patch.delenv(LEDGER_KEY_FILE_ENV, raising=False)
        first, second = asyncio.run(run("goal A")), asyncio.run(run("goal B"))
    return db, early, first, second


@pytest.fixture
def ledger(template, tmp_path, monkeypatch):
    """A fresh copy of the template ledger; the key is set."""
    source, early, first, second = template
    db = tmp_path / "runs.db"
    copy_db(source, db)
    monkeypatch.setenv(LEDGER_KEY_ENV, KEY)
    monkeypatch.delenv(LEDGER_KEY_FILE_ENV, raising=False)
    return db, early, first, second


def sql(db: Path, *statements: tuple) -> None:
    conn = sqlite3.connect(db)
    for statement in statements:
        conn.execute(*statement)
    conn.commit()
    conn.close()


def verify(db: Path, run_id: str, *options: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["verify", run_id, "--db", f"sqlite:///{db}", *options])
    return result.exit_code, result.output.splitlines()


def head_of(db: Path, run_id: str) -> str:
    conn = sqlite3.connect(db)
    (head,) = conn.execute(
        "SELECT chain_sha256 FROM ledger_entries WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    conn.close()
    return str(head)


def swap(run_id: str, one: int, two: int) -> list[tuple]:
    where = "WHERE run_id = ? AND seq = ?"
    return [
        (f"UPDATE ledger_entries SET seq = -1 {where}", (run_id, one)),
        (f"UPDATE ledger_entries SET seq = {one} {where}", (run_id, two)),
        (f"UPDATE ledger_entries SET seq = {two} {where}", (run_id, -1)),
    ]


ATTACKS = {
    "a middle entry deleted": (
        lambda a, b: [("DELETE FROM ledger_entries WHERE run_id = ? AND seq = 2", (a,))],
        "the hash chain jumps from entry 1 to 3",
    ),
    "the last entry deleted": (
        lambda a, b: [
            (
                "DELETE FROM ledger_entries WHERE run_id = ? AND seq = "
                "(SELECT max(seq) FROM ledger_entries WHERE run_id = ?)",
                (a, a),
            )
        ],
        "run: the record differs from its entry in the hash chain",
    ),
    "two entries swapped": (lambda a, b: swap(a, 2, 3), "hash chain entry 2"),
    "seq numbers with a gap": (
        lambda a, b: [
            ("UPDATE ledger_entries SET seq = seq + 100 WHERE run_id = ? AND seq > 3", (a,))
        ],
        "the hash chain jumps from entry 3 to 104",
    ),
    "an entry of another run moved in": (
        lambda a, b: [
            ("DELETE FROM ledger_entries WHERE run_id = ? AND seq = 2", (a,)),
            ("UPDATE ledger_entries SET run_id = ? WHERE run_id = ? AND seq = 2", (a, b)),
        ],
        "hash chain entry 2",
    ),
    "a failed run marked completed": (
        lambda a, b: [("UPDATE runs SET status = 'failed' WHERE run_id = ?", (a,))],
        "run: the record differs from its entry in the hash chain",
    ),
    "the other run's chain spliced on": (
        lambda a, b: [
            ("DELETE FROM ledger_entries WHERE run_id = ?", (a,)),
            (
                "INSERT INTO ledger_entries (run_id, seq, kind, subject, payload_sha256, "
                "chain_sha256, records) SELECT ?, seq, kind, subject, payload_sha256, "
                "chain_sha256, records FROM ledger_entries WHERE run_id = ?",
                (a, b),
            ),
        ],
        "hash chain entry 1",
    ),
    "a call copied from the other run": (
        lambda a, b: [
            ("CREATE TEMP TABLE copied AS SELECT * FROM calls WHERE run_id = ? LIMIT 1", (b,)),
            ("UPDATE copied SET ordinal = NULL, call_id = call_id || 'x', run_id = ?", (a,)),
            ("INSERT INTO calls SELECT * FROM copied", ()),
        ],
        "the record is not in the run's hash chain: it was added",
    ),
}  # fmt: skip


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_edit_of_the_ledger_fails_verify_naming_it(ledger, attack):
    db, _, first, second = ledger
    assert verify(db, first)[0] == 0
    statements, reason = ATTACKS[attack]
    sql(db, *statements(first, second))
    code, lines = verify(db, first)
    assert code == 1
    assert any(reason in line for line in lines), lines


def test_a_keyed_run_verified_without_its_key_is_not_verified(ledger, monkeypatch):
    db, _, first, _ = ledger
    monkeypatch.delenv(LEDGER_KEY_ENV)
    code, lines = verify(db, first)
    assert code == 1
    assert lines == [
        f"run {first}: not verified: the run is keyed and no ledger key was given, so its "
        "records cannot be told from forged ones; set CLEARANCE_LEDGER_KEY"
    ]


def test_a_ledger_rolled_back_verifies_unless_checked_against_its_noted_head(ledger):
    db, early, first, _ = ledger
    head = head_of(db, first)
    assert verify(db, first, "--head", head)[0] == 0
    # The whole file replaced by a copy taken before the run ended: consistent, keyed.
    code, lines = verify(early, first)
    assert code == 0, lines
    code, lines = verify(early, first, "--head", head)
    assert code == 1
    assert lines[0] == (
        f"run: the hash chain does not hold the head noted earlier ({head[:16]}...): records "
        "were removed from its end, or the ledger was rolled back"
    )


def test_a_noted_head_that_is_not_a_head_is_one_line_and_exit_2(ledger):
    db, _, first, _ = ledger
    code, lines = verify(db, first, "--head", "abc")
    assert code == 2
    assert len(lines) == 1 and "--head" in lines[0] and "64 hex digits" in lines[0], lines


@pytest.mark.parametrize("content", [b"", b"   \n", b"short"])
def test_a_short_key_file_is_named_as_the_key_file(tmp_path, content):
    path = tmp_path / "key"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_ledger_key({LEDGER_KEY_FILE_ENV: str(path)})
    assert str(caught.value).startswith(f"{LEDGER_KEY_FILE_ENV}: the ledger key from ")


def test_an_entry_chained_without_the_key_at_a_keyed_runs_end_is_caught(ledger):
    db, _, first, _ = ledger
    conn = sqlite3.connect(db)
    seq, head = conn.execute(
        "SELECT seq, chain_sha256 FROM ledger_entries WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
        (first,),
    ).fetchone()
    conn.close()
    # The run's own record, unchanged, chained again: only its link (no HMAC) is forged.
    with RunLedger(f"sqlite:///{db}") as opened:
        (row,) = opened.record_rows(first)["run"]
    payload = payload_sha256("run", row)
    forged = chain_sha256(head, first, seq + 1, "run", first, payload, None)
    sql(
        db,
        (
            "INSERT INTO ledger_entries (run_id, seq, kind, subject, payload_sha256, "
            "chain_sha256) VALUES (?, ?, 'run', ?, ?, ?)",
            (first, seq + 1, first, payload, forged),
        ),
    )
    code, lines = verify(db, first)
    assert code == 1
    assert lines[0] == (
        f"run: hash chain entry {seq + 1} (run {first}) does not follow from the entries "
        "before it: the chain was altered"
    )
