"""Hostile paths and environment variables: one ``error:`` line, exit code 2, no hang.

A FIFO or a loop of symbolic links where a database file is expected, a ledger key that is
not UTF-8 or whose file is a FIFO, a fake-model latency of ``inf``, and OpenTelemetry
variables the SDK would choke on (with a traceback) are bad input like any other. The cases
that used to hang run the command in its own process, with a deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clearance._core.errors import ConfigError
from clearance._orchestration.run_memory import absolute_url, default_memory_url
from clearance._state.chain import load_ledger_key
from clearance.cli import app
from clearance.cli._otel import wants_otlp

TEAM = {
    "name": "t",
    "agents": [
        {"name": "writer", "instructions": "You write.", "limits": {"max_output_tokens": 32}}
    ],
    "tasks": [{"id": "t1", "title": "T", "description": "Do it.", "assignee": "writer"}],
}
DEADLINE_S = 30


def command(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """``clearance args`` in its own process: exit code and the non-empty stderr lines."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARANCE_", "OTEL_"))}
    environ.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


def one_error_line(code: int, lines: list[str], *words: str) -> None:
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines
    for word in words:
        assert word in lines[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    return tmp_path / "loop1"


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "--db"],
        ["inspect", "run_x", "--db"],
        ["store", "query", "ns", "--db"],
        ["memory", "--memory"],
    ],
    ids=["runs", "inspect", "store-query", "memory"],
)
def test_a_fifo_as_a_database_is_refused_not_waited_on(tmp_path, fifo, args):
    code, lines = command(*args, f"sqlite:///{fifo}", cwd=tmp_path)
    one_error_line(code, lines, "not a regular file")


def test_a_device_as_a_database_is_refused():
    result = CliRunner().invoke(app, ["runs", "--db", "sqlite:////dev/null"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "not a regular file" in result.output


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        # memory reads memory.db next to the ledger, which is not there yet
        (["memory", "--db", "{url}"], 0, "no memory at"),
        (["runs", "--db", "{url}"], 2, "loop of symbolic links"),
        (["chat", "{team}", "--agent", "writer", "--db", "{url}"], 2, "loop of symbolic links"),
    ],
    ids=["memory", "runs", "chat"],
)
def test_a_loop_of_links_as_a_database_is_no_traceback(tmp_path, loop, args, code, said):
    team = tmp_path / "team.yaml"
    team.write_text(yaml.safe_dump(TEAM))
    argv = [a.format(url=f"sqlite:///{loop}", team=team) for a in args]
    result = CliRunner().invoke(app, argv, input="", env={"CLEARANCE_DB": None})
    assert not isinstance(result.exception, RuntimeError), result.output
    assert result.exit_code == code, result.output
    assert said in result.output


def test_the_memory_urls_of_a_loop_of_links_do_not_raise(loop):
    assert absolute_url(f"sqlite:///{loop}").endswith("loop1")
    assert default_memory_url(f"sqlite:///{loop}").endswith("/memory.db")


def test_a_ledger_key_of_bytes_that_are_not_utf8_is_those_bytes():
    # os.environ holds bytes that are not UTF-8 as surrogate escapes.
    assert load_ledger_key({"CLEARANCE_LEDGER_KEY": "\udcff" * 20}) == b"\xff" * 20
    with pytest.raises(ConfigError, match="CLEARANCE_LEDGER_KEY"):
        load_ledger_key({"CLEARANCE_LEDGER_KEY": "\ud800" * 20})


def test_a_ledger_key_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path, fifo):
    code, lines = command("runs", cwd=tmp_path, env={"CLEARANCE_LEDGER_KEY_FILE": str(fifo)})
    one_error_line(code, lines, "CLEARANCE_LEDGER_KEY")


def test_a_ledger_key_file_that_is_a_pipe_with_a_writer_is_read():
    read, write = os.pipe()
    try:
        os.write(write, b"0123456789abcdef-key\n")
        os.close(write)
        key = load_ledger_key({"CLEARANCE_LEDGER_KEY_FILE": f"/dev/fd/{read}"})
    finally:
        os.close(read)
    assert key == b"0123456789abcdef-key"


@pytest.mark.parametrize("value", ["inf", "1e30"])
def test_an_endless_fake_latency_is_refused(tmp_path, value):
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))
    code, lines = command(
        "run",
        "team.yaml",
        "--model",
        "fake:t",
        cwd=tmp_path,
        env={"CLEARANCE_FAKE_LATENCY_S": value},
    )
    one_error_line(code, lines, "CLEARANCE_FAKE_LATENCY_S")


def test_a_tracer_provider_variable_naming_nothing_is_one_line(tmp_path):
    pytest.importorskip("opentelemetry.trace")
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))
    code, lines = command(
        "run",
        "team.yaml",
        "--model",
        "fake:t",
        cwd=tmp_path,
        env={"OTEL_PYTHON_TRACER_PROVIDER": "nonexistent"},
    )
    one_error_line(code, lines, "OTEL_PYTHON_TRACER_PROVIDER", "nonexistent")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "abc"),
        ("OTEL_ATTRIBUTE_COUNT_LIMIT", "-1"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "1.5"),
    ],
)
def test_sdk_whole_number_variables_are_checked(name, value):
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", name: value}
    with pytest.raises(ConfigError, match=name):
        wants_otlp(environ)
    environ[name] = "64"
    assert wants_otlp(environ)


@pytest.mark.parametrize("args", [("inspect",), ("verify",), ("resume",), ("approve",)])
def test_an_unknown_run_id_of_a_megabyte_is_not_echoed_back_whole(tmp_path, args):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    team = tmp_path / "team.yaml"
    team.write_text(yaml.safe_dump(TEAM))
    assert (
        CliRunner().invoke(app, ["run", str(team), "--model", "fake:m", "--db", url]).exit_code == 0
    )
    run_id = "run_" + "x" * 1_000_000
    extra = ("apr_1",) if args == ("approve",) else ()
    result = CliRunner().invoke(app, [*args, run_id, *extra, "--db", url])
    assert result.exit_code != 0
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert line.startswith("error: unknown run 'run_xxx") and len(line) < 400, line[:500]
    assert "[cut: 1000006 characters]" in line
