"""Attacks on a recorded run's ledger: each edit, made with sqlite3 on the file, is caught.

Without a ledger key the hash chain catches a forger who edits records but not the chain; the
keyed chain (HMAC) also catches one who recomputes every unkeyed digest, chain included.
"""

import asyncio
import json
import sqlite3

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.prompt import ChatMessage, messages_sha256, sha256_text
from clearance._state.chain import LEDGER_KEY_ENV
from clearance._state.ledger import call_record_sha256
from clearance.testing import FunctionModel

KEY = "5" * 64
TEAM = Team(
    agents=(Agent(name="alice", instructions="Alice."), Agent(name="bob", instructions="Bob.")),
    coordinator=Agent(name="lead", instructions="Lead."),
)


def record(tmp_path, keyed: bool, monkeypatch) -> tuple:
    if keyed:
        monkeypatch.setenv(LEDGER_KEY_ENV, KEY)
    else:
        monkeypatch.delenv(LEDGER_KEY_ENV, raising=False)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("the notes\n")
    db = tmp_path / "runs.db"
    tasks = [
        Task(id="a", title="A", description="Do a.", assignee="alice", files=["notes.txt"]),
        Task(id="x", title="X", description="Do x.", assignee="alice"),
        Task(id="b", title="B", description="Do b.", assignee="bob", depends_on=["a"]),
    ]
    model = FunctionModel(lambda r: f"RESULT of {r.prompt.manifest.subject}")

    async def run():
        with RunLedger(f"sqlite:///{db}") as ledger:
            orch = Orchestrator(
                TEAM, model=model, ledger=ledger, options=RunOptions(input_root=tmp_path / "in")
            )
            return await orch.run_tasks(tasks, goal="The goal")

    return db, asyncio.run(run()).run_id


def verify(db, run_id):
    with RunLedger(f"sqlite:///{db}") as ledger:
        return verify_run(ledger, run_id)


def sql(db, statement, *args):
    conn = sqlite3.connect(db)
    conn.execute(statement, args)
    conn.commit()
    conn.close()


# Not `rewrite_prompt`: raw-text edits, e.g. a block duplicated, which a block edit cannot do.
def rewrite_call(db, subject, change):
    """Edit a call's prompt with ``change(messages, manifest)``; recompute its digests."""
    conn = sqlite3.connect(db)
    ordinal, messages, manifest = conn.execute(
        "SELECT ordinal, messages, manifest FROM calls WHERE subject = ?", (subject,)
    ).fetchone()
    messages, manifest = json.loads(messages), json.loads(manifest)
    change(messages, manifest)
    digest = messages_sha256(tuple(ChatMessage(**m) for m in messages))
    manifest["prompt_sha256"] = digest
    conn.execute(
        "UPDATE calls SET messages = ?, manifest = ?, prompt_sha256 = ?, record_sha256 = ? "
        "WHERE ordinal = ?",
        (
            json.dumps(messages),
            json.dumps(manifest),
            digest,
            call_record_sha256(messages, manifest),
            ordinal,
        ),
    )
    conn.commit()
    conn.close()


def delete_call(db, run_id):
    sql(db, "DELETE FROM calls WHERE subject = 'task:x'")


def reorder_calls(db, run_id):
    conn = sqlite3.connect(db)
    (first,), (second,) = conn.execute(
        "SELECT ordinal FROM calls WHERE subject IN ('task:a', 'task:x') ORDER BY ordinal"
    ).fetchall()
    conn.execute("UPDATE calls SET ordinal = -1 WHERE ordinal = ?", (first,))
    conn.execute("UPDATE calls SET ordinal = ? WHERE ordinal = ?", (first, second))
    conn.execute("UPDATE calls SET ordinal = ? WHERE ordinal = -1", (second,))
    conn.commit()
    conn.close()


def edit_response(db, run_id):
    sql(db, "UPDATE calls SET response = 'forged answer' WHERE subject = 'task:x'")
    sql(db, "UPDATE tasks SET result = 'forged answer' WHERE task_id = 'x'")


def rewrite_result(db, run_id):
    """Task a's result, its call's response and every prompt holding it, all consistent."""
    forged = "FORGED RESULT"
    sql(db, "UPDATE tasks SET result = ? WHERE task_id = 'a'", forged)
    sql(db, "UPDATE calls SET response = ? WHERE subject = 'task:a'", forged)
    for subject in ("task:b", "synthesis"):

        def change(messages, manifest):
            messages[1]["content"] = messages[1]["content"].replace("RESULT of task:a", forged)
            item = next(i for i in manifest["items"] if i["origin"] == "task_result:a")
            item["sha256"] = sha256_text(forged)

        rewrite_call(db, subject, change)


