"""Sessions with MCP servers, capped while reading, each stdio server in its caller's folder.

**Caps while reading.** A server's answer is read under a cap (`read_cap`: four times the
server's ``max_result_bytes``, at least 1 MiB): over stdio, the server's output is split into
lines as it arrives and a line over the cap stops the read and the server, before the SDK
would have assembled (and parsed) the whole line; over HTTP, every response body, JSON or
server-sent events, is counted as it streams. A message over the cap fails its call at once
(`ReadCap.exceeded` says so) instead of after tens of seconds of assembling it.

**One folder per caller.** A stdio server runs with its working directory, ``HOME``,
``TMPDIR`` and ``XDG_*`` folders in a private folder of its caller (`StateFolders`): one per
agent by default, so what one agent's calls leave in the server's files never reaches
another agent's calls; one per server when the team file declares ``share: true``. An HTTP
server is one process that Clearance does not start: it cannot be separated per agent, so
the team file must declare ``share: true`` for one that several agents use.

**Nothing left running.** The SDK starts a stdio server in a process group of its own and
kills that group only when the server outlives a grace period after its input closes; a
server that exits in time would leave what it started running. When a session ends, however
it ends (a result, a failure, a deadline, a cancellation), whatever is left of the group is
killed (`_kill_groups`). A process that leaves the group on purpose (``setsid``) escapes.
On Linux, each server is started through a small guard (`mcp_guard`) that the kernel
signals when this process dies, even by SIGKILL, and that then kills the server's group;
elsewhere a Clearance killed that way leaves its servers running.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import logging
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from anyio import ClosedResourceError, EndOfStream
from anyio.abc import ObjectReceiveStream
from anyio.streams.text import TextReceiveStream

from clearance._core.masking import mask_cut, mask_text
from clearance._core.mcp_spec import McpServerSpec

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["MALFORMED_SHOWN", "MAX_SERVER_REQUESTS", "ErrorTail", "ReadCap", "StateFolders",
           "read_cap", "session"]  # fmt: skip

# The SDK logs a server's malformed message with its traceback; with no logging set up,
# Python's last-resort handler would print that to the terminal. What a server sends is
# reported by `session` (``malformed``) in the caller's one-line error instead.
logging.getLogger("mcp").addHandler(logging.NullHandler())

MALFORMED_SHOWN = 120
"""Most characters of a server's malformed message quoted in an error."""

MAX_SERVER_REQUESTS = 100
"""Most requests (``ping``, ``roots/list``, ...) a server may send the client in one session;
past them the session's input ends (`ReadCap.flooded`), failing the listing or call at once."""

_MIN_READ_CAP = 1024 * 1024
_FOLDER_VARIABLES = (
    "HOME", "TMPDIR", "TMP", "TEMP",
    "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
)  # fmt: skip


def read_cap(spec: McpServerSpec) -> int:
    """Most characters (stdio) or bytes (HTTP) of one message read from the server."""
    return max(4 * spec.max_result_bytes, _MIN_READ_CAP)


@dataclass(slots=True)
class ReadCap:
    """The cap of one session's reads, and whether a message went over it.

    Attributes:
        limit: Most characters (stdio line) or bytes (HTTP response body) of one message.
        exceeded: Set when a message went over ``limit`` (its read was stopped).
        requests: The requests the server sent the client so far.
        flooded: Set when they went over `MAX_SERVER_REQUESTS` (the reading was stopped).
    """

    limit: int
    exceeded: bool = False
    requests: int = 0
    flooded: bool = False


class _CountedRequests(ObjectReceiveStream[Any]):
    """The server's messages, ended (as if it closed) past `MAX_SERVER_REQUESTS` requests."""

    # Each request would otherwise get a task and an answer, until the call's deadline.

    def __init__(self, inner: Any, cap: ReadCap) -> None:
        self._inner, self._cap = inner, cap

    @property
    def last_context(self) -> Any:  # the SDK's per-message context, where the stream has one
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        from mcp.types import JSONRPCRequest

        item = await self._inner.receive()
        if isinstance(getattr(item, "message", None), JSONRPCRequest):
            self._cap.requests += 1
            if self._cap.requests > MAX_SERVER_REQUESTS:
                self._cap.flooded = True
                await self._inner.aclose()  # the transport's writes now fail; it stops
                raise EndOfStream
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()


