"""Tools from MCP servers (the official ``mcp`` SDK), treated as untrusted.

`load_mcp_tools` connects to each declared server once before a run, lists its tools and
keeps only the ones agents are allowed (``mcp:<server>/<tool>`` entries): their argument
schemas must be valid JSON Schema objects within a size cap, and their descriptions are
shortened and stripped of control characters. Each kept tool becomes a `Tool` whose call
opens its own session (a stdio server is started for the call, in its calling agent's own
folder unless the server is declared shared, and always stopped after it, on failure and
cancellation too; see `clearance._agents.mcp_transport`), checks the arguments against the
schema with the project's one bounded check (`clearance._core.schema_check`: patterns under
a time limit, no ``$ref`` fetched, enums hashed), calls the tool under a deadline, caps what
it reads while reading, and caps the result's size. A server cannot add tools: only the names
listed before the run are offered to a model, and only those are ever called.

The result enters the next prompt like any tool result, as a fenced ``tool:<call id>`` item
built by the `ContextBuilder`; the call's server, tool, size and cut are recorded in the
ledger as an ``mcp_call`` event (see ``ToolOutput.source``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from clearance._agents.mcp_transport import (
    MAX_SERVER_REQUESTS,
    ErrorTail,
    ReadCap,
    StateFolders,
    read_cap,
    session,
)
from clearance._agents.tools import Tool, ToolOutput, tool_caller
from clearance._core.confined import escape_controls
from clearance._core.errors import ConfigError
from clearance._core.masking import mask_cut, mask_text
from clearance._core.mcp_spec import McpServerSpec, McpToolRef
from clearance._core.schema_check import schema_errors, schema_problem
from clearance.models._base import MAX_ARGUMENT_DEPTH, nested_deeper_than

if TYPE_CHECKING:
    from mcp.types import CallToolResult

__all__ = ["MAX_DESCRIPTION_CHARS", "load_mcp_tools", "load_mcp_tools_sync"]

MAX_DESCRIPTION_CHARS = 1000
"""A server's tool description is cut to this many characters before a model sees it."""

_MAX_PAGES = 20  # tools/list pages read from one server, each within its read cap
_NAMES_SHOWN = 20  # names of a server's other tools quoted in an error
_CLEANUP_S = 15.0  # bound on stopping a server after its caller was cancelled
_ERROR_CHARS = 300  # of an error message quoting what a server said
_PROBLEMS_SHOWN = 10  # argument problems told to the model, each cut to _ERROR_CHARS

T = TypeVar("T")


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError(
            "MCP servers need the official MCP SDK: pip install 'clearance[mcp]'",
            field="mcp_servers",
        ) from None


async def _stopped_on_cancel(work: Callable[[], Awaitable[T]]) -> T | None:
    """Run ``work`` so that cancelling the caller still lets it stop its server.

    The MCP SDK stops a stdio server in a shielded cleanup that a plain asyncio
    cancellation could cut short; here a cancellation of the caller becomes an anyio
    cancellation of ``work``, whose cleanup is awaited (at most ``_CLEANUP_S`` seconds)
    before the cancellation goes on.
    """
    import anyio

    scopes: list[anyio.CancelScope] = []

    async def inner() -> T | None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            return await work()
        return None

    task = asyncio.ensure_future(inner())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        for scope in scopes:
            scope.cancel()
        await asyncio.wait({task}, timeout=_CLEANUP_S)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the caller's cancellation is what goes on
        raise


async def load_mcp_tools(
    servers: Mapping[str, McpServerSpec], refs: Iterable[McpToolRef]
) -> dict[str, Tool]:
    """The allowed tools of the servers, as `Tool` objects keyed by the name a model calls.

    Args:
        servers: ``mcp_servers:`` by name.
        refs: The tools agents may call (duplicates are fine).

    Returns:
        ``{"mcp__<server>__<tool>": Tool}`` (the function name of the agent's
        ``mcp:<server>/<tool>`` entry, which is also each tool's ``name``).

    Raises:
        ConfigError: The SDK is not installed, a server cannot be reached or does not finish
            the handshake and listing within ``connect_timeout_s``, does not offer an allowed
            tool, or offers it with a schema that is not a valid JSON Schema object within
            ``max_schema_bytes``. The message names the server.
    """
    wanted: dict[str, dict[str, McpToolRef]] = {}
    for ref in refs:
        wanted.setdefault(ref.server, {})[ref.tool] = ref
    if not wanted:
        return {}
    _require_sdk()
    tools: dict[str, Tool] = {}
    folders = StateFolders()
    for server, by_tool in wanted.items():
        spec = servers[server]
        listing = await _listed(server, spec, set(by_tool), folders.folder(server, spec, None))
        for name, ref in by_tool.items():
            if name not in listing.tools:
                raise ConfigError(
                    f"MCP server {server!r} has no tool {name!r} ({listing.offered()})",
                    field=f"mcp_servers.{server}",
                )
            description, schema = _checked_tool(server, spec, name, listing.tools[name])
            if ref.model_name in tools:
                raise ConfigError(
                    f"two allowed tools would both be called {ref.model_name!r}",
                    field=f"mcp_servers.{server}",
                )
            tools[ref.model_name] = _tool(ref, spec, description, schema, folders)
    return tools


