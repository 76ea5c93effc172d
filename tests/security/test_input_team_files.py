"""Hostile team files: each gets one error line and exit code 2 within a second or two.

Attacks: an alias bomb in ``output_schema``, deep nesting, a recursive alias, a 50 MB file,
``/dev/zero`` and a FIFO nobody writes to. The CLI runs in a subprocess with a timeout, so an
attack that hangs the loader fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clearance import ConfigError
from clearance._core.safe_yaml import MAX_YAML_BYTES, MAX_YAML_DEPTH
from clearance._core.teamfile import load_team_file
from cpu_time import cpu_timer

AGENTS = "agents: [{name: a, instructions: Do it.}]\n"


def alias_bomb() -> str:
    """Nine levels of ten aliases each: 10**9 strings once expanded."""
    lines = ['l0: &l0 ["laugh laugh laugh laugh"]']
    for i in range(1, 10):
        refs = ", ".join([f"*l{i - 1}"] * 10)
        lines.append(f"l{i}: &l{i} [{refs}]")
    defs = "\n".join("  " + line for line in lines)
    return (
        AGENTS
        + f"definitions:\n{defs}\n"
        + "tasks:\n  - {id: t, title: T, description: d, assignee: a,\n"
        + "     output_schema: {type: object, properties: {x: {enum: *l9}}}}\n"
    )


def run_cli(*args: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return done, time.perf_counter() - t0


def assert_one_line_exit_2(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: ")
    assert fragment in lines[0], lines[0]


def test_alias_bomb_in_output_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    # The alias bomb hides in an extra top-level key too, so the loader must catch it
    # before validation (which would reject the key) ever sees the value.
    path.write_text(alias_bomb(), encoding="utf-8")
    with cpu_timer() as cpu, pytest.raises(ConfigError, match="expands to more than"):
        load_team_file(path)
    assert cpu.seconds < 2


def test_alias_bomb_only_in_output_schema_is_refused(tmp_path: Path) -> None:
    lines = ['{l0: &l0 ["laugh laugh laugh laugh"]']
    for i in range(1, 10):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    schema = ", ".join(lines) + "}"
    text = (
        AGENTS + "tasks:\n  - {id: t, title: T, description: d, assignee: a,\n"
        f"     output_schema: {{type: object, definitions: {schema}}}}}\n"
    )
    path = tmp_path / "team.yaml"
    path.write_text(text, encoding="utf-8")
    done, took = run_cli("graph", str(path))
    assert_one_line_exit_2(done, "expands to more than")
    assert took < 10  # interpreter start-up included; the refusal itself is instant


def test_deeply_nested_yaml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    depth = 5000
    path.write_text(AGENTS + "x: " + "[" * depth + "]" * depth + "\n", encoding="utf-8")
    done, _ = run_cli("graph", str(path))
    assert_one_line_exit_2(done, f"nested more than {MAX_YAML_DEPTH} levels deep")


def test_nesting_within_the_cap_still_loads(tmp_path: Path) -> None:
    depth = (MAX_YAML_DEPTH - 8) // 2  # two mappings per level
    schema = "{type: object, properties: {x: " * depth + "{}" + "}}" * depth
    path = tmp_path / "team.yaml"
    path.write_text(
        AGENTS + "tasks:\n  - {id: t, title: T, description: d, assignee: a,\n"
        f"     output_schema: {schema}}}\n",
        encoding="utf-8",
    )
    assert load_team_file(path).tasks[0].output_schema is not None


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(
        AGENTS + "tasks:\n  - {id: t, title: T, description: d, assignee: a,\n"
        "     output_schema: &s {type: object, properties: {x: *s}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"the alias \*s .*refers to itself"):
        load_team_file(path)


def test_a_50_mb_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    with path.open("wb") as f:
        f.write(AGENTS.encode())
        f.write(b"#" * (50 * 1024 * 1024))
    done, _ = run_cli("graph", str(path))
    assert_one_line_exit_2(done, f"over the limit of {MAX_YAML_BYTES}")


def test_dev_zero_is_refused(tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    done, took = run_cli("graph", "/dev/zero", timeout=20)
    assert_one_line_exit_2(done, "not a regular file")
    assert took < 10


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_nobody_writes_to_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "team.yaml"
    os.mkfifo(fifo)
    done, took = run_cli("graph", str(fifo), timeout=20)
    assert_one_line_exit_2(done, "not a regular file")
    assert took < 10


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the file|not a regular file"):
        load_team_file(tmp_path)
