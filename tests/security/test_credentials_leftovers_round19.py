"""Two leftovers of the credentials probe: verify's memory connection, and MCP errors over HTTP.

- ``clearance verify --memory URL`` opened the memory store and never closed it: on
  PostgreSQL a psycopg connection was left open (a ``ResourceWarning`` at exit), on SQLite the
  file stayed open, on success and when verify then refused the store.
- An MCP server reached over HTTP that echoed the request in its error (a JSON-RPC error or
  a 401 body quoting the ``Authorization`` header and the URL's ``?token=``, an error
  result, a message that is not JSON-RPC) had the token quoted whole into the tool's output:
  the model's next prompt, the ledger, ``inspect``; while listing, onto the terminal.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from clearance._core.masking import MASK, header_secrets, mask_cut, mask_text, url_secrets
from clearance._core.mcp_spec import McpServerSpec
from clearance.cli import app

SRC = Path(__file__).resolve().parents[2] / "src"
sys.path.insert(0, str(SRC.parent / "tests" / "agents"))  # the raw MCP endpoint of those tests

from raw_mcp_http import Behaviour, RawMcpServer, result_body, serving  # noqa: E402


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"CLEARANCE_DB": None})


def run_with_memory(tmp_path: Path, memory_url: str) -> tuple[str, str]:
    """A finished run of a team whose agent recalls from and records to ``memory_url``."""
    team = {
        "name": "t",
        "memory": {"url": memory_url, "on_error": "fail"},
        "agents": [
            {"name": "a", "instructions": "Go.", "memory": {"recall": 3, "record": "result"}}
        ],
        "tasks": [{"id": "t1", "title": "T", "description": "Do it.", "assignee": "a"}],
    }
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run = cli("run", str(tmp_path / "team.yaml"), "--model", "fake:m", "--db", db)
    assert run.exit_code == 0, run.output
    return db, run.output.split("run id: ")[1].split()[0]


def verify_in_subprocess(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("CLEARANCE_DB", None)
    command = [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-m", "clearance"]
    return subprocess.run(
        [*command, "verify", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )


def open_files_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open (Linux: /proc/self/fd)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            held.append(target)
    return held


# -- verify closes the memory store it opened ---------------------------------------------


@pytest.mark.network
@pytest.mark.parametrize("refused_store", [False, True])
def test_verify_memory_on_postgresql_leaves_no_connection_open(
    postgres_url: str, tmp_path: Path, refused_store: bool
) -> None:
    db, run_id = run_with_memory(tmp_path, postgres_url)
    store = ["--store", f"sqlite:///{tmp_path / 'no-store.db'}"] if refused_store else []
    done = verify_in_subprocess(tmp_path, run_id, "--db", db, "--memory", postgres_url, *store)
    if refused_store:
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.startswith("error: the run's store at "), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 model calls verified" in done.stdout, done.stdout
        assert done.stderr == "", done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr


@pytest.mark.parametrize("refused_store", [False, True])
def test_verify_memory_on_sqlite_leaves_the_file_closed(
    tmp_path: Path, refused_store: bool
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    url = f"sqlite:///{memory / 'memory.db'}"
    db, run_id = run_with_memory(tmp_path, url)
    assert open_files_under(memory) == []
    store = ["--store", f"sqlite:///{tmp_path / 'no-store.db'}"] if refused_store else []
    done = cli("verify", run_id, "--db", db, "--memory", url, *store)
    assert done.exit_code == (2 if refused_store else 0), done.output
    assert open_files_under(memory) == [], "verify left the memory store open"


# -- an MCP server's error echoing the request quotes no credential -------------------------

QUERY_TOKEN = "q-T0KEN-r19%2Fx"  # as written in the URL (its decoded form holds a '/')
BEARER = "bearer-R19-secret"
API_KEY = "K3Y-R19"
SECRETS = (QUERY_TOKEN, "q-T0KEN-r19/x", BEARER, API_KEY)


def echo(handler: Any) -> str:
    """What a careless server says back: the path with its query, and the headers' values."""
    headers = handler.headers
    return f"denied {handler.path} for {headers['Authorization']} ({headers['X-Api-Key']})"