_STDIO_CAP: contextvars.ContextVar[ReadCap | None] = contextvars.ContextVar(
    "clearance_mcp_stdio_cap", default=None
)


class _LineStream(TextReceiveStream):
    """The SDK's stdio text stream, yielding whole lines only, each within the session's cap.

    The SDK joins what it receives to a growing buffer until a newline comes; here the
    pieces of a line are kept in a list and handed over once whole (linear, not quadratic,
    in the line's length), and a line over the cap closes the server's output instead.
    """

    def __init__(self, transport_stream: Any, encoding: str = "utf-8", errors: str = "strict"):
        super().__init__(transport_stream, encoding=encoding, errors=errors)
        self._pieces: list[str] = []
        self._size = 0
        self._cap = _STDIO_CAP.get()

    async def receive(self) -> str:
        while True:
            try:
                chunk = await super().receive()
            except EndOfStream:
                if self._pieces:
                    rest, self._pieces, self._size = "".join(self._pieces), [], 0
                    return rest
                raise
            head, newline, tail = chunk.rpartition("\n")
            over = self._size + (len(head) if newline else len(chunk))
            if self._cap is not None and over > self._cap.limit:
                self._cap.exceeded = True
                self._pieces, self._size = [], 0
                await self.transport_stream.aclose()  # the server's writes now fail; it stops
                raise ClosedResourceError
            if not newline:
                self._pieces.append(chunk)
                self._size += len(chunk)
                continue
            line = "".join(self._pieces) + head + "\n"
            self._pieces, self._size = ([tail], len(tail)) if tail else ([], 0)
            return line


_STDIO_GROUPS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "clearance_mcp_stdio_groups", default=None
)


async def _spawned(
    command: str,
    args: list[str],
    env: dict[str, str] | None = None,
    errlog: TextIO = sys.stderr,
    cwd: Path | str | None = None,
) -> Any:
    """The SDK's process start (guarded on Linux), its process (group) id noted."""
    if not _GUARDED:
        process = await _SDK_SPAWN[0](command, args, env=env, errlog=errlog, cwd=cwd)
        _note_group(process.pid)
        return process
    import anyio

    lc_ctype = "-" if env is None or "LC_CTYPE" not in env else "=" + env["LC_CTYPE"]
    read_end, write_end = os.pipe()
    try:
        guard = [sys.executable, "-I", "-S", str(_GUARD), str(os.getpid()), str(write_end)]
        process = await anyio.open_process(
            [*guard, lc_ctype, "--", command, *args], env=env, stderr=errlog, cwd=cwd,
            start_new_session=True, pass_fds=(write_end,),
        )  # fmt: skip
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    _note_group(process.pid)  # the guard leads the group the server runs in
    try:
        with anyio.fail_after(_GUARD_START_S):  # the guard's report: nothing once started
            await anyio.wait_readable(read_end)
        failed = os.read(read_end, 32)
    except BaseException:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await process.aclose()
        raise
    finally:
        os.close(read_end)
    if failed:
        with anyio.CancelScope(shield=True):
            await process.aclose()
        number = int(failed) if failed.isdigit() else errno.ENOEXEC
        raise OSError(number, os.strerror(number), command)
    return process


def _note_group(pid: int) -> None:
    """Note a stdio server's process group (started with start_new_session: ``pid``)."""
    groups = _STDIO_GROUPS.get()
    if groups is not None:
        groups.append(pid)


# On Linux a stdio server is started through `mcp_guard`, which ends the server's process
# group when this process (strictly: the thread that started it, the event loop's) dies,
# however it dies; it adds about 20 ms to a server's start. Elsewhere a server is started
# directly, and a Clearance killed with SIGKILL leaves it (and what it started) running.
_GUARD = Path(__file__).with_name("mcp_guard.py")
_GUARDED = sys.platform.startswith("linux") and bool(sys.executable) and _GUARD.is_file()
_GUARD_START_S = 30.0  # most seconds the guard may take to start the server


_SDK_SPAWN: list[Any] = []  # the SDK's own process start, once patched