def foreign_file_item(db, run_id):
    """Task a's own file item made to hold another task's result, digests recomputed."""
    foreign = "RESULT of task:x"

    def change(messages, manifest):
        messages[1]["content"] = messages[1]["content"].replace("the notes\n", foreign)
        item = next(i for i in manifest["items"] if i["origin"] == "file:notes.txt")
        item["sha256"] = sha256_text(foreign)

    rewrite_call(db, "task:a", change)


ATTACKS = {
    "a deleted call": delete_call,
    "reordered calls": reorder_calls,
    "an edited response": edit_response,
    "a rewritten result with every prompt holding it": rewrite_result,
    "a foreign item under a task's own file: origin": foreign_file_item,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_is_caught_without_a_key(tmp_path, monkeypatch, attack):
    db, run_id = record(tmp_path, keyed=False, monkeypatch=monkeypatch)
    assert verify(db, run_id).ok
    ATTACKS[attack](db, run_id)
    report = verify(db, run_id)
    assert not report.ok
    assert any("hash chain" in f.reason for f in report.findings), [str(f) for f in report.findings]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_with_the_key_each_attack_is_caught_even_with_every_digest_recomputed(
    tmp_path, monkeypatch, attack, rechain
):
    db, run_id = record(tmp_path, keyed=True, monkeypatch=monkeypatch)
    clean = verify(db, run_id)
    assert clean.ok and clean.keyed and clean.macs_checked
    ATTACKS[attack](db, run_id)
    rechain(db, run_id)  # every unkeyed digest recomputed: the chain is consistent again
    report = verify(db, run_id)
    assert not report.ok
    assert any("not keyed" in f.reason for f in report.findings)


def test_a_keyed_chain_recomputed_with_the_run_still_marked_keyed_fails_its_macs(
    tmp_path, monkeypatch, rechain
):
    db, run_id = record(tmp_path, keyed=True, monkeypatch=monkeypatch)
    (key_id,) = sqlite3.connect(db).execute("SELECT chain_key_id FROM runs").fetchone()
    edit_response(db, run_id)
    rechain(db, run_id)
    sql(db, "UPDATE runs SET chain_key_id = ?", key_id)  # claims the key again
    findings = [f.reason for f in verify(db, run_id).findings]
    assert any("does not follow" in r or "differs from its entry" in r for r in findings)


def test_a_keyed_run_verified_without_the_key_says_its_links_were_not_checked(
    tmp_path, monkeypatch
):
    db, run_id = record(tmp_path, keyed=True, monkeypatch=monkeypatch)
    monkeypatch.delenv(LEDGER_KEY_ENV)
    report = verify(db, run_id)
    assert report.ok and report.keyed and not report.macs_checked


def test_a_wrong_key_is_named(tmp_path, monkeypatch):
    db, run_id = record(tmp_path, keyed=True, monkeypatch=monkeypatch)
    monkeypatch.setenv(LEDGER_KEY_ENV, "6" * 64)
    reasons = [f.reason for f in verify(db, run_id).findings]
    assert any("another ledger key" in r for r in reasons), reasons


def test_rewritten_result_without_the_chain_is_caught_by_the_result_check(
    tmp_path, monkeypatch, rechain
):
    """Only the result edited (not its call): the result no longer is the call's response."""
    db, run_id = record(tmp_path, keyed=False, monkeypatch=monkeypatch)
    sql(db, "UPDATE tasks SET result = 'forged' WHERE task_id = 'x'")
    rechain(db, run_id)
    reasons = [(f.subject, f.reason) for f in verify(db, run_id).findings]
    assert ("task:x", "the task's recorded result is not the response of its last call") in reasons


def test_completed_tasks_without_calls_fail_verification(tmp_path, monkeypatch, rechain):
    db, run_id = record(tmp_path, keyed=False, monkeypatch=monkeypatch)
    sql(db, "DELETE FROM calls")
    rechain(db, run_id)
    report = verify(db, run_id)
    assert report.calls_checked == 0 and not report.ok
    # Each completed task, and the run's synthesis: no call answered any of them.
    assert {f.subject for f in report.findings} == {"task:a", "task:x", "task:b", "run"}


def test_a_duplicated_file_origin_is_caught(tmp_path, monkeypatch, rechain):
    db, run_id = record(tmp_path, keyed=False, monkeypatch=monkeypatch)

    def change(messages, manifest):
        items = manifest["items"]
        file_item = next(i for i in items if i["origin"] == "file:notes.txt")
        items.insert(items.index(file_item) + 1, dict(file_item))
        user = messages[1]["content"]
        block = "### notes.txt\n~~~~\nthe notes\n\n~~~~\n"
        assert block in user, user
        messages[1]["content"] = user.replace(block, block + "\n" + block, 1)

    rewrite_call(db, "task:a", change)
    rechain(db, run_id)
    reasons = [(f.origin, f.reason) for f in verify(db, run_id).findings]
    assert ("file:notes.txt", "the origin appears twice in one prompt") in reasons