def rpc_error(status: int) -> Callable[[Any, dict[str, Any]], None]:
    def answer(handler: Any, message: dict[str, Any]) -> None:
        error = {"code": -32001, "message": echo(handler)}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode()
        handler.reply(status, body, "application/json")

    return answer


def error_result(handler: Any, message: dict[str, Any]) -> None:
    result = {"isError": True, "content": [{"type": "text", "text": echo(handler)}]}
    handler.reply(200, result_body(message, result), "application/json")


def not_json_rpc(handler: Any, message: dict[str, Any]) -> None:
    handler.reply(200, json.dumps({"echo": echo(handler)}).encode(), "application/json")


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], RawMcpServer]]:
    with serving() as start:
        yield start


def server_entry(server: RawMcpServer, **more: Any) -> dict[str, Any]:
    return {
        "url": f"{server.url}?session={QUERY_TOKEN}",
        "headers": {"Authorization": "${MCP_R19_AUTH}", "X-Api-Key": API_KEY},
        "connect_timeout_s": 5,
        **more,
    }


def assert_no_secret(*texts: str) -> None:
    for secret in SECRETS:
        for text in texts:
            assert secret not in text, (secret, text)


@pytest.mark.network
def test_mcp_errors_echoing_the_request_reach_no_prompt_ledger_or_terminal(
    serve: Callable[[Behaviour], RawMcpServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    openai_server: Any,
) -> None:
    servers = {
        "rpc": serve({"tools/call": rpc_error(200)}),
        "unauth": serve({"tools/call": rpc_error(401)}),
        "result": serve({"tools/call": error_result}),
    }
    seen: list[str] = []
    calls = [(f"mcp__{name}__t", {}) for name in servers]

    def reply(messages: list[dict[str, Any]]) -> Any:
        if "You look terms up" not in messages[0]["content"]:
            return "The report."  # the synthesis
        if "## Results of your tool calls" not in messages[-1]["content"]:
            return calls
        seen.append(messages[-1]["content"])
        return "Done."

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("MCP_R19_AUTH", f"Bearer {BEARER}")
    team = {
        "name": "mcp",
        "mcp_servers": {name: server_entry(server) for name, server in servers.items()},
        "agents": [
            {"name": "researcher", "instructions": "You look terms up.",
             "tools": [f"mcp:{name}/t" for name in servers], "limits": {"max_steps": 4}}
        ],
        "tasks": [
            {"id": "define", "title": "Define", "description": "Define clearance.",
             "assignee": "researcher"}
        ],
    }  # fmt: skip
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:scripted", "--db", db]
    )
    assert run.exit_code == 0, run.output
    # Each server did see the credentials, and echoed them.
    for server in servers.values():
        headers = next(h for m, h in server.seen if m.get("method") == "tools/call")
        assert headers["Authorization"] == f"Bearer {BEARER}"
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    shown = cli("inspect", run_id, "--db", db, "--json")
    assert shown.exit_code == 0, shown.output
    ledger = b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))
    assert_no_secret(run.output, shown.output, *seen, ledger.decode("utf-8", "replace"))
    # What the model received: each error, its credentials masked and the rest kept.
    (results,) = seen
    masked = f"denied /mcp?session={MASK} for {MASK} ({MASK})"
    assert results.count(masked) == 3, results
    assert "failed to answer t: MCPError: " + masked in results
    outputs = [
        call["result"] for call in json.loads(shown.output)["tool_calls"] if "mcp" in call["name"]
    ]
    assert len(outputs) == 3 and all(masked in output for output in outputs), outputs