def _kill_groups(groups: list[int]) -> None:
    """Kill what is left of each stdio server's process group (the server is gone by now)."""
    while groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(groups.pop(), signal.SIGKILL)


def _patch_stdio() -> None:
    """Have the SDK's stdio client read through `_LineStream`, note its groups (idempotent)."""
    import mcp.client.stdio as stdio

    if stdio.TextReceiveStream is not _LineStream:  # type: ignore[attr-defined]
        stdio.TextReceiveStream = _LineStream  # type: ignore[attr-defined]
    if not _SDK_SPAWN:
        _SDK_SPAWN.append(stdio._create_platform_compatible_process)
        stdio._create_platform_compatible_process = _spawned


_CLOSE_S = 5.0  # most seconds an HTTP server may take to answer a session's end (DELETE)


def _read_timeout(spec: McpServerSpec) -> float:
    """An HTTP read's timeout: a backstop, past the deadlines the caller sets and names.

    The listing is bounded by ``connect_timeout_s`` and a call by ``timeout_s``; a read
    timeout of ``timeout_s`` alone cut a listing short (``timeout_s`` under
    ``connect_timeout_s``) or raced a call's own deadline, and the error named neither.
    """
    return max(spec.connect_timeout_s, spec.timeout_s) + 1.0


def _capped_transport(cap: ReadCap, close_s: float) -> Any:
    """An HTTP transport whose response bodies are counted as they stream.

    A session's end (the SDK's DELETE, whose failure it only logs) is given ``close_s``
    seconds, not the read timeout of a tool call: a server holding it open would otherwise
    hold a listing or a result already received.
    """
    import anyio
    import httpx2

    class CapExceeded(httpx2.StreamError):
        pass

    class Body(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            size = 0
            async for chunk in self._inner:
                size += len(chunk)
                if size > cap.limit:
                    cap.exceeded = True
                    raise CapExceeded(f"the server's message is over {cap.limit} bytes")
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class Transport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            if request.method == "DELETE":
                with anyio.fail_after(close_s):
                    response = await self._inner.handle_async_request(request)
                    await response.aread()
                    return response
            response = await self._inner.handle_async_request(request)
            return httpx2.Response(
                status_code=response.status_code, headers=response.headers,
                stream=Body(response.stream), extensions=response.extensions,
            )  # fmt: skip

        async def aclose(self) -> None:
            await self._inner.aclose()

    return Transport()


class ErrorTail:
    """A pipe for a server's standard error that keeps only the last ``keep`` bytes written.

    ``file`` is given to the server as its standard error; a daemon thread reads the pipe as
    it fills, so a server writing without end never blocks on it and never costs more than
    ``keep`` bytes. `close` ends the reading and returns the end kept.

    Args:
        keep: Most bytes kept (the last ones written).
    """

    _POLL_S = 0.05
    _LINGER_S = 0.5  # after `close`, how long what is still being written is read

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._data = bytearray()
        self._closing = threading.Event()
        read_end, write_end = os.pipe()
        self._read_end = read_end
        self.file: TextIO = os.fdopen(write_end, "w", encoding="utf-8", errors="replace")
        self._thread = threading.Thread(target=self._drain, name="mcp-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        stop_at: float | None = None
        poller = select.poll()  # no limit on the descriptor's number, unlike select()
        poller.register(self._read_end, select.POLLIN)
        try:
            while True:
                if stop_at is None and self._closing.is_set():
                    stop_at = time.monotonic() + self._LINGER_S
                if stop_at is not None and time.monotonic() >= stop_at:
                    return
                ready = poller.poll(self._POLL_S * 1000)
                if not ready:
                    if stop_at is not None:
                        return
                    continue
                chunk = os.read(self._read_end, 65536)
                if not chunk:
                    return  # every writer is gone
                self._data += chunk
                del self._data[: -self._keep]
        except OSError:
            return
        finally:
            os.close(self._read_end)

    def close(self) -> str:
        """Stop reading (what is already written is read first) and return the end kept."""
        with contextlib.suppress(OSError):
            self.file.close()
        self._closing.set()
        self._thread.join(timeout=self._LINGER_S + 1)
        return bytes(self._data).decode("utf-8", "replace")


class StateFolders:
    """Private folders for stdio servers: one per (server, agent), or per server if shared.

    The folders live under one temporary folder, removed when this object is collected or
    the process exits.
    """

    def __init__(self) -> None:
        self._root: Path | None = None
        self._names: dict[tuple[str, str], Path] = {}

    def folder(self, server: str, spec: McpServerSpec, agent: str | None) -> Path:
        """The folder a call of ``server`` by ``agent`` runs in (``None``: no agent)."""
        who = "shared" if spec.share else ("agent:" + agent if agent else "none")
        found = self._names.get((server, who))
        if found is None:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="clearance-mcp-"))
                weakref.finalize(self, shutil.rmtree, self._root, ignore_errors=True)
            found = self._root / f"{server}-{len(self._names)}"
            found.mkdir(mode=0o700)
            self._names[(server, who)] = found
        return found


