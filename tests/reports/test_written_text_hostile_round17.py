"""What Clearance writes for a person to read, from hostile model text and hostile input.

The attacks: a model answers a task and the synthesis with terminal escapes (OSC 52 sets the
clipboard, CSI clears the screen, a C1 CSI), a bidirectional override, NUL and a carriage
return that rewrites the line it ends; ``cat report.md`` ran them. A team file holds two
titles that differ only by Unicode normalization, a zero-width character or full-width
letters: the results' labels read alike. The other written outputs (the run page, the list
of runs, ``--json``, SARIF) are fed the same text.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance.cli._app import app
from clearance.testing import FunctionModel
from clearance.view import make_server

RAW = ("\x1b", "\x07", "\x9b", "\x00", "\r", "\u202e", "\u2066")
HOSTILE_RESULT = "part one \x1b]52;c;aGk=\x07 then \x1b[2J\x9b31m red \u202edaer\u202c \x00 end"
HOSTILE_SYNTHESIS = "All done.\r\nok line\rforged line \u2066iso\u2069 ``` not a fence"

TEAM = """\
name: hostile
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - id: a
    title: "First <img src=https://evil.example/t.png> [docs](https://evil.example/d)"
    description: Write the first part.
    assignee: writer
"""


def assert_no_raw_controls(text: str) -> None:
    for char in RAW:
        assert char not in text, (char, text[:2000])


def hostile_reply(messages: list[dict[str, Any]]) -> str:
    if "Write the first part." in messages[-1]["content"]:
        return HOSTILE_RESULT
    return HOSTILE_SYNTHESIS


def run_cli(tmp_path: Path, *args: str) -> Any:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    return CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", db, *args]
    )


@pytest.mark.network
def test_the_report_file_shows_control_characters_escaped_and_keeps_every_printable_one(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``--output`` held the answers' ESC, BEL, C1 CSI, NUL, CR and bidi overrides
    as the model sent them, so ``cat report.md`` set the clipboard, cleared the screen and
    showed text in another order; a planned title's Markdown was a live image and link."""
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(hostile_reply))
    (tmp_path / "team.yaml").write_text(TEAM, encoding="utf-8")
    md, js = tmp_path / "report.md", tmp_path / "report.json"
    result = run_cli(tmp_path, "--output", str(md), "--json", str(js))
    assert result.exit_code == 0, result.output[-2000:]
    text = md.read_bytes().decode("utf-8")
    assert_no_raw_controls(text)
    # Every printable character is there, each control as the escape Python writes.
    assert (
        "part one \\x1b]52;c;aGk=\\x07 then \\x1b[2J\\x9b31m red \\u202edaer\\u202c \\x00 end"
        in text
    )
    # A line break is a line break (CRLF as LF); a carriage return alone is shown.
    assert "All done.\nok line\\rforged line \\u2066iso\\u2069 ``` not a fence" in text
    assert "_Note: this answer held 7 control or bidirectional characters, shown as" in text
    assert "_Note: the synthesis held 3 control or bidirectional characters, shown as" in text
    tokens = MarkdownIt("commonmark").parse(text)
    inline = [c for t in tokens if t.children for c in t.children]
    assert not [c for c in inline if c.type in ("image", "link_open", "html_inline")]
    headings = [
        "".join(c.content for c in tokens[i + 1].children or ())
        for i, t in enumerate(tokens)
        if t.type == "heading_open"
    ]
    assert headings[-1] == (
        "First <img src=https://evil.example/t.png> [docs](https://evil.example/d) (a, by writer)"
    )
    # --json holds the text exactly as answered, with no raw control or override in the file.
    raw = js.read_bytes().decode("utf-8")
    assert_no_raw_controls(raw)
    data = json.loads(raw)
    assert data["synthesis"] == HOSTILE_SYNTHESIS
    assert [t["result"] for t in data["tasks"]] == [HOSTILE_RESULT]


LOOK_ALIKE_TEAM = """\
name: alike
agents:
  - {{name: writer, instructions: "You write."}}
tasks:
  - {{id: one, title: "{first}", description: Write one., assignee: writer}}
  - {{id: two, title: "{second}", description: Write two., assignee: writer}}
"""