@pytest.mark.network
@pytest.mark.parametrize("status", [200, 401])
def test_an_mcp_listing_failing_with_the_request_echoed_is_one_line_without_it(
    serve: Callable[[Behaviour], RawMcpServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
) -> None:
    monkeypatch.setenv("MCP_R19_AUTH", f"Bearer {BEARER}")
    server = serve({"initialize": rpc_error(status)})
    team = {
        "name": "t",
        "model": "fake:m",
        "mcp_servers": {"docs": server_entry(server)},
        "agents": [{"name": "a", "instructions": "Go.", "tools": ["mcp:docs/t"]}],
        "tasks": [{"id": "t1", "title": "T", "description": "Do it.", "assignee": "a"}],
    }
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    started = time.monotonic()
    run = cli("run", str(tmp_path / "team.yaml"), "--db", f"sqlite:///{tmp_path / 'runs.db'}")
    assert time.monotonic() - started < 10
    assert run.exit_code == 2, run.output
    assert run.output == (
        f"error: {tmp_path / 'team.yaml'}: mcp_servers.docs: "
        f"cannot use MCP server 'docs' ({server.url}): MCPError: "
        f"denied /mcp?session={MASK} for {MASK} ({MASK})\n"
    )
    assert_no_secret(run.output)


@pytest.mark.network
async def test_an_answer_that_is_not_json_rpc_quotes_no_credential_even_cut_short(
    serve: Callable[[Behaviour], RawMcpServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's validation error shows the answer as its first and last characters around
    # "...": the end of the echoed token ("r-R19-secret") was shown, neither whole nor gone.
    from clearance._agents.mcp import load_mcp_tools
    from clearance._core.mcp_spec import McpToolRef

    monkeypatch.setenv("MCP_R19_AUTH", f"Bearer {BEARER}")
    server = serve({"tools/call": not_json_rpc})
    spec = McpServerSpec(**server_entry(server, timeout_s=5))
    tools = await load_mcp_tools({"docs": spec}, [McpToolRef("docs", "t")])
    output = await tools["mcp__docs__t"].call({})
    assert output.is_error
    assert output.content.startswith(
        "error: MCP server 'docs' failed to answer t: MCPError: Failed to parse JSON response: "
    ), output.content
    assert f"input_value={{'echo': 'denied /mcp?ses...{MASK} ({MASK})'}}" in output.content
    assert_no_secret(output.content)
    for n in range(3, len(BEARER)):
        assert BEARER[-n:] + " (" not in output.content, n


def test_the_secrets_of_an_mcp_server_are_its_query_values_and_header_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_R19_AUTH", f"Bearer {BEARER}")
    spec = McpServerSpec(
        url=f"http://127.0.0.1:9/mcp?session={QUERY_TOKEN}&plain",
        headers={"Authorization": "${MCP_R19_AUTH}", "X-Api-Key": API_KEY,
                 "X-Unset": "${MCP_R19_UNSET}"},
    )  # fmt: skip
    monkeypatch.delenv("MCP_R19_UNSET", raising=False)
    secrets = spec.secrets()
    for secret in (*SECRETS, f"Bearer {BEARER}", "plain"):
        assert secret in secrets, secret
    assert "${MCP_R19_UNSET}" not in secrets
    basic = base64.b64encode(b"bob:pa55-word").decode()
    assert header_secrets(f"Basic {basic}") == (
        f"Basic {basic}",
        basic,
        "bob:pa55-word",
        "pa55-word",
    )
    assert url_secrets("http://h/mcp?t=abcd", whole_query=False) == ()
    assert mask_cut(f"'Bearer {BEARER[:7]}...{BEARER[-5:]}' ...", secrets) == (
        f"'{MASK}...{MASK}' ..."
    )
    assert mask_cut("a...b ... x", secrets) == "a...b ... x"
    text = f"x bob:pa55-word {BEARER} /mcp?session={QUERY_TOKEN}"
    assert mask_text(text, [*secrets, *header_secrets(f"Basic {basic}")]) == (
        f"x {MASK} {MASK} /mcp?session={MASK}"
    )