@functools.cache
def _session_class() -> type[ClientSession]:
    """The SDK's client session, without its check of a result against the output schema.

    The SDK checks a tool's structured result against the ``outputSchema`` the server lists
    (listing the tools again first), with ``jsonschema`` in the event loop: a server's
    pattern that backtracks without end (``^(a+)+$``) would stall the whole run, past every
    deadline. The schema and the result are the server's alike, so the check proves nothing;
    the result reaches the model as an untrusted tool result, cut to ``max_result_bytes``.
    """
    from mcp import ClientSession
    from mcp.types import CallToolResult

    class Unchecked(ClientSession):
        async def validate_tool_result(self, name: str, result: CallToolResult) -> None:
            return None

    return Unchecked


@contextlib.asynccontextmanager
async def session(
    spec: McpServerSpec,
    cap: ReadCap,
    *,
    folder: Path | None = None,
    errlog: TextIO | None = None,
    malformed: list[str] | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized session with one server; the server (or connection) is closed after.

    A stdio server gets only its declared environment, runs in ``folder`` (its home and
    temporary folders too, unless ``env`` names them); its standard error goes to
    ``errlog``, or is discarded (a hostile server could otherwise write to the terminal).
    Each message the server sent that is not JSON-RPC is described in ``malformed`` (the
    session goes on without it: a request it should have answered then times out, and the
    caller can say why). Past `MAX_SERVER_REQUESTS` requests of the server, its input ends.
    """
    import anyio
    import httpx2
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    async with contextlib.AsyncExitStack() as stack:
        if spec.command is not None:
            _patch_stdio()
            token = _STDIO_CAP.set(cap)  # read by the SDK's reader task, started just below
            env = {name: str(folder) for name in _FOLDER_VARIABLES} if folder else {}
            program, *args = spec.resolved_command()
            params = StdioServerParameters(
                command=program, args=args,
                env={**env, **spec.resolved_env()}, cwd=folder,
            )  # fmt: skip
            if errlog is None:
                errlog = stack.enter_context(open(os.devnull, "w", encoding="utf-8"))  # noqa: ASYNC230, SIM115
            groups: list[int] = []
            stack.callback(_kill_groups, groups)  # after the SDK stopped the server
            noted = _STDIO_GROUPS.set(groups)
            try:
                streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            finally:
                _STDIO_GROUPS.reset(noted)
            _STDIO_CAP.reset(token)
        else:
            assert spec.url is not None
            client = httpx2.AsyncClient(
                headers=spec.resolved_headers(),
                timeout=httpx2.Timeout(spec.connect_timeout_s, read=_read_timeout(spec)),
                follow_redirects=False,
                transport=_capped_transport(cap, min(_CLOSE_S, spec.connect_timeout_s)),
            )
            await stack.enter_async_context(client)
            streams = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=client, max_sse_event_size=cap.limit)
            )
        read, write = streams

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception) and malformed is not None and len(malformed) < 8:
                secrets = spec.secrets()  # one echoing the request quotes no credential
                text = " ".join(mask_text(str(message), secrets).split())
                malformed.append(mask_cut(text[:MALFORMED_SHOWN], secrets))

        client_session = await stack.enter_async_context(
            _session_class()(_CountedRequests(read, cap), write, message_handler=on_message)
        )
        with anyio.fail_after(spec.connect_timeout_s):
            await client_session.initialize()
        yield client_session