def load_mcp_tools_sync(
    servers: Mapping[str, McpServerSpec], refs: Iterable[McpToolRef]
) -> dict[str, Tool]:
    """`load_mcp_tools` for code not in an event loop (the command line).

    Raises:
        ConfigError: As `load_mcp_tools`.
    """
    return asyncio.run(load_mcp_tools(servers, list(refs)))


@dataclass(slots=True)
class _Listing:
    """What a server listed: the allowed tools, and a few names and a count of the others."""

    tools: dict[str, Any] = field(default_factory=dict)
    sample: list[str] = field(default_factory=list)
    count: int = 0
    pages: int = 0
    more: bool = False  # it named a next page past the page cap

    def add(self, tool: Any, wanted: set[str]) -> None:
        self.count += 1
        if tool.name in wanted:
            self.tools.setdefault(tool.name, tool)
        elif len(self.sample) < _NAMES_SHOWN:
            self.sample.append(_shown_name(tool.name))

    def offered(self) -> str:
        """``"it offers N tools: a, b, ..."`` for an error (``"it offers none"``)."""
        if not self.count:
            text = "it offers none"
        else:
            rest = ", ..." if self.count > len(self.sample) else ""
            text = f"it offers {self.count} tools: {', '.join(self.sample)}{rest}"
        if self.more:
            text += f"; its listing was read to {_MAX_PAGES} pages only"
        return text


async def _listed(server: str, spec: McpServerSpec, wanted: set[str], folder: Path) -> _Listing:
    """The server's listing (every page, within the caps and the connect deadline).

    Only the ``wanted`` tools are kept, so a listing of any length costs no more memory than
    one page; the pages read are at most ``_MAX_PAGES``, each a message within `read_cap`.
    """
    import anyio

    errlog = ErrorTail(4 * _ERROR_CHARS)  # a server flooding it costs no disk, no memory
    malformed: list[str] = []
    cap = ReadCap(read_cap(spec))

    async def work() -> _Listing:
        from mcp.types import PaginatedRequestParams

        found = _Listing()
        with anyio.fail_after(spec.connect_timeout_s * 2):
            async with session(
                spec, cap, folder=folder, errlog=errlog.file, malformed=malformed
            ) as open_:
                cursor: str | None = None
                while found.pages < _MAX_PAGES:
                    params = PaginatedRequestParams(cursor=cursor) if cursor else None
                    with anyio.fail_after(spec.connect_timeout_s):
                        page = await open_.list_tools(params=params)
                    found.pages += 1
                    for tool in page.tools:
                        found.add(tool, wanted)
                    cursor = page.next_cursor
                    if not cursor or wanted.issubset(found.tools):
                        break
                found.more = bool(cursor) and not wanted.issubset(found.tools)
        return found

    field_name = f"mcp_servers.{server}"
    try:
        listed = await _stopped_on_cancel(work)
    except Exception as exc:  # any failure of the server, its process or the connection
        leaf = _leaf(exc)
        said = _describe(leaf, spec.secrets()) + _tail(errlog.close(), spec.secrets())
        if cap.flooded:
            raise ConfigError(
                f"MCP server {server!r} ({spec.where()}) sent more than {MAX_SERVER_REQUESTS} "
                "requests while listing its tools",
                field=field_name,
            ) from None
        if cap.exceeded:
            raise ConfigError(
                f"MCP server {server!r} listed its tools in a message over {cap.limit} bytes, "
                "which was not read (4 x max_result_bytes, at least 1 MiB)",
                field=field_name,
            ) from None
        if isinstance(leaf, ConfigError):
            raise ConfigError(str(leaf), field=field_name) from None
        if _timed_out(leaf):
            raise ConfigError(
                f"MCP server {server!r} ({spec.where()}) did not answer within "
                f"{spec.connect_timeout_s:g} s{_sent(malformed)}",
                field=field_name,
            ) from None
        raise ConfigError(
            f"cannot use MCP server {server!r} ({spec.where()}): {said}",
            field=field_name,
        ) from None
    finally:
        errlog.close()  # a second close only returns the end again
    assert listed is not None
    return listed