@pytest.mark.parametrize(
    ("first", "second", "shown"),
    [
        # NFC and NFD: one word, two forms.
        (
            "R\\u00e9sum\\u00e9",
            "Re\\u0301sume\\u0301",
            "'R\\xe9sum\\xe9' and 'Re\\u0301sume\\u0301'",
        ),
        # A zero-width space and a zero-width joiner are not seen.
        ("Draft", "Dr\\u200baft", "'Draft' and 'Dr\\u200baft'"),
        ("Draft", "Dra\\u200dft", "'Draft' and 'Dra\\u200dft'"),
        # Full-width letters read as the ASCII ones.
        (
            "Draft",
            "\\uff24\\uff52\\uff41\\uff46\\uff54",
            "'Draft' and '\\uff24\\uff52\\uff41\\uff46\\uff54'",
        ),
    ],
)
@pytest.mark.parametrize("command", ["run", "graph", "plan"])
def test_titles_that_read_alike_are_refused_in_one_line_naming_both(
    tmp_path: Path, first: str, second: str, shown: str, command: str
) -> None:
    """Before: titles were compared ignoring case only, so these ran, and the dependents and
    the synthesis got two results labelled alike (plans were already held to this rule)."""
    (tmp_path / "team.yaml").write_text(
        LOOK_ALIKE_TEAM.format(first=first, second=second), encoding="utf-8"
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = {
        "run": ["run", str(tmp_path / "team.yaml"), "--model", "fake:echo", "--db", db],
        "graph": ["graph", str(tmp_path / "team.yaml")],
        "plan": [
            "plan",
            str(tmp_path / "team.yaml"),
            "--model",
            "fake:echo",
            "--db",
            db,
            "--goal",
            "g",
        ],
    }[command]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), lines
    assert f"tasks 'one' and 'two' have the same titles {shown}" in lines[0], lines[0]


