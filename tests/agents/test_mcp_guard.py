"""The guard a stdio MCP server is started through on Linux (`mcp_guard`) changes nothing it sees.

The end-to-end proof that the guard does its job (a ``clearance run`` killed with SIGKILL
leaves no server process running) is in ``test_mcp_processes.py``; here the server's view
(argv, environment, working directory, open descriptors) is compared with and without the
guard, and the guard's own edges are checked: a program that cannot be started, a parent
already gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from test_mcp_processes import gone_within

from clearance._agents import mcp_transport
from clearance._agents.mcp import load_mcp_tools
from clearance._core.errors import ConfigError
from clearance._core.mcp_spec import McpServerSpec, McpToolRef

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guard is Linux's"),
]

SERVER = Path(__file__).with_name("mcp_server.py")
GUARD = Path(mcp_transport.__file__).with_name("mcp_guard.py")


async def facts(spec: McpServerSpec) -> dict[str, Any]:
    tools = await load_mcp_tools({"docs": spec}, [McpToolRef("docs", "process_facts")])
    output = await tools["mcp__docs__process_facts"].call({})
    assert not output.is_error, output.content
    found: dict[str, Any] = json.loads(output.content)
    return found


@pytest.mark.parametrize("lc_ctype", [None, "C"])
async def test_a_guarded_server_sees_what_an_unguarded_one_sees(tmp_path, monkeypatch, lc_ctype):
    # PYTHONCOERCECLOCALE=0: the server itself leaves LC_CTYPE as given, so one the guard's
    # interpreter set (PEP 538, in a C locale) would show.
    env = {"PYTHONCOERCECLOCALE": "0", "DECLARED": "yes"}
    if lc_ctype is not None:
        env["LC_CTYPE"] = lc_ctype
    spec = McpServerSpec(command=[sys.executable, str(SERVER), "stdio"], env=env)
    assert mcp_transport._GUARDED
    guarded = await facts(spec)
    monkeypatch.setattr(mcp_transport, "_GUARDED", False)
    plain = await facts(spec)
    for found in (guarded, plain):  # each call's private folder has its own name
        del found["pid"], found["ppid"], found["pgid"]
        folder = found.pop("cwd")
        found["env"] = {k: v.replace(folder, "<folder>") for k, v in found["env"].items()}
    assert guarded == plain
    assert guarded["argv"] == [str(SERVER), "stdio"]
    assert guarded["env"].get("LC_CTYPE") == lc_ctype
    assert guarded["env"]["DECLARED"] == "yes"


async def test_the_server_runs_in_its_guards_process_group(tmp_path, monkeypatch):
    spec = McpServerSpec(command=[sys.executable, str(SERVER), "stdio"])
    guarded = await facts(spec)
    assert guarded["ppid"] != os.getpid()  # started by the guard
    assert guarded["pgid"] == guarded["ppid"]  # in the group the guard leads
    monkeypatch.setattr(mcp_transport, "_GUARDED", False)
    plain = await facts(spec)
    assert plain["ppid"] == os.getpid() and plain["pgid"] == plain["pid"]


async def test_a_program_that_cannot_be_started_is_named_as_without_the_guard(monkeypatch):
    spec = McpServerSpec(command=["clearance-no-such-program"], connect_timeout_s=5)
    messages = []
    for guarded in (True, False):
        monkeypatch.setattr(mcp_transport, "_GUARDED", guarded)
        with pytest.raises(ConfigError) as caught:
            await load_mcp_tools({"gone": spec}, [McpToolRef("gone", "x")])
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "FileNotFoundError" in messages[0] and "clearance-no-such-program" in messages[0]


def test_a_guard_whose_parent_is_already_gone_starts_nothing(tmp_path):
    marker = tmp_path / "started"
    read_end, write_end = os.pipe()
    code = f"open({str(marker)!r}, 'w').close()"
    started = time.monotonic()
    guard = subprocess.run(
        [sys.executable, "-I", "-S", str(GUARD), "1", str(write_end), "-", "--",
         sys.executable, "-c", code],
        pass_fds=(write_end,), start_new_session=True, timeout=30, check=False,
    )  # fmt: skip
    os.close(write_end)
    os.close(read_end)
    assert guard.returncode == -9  # it killed its own group
    assert time.monotonic() - started < 10
    assert not marker.exists()


def test_a_guard_passes_on_the_servers_exit_status(tmp_path):
    read_end, write_end = os.pipe()
    guard = subprocess.run(
        [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(write_end), "-", "--",
         sys.executable, "-c", "import sys; sys.exit(7)"],
        pass_fds=(write_end,), start_new_session=True, timeout=30, check=False,
    )  # fmt: skip
    os.close(write_end)
    assert os.read(read_end, 32) == b""  # started: nothing reported
    os.close(read_end)
    assert guard.returncode == 7


def test_a_guard_given_sigterm_ends_its_server_and_itself_at_once(tmp_path):
    pid_file = tmp_path / "server.pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    read_end, write_end = os.pipe()
    guard = subprocess.Popen(
        [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(write_end), "-", "--",
         sys.executable, "-c", code],
        pass_fds=(write_end,), start_new_session=True,
    )  # fmt: skip
    os.close(write_end)
    try:
        assert os.read(read_end, 32) == b""
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.02)
        server = int(pid_file.read_text())
        started = time.monotonic()
        guard.send_signal(signal.SIGTERM)
        guard.wait(timeout=30)
        assert time.monotonic() - started < 1.5  # not the whole grace: the server ended at once
        assert gone_within(server, 2)
    finally:
        os.close(read_end)
        if guard.poll() is None:
            os.killpg(guard.pid, signal.SIGKILL)
            guard.wait()
