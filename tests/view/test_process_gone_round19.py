"""A run whose process is gone is shown so by the run page, ``serve`` and ``verify`` too.

``clearance runs`` and ``inspect`` show a run recorded ``running`` whose process was killed
as ``running (process gone)`` (`clearance.runs.shown_status`, the rule ``resume`` uses). The
run page (``clearance view``, ``clearance serve``: its page and the list of runs) still said
``running``, and a served page kept saying so after the process died: the page was kept by
chain position (nothing new is recorded once the process is dead) and the state endpoint
answered ``304`` for ever, with the page's "the run is going" note. ``clearance verify``
said "in progress, or its process died" of a run it could tell was dead. Now each uses the
same rule; the stored status stays in JSON (the state endpoint's ``status``).

Through the product path: a team file, ``clearance run`` as a subprocess against a real
OpenAI-compatible server on 127.0.0.1 that holds the task's call, SIGKILLed mid-run, a real
SQLite ledger; then ``clearance view`` (the written file), ``clearance serve`` (a subprocess,
HTTP GETs on 127.0.0.1) and ``clearance verify``. While the run's process lives, each still
shows ``running``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from killed_runs import kill, stalled_run

SRC = str(Path(__file__).parents[2] / "src")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

_BADGE = r'<span class="status status-running([^"]*)">([^<]*)</span>'
_RUN_STATUS = re.compile(r"<dt>status</dt><dd>" + _BADGE)  # the run's, not its tasks'
_LISTED_STATUS = re.compile(r'<td class="nowrap">' + _BADGE)
_SEQ = re.compile(r'data-seq="(\d+)"')
_IN_PROGRESS = (
    "; the run is recorded as running (in progress, or its process died): records added after "
    "this check are not covered, so verify it again once it has ended"
)
_GONE = (
    "; the run is recorded as running (process gone): it stopped before it ended, so what it "
    "recorded is what was checked; verify it again if it is resumed"
)


def _env(url: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARANCE_", "OTEL_"))}
    env.update(PYTHONPATH=SRC, OPENAI_BASE_URL=url, OPENAI_API_KEY="test", COLUMNS="200")
    return env


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@contextmanager
def _serve(tmp_path: Path) -> Iterator[str]:
    """``clearance serve --port 0`` as a subprocess; its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "clearance", "serve", "--port", "0",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()))
        reader.start()
        reader.join(60)
        found = re.search(r"http://127\.0\.0\.1:\d+/", lines[0] if lines else "")
        assert found, (lines, process.poll())
        yield found[0]
    finally:
        process.terminate()
        process.communicate(timeout=30)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _shown(page: str, where: re.Pattern[str] = _RUN_STATUS) -> tuple[str, str]:
    """The run's status as the page shows it, and the extra classes of its badge."""
    (found,) = where.findall(page)
    return found[1], found[0]


def _verified_line(tmp_path: Path, run_id: str) -> str:
    checked = _cli(tmp_path, "verify", run_id)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (line,) = checked.stdout.strip().splitlines()
    assert line.startswith(f"run {run_id}: 1 model calls verified"), line
    return line


def test_view_and_verify_show_a_killed_run_gone_and_a_live_one_running(tmp_path, openai_server):
    with stalled_run(tmp_path, openai_server, _env) as (process, run_id):
        written = _cli(tmp_path, "view", run_id, "--output", "live.html")
        assert written.returncode == 0, written.stderr
        live = (tmp_path / "live.html").read_text()
        assert _shown(live) == ("running", "")
        assert _verified_line(tmp_path, run_id).endswith(_IN_PROGRESS)

        kill(process)
        written = _cli(tmp_path, "view", run_id, "--output", "gone.html")
        assert written.returncode == 0, written.stderr
        gone = (tmp_path / "gone.html").read_text()
        assert _shown(gone) == ("running (process gone)", " status-gone")
        assert "<strong>process gone</strong>" in gone and f"clearance resume {run_id}" in gone
        assert _verified_line(tmp_path, run_id).endswith(_GONE)
        # What the ledger holds is unchanged: JSON shows the stored status.
        shown = _cli(tmp_path, "inspect", run_id, "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["run"]["status"] == "running"


def test_serve_shows_a_run_gone_once_its_process_is_killed(tmp_path, openai_server):
    with stalled_run(tmp_path, openai_server, _env) as (process, run_id), _serve(tmp_path) as base:
        status, index = _get(base)
        assert status == 200 and _shown(index, _LISTED_STATUS) == ("running", "")
        assert "when the run has finished" in index  # not verified while it goes on
        status, page = _get(f"{base}run/{run_id}")
        assert status == 200 and _shown(page) == ("running", "")
        assert 'id="live-note"' in page and "data-live=" in page
        (seq,) = _SEQ.findall(page)
        state = f"{base}run/{run_id}/state"
        assert _get(f"{state}?since={seq}") == (304, "")

        kill(process)  # nothing new is recorded: the chain head stays where it was
        status, body = _get(f"{state}?since={seq}")  # the open page learns it, and stops
        assert status == 200, body
        assert json.loads(body) == {"run_id": run_id, "seq": int(seq), "status": "running",
                                    "live": False}  # fmt: skip
        status, page = _get(f"{base}run/{run_id}")  # kept at this head, but rendered anew
        assert status == 200 and _shown(page) == ("running (process gone)", " status-gone")
        assert 'id="live-note"' not in page and "data-live=" not in page
        status, index = _get(base)
        gone = ("running (process gone)", " status-gone")
        assert status == 200 and _shown(index, _LISTED_STATUS) == gone
        # It will not finish by itself: verified as it stands, not "when the run has finished".
        assert '<td class="verify verify-ok">1 model calls verified</td>' in index
