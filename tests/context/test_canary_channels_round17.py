"""Need-to-know, end to end: every answer's canary reaches exactly the prompts it may.

One team file (`canary_team_round17.TEAM`) exercises every channel a canary could travel:
dependencies and non-dependencies, a store written under a grant and read by a grant's
holder (and refused to another), long-term memory of one agent and of a group, workspace
outputs (a file named by a canary), an isolated task's clarification, a spawned child, a
delegate, a structured task that fails (its rejected answers) and is retried by
``clearance resume``, a review loop, a compacted tool loop, a ``for_each_file`` fan-out and
the coordinator's synthesis. It runs through ``clearance run``, ``resume`` and ``chat``
against a scripted OpenAI-compatible server on 127.0.0.1 that keeps every request body; the
tests read who was sent which canary from those bodies.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.render import Block
from clearance._core.prompt import sha256_text
from clearance.cli._app import app

sys.path.insert(0, str(Path(__file__).parent))
from canary_team_round17 import FILES, TEAM, Canaries, Script, scout_answer, viewer

pytestmark = pytest.mark.network

TASKS = ("scout_t", "diary_t", "reader_t", "outsider_t", "archivist_t", "analyst_t", "iso_t",
         "parent_t", "boss_t", "flaky_t", "after_t", "rev_t", "loop_t", "final_t",
         *(f"fe_{name}" for name in FILES))  # fmt: skip

# What each prompt may hold, and must: the canaries of the answers, tool results and files
# it is cleared for (its dependencies, a grant it holds, its memory, its own tool calls,
# children and delegates, its clarification, its review), and nothing else.
MAY_SEE = {
    "scout_t": {"scout-store", "scout-file"},  # its own tool calls' results
    "diary_t": set(),
    "reader_t": {"scout-store"},  # a holder of the grant reads the entry
    "outsider_t": {"outsider-key"},  # its own call's arguments; no refused entry
    "archivist_t": {"scout_t"},  # the desk group's memory, recorded by the scout
    "analyst_t": {"scout_t"},
    "iso_t": {"analyst_t", "clar"},
    "clarification": {"analyst_t"},  # what the isolated task is cleared for
    "parent_t": {"kid"},
    "kid": set(),
    "boss_t": {"helper"},
    "helper": set(),
    "flaky_t": {"flaky-bad"},  # its own rejected answer, on the repair attempt
    "after_t": {"flaky-bad"},  # its dependency's failure, whose reason quotes the answer
    "rev_t": {"critic"},
    "critic": {"rev-draft", "rev_t"},
    "loop_t": {"loop-file"},
    "fe_alpha": {"file-alpha"},
    "fe_beta": {"file-beta"},
    "final_t": {"scout_t", "rev_t"},
    "synthesis": set(TASKS) - {"outsider_t", "flaky_t"},  # synthesis_from leaves them out
}


def cli(tmp: Path, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp / 'runs.db'}"], input=input)


def seen(bodies: list[dict[str, Any]], c: Canaries) -> dict[str, set[str]]:
    """Each prompt's canaries, by viewer (every request of that viewer together)."""
    found: dict[str, set[str]] = defaultdict(set)
    for body in bodies:
        text = "\n".join(m.get("content") or "" for m in body["messages"])
        found[viewer(body["messages"])] |= c.found(text)
    return dict(found)


@pytest.fixture(scope="module")
def canary_run(tmp_path_factory: pytest.TempPathFactory, openai_server_module) -> dict[str, Any]:
    """The team run, failed once, resumed, then chatted with: every request body kept."""
    tmp = tmp_path_factory.mktemp("canary")
    c = Canaries()
    (tmp / "in").mkdir()
    for name in FILES:
        (tmp / "in" / f"{name}.txt").write_text(f"file {c.of[f'file-{name}']}\n")
    (tmp / "team.yaml").write_text(TEAM.format(tmp=tmp))
    script = Script(c)
    url = openai_server_module(script)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("OPENAI_BASE_URL", url)
        mp.setenv("OPENAI_API_KEY", "test")
        first = cli(tmp, "run", "team.yaml", "--model", "openai:m")
        found = re.search(r"run id: (\S+)", first.output)
        assert found is not None, first.output
        run_id = found.group(1)
        ran = len(url.bodies)
        script.phase = 2
        resumed = cli(tmp, "resume", run_id)
        resumed_to = len(url.bodies)
        chats = {}
        for agent in ("diarist", "archivist"):
            start = len(url.bodies)
            chat = cli(tmp, "chat", "team.yaml", "--agent", agent, "--model", "openai:m",
                       "--context-window", "8000",
                       input="TAG=chat; what the scout found, and your notes?\n")  # fmt: skip
            assert chat.exit_code == 0, chat.output
            chats[agent] = url.bodies[start:]
    return {"tmp": tmp, "c": c, "run_id": run_id, "first": first, "resumed": resumed,
            "bodies": url.bodies[:resumed_to], "run": url.bodies[:ran],
            "resume": url.bodies[ran:resumed_to], "chats": chats}  # fmt: skip


