"""A run's chain entries digest its row as stored, whether the ledger remembers it or not.

The ledger that started a run digests the run's later changes (`set_graph`, `finish_run`)
from the row it wrote, without reading it back; a run it did not start (one reopened to
resume it) or one another ledger took over is read back. Either way the digest must be the
one of the row as stored.
"""

import json
from contextlib import nullcontext

import pytest
from sqlalchemy import select

from clearance import RunLedger
from clearance._context.verify import verify_run
from clearance._state.chain import LEDGER_KEY_ENV, payload_sha256
from clearance._state.ledger.schema import RUNS
from clearance.models import Usage

GRAPH = [
    {"id": f"t{i}", "title": f"T{i}", "description": "d é", "assignee": "a", "depends_on": []}
    for i in range(3)
]


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(LEDGER_KEY_ENV, raising=False)


def stored_digest(ledger: RunLedger, run_id: str) -> str:
    with ledger._reading("read back") as conn:
        row = conn.execute(select(RUNS).where(RUNS.c.run_id == run_id)).mappings().one()
    return payload_sha256("run", dict(row))


def last_run_digest(ledger: RunLedger, run_id: str) -> str:
    """The payload digest of the run's latest record in its chain (alone or in a group)."""
    found = None
    for entry in ledger.chain_entries(run_id):
        if entry.kind == "run":
            found = entry.payload_sha256
        elif entry.records is not None:
            for kind, _subject, payload in json.loads(entry.records):
                if kind == "run":
                    found = payload
    assert found is not None
    return found


SYNTHESIS_WITHOUT_CALL = (
    "run",
    "the run's synthesis is not the answer of a synthesis call of the run",
)


def verified(ledger: RunLedger, run_id: str) -> bool:
    """Whether the run's records and chain verify.

    The one finding expected is the synthesis these tests write by hand, with no synthesis
    call behind it (`verify` flags a forged one so); a run without a synthesis has none.
    """
    found = [(f.subject, f.reason) for f in verify_run(ledger, run_id).findings]
    written = ledger.get_run(run_id).synthesis is not None
    return found == ([SYNTHESIS_WITHOUT_CALL] if written else [])


def check(ledger: RunLedger, run_id: str) -> str:
    digest = last_run_digest(ledger, run_id)
    assert digest == stored_digest(ledger, run_id)
    return digest


@pytest.mark.parametrize("behind", [False, True])
def test_start_set_graph_and_finish_digest_the_stored_row(tmp_path, behind):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(url) as ledger:
        with ledger.write_behind() if behind else nullcontext():
            ledger.start_run(run_id="run_a", team="t", goal="g ✓", graph=None, config={"x": [1]})
            seen = {check(ledger, "run_a")}
            ledger.set_graph("run_a", GRAPH)
            seen.add(check(ledger, "run_a"))
            usage = Usage(requests=2, prompt_tokens=3, completion_tokens=4)
            ledger.finish_run("run_a", status="completed", synthesis="s", usage=usage, error=None)
            seen.add(check(ledger, "run_a"))
        assert len(seen) == 3  # each change was chained
        assert verified(ledger, "run_a")


