"""MCP tool servers in a team file: ``mcp_servers:`` and the ``mcp:<server>/<tool>`` tool entries.

A server is started as a process speaking MCP over stdio (``command:``, with ``env:``) or
reached over streamable HTTP (``url:``, with ``headers:``). An agent names each MCP tool it may
call in its ``tools:`` list as ``mcp:<server>/<tool>``: that list is the allow-list, and a
server's other tools are never offered or called. The model calls the tool by
``mcp__<server>__<tool>`` (function names may not hold ``:`` or ``/``).

A value of ``env:`` or ``headers:`` written as ``${NAME}`` is taken from the environment of
the run, so secrets need not be written into the team file.

A stdio server's program written as ``python`` or ``python3`` is the interpreter running
Clearance (``sys.executable``), not whichever ``python`` comes first on ``PATH``: a server
written in Python finds the packages installed next to Clearance (``mcp`` among them) even
when the virtual environment is not activated, and its script (``python server.py``) is
found relative to where Clearance runs. Write a path (``/usr/bin/python3``) to choose another
interpreter.

A server is a channel between the agents that call it (one agent's arguments may come back
in another's results), so by default each agent gets its own: a stdio server runs, for each
agent, in that agent's own folder. ``share: true`` declares the channel instead (one folder
for every agent); it is recorded with each call and listed by ``clearance verify``. An HTTP
server cannot be separated per agent, so one listed by several agents needs ``share: true``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clearance._core.errors import ConfigError
from clearance._core.masking import header_secrets, mask_text, mask_url, url_secrets

__all__ = [
    "MCP_FUNCTION_PREFIX",
    "MCP_PREFIX",
    "McpServerSpec",
    "McpToolRef",
    "check_mcp_entries",
    "mcp_model_name",
    "mcp_refs",
]

MCP_PREFIX = "mcp:"
"""Prefix of an agent's ``tools:`` entry naming an MCP tool: ``mcp:<server>/<tool>``."""
MCP_FUNCTION_PREFIX = "mcp__"
"""Prefix of the name a model calls an MCP tool by: ``mcp__<server>__<tool>``; no other tool
may be named so (`clearance._orchestration.graph_check.check_tools`)."""

_SERVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}")
_TOOL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
_FROM_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_THIS_PYTHON = frozenset({"python", "python3"})
_MODEL_NAME_MAX = 64  # OpenAI function names: ^[a-zA-Z0-9_-]{1,64}$


