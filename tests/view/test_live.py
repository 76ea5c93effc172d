"""``serve`` while a run is going: the state endpoint, the live page, the runs list's columns."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from serving import fetch, serving

from clearance import RunLedger, Task
from clearance._context.verify import verify_run
from clearance._core.vocabulary import EventKind
from clearance._state.queue import TaskState, TaskStatus
from clearance._view import load_run_view, render_index, render_run_page
from clearance._view.runs import VerdictCache
from clearance.models import Usage


def start_running(ledger: RunLedger, run_id: str = "run_live") -> Task:
    """A run still going: started, one task running."""
    task = Task(id="a", title="A <i>title</i>", description="Do it.", assignee="w")
    ledger.start_run(run_id=run_id, team="t", goal=None, graph=None)
    ledger.record_task(
        run_id, TaskState(task=task, status=TaskStatus.RUNNING, started_at=datetime.now(UTC))
    )
    return task


async def test_the_state_of_a_finished_run_and_304_while_nothing_is_new(recorded):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        head = ledger.chain_heads([recorded.run_id])[recorded.run_id]
        url = f"{server.url}run/{recorded.run_id}/state"
        status, headers, body = fetch(url)
        assert status == 200 and headers["Content-Type"] == "application/json"
        assert json.loads(body) == {
            "run_id": recorded.run_id, "seq": head, "status": "failed", "live": False
        }  # fmt: skip
        assert headers["Cache-Control"] == "no-store"
        assert headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
        status, _, body = fetch(f"{url}?since={head}")
        assert (status, body) == (304, "")
        assert json.loads(fetch(f"{url}?since={head - 1}")[2])["seq"] == head
        # A prefix names the run, as on its page.
        assert json.loads(fetch(f"{server.url}run/{recorded.run_id[:14]}/state")[2])["seq"] == head


async def test_the_state_serves_only_the_loopback_host(recorded):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        url = f"{server.url}run/{recorded.run_id}/state?since=0"
        assert fetch(url, host=f"attacker.example:{server.port}")[0] == 421
        assert fetch(url, host=f"localhost:{server.port}")[0] == 200


async def test_the_state_of_an_unknown_run_is_404(recorded):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, headers, body = fetch(f"{server.url}run/run_nope/state")
        assert status == 404 and headers["Content-Type"] == "application/json"
        assert "unknown run 'run_nope'" in json.loads(body)["error"]


@pytest.mark.parametrize(
    "since", ["abc", "-1", "1.5", "", "%D9%A3", "1&since=2", "9" * 19, "9" * 5000]
)
async def test_a_bad_since_is_400(recorded, since):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, body = fetch(f"{server.url}run/{recorded.run_id}/state?since={since}")
        assert status == 400 and "since must be one whole number" in json.loads(body)["error"]


def test_a_run_going_on_is_live_until_it_finishes(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(db) as writer, RunLedger(db) as reader, serving(reader) as server:
        task = start_running(writer)
        writer.flush()
        state = f"{server.url}run/run_live/state"
        first = json.loads(fetch(state)[2])
        assert first["live"] is True and first["status"] == "running"
        assert fetch(f"{state}?since={first['seq']}")[0] == 304

        status, headers, page = fetch(f"{server.url}run/run_live")
        assert status == 200
        assert 'data-live="/run/run_live/state"' in page
        assert f'data-seq="{first["seq"]}"' in page
        policy = headers["Content-Security-Policy"]
        assert "connect-src 'self';" in policy and policy.startswith("default-src 'none'; ")
        assert 'id="live-note"' in page

        done = TaskState(
            task=task, status=TaskStatus.COMPLETED, result="done",
            started_at=datetime.now(UTC), finished_at=datetime.now(UTC),
        )  # fmt: skip
        writer.record_task("run_live", done)
        writer.flush()
        second = json.loads(fetch(f"{state}?since={first['seq']}")[2])
        assert second["seq"] > first["seq"] and second["live"] is True
        assert "status-completed" in fetch(f"{server.url}run/run_live")[2]

        writer.finish_run("run_live", status="completed", synthesis=None, usage=Usage(), error=None)
        writer.flush()
        last = json.loads(fetch(f"{state}?since={second['seq']}")[2])
        assert last["live"] is False and last["status"] == "completed"
        status, headers, page = fetch(f"{server.url}run/run_live")
        assert "data-live=" not in page and 'id="live-note"' not in page
        assert "connect-src" not in headers["Content-Security-Policy"]


async def test_polling_verifies_nothing_and_a_page_is_rendered_once_per_change(
    recorded, monkeypatch
):
    import clearance._view.serve as serve

    loads: list[str] = []
    real = serve.load_run_view

    def counting(ledger, run_id):
        loads.append(run_id)
        return real(ledger, run_id)

    monkeypatch.setattr(serve, "load_run_view", counting)
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        for _ in range(3):
            assert fetch(f"{server.url}run/{recorded.run_id}")[0] == 200
        for _ in range(5):
            assert fetch(f"{server.url}run/{recorded.run_id}/state?since=1")[0] == 200
        assert loads == [recorded.run_id]  # the page once; the polls never
        assert server.verdicts.verified == 0  # the page's own verdict fills the list's cache
        body = fetch(server.url)[2]
        assert server.verdicts.verified == 0 and "8 model calls verified" in body


async def test_a_static_page_never_polls(recorded):
    with RunLedger(recorded.db) as ledger:
        view = load_run_view(ledger, recorded.run_id)
    import dataclasses

    going = dataclasses.replace(view, run=dataclasses.replace(view.run, finished_at=None))
    page = render_run_page(going)  # a file: no state to poll
    assert "connect-src" not in page and "data-live=" not in page
    served = render_run_page(going, live_url="/run/x/state")
    assert "connect-src &#39;self&#39;" in served and 'data-live="/run/x/state"' in served


async def test_model_calls_are_counted_as_verify_counts_them(recorded):
    """The header once said "model calls 0" (the run's usage, written at its finish and
    counting answered requests only) next to "N model calls verified"."""
    with RunLedger(recorded.db) as ledger:
        view = load_run_view(ledger, recorded.run_id)
        recorded_calls = len(ledger.calls(recorded.run_id))
    assert view.run.usage.requests != recorded_calls  # the two failed calls are not requests
    assert len(view.calls) == view.calls_checked == recorded_calls == 8
    page = render_run_page(view)
    assert '<dd id="call-count">8 (2 failed)</dd>' in page
    assert "verify: 8 model calls verified." in page
    tokens = sum(c.call.usage.prompt_tokens for c in view.calls)
    assert f"<dd>{tokens} prompt · " in page


def test_a_run_going_on_counts_its_calls_before_it_finishes(tmp_path):
    import asyncio

    from clearance import Agent, Orchestrator, Team
    from clearance.testing import FunctionModel

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    seen: list[str] = []

    async def answer(request):
        with RunLedger(db) as reader:  # what a page would show while the call is in flight
            (run,) = reader.list_runs()
            seen.append(render_run_page(load_run_view(reader, run.run_id)))
        return "ok"

    team = Team(agents=(Agent(name="w", instructions="W."),), name="t")
    tasks = [Task(id="a", title="A", description="A.", assignee="w")]

    async def main() -> None:
        with RunLedger(db) as ledger:
            await Orchestrator(team, model=FunctionModel(answer), ledger=ledger).run_tasks(tasks)

    asyncio.run(main())
    page = seen[0]  # during the task's call (a synthesis call may follow)
    assert '<dd id="call-count">1</dd>' in page  # the request is recorded before it is sent
    assert "model calls 0" not in page


async def test_the_runs_list_shows_duration_and_verdict_and_caches_it(tmp_path, record):
    first = await record(tmp_path)
    second = await record(tmp_path)  # same ledger: two runs
    with RunLedger(first.db) as ledger:
        runs = ledger.list_runs()
        cache = VerdictCache(max_per_request=1)
        rows = cache.rows(ledger, runs)
        assert [r.verdict.state for r in rows] == ["ok", "unchecked"]  # newest first
        assert rows[0].run.run_id == second.run_id
        assert rows[1].verdict.text == "not checked yet (reload)"
        rows = cache.rows(ledger, runs)
        assert [r.verdict.state for r in rows] == ["ok", "ok"] and cache.verified == 2
        cache.rows(ledger, runs)
        assert cache.verified == 2  # nothing new: nothing verified again
        data = {"record": "call", "original": "call_x", "sha256": "0" * 64}
        ledger.record_event(first.run_id, EventKind.REPLAYED, "task:spec", data)
        again = cache.rows(ledger, runs)
        assert cache.verified == 3  # only the run with a new record
        findings = verify_run(ledger, first.run_id).findings
        assert findings  # a replay of a call that was never recorded
        assert again[1].verdict.state == "bad"
        assert again[1].verdict.text == f"{len(findings)} problem(s) in 8 model calls"
        page = render_index(rows)
    for row in rows:
        assert row.tokens == row.run.usage.prompt_tokens + row.run.usage.completion_tokens
        assert f'<td class="num">{row.tokens}</td>' in page
        assert row.duration_s is not None
        expected = (row.run.finished_at - row.run.created_at).total_seconds()
        assert row.duration_s == pytest.approx(expected)
    header = re.search(r"<thead>(.*?)</thead>", page, re.DOTALL)
    assert header is not None
    assert re.findall(r"<th[^>]*>([^<]+)</th>", header[1]) == [
        "run id", "team", "status", "started (UTC)", "duration", "verify", "tokens", "goal"
    ]  # fmt: skip
    assert page.count('class="verify verify-ok">8 model calls verified</td>') == 2
    assert page.count('<td class="nowrap"><span class="status status-failed">failed</span>') == 2
    assert re.search(r'<td class="num nowrap">\d+\.\ds</td>', page)


def test_a_run_going_on_is_not_verified_in_the_list(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(db) as ledger:
        start_running(ledger)
        cache = VerdictCache()
        (row,) = cache.rows(ledger, ledger.list_runs())
    assert row.verdict.state == "running" and cache.verified == 0
    assert row.duration_s is None
    assert row.tokens is None  # the usage total is written at the end: not a 0
    page = render_index([row])
    assert '<td class="num nowrap">-</td>' in page
    assert '<td class="num">—</td>' in page
    assert "when the run has finished" in page


async def test_a_forged_run_is_bad_in_the_list(recorded, tamper):
    tamper(recorded)
    with RunLedger(recorded.db) as ledger:
        (row,) = VerdictCache().rows(ledger, ledger.list_runs())
    assert row.verdict.state == "bad" and "problem(s)" in row.verdict.text
    page = render_index([row])
    assert "<script>window.__pwned" not in page


async def test_chain_heads_grow_with_every_record_in_one_read(recorded):
    with RunLedger(recorded.db) as ledger:
        entries = ledger.chain_entries(recorded.run_id)
        assert ledger.chain_heads([recorded.run_id, "run_nope"]) == {
            recorded.run_id: entries[-1].seq
        }
        assert ledger.chain_heads([]) == {}
        data = {"record": "call", "original": "call_x", "sha256": "0" * 64}
        ledger.record_event(recorded.run_id, EventKind.REPLAYED, "task:spec", data)
        assert ledger.chain_heads([recorded.run_id])[recorded.run_id] == entries[-1].seq + 1
