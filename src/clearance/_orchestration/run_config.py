"""From a `RunSpec` to what an orchestrator runs with, and from an orchestrator to its spec.

The spec is the one definition of a run (see `clearance._core.run_spec`): `spec_options`,
`model_settings` and `spec_tools` turn it into the orchestrator's run options, each model's
settings and the user tools; `derived_spec` writes the spec of an orchestrator made directly
from a `Team` in code, so every run records a spec and `Orchestrator.from_run` reads it back.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearance._agents.tools import Tool, import_function, marked_tool, tool_marks
from clearance._core.errors import ConfigError
from clearance._core.mcp_spec import mcp_refs
from clearance._core.run_spec import MASK, RunSpec
from clearance._core.spec import Team
from clearance._core.teamfile import resolve_input
from clearance._core.teamfile_models import (
    MODEL_OPTION_KEYS,
    AgentSpec,
    BudgetSpec,
    FileCapsSpec,
    InputSpec,
    IsolationSpec,
    MemoryGroupSpec,
    MemorySpec,
    ModelOptionsSpec,
    PriceSpec,
    ToolEntrySpec,
)
from clearance._orchestration.graph_check import tool_import_paths
from clearance._state.messages import MessageBus
from clearance.models._base import split_model_id
from clearance.models._llama_cpp import CONTEXT_RANGE
from clearance.models._registry import DEFAULT_MODEL_ID

if TYPE_CHECKING:
    from clearance._orchestration.run import RunOptions, RunServices
    from clearance._orchestration.run_memory import RunMemory
    from clearance._state.store import ContextStore

# A run's parts (the orchestrator's options, its store and memory, MCP) are imported where
# they are used: `model_settings` and `spec_tools` serve ``clearance graph``, which opens none.

__all__ = [
    "LLAMA_SETTINGS",
    "MODEL_OPTION_KEYS",
    "WINDOWED_PROVIDERS",
    "checked_model_options",
    "derived_spec",
    "folder",
    "import_path",
    "model_settings",
    "named_tools",
    "orchestrator_arguments",
    "spec_options",
    "spec_tools",
]

WINDOWED_PROVIDERS = ("openai", "anthropic", "fake")
"""Providers whose context window comes from ``model_options.context_window`` (as their
``context_window``; ``llama-cpp:`` takes it as ``n_ctx``)."""

LLAMA_SETTINGS = {
    "threads": "n_threads",
    "threads_batch": "n_threads_batch",
    "batch_size": "n_batch",
}
"""``model_options`` keys that only ``llama-cpp:`` models take, and their `LlamaCppModel` names."""


def named_tools(
    tools: Mapping[str, Tool | Callable[..., Any]] | Iterable[Tool | Callable[..., Any]],
) -> tuple[dict[str, Tool], dict[str, str | None]]:
    """User tools by name, and the import path of each (``None`` if it has none).

    ``tools`` is a mapping by name, or a list named by each tool's own name (a function's
    ``__name__``).
    """
    named = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
    by_name: dict[str, Tool] = {}
    paths: dict[str, str | None] = {}
    for key, entry in named:
        tool = entry if isinstance(entry, Tool) else Tool.from_function(entry, name=key)
        by_name[key or tool.name] = tool
        paths[key or tool.name] = import_path(entry)
    return by_name, paths


def import_path(entry: Tool | Callable[..., Any]) -> str | None:
    """``module:qualname`` of a plain module-level function (so `resume` can import it)."""
    if isinstance(entry, Tool):
        return None
    module, qualname = getattr(entry, "__module__", None), getattr(entry, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"


def checked_model_options(
    options: Mapping[str, Mapping[str, int]],
) -> dict[str, dict[str, int]]:
    """``options`` as plain dicts, once every key is known and every value an integer.

    The values' ranges are checked by the model that receives them.

    Raises:
        ConfigError: A model id is not a string, a setting is not in `MODEL_OPTION_KEYS`, or
            a value is not an integer.
    """
    checked: dict[str, dict[str, int]] = {}
    for model_id, settings in options.items():
        if not isinstance(model_id, str) or not isinstance(settings, Mapping):
            raise ConfigError(
                f"not a model id and its settings: {model_id!r}", field="model_options"
            )
        for key, value in settings.items():
            if key not in MODEL_OPTION_KEYS:
                raise ConfigError(f"unknown model setting {key!r}", field="model_options")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{key} must be an integer, got {value!r}", field="model_options")
        checked[model_id] = dict(settings)
    return checked


def model_settings(
    spec: RunSpec, *, given_as: Mapping[str, str] | None = None
) -> dict[str, dict[str, int]]:
    """The `get_model` settings of the spec's models, by model id (only models with settings).

    ``model_options.context_window`` goes to ``openai:``, ``anthropic:`` and ``fake:``
    models as ``context_window`` and to ``llama-cpp:`` models as ``n_ctx``; ``threads``,
    ``threads_batch`` and ``batch_size`` go to ``llama-cpp:`` models only; then
    ``model_options.by_model`` wins for the models it names.

    Args:
        spec: The run's spec.
        given_as: Where a ``model_options`` key was given, when not in the spec's file (a
            command-line option such as ``--threads``), named in errors.

    Raises:
        ConfigError: A ``llama-cpp:`` setting is given but no agent uses a ``llama-cpp:``
            model (it would have no effect), the context window is given and a model of
            the team takes none (a provider an installed package adds: it would have no
            effect there), or a ``llama-cpp:`` model's context window is outside 128 to
            131072 tokens.
    """
    given_as = given_as or {}
    options = spec.model_options
    values = {
        key: (value, given_as.get(key, f"model_options.{key}"))
        for key in ("context_window", *LLAMA_SETTINGS)
        if (value := getattr(options, key)) is not None
    }
    default_id = spec.model or DEFAULT_MODEL_ID
    agents = (*spec.agents, *((spec.coordinator,) if spec.coordinator else ()))
    ids = sorted({default_id} | {a.model for a in agents if a.model})
    if not any(split_model_id(i)[0] == "llama-cpp" for i in ids):
        for key in LLAMA_SETTINGS:
            if key in values:
                raise ConfigError(
                    "applies to llama-cpp: models only, and no agent uses one",
                    field=values[key][1],
                )
    settings: dict[str, dict[str, int]] = {}
    window = values.get("context_window")
    # A model by_model gives a window of its own does not need the team-wide one.
    own = {m for m, chosen in options.by_model.items() if "context_window" in chosen}
    for model_id in ids:
        provider = split_model_id(model_id)[0]
        if provider in WINDOWED_PROVIDERS and window is not None:
            settings[model_id] = {"context_window": window[0]}
        elif provider != "llama-cpp" and window is not None and model_id not in own:
            raise ConfigError(
                f"has no effect on {model_id!r}: it reaches "
                f"{', '.join(f'{p}:' for p in WINDOWED_PROVIDERS)} and llama-cpp: models only "
                "(give a model that takes a window its own in model_options.by_model)",
                field=window[1],
            )
        elif provider == "llama-cpp":
            low, high = CONTEXT_RANGE
            if window is not None and not low <= window[0] <= high:
                raise ConfigError(
                    f"must be {low} to {high} tokens for a llama-cpp: model, got {window[0]}",
                    field=window[1],
                )
            chosen = {"n_ctx": window[0]} if window is not None else {}
            chosen |= {LLAMA_SETTINGS[k]: v for k, (v, _) in values.items() if k in LLAMA_SETTINGS}
            if chosen:
                settings[model_id] = chosen
    for model_id, chosen in options.by_model.items():
        settings[model_id] = {**settings.get(model_id, {}), **chosen}
    return settings


def folder(value: str | None, what: str) -> Path | None:
    """A spec's folder (a path, or ``python:<package>``), or ``None``.

    Raises:
        ConfigError: It does not exist; the message names ``what`` (``input``, ``project``).
    """
    if value is None:
        return None
    try:
        return resolve_input(value)
    except ConfigError as exc:
        message = str(exc).split(": ", 1)[-1].replace("input folder", f"{what} folder")
        raise ConfigError(message, field=what) from exc


def spec_options(
    spec: RunSpec,
    *,
    synthesis_from: Iterable[str] | None,
    stream_text: bool = False,
    retry_policy: Any = None,
) -> RunOptions:
    """The run options a spec declares.

    Args:
        spec: The run's spec.
        synthesis_from: The task ids the synthesis shows (``synthesis_from`` expanded).
        stream_text: Make every model call stream its text to ``on_event``.
        retry_policy: Backoff between attempts (`RetryPolicy`); ``None`` for the default.

    Raises:
        ConfigError: The input or project folder does not exist, or a model setting is bad
            (see `model_settings`).
    """
    from clearance._orchestration.run import DEFAULT_WORKSPACE_ROOT, RunOptions

    input_root = folder(spec.input.default, "input")
    extra = {"retry_policy": retry_policy} if retry_policy is not None else {}
    return RunOptions(
        max_concurrency=spec.max_concurrency,
        input_root=input_root,
        project_root=folder(spec.project, "project") or input_root,
        input_include=tuple(spec.input.include),
        file_caps=spec.file_caps(),
        clarification_rounds=spec.isolation.max_rounds,
        workspace_root=Path(spec.workspace or DEFAULT_WORKSPACE_ROOT),
        synthesis_from=tuple(synthesis_from) if synthesis_from is not None else None,
        approval_tools=frozenset(spec.approval_tools),
        model_options=model_settings(spec),
        stream_text=stream_text,
        budget=spec.run_budget(),
        **extra,
    )


def spec_tools(
    spec: RunSpec, given: Mapping[str, Tool | Callable[..., Any]] | None = None
) -> dict[str, Tool | Callable[..., Any]]:
    """The user tools a spec names: ``given`` ones, the ``tools:`` imported, the MCP tools.

    The MCP tools agents list (``mcp:<server>/<tool>``) are looked up on their servers,
    keyed by the function name a model calls (``mcp__<server>__<tool>``), unless given.

    Raises:
        ConfigError: An entry cannot be imported, has no import path and is not given (a
            tool given in code when the run started), or an MCP server cannot be used or has
            a secret that was not recorded.
    """
    tools: dict[str, Tool | Callable[..., Any]] = dict(given or {})
    for name, path in tool_import_paths(spec, tools):
        tools[name] = import_function(path, field=f"tools.{name}")
    for name, entry in spec.tools.items():  # a long form's options: imported or given alike
        if not isinstance(entry, str) and name in tools:
            tools[name] = with_entry_options(tools[name], entry)
    agents = (*spec.agents, *((spec.coordinator,) if spec.coordinator else ()))
    refs = [r for a in agents for r in mcp_refs(a.tools) if r.model_name not in tools]
    if not refs:
        return tools
    for server in {r.server for r in refs}:
        server_spec = spec.mcp_servers.get(server)
        secrets = (*server_spec.env.values(), *server_spec.headers.values()) if server_spec else ()
        masked_url = bool(server_spec and server_spec.url and server_spec.url.endswith("?" + MASK))
        if MASK in secrets or masked_url:
            raise ConfigError(
                f"the MCP server {server!r} has a secret that was not recorded; give its tools "
                "(resume with --team)",
                field=f"mcp_servers.{server}",
            )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        from clearance._agents.mcp import load_mcp_tools_sync

        tools.update(load_mcp_tools_sync(spec.mcp_servers, refs))
        return tools
    raise ConfigError(
        "MCP tools are looked up before the event loop runs: make the orchestrator outside "
        "it, or await clearance.run_spec(spec), which looks them up for you",
        field="mcp_servers",
    )


_ENTRY_OPTIONS = ("idempotent", "replay", "timeout_s")
"""A long-form ``tools:`` entry's options that change how its tool is called."""