def test_a_run_started_inside_write_behind(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        with ledger.write_behind():
            ledger.start_run(run_id="run_b", team="t", goal=None, graph=GRAPH)
            ledger.finish_run("run_b", status="failed", synthesis=None, usage=Usage(), error="e")
        check(ledger, "run_b")
        assert verified(ledger, "run_b")


def test_a_resumed_run_is_read_back(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(url) as first:
        first.start_run(run_id="run_c", team="t", goal=None, graph=GRAPH, config={"a": 1})
        first.finish_run("run_c", status="interrupted", synthesis=None, usage=Usage(), error=None)
    with RunLedger(url) as second:
        second.reopen_run("run_c", process={"host": "h", "pid": 1})
        check(second, "run_c")
        second.set_graph("run_c", [*GRAPH, {**GRAPH[0], "id": "extra"}])
        check(second, "run_c")
        second.finish_run("run_c", status="completed", synthesis="s", usage=Usage(), error=None)
        check(second, "run_c")
        assert verified(second, "run_c")


def test_a_run_taken_over_by_another_ledger_is_read_back(tmp_path):
    """The other ledger changed the run's config: the first one's memory of the row is stale."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(url) as first, RunLedger(url) as second:
        first.start_run(run_id="run_d", team="t", goal=None, graph=GRAPH, config={"a": 1})
        second.reopen_run("run_d", process={"host": "other", "pid": 2}, force=True)
        first.finish_run("run_d", status="completed", synthesis="s", usage=Usage(), error=None)
        check(first, "run_d")
        assert first.get_run("run_d").config["process"] == {"host": "other", "pid": 2}
        assert verified(first, "run_d")


def test_a_run_started_twice_is_read_back(tmp_path):
    """The second start fails; its row must not be taken for the stored one."""
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        ledger.start_run(run_id="run_e", team="first", goal=None, graph=None)
        with pytest.raises(Exception, match="run_e"):
            ledger.start_run(run_id="run_e", team="second", goal="other", graph=GRAPH)
        ledger.finish_run("run_e", status="completed", synthesis="s", usage=Usage(), error=None)
        check(ledger, "run_e")
        assert ledger.get_run("run_e").team == "first"
        assert verified(ledger, "run_e")


def test_a_finished_run_is_forgotten_and_read_back_after(tmp_path):
    """A finished run leaves the ledger's memory (its graph is not kept for the ledger's life)."""
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        ledger.start_run(run_id="run_f", team="t", goal=None, graph=GRAPH)
        ledger.finish_run("run_f", status="running", synthesis=None, usage=Usage(), error=None)
        assert "run_f" in ledger._runs  # still running: still this ledger's
        ledger.finish_run("run_f", status="completed", synthesis="s", usage=Usage(), error=None)
        assert "run_f" not in ledger._runs
        ledger.set_graph("run_f", [*GRAPH, {**GRAPH[0], "id": "late"}])
        check(ledger, "run_f")
        assert verified(ledger, "run_f")


def test_a_change_whose_transaction_fails_is_not_remembered(tmp_path, monkeypatch):
    """A change rolled back at commit: the next change digests the row as stored."""
    from contextlib import contextmanager

    from clearance._core.errors import StoreError
    from clearance._state.ledger.base import LedgerBase

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        ledger.start_run(run_id="run_f", team="t", goal=None, graph=None)
        original = LedgerBase._writing

        @contextmanager
        def fails_at_commit(self, operation):
            with original(self, operation) as conn:
                yield conn
                raise StoreError("the disk is full")  # rolls the transaction back

        monkeypatch.setattr(LedgerBase, "_writing", fails_at_commit)
        with pytest.raises(StoreError, match="disk is full"):
            ledger.set_graph("run_f", GRAPH)
        monkeypatch.setattr(LedgerBase, "_writing", original)
        ledger.finish_run("run_f", status="completed", synthesis="s", usage=Usage(), error=None)
        check(ledger, "run_f")
        assert verified(ledger, "run_f")


NAN_SCHEMA = {"type": "number", "minimum": float("nan")}


@pytest.mark.parametrize(
    "graph",
    [
        GRAPH,  # kept as its canonical text
        [{**GRAPH[0], "output_schema": NAN_SCHEMA}],  # no canonical text: orjson writes NaN null
        [{**GRAPH[0], "depends_on": ("t1",)}, *GRAPH[1:]],  # a tuple
        [{**GRAPH[0], "output_schema": {"maximum": 2**70}}],  # beyond orjson
    ],
    ids=["plain", "nan", "tuple", "big-int"],
)
@pytest.mark.parametrize("behind", [False, True])
def test_a_graph_is_stored_and_digested_as_given(tmp_path, graph, behind):
    """Whether the graph is kept as canonical text or not, it reads back as given and every
    digest of the run's record is that of the row as stored."""
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        with ledger.write_behind() if behind else nullcontext():
            ledger.start_run(run_id="run_g", team="t", goal=None, graph=graph)
            check(ledger, "run_g")
            ledger.set_graph("run_g", graph)
            check(ledger, "run_g")
            ledger.finish_run("run_g", status="completed", synthesis="s", usage=Usage(), error=None)
        check(ledger, "run_g")
        assert verified(ledger, "run_g")
        stored = ledger.get_run("run_g").graph
    # The value as given, NaN included (its keys may come back sorted: JSON objects have no
    # order).
    given = json.loads(json.dumps(graph))
    assert json.dumps(stored, sort_keys=True) == json.dumps(given, sort_keys=True)