def record_hostile_run(tmp_path: Path) -> tuple[str, str]:
    """A run whose goal, title, result and synthesis hold escapes and overrides."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"

    def answer(request: Any) -> str:
        if request.prompt.manifest.subject == "task:a":
            return HOSTILE_RESULT
        return HOSTILE_SYNTHESIS

    team = Team(agents=(Agent(name="writer", instructions="You write."),))
    title = "Draft \u202eevil\u202c \u2066x\u2069"
    tasks = [Task(id="a", title=title, description="Write.", assignee="writer")]

    async def run() -> str:
        with RunLedger(db) as ledger:
            orchestrator = Orchestrator(team, model=FunctionModel(answer), ledger=ledger)
            goal = "goal \x1b]0;owned\x07 \u202edaer"
            return (await orchestrator.run_tasks(tasks, goal=goal)).run_id

    return db, asyncio.run(run())


def test_the_run_page_and_the_list_of_runs_hold_no_raw_control_or_override(
    tmp_path: Path,
) -> None:
    """Before: the page held the answers' escapes and overrides raw (HTML escaping leaves
    them): a browser showed a title, goal or result in another order than it reads, and
    ``curl`` of a served page, or ``cat`` of a written one, ran the escapes."""
    db, run_id = record_hostile_run(tmp_path)
    target = tmp_path / "page.html"
    result = CliRunner().invoke(app, ["view", run_id, "--db", db, "-o", str(target)])
    assert result.exit_code == 0, result.output
    page = target.read_bytes().decode("utf-8")
    assert_no_raw_controls(page)
    assert "part one \\x1b]52;c;aGk=\\x07 then \\x1b[2J\\x9b31m red \\u202edaer\\u202c" in page
    assert "Draft \\u202eevil\\u202c \\u2066x\\u2069" in page
    assert "goal \\x1b]0;owned\\x07 \\u202edaer" in page
    with RunLedger(db, read_only=True) as ledger:
        server = make_server(ledger, 0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}/"
            for url in (base, f"{base}run/{run_id}"):
                with urllib.request.urlopen(url, timeout=10) as response:
                    served = response.read().decode("utf-8")
                assert_no_raw_controls(served)
                assert "goal \\x1b]0;owned\\x07 \\u202edaer" in served
            # An unknown run's page quotes the id the request named.
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(f"{base}run/r%1b%5d0;owned%07%e2%80%ae", timeout=10)
            assert info.value.code == 404
            missing = info.value.read().decode("utf-8")
            assert_no_raw_controls(missing)
            assert "r\\x1b]0;owned\\x07\\u202e" in missing
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


ROOT = Path(__file__).resolve().parents[2]


def test_the_code_reviews_report_and_sarif_hold_input_names_escaped(tmp_path: Path) -> None:
    """Before: a reviewed file's name and the input folder's name (someone else's) reached
    ``--output`` with their bidirectional overrides raw, and ``--sarif`` too (JSON escapes
    only C0 controls): ``cat`` of either showed the names in another order than they read."""
    pkg = tmp_path / "pk\u202eg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Pkg \x1b]0;owned\x07 here."""\n')
    (pkg / "ev\u202eyp.il.py").write_text(
        '"""Tools."""\n\n\ndef f():\n    return eval("1 + 2")\n', encoding="utf-8"
    )
    md, sarif = tmp_path / "review.md", tmp_path / "review.sarif"
    db = f"sqlite:///{tmp_path / 'r.db'}"
    example = str(ROOT / "examples" / "code_review.yaml")
    args = ["run", example, "--input", str(pkg), "--model", "fake:echo", "--db", db]
    result = CliRunner().invoke(app, [*args, "--output", str(md), "--sarif", str(sarif)])
    assert result.exit_code == 0, result.output
    text = md.read_bytes().decode("utf-8")
    assert_no_raw_controls(text)
    assert "### `ev\\u202eyp.il.py`: Tools." in text
    assert "Package `pk\\u202eg` has 2 modules" in text
    raw = sarif.read_bytes().decode("utf-8")
    assert_no_raw_controls(raw)
    log = json.loads(raw)["runs"][0]
    assert log["originalUriBaseIds"]["PACKAGE_ROOT"]["description"]["text"] == "pk\u202eg"
    location = log["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location["uri"] == "ev%E2%80%AEyp.il.py"


class _SynthesisFails:
    """A model server on 127.0.0.1: a task's request is answered, the synthesis's refused."""

    def __init__(self, error: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if "Write the first part." in body["messages"][-1]["content"]:
                    status, answer = 200, {
                        "id": "x", "object": "chat.completion", "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "Done."}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }  # fmt: skip
                else:
                    status, answer = 400, {"error": {"message": error}}
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.mark.network
def test_a_failed_synthesis_reason_is_one_line_of_text_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the reason a synthesis failed (a server's error body, quoted) went into the
    report as Markdown: its line break started a heading of its own and its image was
    fetched when the report was shown."""
    error = "bad <img src=https://evil.example/p.png>\n\n## Synthesis (all clear)\n![x](https://t.example/p)"
    server = _SynthesisFails(error)
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        team = TEAM.replace(
            '"First <img src=https://evil.example/t.png> [docs](https://evil.example/d)"', "First"
        )
        (tmp_path / "team.yaml").write_text(team, encoding="utf-8")
        md = tmp_path / "report.md"
        result = run_cli(tmp_path, "--output", str(md))
    finally:
        server.close()
    assert result.exit_code == 1, result.output[-2000:]
    text = md.read_text(encoding="utf-8")
    tokens = MarkdownIt("commonmark").parse(text)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == [
        "Run report (hostile)",
        "Synthesis (written by the coordinator, openai:m)",
        "First (a, by writer)",
    ]
    inline = [c for t in tokens if t.children for c in t.children]
    assert not [c for c in inline if c.type in ("image", "link_open", "html_inline")]
    (line,) = [line for line in text.splitlines() if line.startswith("_No synthesis: ")]
    # Every character of the reason is there, as text.
    assert "bad \\<img src=https://evil.example/p.png\\> \\#\\# Synthesis \\(all clear\\)" in line
