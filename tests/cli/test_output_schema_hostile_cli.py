"""A hostile ``output_schema`` in a team file, driven through ``clearance run``.

The schema is the team file's and the answer the model's (a real OpenAI-compatible server on
127.0.0.1): a pattern that backtracks without end is bounded in time, a ``$ref`` to a URL or
a file is refused before the run and never fetched, and a schema whose patterns could not be
bounded is a one-line error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli._app import app

pytestmark = pytest.mark.network


def team(schema: dict[str, Any]) -> str:
    return yaml.safe_dump({
        "name": "hostile-schema",
        "model": "openai:gpt-test",
        "agents": [{"name": "alpha", "instructions": "You answer."}],
        "tasks": [{"id": "a", "title": "A", "description": "Answer.", "assignee": "alpha",
                   "output_schema": schema}],
    })  # fmt: skip


def test_a_backtracking_pattern_fails_the_task_within_seconds(tmp_path: Path, openai_server):
    # `re` takes ages for '^(a|aa)+$' on 'aaa...!'; the run held for ever before.
    answer = json.dumps({"s": "a" * 60 + "!"})
    url = openai_server(lambda messages: answer)
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|aa)+$"}}}
    (tmp_path / "team.yaml").write_text(team(schema))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "test",
           "PYTHONPATH": str(Path(__file__).parents[2] / "src")}  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "clearance", "run", "team.yaml", "--db", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert time.monotonic() - started < 45  # two checks of 2 seconds, and the run around them
    assert done.returncode != 0
    ledger = RunLedger(db)
    (run,) = ledger.list_runs()
    (task,) = ledger.tasks(run.run_id)
    assert task.status == "failed"
    assert "the output schema's patterns took over 2 seconds on the answer" in (task.error or "")
    repairs = [b for b in url.bodies if "Problem:" in b["messages"][-1]["content"]]
    assert len(repairs) == 1  # one repair, told why
    assert "patterns took over 2 seconds" in repairs[0]["messages"][-1]["content"]
    verified = subprocess.run(
        [sys.executable, "-m", "clearance", "verify", run.run_id, "--db", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.fixture
def schema_host():
    """A server on 127.0.0.1 that serves a schema and counts the requests it got."""
    got: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            got.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/schema.json", got
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("where", ["http", "file", "relative"])
def test_a_ref_outside_the_schema_is_refused_before_the_run_and_never_fetched(
    tmp_path: Path, openai_server, schema_host, monkeypatch: pytest.MonkeyPatch, where: str
):
    url, got = schema_host
    (tmp_path / "s.json").write_text('{"type": "integer"}')
    ref = {"http": url, "file": (tmp_path / "s.json").as_uri(), "relative": "s.json"}[where]
    model = openai_server(lambda messages: '"text"')
    monkeypatch.setenv("OPENAI_BASE_URL", model)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(team({"$ref": ref}))
    result = CliRunner().invoke(app, ["run", "team.yaml", "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert "tasks.a.output_schema" in line and "points outside the schema" in line
    assert got == [] and model.bodies == []  # nothing fetched, no model called


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False},
         "unevaluatedProperties cannot be used with patternProperties"),
    ],
)  # fmt: skip
def test_a_schema_that_cannot_be_checked_safely_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, schema: dict[str, Any], says: str
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(team(schema).replace("openai:gpt-test", "fake:x"))
    started = time.monotonic()
    result = CliRunner().invoke(app, ["run", "team.yaml", "--db", f"sqlite:///{tmp_path}/r.db"])
    assert time.monotonic() - started < 10
    assert result.exit_code == 2, result.output
    assert says in result.output and "tasks.a.output_schema" in result.output
    assert result.output.strip().count("\n") <= 2  # one error line, however it wraps


@pytest.mark.parametrize("key", ["minItems", "minLength"])
def test_a_huge_minimum_on_the_fake_model_fails_the_task_within_seconds(tmp_path: Path, key):
    # The fake model built an instance of 10**22 items (or characters), and the run never
    # ended, not even on SIGTERM.
    kind = "array" if key == "minItems" else "string"
    (tmp_path / "team.yaml").write_text(
        team({"type": kind, key: 10**22}).replace("openai:gpt-test", "fake:x")
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "clearance", "run", "team.yaml", "--db", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    ledger = RunLedger(db)
    (run,) = ledger.list_runs()
    (task,) = ledger.tasks(run.run_id)
    assert task.status == "failed"
    says = {"minItems": "the JSON does not match the output schema at $",
            "minLength": "(max_response_chars): refused"}[key]  # fmt: skip
    assert says in (task.error or "")
