"""`clearance run` exports its spans over OTLP/HTTP when the standard variables ask for it.

The collector is a small HTTP server on 127.0.0.1 that decodes the OTLP protobuf requests; the
command runs in its own process (as a user runs it), so the export at exit is what is tested.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import clearance
from clearance._agents.telemetry import span_ref, span_task_id
from clearance._core.errors import ConfigError
from clearance.cli import app
from clearance.cli._otel import otlp_tracing, wants_otlp

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

TEAM = {
    "name": "otlp",
    "agents": [{"name": "writer", "instructions": "You write one line."}],
    "tasks": [
        {"id": "line", "title": "Line", "description": "Write a line.", "assignee": "writer"}
    ],
}
OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SDK_DISABLED",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)


class Collector:
    """Receives OTLP/HTTP trace exports (protobuf) on 127.0.0.1."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service.ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append((self.path, request))
                payload = trace_service.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """``(resource attributes, span)`` of every span received."""
        out = []
        for _, request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    out.extend((resource, span) for span in scope_spans.spans)
        return out

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes(span: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    yield server
    server.close()


def run_command(
    tmp_path: Path, model_url: str, team: dict[str, Any] = TEAM, **otel: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(Path(clearance.__file__).parents[1]),
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "test",
        **otel,
    }
    return subprocess.run(
        [sys.executable, "-m", "clearance", "run", "team.yaml", "--model", "openai:scripted",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.network
def test_run_exports_gen_ai_spans_to_the_otlp_endpoint(tmp_path, collector, openai_server):
    url = openai_server(lambda messages: "One line.")
    result = run_command(
        tmp_path, url, OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_SERVICE_NAME="review-bot"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert {path for path, _ in collector.requests} == {"/v1/traces"}
    spans = collector.spans()
    assert {resource["service.name"] for resource, _ in spans} == {"review-bot"}
    chats = [attributes(s) for _, s in spans if s.name == "chat scripted"]
    task_call = next(a for a in chats if a.get("clearance.task_id") == span_task_id("line"))
    assert task_call["gen_ai.operation.name"] == "chat"
    assert task_call["gen_ai.provider.name"] == "openai"
    assert task_call["gen_ai.usage.input_tokens"] == 10
    assert task_call["gen_ai.usage.output_tokens"] == 5
    assert task_call["clearance.run_id"] in result.stdout
    assert span_ref("task:line") in task_call["clearance.prompt.origins"]  # ids as digests
    agents = [attributes(s) for _, s in spans if s.name == "invoke_agent writer"]
    assert agents and agents[0]["gen_ai.agent.name"] == "writer"


TOOL_TEAM = {
    "name": "otlp-tools",
    "agents": [
        {"name": "writer", "instructions": "You write notes.", "tools": ["write_output"]},
        {"name": "editor", "instructions": "You edit notes."},
    ],
    "tasks": [
        {"id": "notes", "title": "Notes", "description": "Write notes.", "assignee": "writer"},
        {"id": "edit", "title": "Edit", "description": "Edit them.", "assignee": "editor",
         "depends_on": ["notes"]},
    ],
}  # fmt: skip


def writes_a_file(messages: list[dict[str, Any]]) -> Any:
    """The writer calls ``write_output`` once, then answers; everyone else answers."""
    writer = "You write notes." in messages[0]["content"]
    if writer and "## Results of your tool calls" not in messages[-1]["content"]:
        return [("write_output", {"name": "notes.md", "content": "hello"})]
    return "One line."


@pytest.mark.network
def test_a_run_is_one_trace_with_one_root_and_its_tool_calls(tmp_path, collector, openai_server):
    url = openai_server(writes_a_file)
    result = run_command(tmp_path, url, TOOL_TEAM, OTEL_EXPORTER_OTLP_ENDPOINT=collector.url)
    assert result.returncode == 0, result.stdout + result.stderr
    spans = [span for _, span in collector.spans()]
    assert len({span.trace_id for span in spans}) == 1  # one trace for the whole run
    (root,) = [span for span in spans if not span.parent_span_id]
    assert root.name == "invoke_workflow otlp-tools"
    root_attributes = attributes(root)
    assert root_attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert root_attributes["clearance.run_id"] in result.stdout
    assert root_attributes["clearance.tasks.completed"] == 2
    by_id = {span.span_id: span for span in spans}
    agents = [span for span in spans if span.name.startswith("invoke_agent ")]
    assert sorted(span.name for span in agents) == ["invoke_agent editor", "invoke_agent writer"]
    assert {by_id[span.parent_span_id].name for span in agents} == {root.name}
    (tool,) = [span for span in spans if span.name.startswith("execute_tool ")]
    assert tool.name == "execute_tool write_output"
    assert by_id[tool.parent_span_id].name == "invoke_agent writer"
    tool_attributes = attributes(tool)
    assert tool_attributes["gen_ai.tool.name"] == "write_output"
    assert tool_attributes["gen_ai.tool.type"] == "function"
    assert "gen_ai.tool.call.arguments" not in tool_attributes  # no content by default


@pytest.mark.network
def test_the_traces_endpoint_variable_is_used_as_is(tmp_path, collector, openai_server):
    url = openai_server(lambda messages: "One line.")
    result = run_command(
        tmp_path, url, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{collector.url}/custom/traces"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert {path for path, _ in collector.requests} == {"/custom/traces"}
    assert {resource["service.name"] for resource, _ in collector.spans()} == {"clearance"}


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.example/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
         False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
         False),
    ],
)  # fmt: skip
def test_which_variables_turn_export_on(environ, wanted):
    assert wants_otlp(environ) is wanted


@pytest.mark.parametrize(
    ("environ", "field"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://h/x"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
         "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ],
)  # fmt: skip
def test_bad_variables_are_config_errors(environ, field):
    with pytest.raises(ConfigError, match=field):
        wants_otlp(environ)


def test_no_variables_set_up_no_exporter(monkeypatch):
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    with otlp_tracing() as provider:
        assert provider is None


def test_a_bad_endpoint_is_a_one_line_error_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--db", f"sqlite:///{tmp_path / 'r.db'}"]
    )
    assert result.exit_code == 2
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in result.output and "Traceback" not in result.output


LONG_TEAM = {
    **TEAM,
    "tasks": [{**TEAM["tasks"][0], "description": "Write a line. " + "context " * 10_000}],
}


@pytest.mark.network
@pytest.mark.parametrize(("limit", "most"), [(None, 16_384), ("1000", 1000)])
def test_captured_content_is_cut_to_a_size_a_collector_takes(
    tmp_path, collector, openai_server, limit, most
):
    # The SDK's default is no limit: with content capture on, a span carried the whole prompt.
    url = openai_server(lambda messages: "One line.")
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "CLEARANCE_OTEL_CAPTURE_CONTENT": "1"}
    if limit is not None:
        otel["OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"] = limit
    result = run_command(tmp_path, url, LONG_TEAM, **otel)
    assert result.returncode == 0, result.stdout + result.stderr
    chats = [attributes(s) for _, s in collector.spans() if s.name == "chat scripted"]
    captured = [a["gen_ai.input.messages"] for a in chats if "gen_ai.input.messages" in a]
    assert captured, "content capture put no prompt on the span"
    assert max(len(text) for text in captured) == most
