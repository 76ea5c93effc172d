"""The run page: what it shows, that it escapes everything, its policy, and the commands."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import sqlite3
from pathlib import Path

import pytest
from serving import fetch, serving
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._view import load_run_view, render_index, render_run_page
from clearance.cli import app

runner = CliRunner()


def page_of(recorded, **kwargs) -> str:
    with RunLedger(recorded.db) as ledger:
        return render_run_page(load_run_view(ledger, recorded.run_id), **kwargs)


def detail(page: str, index: int) -> str:
    start = page.index(f'<article class="detail" id="task-{index}"')
    return page[start : page.index("</article>", start)]


def graph_json(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', page)
    assert match is not None
    return json.loads(match[1])


async def test_graph_data_has_every_task_its_status_edges_and_clearance(recorded):
    graph = graph_json(page_of(recorded))
    ids = [n["id"] for n in graph["nodes"]]
    assert ids == ["spec", "evil", "flaky", "review", "summary", "broken", "after"]
    status = {n["id"]: n["status"] for n in graph["nodes"]}
    assert status["broken"] == "failed" and status["after"] == "skipped"
    assert status["review"] == "completed"
    assert sorted(graph["edges"]) == [[0, 3], [0, 4], [1, 3], [2, 4], [5, 6]]
    # review may see spec and evil, summary spec and flaky: never each other's inputs.
    assert graph["cleared"]["3"] == [0, 1] and graph["cleared"]["4"] == [0, 2]
    labels = {n["id"]: n["label"] for n in graph["nodes"]}
    assert re.fullmatch(r"completed · \d+\.\ds · \d+ tok", labels["review"])


async def test_the_prompt_is_split_by_origin_with_token_counts(recorded):
    with RunLedger(recorded.db) as ledger:
        view = load_run_view(ledger, recorded.run_id)
    for task in view.tasks:
        for call in task.calls:
            assert call.layout_note is None
            for message, recorded_message in zip(call.messages, call.call.messages, strict=True):
                assert "".join(s.text for s in message.segments) == recorded_message["content"]
            marked = [s for m in call.messages for s in m.segments if s.origin is not None]
            assert [s.origin for s in marked] == [i["origin"] for i in call.items]
            assert [s.tokens for s in marked] == [i["tokens"] for i in call.items]
    review = view.tasks[3].calls[0]
    kinds = [s.css for m in review.messages for s in m.segments if s.origin]
    assert kinds == ["other", "task", "task_result", "task_result"]
    section = detail(page_of(recorded), 3)
    assert 'class="seg k-task_result" title="task_result:spec · Write the spec' in section
    assert "ANSWER for task:spec" in section


async def test_a_task_shows_what_it_was_not_cleared_to_see(recorded):
    section = detail(page_of(recorded), 4)  # summary: depends on spec and flaky
    cleared = re.findall(r'<li class="cleared">result of <code>([^<]+)</code>', section)
    hidden = re.findall(r'<li class="not-cleared">([^ ]+) ', section)
    assert cleared == ["spec", "flaky"]
    assert hidden == ["evil", "review", "broken", "after"]
    assert "window.__pwned" not in section  # nothing of evil's result is on summary's panel


async def test_retries_failures_and_skips_are_shown(recorded):
    page = page_of(recorded)
    flaky = detail(page, 2)
    assert flaky.count('<section class="call') == 2
    assert '<span class="retry">retry 1</span>' in flaky
    assert "503 service unavailable" in flaky
    assert "HTTP 400 bad request" in detail(page, 5)
    assert "skipped: dependency &#39;broken&#39; failed" in detail(page, 6)
    assert "No model call was recorded for this task." in detail(page, 6)
    assert '<div id="verdict" class="verdict ok">' in page


async def test_hostile_text_is_shown_as_text_never_as_markup(recorded):
    page = page_of(recorded)
    assert recorded.hostile not in page
    # The only script elements are the page's own data block and script.
    assert len(re.findall(r"<script", page, re.IGNORECASE)) == 2
    assert "<img" not in page and "<svg><script" not in page
    assert "&lt;script&gt;window.__pwned = 1" in page
    assert "{{ 7 * 7 }}" in page  # template syntax in data is not evaluated
    # The task title with markup is escaped in the lists and panels alike.
    assert "Untrusted &lt;b&gt;task&lt;/b&gt;" in page and "<b>task</b>" not in page
    # No inline event handler anywhere (the CSP would block one anyway).
    assert not re.search(r"<[^>]+\son\w+\s*=", page)


async def test_the_policy_allows_only_the_pages_own_script_and_style(recorded):
    page = page_of(recorded)
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None
    csp = policy[1].replace("&#39;", "'")
    assert csp.startswith("default-src 'none'; ")
    script = re.search(r"<script>(.*?)</script>", page, re.DOTALL)
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    assert script is not None and style is not None
    for directive, text in (("script-src", script[1]), ("style-src", style[1])):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{directive} 'sha256-{digest}';" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert not re.search(r"\b(src|href)=\"(https?:)?//", page)  # no external resource


async def test_a_forged_result_is_flagged_on_the_call_and_item_that_show_it(recorded):
    conn = sqlite3.connect(recorded.path / "runs.db")
    conn.execute("UPDATE tasks SET result = 'forged' WHERE task_id = 'spec'")
    conn.commit()
    conn.close()
    page = page_of(recorded)
    assert '<div id="verdict" class="verdict bad">' in page
    review = detail(page, 3)
    assert '<section class="call has-findings">' in review
    assert 'class="seg k-task_result flagged" title="task_result:spec' in review
    assert "verify found 1 problem(s) in this call" in review


def test_a_prompt_that_does_not_parse_is_shown_raw_with_the_reason():
    from datetime import UTC, datetime

    from clearance._state.ledger import CallRecord
    from clearance._view.model import segment_call
    from clearance.models import Usage

    call = CallRecord(
        call_id="call_1", run_id="run_1", subject="task:a", agent="w", model_id="fake:x",
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "### x\nno"}],
        manifest={"items": [{"origin": "instructions", "title": "w", "tokens": 1}]},
        prompt_sha256="", record_sha256=None, response="r", finish_reason=None,
        usage=Usage(), error=None, started_at=datetime.now(UTC), latency_s=0.0,
    )  # fmt: skip
    view = segment_call(call, 1)
    assert view.layout_note is not None and "outside any section" in view.layout_note
    assert [s.text for m in view.messages for s in m.segments] == ["S", "### x\nno"]
    assert all(s.origin is None for m in view.messages for s in m.segments)


async def test_cli_view_writes_one_self_contained_file(recorded, tmp_path, monkeypatch):
    target = tmp_path / "out" / "run.html"
    target.parent.mkdir()
    result = runner.invoke(
        app, ["view", recorded.run_id[:12], "--db", recorded.db, "--output", str(target)]
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {target}" in result.output.replace("\n", "")
    page = target.read_text()
    assert page.startswith("<!DOCTYPE html>") and recorded.run_id in page
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["view", recorded.run_id, "--db", recorded.db]).exit_code == 0
    assert (tmp_path / f"{recorded.run_id}.html").read_text() == page


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["nope"], "unknown run 'nope'"), (["run_", "--output", "."], "is a folder")],
)
async def test_cli_view_errors_are_one_line(recorded, args, fragment):
    result = runner.invoke(app, ["view", *args, "--db", recorded.db])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]


async def test_serve_lists_runs_and_serves_their_pages_on_loopback_only(recorded):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        assert server.server_address[0] == "127.0.0.1"
        status, headers, body = fetch(server.url)
        assert status == 200 and f'href="/run/{recorded.run_id}"' in body
        assert "script-src 'none'" in headers["Content-Security-Policy"]
        status, headers, body = fetch(f"{server.url}run/{recorded.run_id}")
        assert status == 200 and 'href="/">all runs</a>' in body
        assert headers["Content-Security-Policy"].startswith("default-src 'none'; script-src")
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        status, _, body = fetch(f"{server.url}run/%3Cscript%3Enope")
        assert status == 404 and "unknown run &#39;&lt;script&gt;nope&#39;" in body
        assert fetch(f"{server.url}elsewhere")[0] == 404
        # DNS rebinding: another host name pointing at 127.0.0.1 is refused.
        assert fetch(server.url, host=f"attacker.example:{server.port}")[0] == 421


def test_serve_refuses_a_bad_or_busy_port(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    RunLedger(db).close()  # serve reads an existing ledger; it creates none
    result = runner.invoke(app, ["serve", "--port", "70000", "--db", db])
    assert result.exit_code == 2 and "65535" in result.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["serve", "--port", str(port), "--db", db])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --port: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in result.output


def test_the_index_page_of_an_empty_ledger():
    page = render_index([])
    assert "This ledger holds no runs yet." in page and "<script>" not in page


def test_the_layout_library_and_its_licence_are_packaged():
    static = Path(__file__).parents[2] / "src" / "clearance" / "_view" / "static"
    assert "Permission is hereby granted" in (static / "dagre.LICENSE").read_text()
    assert "sourceMappingURL" not in (static / "dagre.min.js").read_text()


async def test_a_tampered_ledger_is_shown_as_text_too(recorded, tamper):
    tampered = tamper(recorded)
    page = page_of(recorded)
    assert tampered not in page
    assert len(re.findall(r"<script", page, re.IGNORECASE)) == 2
    assert graph_json(page)["nodes"][0]["status"] == tampered  # data, read with JSON.parse
    assert "&lt;script&gt;window.__pwned = 4" in page


async def test_serve_answers_head_with_gets_headers_and_no_body(recorded):
    # RFC 9110, 9.3.2: a general-purpose server supports HEAD (it answered 501).
    import http.client

    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        for path in ("/", f"/run/{recorded.run_id}", "/elsewhere"):
            get_status, get_headers, get_body = fetch(f"{server.url}{path.lstrip('/')}")
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            try:
                conn.request("HEAD", path)
                response = conn.getresponse()
                assert response.read() == b""
                assert response.status == get_status
                headers = dict(response.getheaders())
            finally:
                conn.close()
            assert headers["Content-Length"] == str(len(get_body.encode()))
            assert headers["Content-Security-Policy"] == get_headers["Content-Security-Policy"]
