"""Shared fixtures. Outbound network is blocked: tests talk only to loopback servers they start."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from clearance import RunLedger

# CI runs the same examples every time (a submission must not pass or fail by chance);
# locally, hypothesis explores new examples on every run and remembers failures.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

_real_connect = socket.socket.connect


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise ConnectionRefusedError(f"tests may not connect to {host!r}: loopback only")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _no_outbound_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
    ):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[RunLedger]:
    """A run ledger in a fresh SQLite file."""
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as led:
        yield led


# -- a real PostgreSQL server, for the store and memory tests ---------------------------
_PG_ROOT = Path("/usr/lib/postgresql")


def _pg_bin() -> Path | None:
    if not _PG_ROOT.is_dir():
        return None
    versions = sorted(
        (p for p in _PG_ROOT.iterdir() if (p / "bin" / "initdb").exists()),
        key=lambda p: int(p.name) if p.name.isdigit() else 0,
    )
    return versions[-1] / "bin" if versions else None


def _install() -> str | None:
    """Install Debian's postgresql when missing; return why it is unusable, or None."""
    if _pg_bin() is not None:
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "PostgreSQL is not installed and cannot be (needs root and apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "postgresql"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-400:]}"
    return None if _pg_bin() is not None else "postgresql installed but initdb not found"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*cmd: str) -> subprocess.CompletedProcess[str]:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh database on a PostgreSQL server started for this session."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("PostgreSQL tests need psycopg: pip install 'psycopg[binary]'")
    reason = _install()
    if reason is not None:
        pytest.skip(f"NO POSTGRESQL: {reason}")
    pg_bin = _pg_bin()
    assert pg_bin is not None
    base = Path(tempfile.mkdtemp(prefix="clearance-pg-"))
    data = base / "pg"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        shutil.chown(data, "postgres", "postgres")
    data.chmod(0o700)
    port = _free_port()
    steps = [
        [str(pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
         "--locale=C.UTF-8"],
        [str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-w",
         "-t", "60", "-o", f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start"],
        ["psql", "-h", str(data), "-p", str(port), "-U", "postgres", "-c",
         "CREATE DATABASE clearance_test"],
    ]  # fmt: skip
    started = False
    try:
        for step in steps:
            done = _as_postgres(*step)
            if done.returncode != 0:
                pytest.skip(f"NO POSTGRESQL: {step[0]} failed: {done.stderr.strip()[-400:]}")
            started = started or step[-1] == "start"
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/clearance_test"
    finally:
        if started:
            _as_postgres(str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def rechain_run(db_path: Path, run_id: str) -> None:
    """Rebuild a run's hash chain from its current rows, unkeyed, as a forger could.

    Uses only public knowledge (the chain's format and the ledger's reader): one entry per
    row, run first, then tasks, task reasons, messages, calls, tool calls and events. A keyed
    run is turned into an unkeyed one (the forger has no key).
    """
    import sqlite3

    from clearance._context.verify_chain import _with_recomputed_digest
    from clearance._state.chain import SUBJECT_FIELDS, chain_sha256, payload_sha256

    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE runs SET chain_key_id = NULL WHERE run_id = ?", (run_id,))
    conn.commit()
    with RunLedger(f"sqlite:///{db_path}") as ledger:
        rows = ledger.record_rows(run_id)
    entries = []
    previous = ""
    for kind in ("run", "task", "task_reason", "message", "call", "tool_call", "event"):
        for row in rows[kind]:
            if kind == "call":
                row = _with_recomputed_digest(row)
            subject = str(row[SUBJECT_FIELDS[kind]])
            payload = payload_sha256(kind, row)
            seq = len(entries) + 1
            previous = chain_sha256(previous, run_id, seq, kind, subject, payload, None)
            entries.append((run_id, seq, kind, subject, payload, previous))
    conn.execute("DELETE FROM ledger_entries WHERE run_id = ?", (run_id,))
    conn.executemany(
        "INSERT INTO ledger_entries (run_id, seq, kind, subject, payload_sha256, chain_sha256) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        entries,
    )
    conn.commit()
    conn.close()


@pytest.fixture
def rechain() -> Any:
    """`rechain_run`: rebuild a run's hash chain from its rows, as a forger without the key."""
    return rechain_run


def rewrite_last_prompt(
    conn: Any, subject: str, edit: Any, manifest_edit: Any = None, *, call_id: str | None = None
) -> str:
    """Rewrite the blocks of ``subject``'s last recorded prompt, as a forger could.

    ``edit(block, item)`` returns each user-message block as it should read (and may change
    its manifest ``item`` in place), or ``None`` to drop the block and its item;
    ``manifest_edit(manifest)`` may change the rest. ``call_id`` picks another call than
    the subject's last. The prompt's digest and the call's record digest are recomputed, so
    only `verify`'s own checks can tell. ``conn`` is an `sqlite3` connection (committed by
    the caller). Returns the call's id.
    """
    import json

    from clearance._context.render import Section, parse_user_message, render_user_message
    from clearance._core.prompt import ChatMessage, messages_sha256
    from clearance._state.ledger import call_record_sha256

    query = "SELECT call_id, messages, manifest FROM calls WHERE "
    query += "call_id = ?" if call_id else "subject = ? ORDER BY rowid DESC"
    call_id, messages, manifest = conn.execute(query, (call_id or subject,)).fetchone()
    messages, manifest = json.loads(messages), json.loads(manifest)
    sections, trailer = parse_user_message(messages[1]["content"])
    index, rebuilt, dropped = 0, [], []
    for section in sections:
        blocks = []
        for block in section.blocks:
            index += 1  # item 0 is the system message's
            kept = edit(block, manifest["items"][index])
            if kept is None:
                dropped.append(index)
            else:
                blocks.append(kept)
        rebuilt.append(Section(section.heading, tuple(blocks)))
    for index in reversed(dropped):
        del manifest["items"][index]
    if manifest_edit is not None:
        manifest_edit(manifest)
    messages[1]["content"] = render_user_message(rebuilt, trailer)
    manifest["prompt_sha256"] = messages_sha256(
        tuple(ChatMessage(role=m["role"], content=m["content"]) for m in messages)
    )
    conn.execute(
        "UPDATE calls SET messages = ?, manifest = ?, prompt_sha256 = ?, record_sha256 = ? "
        "WHERE call_id = ?",
        (json.dumps(messages), json.dumps(manifest), manifest["prompt_sha256"],
         call_record_sha256(messages, manifest), call_id),
    )  # fmt: skip
    return str(call_id)


@pytest.fixture
def rewrite_prompt() -> Any:
    """`rewrite_last_prompt`: rewrite a recorded prompt's blocks, digests recomputed."""
    return rewrite_last_prompt


class ServerUrl(str):
    """A scripted server's base URL; ``bodies`` holds every request body it received."""

    bodies: list[dict[str, Any]]


class _ChatCompletions:
    """A real OpenAI-compatible chat-completions server on 127.0.0.1, answering by script.

    ``reply(messages)`` returns the answer: text, or ``[(tool name, arguments), ...]`` for
    tool calls, or (for a streamed request) an iterator of text pieces, each sent as it is
    produced (a generator that sleeps trickles). Text of a `str` subclass with a
    ``finish_reason`` attribute is finished with it (``"length"``: cut off), else ``"stop"``.
    Usage is reported as 10 prompt and 5 completion tokens unless ``usage`` (the response's
    ``usage`` object) is given.
    A request with ``"stream": true`` is answered with server-sent
    events (one chunk per word, tool-call arguments in two pieces, usage last when
    ``stream_options.include_usage`` asks for it).
    """

    def __init__(
        self, reply: Any, usage: dict[str, Any] | None = None, stream_usage: bool = True
    ) -> None:
        import contextlib
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        bodies: list[dict[str, Any]] = []

        def chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        def tool_calls(answer: Any) -> list[dict[str, Any]]:
            return [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(answer)
            ]  # fmt: skip

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bodies.append(body)
                answer = reply(body["messages"])
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # client gone
                    if body.get("stream"):
                        self._stream(body, answer)
                    else:
                        self._whole(body, answer)

            def _whole(self, body: dict[str, Any], answer: Any) -> None:
                message: dict[str, Any] = {"role": "assistant", "content": None}
                if isinstance(answer, str):  # a str subclass may carry its finish_reason
                    message["content"] = answer
                    finish = getattr(answer, "finish_reason", "stop")
                else:
                    message["tool_calls"], finish = tool_calls(answer), "tool_calls"
                payload = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5,
                                       "total_tokens": 15},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, body: dict[str, Any], answer: Any) -> None:
                import re

                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                model = body["model"]

                def send(data: bytes) -> None:
                    self.wfile.write(data)
                    self.wfile.flush()

                send(chunk(model, {"role": "assistant", "content": ""}))
                if isinstance(answer, list):
                    for i, call in enumerate(tool_calls(answer)):
                        arguments = call["function"]["arguments"]
                        half = len(arguments) // 2
                        first = {"index": i, "id": call["id"], "type": "function",
                                 "function": {"name": call["function"]["name"],
                                              "arguments": arguments[:half]}}  # fmt: skip
                        send(chunk(model, {"tool_calls": [first]}))
                        rest = {"index": i, "function": {"arguments": arguments[half:]}}
                        send(chunk(model, {"tool_calls": [rest]}))
                    finish = "tool_calls"
                else:
                    pieces = answer
                    if isinstance(answer, str):
                        pieces = re.findall(r"\S+\s*|\s+", answer)
                    for piece in pieces:
                        send(chunk(model, {"content": piece}))
                    finish = getattr(answer, "finish_reason", "stop")
                send(chunk(model, {}, finish))
                if stream_usage and (body.get("stream_options") or {}).get("include_usage"):
                    usage = {"id": "x", "object": "chat.completion.chunk", "created": 0,
                             "model": model, "choices": [],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                       "total_tokens": 15}}  # fmt: skip
                    send(b"data: " + json.dumps(usage).encode() + b"\n\n")
                send(b"data: [DONE]\n\n")
                self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = ServerUrl(f"http://127.0.0.1:{self._httpd.server_address[1]}/v1")
        self.url.bodies = bodies

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def openai_server() -> Iterator[Any]:
    """``openai_server(reply, usage=None, stream_usage=True)`` -> base URL of a scripted server.

    ``stream_usage=False``: a streamed answer holds no usage chunk, as llama.cpp's server's.
    """
    servers: list[_ChatCompletions] = []

    def start(
        reply: Any, usage: dict[str, Any] | None = None, stream_usage: bool = True
    ) -> ServerUrl:
        servers.append(_ChatCompletions(reply, usage, stream_usage))
        return servers[-1].url

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def openai_server_module() -> Iterator[Any]:
    """`openai_server`, shared by a module's tests (one scripted run read by many checks)."""
    servers: list[_ChatCompletions] = []

    def start(reply: Any, usage: dict[str, Any] | None = None) -> ServerUrl:
        servers.append(_ChatCompletions(reply, usage))
        return servers[-1].url

    yield start
    for server in servers:
        server.close()