def with_entry_options(
    tool: Tool | Callable[..., Any], entry: ToolEntrySpec
) -> Tool | Callable[..., Any]:
    """``tool`` with the options its long-form ``tools:`` entry sets.

    Only the options the entry sets (``idempotent``, ``replay``, ``timeout_s``) change; the
    others stay as the tool has them (a `Tool`'s fields, a function's `mark_tool` marks). A
    function is wrapped (`marked_tool`), never changed itself.
    """
    options = {k: getattr(entry, k) for k in _ENTRY_OPTIONS if k in entry.model_fields_set}
    if not options:
        return tool
    if isinstance(tool, Tool):
        return dataclasses.replace(tool, **options)
    return marked_tool(tool, **{**tool_marks(tool), **options})


def derived_spec(
    team: Team,
    *,
    model_id: str,
    options: RunOptions,
    tool_paths: Mapping[str, str | None],
    store: ContextStore | None,
    memory: RunMemory | None,
) -> RunSpec:
    """The spec of an orchestrator made in code: what its runs record.

    Raises:
        ConfigError: A setting cannot be written as a spec (a value out of a spec's range).
    """
    from clearance._orchestration.run import DEFAULT_WORKSPACE_ROOT
    from clearance._orchestration.run_memory import absolute_url

    tools: dict[str, str | ToolEntrySpec] = {}
    for name in sorted({*tool_paths, *options.approval_tools}):
        path = tool_paths.get(name)
        required = name in options.approval_tools
        tools[name] = (
            path
            if path is not None and not required
            else ToolEntrySpec(function=path, approval="required" if required else "none")
        )
    project = options.project_root if options.project_root != options.input_root else None
    workspace = str(options.workspace_root)
    budget = options.budget
    costed = budget is not None and budget.cost_usd is not None  # prices count only a cost
    return RunSpec(
        name=team.name,
        model=model_id,
        model_options=ModelOptionsSpec(by_model=checked_model_options(options.model_options)),
        max_concurrency=options.max_concurrency,
        store=absolute_url(store.url) if store else None,
        input=_input_spec(options),
        project=str(project) if project else None,
        workspace=workspace if workspace != DEFAULT_WORKSPACE_ROOT else None,
        isolation=IsolationSpec(
            max_rounds=options.clarification_rounds,
            file_caps=FileCapsSpec(**dataclasses.asdict(options.file_caps)),
        ),
        agents=[AgentSpec.from_agent(a) for a in team.agents],
        coordinator=AgentSpec.from_agent(team.coordinator) if team.coordinator else None,
        memory_groups=[MemoryGroupSpec.from_group(g) for g in team.memory_groups],
        memory=MemorySpec(url=absolute_url(memory.url), on_error=memory.on_error)
        if memory
        else None,
        tools=tools,
        synthesis_from=list(options.synthesis_from) if options.synthesis_from else None,
        budget=BudgetSpec(tokens=budget.tokens, cost_usd=budget.cost_usd) if budget else None,
        prices={m: PriceSpec(**dataclasses.asdict(p)) for m, p in budget.prices.items()}
        if budget is not None and costed
        else {},
    )


