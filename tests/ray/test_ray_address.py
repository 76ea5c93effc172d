"""The Ray address is checked, the cluster's head is reached within a deadline, loopback holds.

Before:

- ``ray.init`` was given any non-empty address: ``host:99999``, ``127.0.0.1:0`` or a
  port that is closed or answers nothing made ``clearance run --executor ray`` wait forever
  (Ray retries every 30 s and never gives up; measured past 11 minutes), printing Ray's log
  lines, and not even SIGTERM ended it;
- without an address, a cluster meant to be this process's own on 127.0.0.1 was bound to
  the machine's address (every port, with authentication off) when Ray had been imported
  before the executor started or ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`` was set, and
  ``RAY_ADDRESS`` (or a ``ray start`` cluster) made Ray join that cluster instead, which
  failed with "When connecting to an existing cluster, num_cpus ... must not be provided".
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
from typer.testing import CliRunner

from clearance import ConfigError, RayExecutor
from clearance.cli import app

pytestmark = pytest.mark.ray

SRC = str(Path(__file__).parents[2] / "src")


@pytest.mark.parametrize(
    "address",
    [
        "",
        " ",
        "local",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "host:99999",
        "host:6379 ",
        "a b:6379",
        "http://host:6379",
        "host:6379\nx",
        "host:+80",
        "host:٣",
        "x" * 400 + ":1",
    ],
)
def test_an_address_that_is_not_a_ray_address_is_refused_in_one_line(address: str) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        RayExecutor(address=address)
    assert info.value.field == "address"
    assert "\n" not in str(info.value)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    "address",
    [
        "auto",
        "head-host:6379",
        "ray_head:6379",
        "ray://head-host:10001",
        "10.0.0.1:6379",
        "[::1]:6379",
    ],
)
def test_ray_addresses_are_kept(address: str) -> None:
    assert RayExecutor(address=address).address == address


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never says anything."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


@pytest.fixture
def no_ray_yet() -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process")


@pytest.mark.usefixtures("no_ray_yet")
def test_a_closed_port_is_a_one_line_error_at_once() -> None:
    executor = RayExecutor(address=f"127.0.0.1:{_closed_port()}", start_timeout_s=30)
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        executor.start()
    assert time.monotonic() - started < 2
    assert info.value.field == "ray_address"
    assert "cannot reach the Ray cluster" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.usefixtures("no_ray_yet")
def test_auto_naming_a_closed_port_is_a_one_line_error_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    started = time.monotonic()
    with pytest.raises(ConfigError, match="cannot reach the Ray cluster at 'auto'") as info:
        RayExecutor(address="auto").start()
    assert time.monotonic() - started < 2
    assert "\n" not in str(info.value)


@pytest.mark.usefixtures("no_ray_yet")
def test_a_port_that_answers_nothing_fails_within_the_deadline(silent_port: int) -> None:
    executor = RayExecutor(address=f"127.0.0.1:{silent_port}", start_timeout_s=1)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="nothing answered within 1 s") as info:
        executor.start()
    assert time.monotonic() - started < 3
    assert info.value.field == "ray_address"


def _team(tmp_path: Path, executor: str = "") -> Path:
    team = tmp_path / "team.yaml"
    team.write_text(
        "name: t\nagents:\n  - {name: alpha, instructions: A.}\n"
        "tasks:\n  - {id: a, title: A, description: Do A., assignee: alpha}\n" + executor
    )
    return team


def _error_lines(output: str) -> int:
    """Lines of ``output`` besides the ``model:`` line every run prints first."""
    return len([line for line in output.strip().splitlines() if not line.startswith("model:")])


@pytest.mark.usefixtures("no_ray_yet")
def test_the_cli_refuses_a_closed_port_in_one_line_with_exit_2(tmp_path: Path) -> None:
    team = _team(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["run", str(team), "--model", "fake:m", "--db", db, "--executor", "ray"]
    started = time.monotonic()
    result = CliRunner().invoke(app, [*args, "--ray-address", f"127.0.0.1:{_closed_port()}"])
    assert time.monotonic() - started < 5
    assert result.exit_code == 2, result.output
    assert "cannot reach the Ray cluster" in result.output
    assert _error_lines(result.output) == 1, result.output


def test_the_cli_refuses_a_bad_port_in_the_team_file_with_exit_2(tmp_path: Path) -> None:
    team = _team(tmp_path, "executor: {kind: ray, address: 'head:99999'}\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    started = time.monotonic()
    result = CliRunner().invoke(app, ["run", str(team), "--model", "fake:m", "--db", db])
    assert time.monotonic() - started < 5
    assert result.exit_code == 2, result.output
    assert "port 99999" in result.output
    assert _error_lines(result.output) == 1, result.output


_LOCAL_START = """
import ray  # imported before the executor, as a user's program may
from clearance import RayExecutor
with RayExecutor(workers=1, cpus_per_worker=0) as ex:
    context = ray.get_runtime_context()
    print(ray.util.get_node_ip_address(), context.gcs_address, ex._started_ray)
"""


def test_a_local_cluster_is_on_loopback_and_its_own_whatever_the_environment(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get(
        "PYTHONPATH")) if p), RAY_ADDRESS=f"127.0.0.1:{_closed_port()}",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", RAY_USAGE_STATS_ENABLED="0")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _LOCAL_START], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    node, gcs, started = done.stdout.split()
    assert node == "127.0.0.1"
    assert gcs.rpartition(":")[0] == "127.0.0.1"
    assert started == "True"  # its own cluster, not RAY_ADDRESS's
