"""A served page of a run whose process is gone watches for a resume, and shows it.

The page ``serve`` sent for a run recorded ``running`` whose process was killed stopped
polling (no ``connect-src``, no poll address): a run resumed later was shown only once the
page was reloaded. Now such a page carries ``data-watch`` (the state endpoint) and may fetch
from its own origin; it asks about every 15 seconds with ``gone=1``, answered ``304`` while
the run is still gone and nothing is new, and its state (``live: true``) once a resume has
recorded a live process. A ``gone`` that is not ``1`` (or given twice) is ``400``.

Real parts: a SQLite ledger file, a real process that ran and exited (its id names no live
process), ``serve`` on 127.0.0.1 answering HTTP GETs.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from serving import fetch, serving

from clearance import RunLedger, Task
from clearance._orchestration.resume import process_identity
from clearance._state.queue import TaskState, TaskStatus
from clearance.models import Usage

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process ids")

RUN = "run_gone_watch"
_SEQ = re.compile(r'data-seq="(\d+)"')


def dead_pid() -> int:
    """The id of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    return process.pid


def start_gone_run(ledger: RunLedger) -> None:
    """A run recorded running, one task running, owned by a process that is gone."""
    owner = {"host": socket.gethostname(), "pid": dead_pid()}
    ledger.start_run(run_id=RUN, team="t", goal=None, graph=None, config={"process": owner})
    task = Task(id="a", title="A", description="Do it.", assignee="w")
    ledger.record_task(
        RUN, TaskState(task=task, status=TaskStatus.RUNNING, started_at=datetime.now(UTC))
    )


def test_a_gone_runs_page_watches_and_its_state_answers_live_after_a_resume(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        start_gone_run(ledger)
        with serving(ledger) as server:
            state = f"{server.url}run/{RUN}/state"
            status, headers, page = fetch(f"{server.url}run/{RUN}")
            assert status == 200 and 'id="gone-note"' in page
            assert f'<body data-watch="/run/{RUN}/state" data-seq="' in page
            assert "data-live=" not in page and 'id="live-note"' not in page
            assert "connect-src 'self'" in headers["Content-Security-Policy"]
            (seq,) = _SEQ.findall(page)
            assert int(seq) == ledger.chain_heads([RUN])[RUN]

            # The watching page: nothing new and still gone.
            assert fetch(f"{state}?since={seq}&gone=1")[::2] == (304, "")
            # A page that shows it going is told it is gone (as before).
            status, _, body = fetch(f"{state}?since={seq}")
            assert status == 200
            assert json.loads(body) == {"run_id": RUN, "seq": int(seq), "status": "running",
                                        "live": False}  # fmt: skip

            ledger.reopen_run(RUN, process=process_identity())  # resumed by a live process
            head = ledger.chain_heads([RUN])[RUN]
            status, headers, body = fetch(f"{state}?since={seq}&gone=1")
            assert (status, headers["Content-Type"]) == (200, "application/json")
            assert json.loads(body) == {"run_id": RUN, "seq": head, "status": "running",
                                        "live": True}  # fmt: skip
            # The page it then fetches polls as a live one again.
            status, headers, page = fetch(f"{server.url}run/{RUN}")
            assert status == 200 and 'id="gone-note"' not in page
            assert f'<body data-live="/run/{RUN}/state" data-seq="{head}"' in page
            assert "data-watch=" not in page
            assert fetch(f"{state}?since={head}")[::2] == (304, "")


@pytest.mark.parametrize("query", ["gone=0", "gone=", "gone=1&gone=1", "gone=true"])
def test_a_gone_mark_that_is_not_1_is_400(tmp_path, query):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        start_gone_run(ledger)
        with serving(ledger) as server:
            status, headers, body = fetch(f"{server.url}run/{RUN}/state?since=1&{query}")
            assert (status, headers["Content-Type"]) == (400, "application/json")
            assert json.loads(body) == {"error": "gone must be 1, once, or not given"}


def test_a_finished_runs_page_neither_polls_nor_watches(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        start_gone_run(ledger)
        ledger.finish_run(RUN, status="failed", synthesis=None, usage=Usage(), error="stopped")
        with serving(ledger) as server:
            status, headers, page = fetch(f"{server.url}run/{RUN}")
            assert status == 200 and "data-watch=" not in page and "data-live=" not in page
            assert "connect-src" not in headers["Content-Security-Policy"]