def test_the_run_fails_once_and_its_resume_completes(canary_run) -> None:
    first, resumed = canary_run["first"], canary_run["resumed"]
    assert first.exit_code == 1, first.output
    assert "flaky_t" in first.output and "is not of type 'string'" in first.output
    assert resumed.exit_code == 0, resumed.output
    with RunLedger(f"sqlite:///{canary_run['tmp'] / 'runs.db'}") as ledger:
        statuses = {t.task_id: str(t.status) for t in ledger.tasks(canary_run["run_id"])}
    assert statuses == dict.fromkeys(TASKS, "completed")
    # The resume asked only for what had not completed: the synthesis leaves flaky_t out
    # (synthesis_from), so its prompt is the one already answered, and that answer is replayed.
    assert [viewer(b["messages"]) for b in canary_run["resume"]] == ["flaky_t"]


def test_each_canary_reaches_exactly_the_prompts_it_may(canary_run) -> None:
    found = seen(canary_run["bodies"], canary_run["c"])
    assert found.keys() == MAY_SEE.keys()
    wrong = {v: (sorted(found[v] - MAY_SEE[v]), sorted(MAY_SEE[v] - found[v])) for v in found}
    assert {v: d for v, d in wrong.items() if d != ([], [])} == {}, "(leaked, missing) by prompt"


def test_a_complete_answer_reaches_its_dependent_byte_for_byte_under_its_label(
    canary_run,
) -> None:
    c = canary_run["c"]
    (final,) = [b for b in canary_run["bodies"] if viewer(b["messages"]) == "final_t"]
    user = final["messages"][-1]["content"]
    blocks = dict(
        (m.group(2), m.group(3))
        for m in re.finditer(r"^(~{4,}) ([^\n]+)\n(.*?)\n\1$", user, re.M | re.S)
    )
    assert blocks["Scout notes (by scout)"] == scout_answer(c)
    assert blocks["Reviewed (by writer)"] == f"final draft {c.of['rev_t']}"


def test_chat_recalls_only_the_agents_own_and_its_groups_memory(canary_run) -> None:
    c = canary_run["c"]
    chats = {agent: seen(bodies, c) for agent, bodies in canary_run["chats"].items()}
    assert chats == {"diarist": {"chat": {"diary_t"}},
                     "archivist": {"chat": {"scout_t"}}}  # fmt: skip


def test_verify_passes_the_honest_run(canary_run) -> None:
    verify = cli(canary_run["tmp"], "verify", canary_run["run_id"])
    assert verify.exit_code == 0, verify.output


def test_verify_names_a_task_whose_prompt_holds_a_non_dependencys_result(
    canary_run, tmp_path: Path, rechain, rewrite_prompt
) -> None:
    c = canary_run["c"]
    outsider = f"outsider {c.of['outsider_t']}"

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] != "task_result:rev_t":
            return block
        item["origin"], item["sha256"] = "task_result:outsider_t", sha256_text(outsider)
        item["title"] = "Outsider (by outsider)"
        return Block(heading="Outsider (by outsider)", content=outsider, on_fence=True)

    verify = _forged_copy(canary_run, tmp_path, (rechain, rewrite_prompt), "task:final_t", edit)
    assert verify.exit_code == 1, verify.output
    flagged = [line for line in verify.output.splitlines() if "outsider_t" in line]
    assert flagged and all(line.startswith("task:final_t ") for line in flagged), verify.output
    assert "not in the task's clearance" in verify.output or "clearance" in flagged[0]


