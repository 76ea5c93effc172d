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
import time
from collections.abc import Iterator
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
