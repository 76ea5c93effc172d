"""The OTLP exporter's own variables: checked before a run, never echoing a secret, no hang.

The SDK logs and drops what it cannot read (a header that is not ``name=value``, an unknown
compression, a timeout that is not a number), so a run would go on exporting without the
header the user set, or not at all; a timeout of days holds the command's exit that long
when the collector does not answer. Each is one ``error:`` line naming the variable (exit
code 2), and a value that may hold a token (a header, an endpoint) is not shown.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from clearance._core.errors import ConfigError
from clearance.cli._otel import MAX_EXPORT_TIMEOUT_S, wants_otlp

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
TEAM = {
    "name": "t",
    "agents": [
        {"name": "writer", "instructions": "You write.", "limits": {"max_output_tokens": 8}}
    ],
    "tasks": [{"id": "t1", "title": "T", "description": "Do it.", "assignee": "writer"}],
}


def refused(environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        wants_otlp({**ENDPOINT, **environ})
    return str(info.value)


def command(tmp_path: Path, env: dict[str, str], deadline_s: float = 60) -> tuple[int, str, float]:
    """``clearance run`` of a one-task team in its own process: exit code, stderr, seconds."""
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARANCE_", "OTEL_"))}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "clearance", "run", "team.yaml", "--model", "fake:m"],
        cwd=tmp_path, env={**environ, **env}, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=deadline_s,
    )  # fmt: skip
    return done.returncode, done.stderr, time.monotonic() - started


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf", "1e400", "86400"])
@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"]
)
def test_an_export_timeout_that_is_no_bounded_number_of_seconds_is_refused(name, value):
    message = refused({name: value})
    assert message.startswith(f"{name}: ") and f"at most {MAX_EXPORT_TIMEOUT_S:g}" in message


def test_a_bounded_export_timeout_is_taken():
    assert wants_otlp({**ENDPOINT, "OTEL_EXPORTER_OTLP_TIMEOUT": "2.5"})


@pytest.mark.parametrize("value", ["bogus", "zstd"])
def test_an_unknown_compression_is_refused(value):
    message = refused({"OTEL_EXPORTER_OTLP_COMPRESSION": value})
    assert message.startswith("OTEL_EXPORTER_OTLP_COMPRESSION: ") and "gzip" in message
    assert wants_otlp({**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "GZIP"})


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
)
def test_a_header_that_is_not_name_value_is_refused_without_showing_it(name):
    message = refused({name: "x-team=crew,Authorization: Bearer s3cret-token"})
    assert message.startswith(f"{name}: entry 2 is not name=value")
    assert "s3cret" not in message
    assert wants_otlp({**ENDPOINT, name: "Authorization=Bearer s3cret-token, x-team = crew,"})


def test_an_endpoint_that_is_no_url_is_refused_without_showing_it():
    message = refused({"OTEL_EXPORTER_OTLP_ENDPOINT": "user:s3cret@collector:4318"})
    assert message.startswith("OTEL_EXPORTER_OTLP_ENDPOINT: ") and "s3cret" not in message


def test_a_certificate_file_that_does_not_exist_is_refused(tmp_path):
    missing = tmp_path / "ca.pem"
    message = refused({"OTEL_EXPORTER_OTLP_CERTIFICATE": str(missing)})
    assert message.startswith("OTEL_EXPORTER_OTLP_CERTIFICATE: ") and "is not a file" in message
    missing.write_text("-----BEGIN CERTIFICATE-----\n")
    assert wants_otlp({**ENDPOINT, "OTEL_EXPORTER_OTLP_CERTIFICATE": str(missing)})


def test_a_bad_header_is_one_error_line_with_exit_2_before_the_run(tmp_path):
    code, stderr, _ = command(
        tmp_path, {**ENDPOINT, "OTEL_EXPORTER_OTLP_HEADERS": "Authorization: Bearer s3cret"}
    )
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert lines == [
        "error: OTEL_EXPORTER_OTLP_HEADERS: entry 1 is not name=value (a comma-separated list "
        "of name=value; the value is not shown)"
    ]
    assert sorted(os.listdir(tmp_path)) == ["team.yaml"]  # refused before anything was made


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """A collector that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"http://user:s3cret@127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def test_a_collector_that_never_answers_delays_the_exit_by_the_timeout_only(
    tmp_path, silent_collector
):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": silent_collector, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    code, stderr, seconds = command(tmp_path, env, deadline_s=30)
    assert code == 0, stderr
    assert seconds < 15  # the interpreter's start, the run, and one second of export
    assert "s3cret" not in stderr


@pytest.mark.parametrize("value", ["on", "2", "enabled"])
def test_a_content_capture_switch_that_is_neither_on_nor_off_is_refused(value):
    message = refused({"CLEARANCE_OTEL_CAPTURE_CONTENT": value})
    assert message.startswith("CLEARANCE_OTEL_CAPTURE_CONTENT: must be 1")
    for taken in ("1", "TRUE", "no", ""):
        assert wants_otlp({**ENDPOINT, "CLEARANCE_OTEL_CAPTURE_CONTENT": taken})


# -- the resource: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME ------------------------------
# The SDK drops an entry it cannot read with a warning that shows it, keeps a bad escape or a
# non-UTF-8 one as text, and sends any number of entries of any length with every export: a
# user's service.name or deployment tags vanished, or the exports were refused.