def test_every_channel_was_exercised(canary_run) -> None:
    """The canaries above travelled the channels they were meant to, not some other way."""
    c, run_id = canary_run["c"], canary_run["run_id"]
    with RunLedger(f"sqlite:///{canary_run['tmp'] / 'runs.db'}") as ledger:
        calls = [(t.agent, t.name, t.result) for t in ledger.tool_calls(run_id)]
        events = [(str(e.kind), e.subject, e.data) for e in ledger.events(run_id)]
        subjects = {call.subject for call in ledger.calls(run_id)}
    results = {(agent, name): result for agent, name, result in calls}
    assert results[("reader", "store_get")] == "entry shared/notes/n1 read"
    assert results[("outsider", "store_search")] == "0 entries: none"
    outsider = [result for agent, name, result in calls if agent == "outsider"]
    assert sum("may not read" in r for r in outsider) == 2  # store_get and store_query
    assert any("may not write" in r for r in outsider)
    assert results[("scout", "write_output")] == f"wrote outputs/{c.of['scout-file']}.txt (1 bytes)"
    kinds = {kind for kind, _subject, _data in events}
    assert {"compacted", "clarification", "spawn", "child", "review_round"} <= kinds, kinds
    pages = [r for agent, name, r in calls if agent == "looper" and name == "read_output"]
    assert [p.splitlines()[0] for p in pages] == [
        f"outputs/log.txt: lines {n}-3 of 3" for n in (1, 2, 3)
    ]
    memory = {(agent, name) for agent, name, _result in calls if name.startswith("memory_")}
    assert ("archivist", "memory_recall") in memory and ("scout", "memory_record") in memory
    assert {"clarification:iso_t", "review:rev_t/2/1", "synthesis"} <= subjects, subjects


def _forged_copy(
    canary_run: dict[str, Any], tmp: Path, forger: Any, subject: str, edit: Any
) -> Any:
    """Verify a copy of the run whose ``subject``'s last prompt ``edit`` rewrote, rechained.

    ``forger`` is ``(rechain, rewrite_prompt)``, the fixtures. Rechaining puts every event
    after every call, so the loop's compactions are flagged as recorded late too: tests
    look for their own finding's line.
    """
    rechain_run, rewrite_last_prompt = forger
    tmp_path = tmp
    db = tmp_path / "runs.db"
    with sqlite3.connect(canary_run["tmp"] / "runs.db") as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    conn = sqlite3.connect(db)
    try:
        rewrite_last_prompt(conn, subject, edit)
        conn.commit()
    finally:
        conn.close()
    rechain_run(db, canary_run["run_id"])
    return CliRunner().invoke(app, ["verify", canary_run["run_id"], "--db", f"sqlite:///{db}"])


def test_verify_flags_a_synthesis_showing_a_result_synthesis_from_leaves_out(
    canary_run, tmp_path: Path, rechain, rewrite_prompt
) -> None:
    c = canary_run["c"]
    outsider = f"outsider {c.of['outsider_t']}"

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] != "task_result:diary_t":
            return block
        item["origin"], item["sha256"] = "task_result:outsider_t", sha256_text(outsider)
        item["title"] = "Outsider (by outsider)"
        return Block(heading="Outsider (by outsider)", content=outsider, on_fence=block.on_fence)

    verify = _forged_copy(canary_run, tmp_path, (rechain, rewrite_prompt), "synthesis", edit)
    assert verify.exit_code == 1, verify.output
    assert (
        "synthesis task_result:outsider_t: the synthesis shows task 'outsider_t', which "
        "synthesis_from leaves out" in verify.output
    ), verify.output


@pytest.mark.parametrize("prompt_format", [2, 1, 0])
def test_a_left_out_failure_is_flagged_from_prompt_format_2(prompt_format: int) -> None:
    """A run recorded before format 2 showed such a failure's reason honestly: not flagged."""
    from types import SimpleNamespace

    from clearance._context.verify_items import _outside_synthesis_from

    facts: Any = SimpleNamespace(synthesis_from=frozenset({"a"}), prompt_format=prompt_format)
    status = list(_outside_synthesis_from("task_status:b", facts))
    assert status == ([("task_status:b", "the synthesis shows task 'b', which synthesis_from "
                        "leaves out")] if prompt_format >= 2 else [])  # fmt: skip
    assert list(_outside_synthesis_from("task_result:b", facts))  # never shown, any format
    assert not list(_outside_synthesis_from("task_status:a", facts))