def _no_controls(value: str, what: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{what} holds a control character")
    return value


class McpServerSpec(BaseModel):
    """One entry of ``mcp_servers:``.

    Attributes:
        command: The stdio server's program and arguments (``[program, arg, ...]``).
        env: The stdio server's environment: only these variables (plus the SDK's short list
            of non-secret basics: ``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``,
            ``USER``) reach it; the run's own environment (API keys...) does not.
        url: The streamable HTTP endpoint (``https://``, or ``http://`` on a loopback host).
        headers: HTTP headers sent with every request (e.g. ``Authorization``).
        connect_timeout_s: Deadline for starting or reaching the server and the MCP handshake,
            and for listing its tools, in seconds.
        timeout_s: Deadline of one tool call, in seconds.
        max_result_bytes: Cap on a tool result's text (UTF-8 bytes); the rest is cut off and
            the cut is noted in the text.
        max_schema_bytes: Cap on a tool's argument schema (JSON, bytes); a larger one is refused.
        share: Whether the agents that list the server's tools share it (one stdio folder for
            all of them; required for an HTTP server several agents list): a declared
            channel between them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(default=None, min_length=1, max_length=256)
    env: dict[str, str] = Field(default={}, max_length=256)
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    headers: dict[str, str] = Field(default={}, max_length=64)
    connect_timeout_s: float = Field(default=20.0, gt=0, le=600, strict=True)
    timeout_s: float = Field(default=60.0, gt=0, le=3600, strict=True)
    max_result_bytes: int = Field(default=64 * 1024, ge=64, le=16 * 1024 * 1024, strict=True)
    max_schema_bytes: int = Field(default=16 * 1024, ge=256, le=1024 * 1024, strict=True)
    share: bool = False

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value[0].strip():
                raise ValueError("the program (first item) is empty")
            for part in value:
                if "\x00" in part:
                    raise ValueError("holds a NUL character")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if "\x00" in item:
                raise ValueError(f"the value of {name} holds a NUL character")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            _no_controls(item, f"the value of header {name}")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None:
            check_url(value)
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (streamable HTTP)")
        if self.env and self.command is None:
            raise ValueError("env applies to stdio servers (command) only")
        if self.headers and self.url is None:
            raise ValueError("headers apply to HTTP servers (url) only")
        return self

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command is not None else "http"

    def resolved_command(self) -> list[str]:
        """``command`` with a program of ``python`` or ``python3`` as ``sys.executable``.

        After ``python``/``python3``, the script (the first argument that is not an option,
        when it ends in ``.py``) is made absolute against the current directory, since the
        server runs in its agent's own folder.

        Raises:
            ConfigError: The server is not a stdio server (it has no ``command``).
        """
        if self.command is None:
            raise ConfigError("an HTTP server has no command", field="command")
        program, *args = self.command
        if program not in _THIS_PYTHON:
            return [program, *args]
        # The server runs in its agent's own folder: its script, named relative to where
        # Clearance runs, is made absolute so that it is still found there.
        script = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
        if script is not None and args[script].endswith(".py"):
            args[script] = os.path.abspath(args[script])
        return [sys.executable, *args]

    def resolved_env(self) -> dict[str, str]:
        """``env`` with ``${NAME}`` values taken from this process's environment.

        Raises:
            ConfigError: A ``${NAME}`` variable is not set.
        """
        return {k: _from_env(v, f"env.{k}") for k, v in self.env.items()}

    def resolved_headers(self) -> dict[str, str]:
        """``headers`` with ``${NAME}`` values taken from this process's environment.

        Raises:
            ConfigError: A ``${NAME}`` variable is not set, or its value holds a control
                character.
        """
        out = {k: _from_env(v, f"headers.{k}") for k, v in self.headers.items()}
        for name, value in out.items():
            if any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise ConfigError("holds a control character", field=f"headers.{name}")
        return out

    def secrets(self) -> tuple[str, ...]:
        """What a server's errors must not quote back (masked with `mask_text`).

        Every value of the URL's query, of the headers and of a stdio server's ``env``
        (``${NAME}`` resolved; one whose variable is not set is left out), with the token of
        ``Bearer <token>``. `mask_text` replaces those of at least `MIN_SECRET_CHARS`.
        """
        found = list(url_secrets(self.url, whole_query=True))
        for name, value in self.headers.items():
            try:
                found += header_secrets(_from_env(value, f"headers.{name}"))
            except ConfigError:
                continue
        for name, value in self.env.items():
            try:
                found.append(_from_env(value, f"env.{name}"))
            except ConfigError:
                continue
        return tuple(s for s in dict.fromkeys(found) if s)

    def where(self) -> str:
        """The server's address for messages and the ledger: its URL or its program.

        A URL's query is left out (it may hold a token).
        """
        if self.url is not None:
            parts = urlsplit(self.url)
            return f"{parts.scheme}://{parts.netloc}{parts.path}"
        assert self.command is not None
        return self.command[0]


def _from_env(value: str, field: str) -> str:
    match = _FROM_ENV.fullmatch(value)
    if match is None:
        return value
    name = match.group(1)
    found = os.environ.get(name)
    if found is None:
        raise ConfigError(f"environment variable {name} is not set", field=field)
    return found


def check_url(url: str) -> None:
    """Refuse an MCP endpoint URL that is malformed or would leak what it is sent.

    Raises:
        ValueError: Not ``http``/``https``, no host, credentials or a fragment in the URL,
            whitespace or control characters, a bad port, or plain ``http`` to a host that
            is not loopback (headers such as tokens would cross the network unencrypted).
    """
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError("the URL holds whitespace or a control character")
    shown = mask_url(url, whole_query=True)  # a refused URL's password or token is not shown
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{shown!r} is not a valid URL: {mask_text(str(exc))}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{shown!r}: the scheme must be http or https")
    host = parts.hostname
    if not host:
        raise ValueError(f"{shown!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the URL holds credentials: send them in headers (from ${VARIABLE})")
    if parts.fragment:
        raise ValueError("the URL has a fragment")
    if port == 0:
        raise ValueError("port 0 is not a server port")
    if parts.scheme == "http" and not _loopback(host):
        raise ValueError(f"plain http is allowed only on a loopback host, not {host!r}: use https")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class McpToolRef:
    """One allowed MCP tool: a server of ``mcp_servers:`` and one of its tools.

    Attributes:
        server: The server's name in ``mcp_servers:``.
        tool: The tool's name on that server.
    """

    server: str
    tool: str

    @property
    def entry(self) -> str:
        """The agent's ``tools:`` entry: ``mcp:<server>/<tool>``."""
        return f"{MCP_PREFIX}{self.server}/{self.tool}"

    @property
    def model_name(self) -> str:
        """The name the model calls the tool by: ``mcp__<server>__<tool>`` (``.`` as ``_``)."""
        return f"{MCP_FUNCTION_PREFIX}{self.server}__{self.tool.replace('.', '_')}"

    @classmethod
    def parse(cls, entry: str) -> McpToolRef:
        """The reference an entry ``mcp:<server>/<tool>`` names.

        Raises:
            ConfigError: The entry is not of that form, or a name holds characters MCP (or
                a model's function name) does not allow.
        """
        body = entry.removeprefix(MCP_PREFIX)
        server, slash, tool = body.partition("/")
        if not entry.startswith(MCP_PREFIX) or not slash:
            raise ConfigError(f"{entry!r} is not of the form 'mcp:<server>/<tool>'")
        if not _SERVER.fullmatch(server):
            raise ConfigError(
                f"{entry!r}: the server name must be 1-32 letters, digits or '-' "
                "(starting with a letter or digit)"
            )
        if not _TOOL.fullmatch(tool):
            raise ConfigError(f"{entry!r}: the tool name must be 1-128 letters, digits, _ . -")
        ref = cls(server, tool)
        if len(ref.model_name) > _MODEL_NAME_MAX:
            raise ConfigError(
                f"{entry!r}: the function name {ref.model_name!r} is over "
                f"{_MODEL_NAME_MAX} characters; shorten the server's name"
            )
        return ref


def mcp_model_name(entry: str) -> str | None:
    """The function name of an ``mcp:<server>/<tool>`` entry, or ``None`` for other entries."""
    if not entry.startswith(MCP_PREFIX) or "/" not in entry:
        return None
    server, _, tool = entry.removeprefix(MCP_PREFIX).partition("/")
    return McpToolRef(server, tool).model_name


def mcp_refs(tools: Iterable[Any]) -> list[McpToolRef]:
    """The MCP tools among an agent's ``tools:`` entries, in order (other entries skipped).

    Raises:
        ConfigError: An ``mcp:`` entry is malformed.
    """
    return [McpToolRef.parse(t) for t in tools if isinstance(t, str) and t.startswith(MCP_PREFIX)]


def check_mcp_entries(
    servers: Mapping[str, McpServerSpec], agents: Iterable[tuple[str, Iterable[Any]]]
) -> None:
    """Refuse ``mcp:`` tool entries that name no declared server, and servers nobody uses.

    Args:
        servers: ``mcp_servers:`` by name.
        agents: ``(agent name, its tools: entries)`` of every agent and the coordinator.

    Raises:
        ConfigError: A malformed entry or an unknown server (the field names the agent's
            ``tools``), a server name that is not valid, two allowed tools (of one agent or
            of two) that models would know by the same function name, a declared server no
            agent uses, or an HTTP server listed by several agents without ``share: true``.
    """
    for name in servers:
        if not _SERVER.fullmatch(name):
            raise ConfigError(
                "the name must be 1-32 letters, digits or '-' (starting with a letter or digit)",
                field=f"mcp_servers.{name}",
            )
    used: dict[str, list[str]] = {}
    seen: dict[str, tuple[str, str]] = {}  # function name: (entry, agent), across the team
    for agent, tools in agents:
        field = f"agents.{agent}.tools"
        try:
            refs = mcp_refs(tools)
        except ConfigError as exc:
            raise ConfigError(str(exc), field=field) from None
        for ref in refs:
            if ref.server not in servers:
                known = ", ".join(sorted(servers)) or "none declared"
                raise ConfigError(
                    f"{ref.entry!r} names unknown MCP server {ref.server!r} (mcp_servers: {known})",
                    field=field,
                )
            other, owner = seen.setdefault(ref.model_name, (ref.entry, agent))
            if other != ref.entry:
                who = "" if owner == agent else f" (of agent {owner})"
                raise ConfigError(
                    f"{other!r}{who} and {ref.entry!r} would both be called {ref.model_name!r}",
                    field=field,
                )
            users = used.setdefault(ref.server, [])
            if agent not in users:
                users.append(agent)
    for name, spec in servers.items():
        if name not in used:
            raise ConfigError(
                f"has no effect: no agent lists a tool 'mcp:{name}/<tool>'",
                field=f"mcp_servers.{name}",
            )
        if spec.transport == "http" and len(used[name]) > 1 and not spec.share:
            raise ConfigError(
                f"is listed by agents {', '.join(used[name])}: one HTTP server is a channel "
                "between every agent that calls it; declare share: true to allow that, or "
                "give each agent its own server",
                field=f"mcp_servers.{name}",
            )