def orchestrator_arguments(
    spec: RunSpec,
    synthesis_from: Iterable[str] | None,
    *,
    store: ContextStore | None,
    memory: RunMemory | None,
    tools: Mapping[str, Tool | Callable[..., Any]] | None,
    services: RunServices | None,
    stream_text: bool = False,
    retry_policy: Any = None,
) -> dict[str, Any]:
    """The `Orchestrator` arguments a spec declares (but its team and model).

    Tools are imported first, then the store and memory opened (the caller closes them):
    ``store``, ``memory`` and ``tools`` given win; without a message bus in ``services``,
    one is made holding the spec's ``messages:``.

    Raises:
        ConfigError: As `spec_options`, `spec_tools` and `spec_resources`.
        StoreError: The store cannot be opened.
    """
    from clearance._orchestration.resume import spec_resources
    from clearance._orchestration.run import RunServices

    options = spec_options(
        spec, synthesis_from=synthesis_from, stream_text=stream_text, retry_policy=retry_policy
    )
    user_tools = spec_tools(spec, tools)
    services = services if services is not None else RunServices()
    if services.messages is None:
        bus = MessageBus(clock=services.clock)
        for message in spec.messages:
            bus.send(message.sender, message.to, message.content)
        services = dataclasses.replace(services, messages=bus)
    store, memory = spec_resources(spec, store=store, memory=memory)
    return {
        "store": store,
        "memory": memory,
        "tools": user_tools,
        "options": options,
        "services": services,
    }


def _input_spec(options: RunOptions) -> InputSpec:
    """The ``input:`` of `derived_spec`: the folder, and ``include`` unless it is every file."""
    given: dict[str, Any] = {}
    if options.input_root:
        given["default"] = str(options.input_root)
    if options.input_include != ("*",):
        given["include"] = list(options.input_include)
    return InputSpec(**given)