RESOURCE = "OTEL_RESOURCE_ATTRIBUTES"
FORMAT = "a comma-separated list of key=value, values percent-encoded; the value is not shown"


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("s3cret", f"entry 1 is not key=value ({FORMAT})"),
        ("deployment.environment=prod,s3cret", f"entry 2 is not key=value ({FORMAT})"),
        ("=s3cret", f"entry 1 has no key ({FORMAT})"),
        ("team=a,,b=c", f"entry 2 is empty ({FORMAT})"),
        ("team=a,", f"entry 2 is empty ({FORMAT})"),
        (" ", f"entry 1 is empty ({FORMAT})"),
        (
            "my key=s3cret",
            "entry 1: the key is not a token (letters, digits and !#$%&'*+-.^_`|~; "
            "the value is not shown)",
        ),
        (
            "team=ml s3cret",
            "entry 1: the value holds a character that must be percent-encoded (a space, "
            "double quote, comma, semicolon, backslash, control or non-ASCII character; "
            "the value is not shown)",
        ),
        ("team=caf\u00e9s3cret", "entry 1: the value holds a character that must be"),
        (
            "a=%ZZs3cret",
            "entry 1: the value holds a % that starts no percent-escape (%XX, two hex "
            "digits; %25 for %; the value is not shown)",
        ),
        ("a=%FFs3cret", "entry 1: the value's percent-escapes are not UTF-8 text"),
        ("a=%C3s3cret", "entry 1: the value's percent-escapes are not UTF-8 text"),
        ("a=1,b=2,a=s3cret", "entries 1 and 3 give the same key (the value is not shown)"),
        (",".join(f"k{i}=v" for i in range(10_000)), "has 10,000 entries, over the 128"),
        ("a=" + "s3cret" * 200_000, "is 1,200,002 characters, over the 8,192 accepted"),
    ],
)
def test_a_malformed_resource_attribute_is_refused_without_showing_it(value, line):
    message = refused({RESOURCE: value})
    assert message.startswith(f"{RESOURCE}: {line}"), message
    assert "s3cret" not in message and "\n" not in message


@pytest.mark.parametrize(
    "value",
    [
        "",  # the same as unset
        "service.name=mine",
        "deployment.environment=prod%20eu , team = ml,url=a=b=c,empty=",
        "k8s.pod.name=web-1,note=caf%C3%A9%2C%20ok",
        ",".join(f"k{i}=v" for i in range(128)),
    ],
)
def test_resource_attributes_in_the_specified_format_are_taken(value):
    assert wants_otlp({**ENDPOINT, RESOURCE: value})


@pytest.mark.parametrize("value", ["bot\nname", "bot\x1b[31m", "bot\udcff", "b" * 8_193])
def test_a_service_name_that_is_no_printable_bounded_text_is_refused(value):
    message = refused({"OTEL_SERVICE_NAME": value})
    assert message == (
        "OTEL_SERVICE_NAME: must be printable text of at most 8,192 characters "
        "(the value is not shown)"
    )


def test_a_service_name_is_taken():
    assert wants_otlp({**ENDPOINT, "OTEL_SERVICE_NAME": " review bot/2 "})


def test_bad_resource_attributes_are_one_error_line_with_exit_2_before_the_run(tmp_path):
    code, stderr, _ = command(tmp_path, {**ENDPOINT, RESOURCE: "service.name=bot,s3cret"})
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert lines == [f"error: {RESOURCE}: entry 2 is not key=value ({FORMAT})"]
    assert sorted(os.listdir(tmp_path)) == ["team.yaml"]


# -- a token in the endpoint's query ------------------------------------------------------------
# The exporter's retry line shows the URL's path and query ("Max retries exceeded with url:
# /v1/traces?api_key=..."): a token there reaches stderr and the logs.


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:4318/v1/traces?api_key=s3cret", "http://h/#s3cret"]
)
def test_an_endpoint_with_a_query_is_refused_pointing_to_the_headers(name, url):
    message = refused({name: url})
    assert message == (
        f"{name}: has a query string or fragment, which the exporter shows in its log lines: "
        "give a token in OTEL_EXPORTER_OTLP_HEADERS (name=value), not in the URL (the value "
        "is not shown)"
    )


def test_a_query_token_never_reaches_stderr(tmp_path):
    url = "http://127.0.0.1:1/v1/traces?api_key=s3cret"
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    code, stderr, _ = command(tmp_path, env)
    assert code == 2 and "s3cret" not in stderr, stderr


# -- service.name: OTEL_SERVICE_NAME, else OTEL_RESOURCE_ATTRIBUTES, else clearance ----------


class Collector:
    """An OTLP/HTTP collector on 127.0.0.1 that keeps the resource attributes it receives."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self.resources: list[dict[str, str]] = []
        resources = self.resources

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                for spans in request.resource_spans:
                    attrs = spans.resource.attributes
                    resources.append({a.key: a.value.string_value for a in attrs})
                payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.mark.parametrize(
    ("env", "service", "environment"),
    [
        ({RESOURCE: "service.name=review-bot,deployment.environment=prod%20eu"},
         "review-bot", "prod eu"),
        ({RESOURCE: "service.name=ignored", "OTEL_SERVICE_NAME": "named"}, "named", None),
        ({RESOURCE: "deployment.environment=dev"}, "clearance", "dev"),
    ],
)  # fmt: skip
def test_the_service_name_of_the_resource_attributes_is_kept(
    tmp_path, collector, env, service, environment
):
    # Before: service.name in OTEL_RESOURCE_ATTRIBUTES was replaced by "clearance".
    code, stderr, _ = command(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, **env})
    assert code == 0, stderr
    assert collector.resources, stderr
    assert {r["service.name"] for r in collector.resources} == {service}
    assert {r.get("deployment.environment") for r in collector.resources} == {environment}