def _checked_tool(server: str, spec: McpServerSpec, name: str, tool: Any) -> tuple[str, Any]:
    """The description (cut, cleaned) and argument schema of a listed tool, checked.

    The schema is checked in the dialect its ``$schema`` names (2020-12 by default), the one
    its arguments are then held to.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import Draft202012Validator, validator_for

    field = f"mcp_servers.{server}"
    schema = tool.input_schema
    if nested_deeper_than(schema, MAX_ARGUMENT_DEPTH):
        raise ConfigError(
            f"tool {name!r}: its argument schema nests deeper than {MAX_ARGUMENT_DEPTH} levels",
            field=field,
        )
    try:
        size = len(json.dumps(schema, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError):
        raise ConfigError(f"tool {name!r}: its schema is not JSON", field=field) from None
    if size > spec.max_schema_bytes:
        raise ConfigError(
            f"tool {name!r}: its argument schema is {size} bytes, over max_schema_bytes "
            f"({spec.max_schema_bytes})",
            field=field,
        )
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ConfigError(f"tool {name!r}: its argument schema is not an object", field=field)
    if not isinstance(schema.get("$schema", ""), str):
        raise ConfigError(f"tool {name!r}: its argument schema's $schema is not a string",
                          field=field)  # fmt: skip
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(
            f"tool {name!r}: its argument schema is not valid: {exc.message[:_ERROR_CHARS]}",
            field=field,
        ) from None
    except RecursionError:
        raise ConfigError(
            f"tool {name!r}: its argument schema nests too deeply", field=field
        ) from None
    text = " ".join(str(tool.description or tool.title or name).split())
    text = "".join(c for c in text if c.isprintable())[:MAX_DESCRIPTION_CHARS]
    return f"[MCP server {server}] {text}", schema


def _tool(
    ref: McpToolRef, spec: McpServerSpec, description: str, schema: Any, folders: StateFolders
) -> Tool:
    """A `Tool` calling ``ref`` on its server (one session per call, in its agent's folder)."""
    unusable = schema_problem(schema)  # an outside $ref, a pattern too large: every call fails

    async def run(arguments: dict[str, Any]) -> ToolOutput:
        source: dict[str, Any] = {
            "server": ref.server, "tool": ref.tool, "transport": spec.transport,
            "where": spec.where(), "shared": spec.share,
        }  # fmt: skip
        # In a thread: the patterns' matcher lets the event loop (the run's other tasks) go on.
        problems = await asyncio.to_thread(_argument_problems, schema, unusable, arguments)
        if problems:
            return ToolOutput(
                content=f"error: invalid arguments: {problems}", is_error=True, source=source
            )
        started = time.monotonic()
        folder = folders.folder(ref.server, spec, tool_caller())
        content, is_error, extra = await _call(ref, spec, arguments, folder)
        source.update(extra, duration_ms=round((time.monotonic() - started) * 1000))
        return ToolOutput(content=content, is_error=is_error, source=source)

    return Tool(name=ref.model_name, description=description, parameters=schema, run=run)


async def _call(
    ref: McpToolRef, spec: McpServerSpec, arguments: dict[str, Any], folder: Path
) -> tuple[str, bool, dict[str, Any]]:
    """Call the tool: ``(text for the model, is error, details for the ledger)``."""
    import anyio

    cap = ReadCap(read_cap(spec))
    malformed: list[str] = []

    async def work() -> CallToolResult:
        with anyio.fail_after(spec.connect_timeout_s + spec.timeout_s + 5):
            async with session(spec, cap, folder=folder, malformed=malformed) as open_:
                return await open_.call_tool(
                    ref.tool, arguments, read_timeout_seconds=spec.timeout_s
                )

    who = f"MCP server {ref.server!r}"
    try:
        result = await _stopped_on_cancel(work)
    except Exception as exc:  # any failure of the server, its process or the connection
        leaf = _leaf(exc)
        if cap.flooded:
            message = f"{who} sent more than {MAX_SERVER_REQUESTS} requests while answering "
            message += f"{ref.tool}; the call was ended"
            return f"error: {message}", True, {"error": "too_many_requests"}
        if cap.exceeded:
            message = (
                f"{who} answered {ref.tool} with a message over {cap.limit} bytes, which was "
                "not read (4 x max_result_bytes, at least 1 MiB)"
            )
            return f"error: {message}", True, {"error": "too_large"}
        if _timed_out(leaf):
            message = f"{who} did not answer {ref.tool} within {spec.timeout_s:g} s"
            if malformed:
                message += _sent(malformed)
                return f"error: {message}", True, {"error": "malformed"}
            return f"error: {message}", True, {"error": "timeout"}
        if isinstance(leaf, ConfigError):
            return f"error: {who}, calling {ref.tool}: {leaf}", True, {"error": "config"}
        message = f"{who} failed to answer {ref.tool}: {_describe(leaf, spec.secrets())}"
        return f"error: {message}", True, {"error": type(leaf).__name__}
    assert result is not None
    text, size = _result_text(result)  # an error result echoing the request: no credential
    text = mask_text(text, spec.secrets()) if result.is_error else text
    capped, cut = _capped(text, spec.max_result_bytes)
    return capped, bool(result.is_error), {"bytes": size, "truncated": cut}


def _argument_problems(schema: dict[str, Any], unusable: str | None, arguments: Any) -> str:
    """Problems of ``arguments`` against a server's schema (``""``: none), checked safely.

    The schema is the server's, so it is not trusted to be cheap: it is held with
    `schema_errors`, the check of output schemas: no ``$ref`` is fetched (one outside the
    schema, ``unusable`` from `schema_problem`, refuses every call, never a request to another
    host or a read of a local file), its patterns are matched within ``PATTERN_SECONDS``
    together, and a pattern that would unroll too large is never compiled. At most
    ``_PROBLEMS_SHOWN`` problems are listed, each cut short, each naming its argument's path.
    """
    subject = "the tool's argument schema"
    if unusable is not None:
        return f"{subject} cannot be checked: {unusable}"[:_ERROR_CHARS]
    try:
        errors = schema_errors(schema, arguments, subject=subject, value_name="the arguments")
    except ValueError as exc:
        return _quoted(str(exc))
    except Exception as exc:  # anything else the schema makes the check raise
        return f"{subject} cannot be checked: {_describe(exc)}"
    problems = [f"{error.json_path}: {error.message}"[:_ERROR_CHARS] for error in errors]
    if len(problems) > _PROBLEMS_SHOWN:
        problems[_PROBLEMS_SHOWN:] = ["(more not shown)"]
    return "; ".join(problems)


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a deadline's: the caller's, the SDK's or an HTTP read's."""
    import httpx2
    from mcp import MCPError

    if isinstance(exc, TimeoutError | httpx2.TimeoutException):
        return True
    return isinstance(exc, MCPError) and "timed out" in str(exc)


def _sent(malformed: list[str]) -> str:
    """``"; it sent a message that is not JSON-RPC: ..."`` for the first one, or ``""``."""
    if not malformed:
        return ""
    more = f" (and {len(malformed) - 1} more)" if len(malformed) > 1 else ""
    return f"; it sent a message that is not JSON-RPC{more}: {_quoted(malformed[0])}"


def _tail(text: str, secrets: Iterable[str]) -> str:
    """``"; its standard error ends: ..."``: the end of a stdio server's, ``secrets`` masked."""
    lines = [" ".join(ln.split()) for ln in mask_text(text, secrets).splitlines() if ln.strip()]
    if not lines:
        return ""
    last = "".join(c for c in lines[-1] if c.isprintable())[-_ERROR_CHARS:]
    return f"; its standard error ends: {_clean(last)}"


def _shown_name(name: str) -> str:
    """A name a server sent (a tool's, a MIME type, a URI), printable, at most 64 characters."""
    shown = "".join(c for c in name if c.isprintable())
    return _clean(shown if len(shown) <= 64 else shown[:63] + "…")


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """One line about an exception (its first leaf), shortened, ``secrets`` masked."""
    exc = _leaf(exc)
    text = " ".join(mask_text(str(exc), secrets).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {_quoted(mask_cut(text[:_ERROR_CHARS], secrets))}"


_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")  # text shown in another order than sent


def _quoted(text: str, limit: int = _ERROR_CHARS) -> str:
    r"""A server's text, at most ``limit`` characters, controls shown as escapes (``\x1b``)."""
    # ESC, NUL, C1, the bidirectional overrides: shown, never obeyed, as a line break is
    shown = _BIDI.sub(lambda m: f"\\u{ord(m[0]):04x}", escape_controls(text[:limit]))
    return _clean(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def _clean(text: str) -> str:
    """Text any later step accepts: no NUL characters, no lone surrogates."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _result_text(result: CallToolResult) -> tuple[str, int]:
    """The result as text (non-text parts named, not included), and its size in bytes."""
    from mcp.types import EmbeddedResource, ResourceLink, TextContent

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResource):
            text = getattr(block.resource, "text", None)
            uri = _shown_name(str(block.resource.uri))
            parts.append(text if isinstance(text, str) else f"[binary resource {uri}]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link {_shown_name(str(block.uri))}]")
        else:
            mime = _shown_name(str(getattr(block, "mime_type", "")))
            parts.append(f"[{_shown_name(str(block.type))} content {mime} not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(parts).encode("utf-8", "replace").decode("utf-8")  # NUL kept, as stored
    return text, len(text.encode("utf-8"))


def _capped(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` within ``max_bytes`` UTF-8 bytes, with a note when cut."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    kept = data[:max_bytes].decode("utf-8", "ignore")
    return (
        f"{kept}\n[cut: the tool returned {len(data)} bytes; the first {max_bytes} are shown]",
        True,
    )
