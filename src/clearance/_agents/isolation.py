"""`ContextIsolationManager`: dispatch fresh subagents with exactly one task's context.

The controller pattern: for each task the manager assembles an `IsolatedContext` (the task's
full text, the project's architectural context, the contents of the files it needs,
constraints), dispatches a fresh subagent on it through the `ContextBuilder`, and reads the
status the subagent ends with. ``needs_context`` carries the subagent's question; the
controller answers with `add_clarification` or `add_file_content` and dispatches again (the
context is cached until the task is done). Follows the "fresh subagent per task" controller
pattern of obra/superpowers' subagent-driven development (statuses ``DONE``,
``DONE_WITH_CONCERNS``, ``NEEDS_CONTEXT``, ``BLOCKED``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._agents.files import FileCaps, load_text_file
from clearance._context.architecture import ArchitecturalContext
from clearance._context.builder import ContextBuilder
from clearance._context.isolated import (
    DispatchStatus,
    IsolatedContext,
    parse_status,
    subagent_result,
)
from clearance._core.clock import Clock, utc_now
from clearance._core.errors import ConfigError
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.spec import Agent
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import Recorder
from clearance.models._base import ChatModel, Usage

__all__ = [
    "ContextIsolationManager",
    "DispatchResult",
    "DispatchStatus",
    "dispatch_fresh",
    "parse_status",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class DispatchResult:
    """What a dispatched subagent returned.

    Attributes:
        task_id: The task.
        status: ``done``, ``done_with_concerns``, ``needs_context`` or ``blocked``.
        result: For ``done``, the answer without its status line; otherwise the text before
            that line (the whole answer when it has none).
        question: For ``needs_context``: what the subagent asks for, else ``None``.
        concerns: For ``done_with_concerns`` and ``blocked``: the text after the status
            line, or why the status was inferred; else ``None``.
        prompt: The prompt the subagent received (with its manifest).
        usage: Tokens of the call.
        answer: For ``done`` and ``done_with_concerns``: the task's result (the answer
            without its status line, concerns appended); else ``""``.
    """

    task_id: str
    status: DispatchStatus
    result: str
    question: str | None
    concerns: str | None
    prompt: Prompt
    usage: Usage
    answer: str = ""


async def dispatch_fresh(
    caller: ModelCaller,
    *,
    task_id: str,
    agent: Agent,
    model: ChatModel,
    prompt: Prompt,
    budget: CallBudget | None,
) -> DispatchResult:
    """Run one fresh subagent on ``prompt`` and read the status it ends with.

    The one dispatch of an isolated subagent: `ContextIsolationManager.dispatch` and a run's
    isolated tasks both go through it (subject ``isolated:<task id>``).

    Args:
        caller: Makes (and records) the call, with the agent's limits and sampling.
        task_id: The task.
        agent: The subagent's spec.
        model: Its model.
        prompt: Its fresh prompt (from `ContextBuilder`).
        budget: The task's model-call budget, charged one call.

    Returns:
        The status and its parts; ``answer`` is the task's result for ``done`` and
        ``done_with_concerns`` (`subagent_result`), else ``""``.

    Raises:
        LimitExceeded: A limit of the call (see `ModelCaller.call`).
        ModelError: The model failed.
    """
    response = await caller.call(
        subject=f"isolated:{task_id}", agent=agent, model=model, prompt=prompt, budget=budget
    )
    status, result, question, concerns = parse_status(response.text)
    return DispatchResult(
        task_id=task_id, status=status, result=result, question=question, concerns=concerns,
        prompt=prompt, usage=response.usage, answer=subagent_result(response.text) or "",
    )  # fmt: skip


class ContextIsolationManager:
    """Builds isolated contexts for tasks and dispatches fresh subagents on them.

    The architectural context is computed once (on first use, from ``project_root``) and
    shared by every context this manager creates.

    Args:
        project_root: The project directory; every file path is confined to it.
        model: The model subagents run on (`dispatch` may override it).
        architecture: A precomputed architectural context; ``None`` computes it with
            `ArchitecturalContext.from_project` on first use.
        file_caps: Per-file and total size caps, and whether to error or truncate.
        ledger: Where to record every dispatch call (subject ``isolated:<task id>``), with
            ``run_id``; ``None`` records nothing. Ignored when ``caller`` is given.
        run_id: The run the calls belong to (already started in ``ledger``).
        clock: Time source for the ledger's timestamps.
        caller: The `ModelCaller` every dispatch goes through; ``None`` makes one from
            ``ledger`` and ``run_id``.

    Raises:
        ConfigError: ``project_root`` is not a directory.
    """

    def __init__(
        self,
        project_root: str | Path,
        *,
        model: ChatModel | None = None,
        architecture: ArchitecturalContext | None = None,
        file_caps: FileCaps | None = None,
        ledger: Recorder | None = None,
        run_id: str | None = None,
        clock: Clock = utc_now,
        caller: ModelCaller | None = None,
    ) -> None:
        self.project_root = Path(project_root).resolve()
        if not self.project_root.is_dir():
            raise ConfigError(f"{str(project_root)!r} is not a directory", field="project_root")
        self.model = model
        self.file_caps = file_caps or FileCaps()
        self._architecture = architecture
        self._contexts: dict[str, IsolatedContext] = {}
        if caller is None:
            recorder = ledger if run_id is not None else None
            caller = ModelCaller(ledger=recorder, run_id=run_id, clock=clock)
        self.caller = caller

    @property
    def architecture(self) -> ArchitecturalContext:
        """The project's architectural context, computed once and reused."""
        if self._architecture is None:
            self._architecture = ArchitecturalContext.from_project(self.project_root)
        return self._architecture

    @property
    def active_task_ids(self) -> tuple[str, ...]:
        """Tasks whose contexts are cached (created and not yet completed)."""
        return tuple(self._contexts)

    def create_isolated_context(
        self,
        task_id: str,
        task_description: str,
        required_files: Sequence[str] | None = None,
        constraints: Sequence[str] | None = None,
    ) -> IsolatedContext:
        """Assemble and cache the context of one task.

        Args:
            task_id: The task's id.
            task_description: Its full text.
            required_files: Paths relative to the project root whose contents it needs.
            constraints: Rules the result must follow.

        Raises:
            PathEscapeError: A path is absolute, has a ``..`` component or escapes through a
                symlink.
            ConfigError: A file does not exist or is binary.
            LimitExceeded: A file is over a size cap and ``on_oversize`` is ``"error"``.
        """
        context = IsolatedContext(
            task_id=task_id,
            task_description=task_description,
            architectural_context=self.architecture,
            file_contents=self._load(required_files or (), used=0),
            constraints=tuple(constraints or ()),
        )
        self._contexts[task_id] = context
        return context

    def get_context(self, task_id: str) -> IsolatedContext:
        """The cached context of ``task_id``.

        Raises:
            ConfigError: No context is cached for it (never created, or completed).
        """
        try:
            return self._contexts[task_id]
        except KeyError:
            raise ConfigError(f"no active isolated context for task {task_id!r}",
                              field="task_id") from None  # fmt: skip

    def add_clarification(self, task_id: str, text: str) -> IsolatedContext:
        """Append a clarification to the cached context and return the new context.

        Raises:
            ConfigError: No context is cached for ``task_id``.
        """
        context = self.get_context(task_id).with_clarification(text)
        self._contexts[task_id] = context
        return context

    def add_file_content(self, task_id: str, path: str) -> IsolatedContext:
        """Load one more file into the cached context, within the same caps.

        Raises:
            ConfigError: No context is cached for ``task_id``; the file is missing or binary.
            PathEscapeError: The path escapes the project root.
            LimitExceeded: Over a cap, under ``on_oversize="error"``.
        """
        context = self.get_context(task_id)
        used = sum(len(c.encode("utf-8")) for p, c in context.file_contents.items() if p != path)
        added = self._load((path,), used=used)
        context = context.with_file(path, added[path])
        self._contexts[task_id] = context
        return context

    def complete(self, task_id: str) -> None:
        """Drop the cached context of a finished task (no error if none is cached)."""
        self._contexts.pop(task_id, None)

    async def dispatch(
        self,
        context: IsolatedContext,
        agent: Agent,
        *,
        model: ChatModel | None = None,
        budget: CallBudget | None = None,
    ) -> DispatchResult:
        """Run a fresh subagent on ``context`` and read its status.

        The prompt is built by `ContextBuilder.build_isolated_prompt` from the context alone:
        no earlier attempt, no other task. A ``done`` or ``done_with_concerns`` answer drops
        the cached context (`complete`); ``needs_context`` and ``blocked`` keep it for a
        re-dispatch.

        Args:
            context: What the subagent may see.
            agent: Its spec: instructions and limits (applied by the `ModelCaller`).
            model: Overrides the manager's model.
            budget: The task's model-call budget, charged one call.

        Raises:
            ConfigError: No model was given here or to the manager.
            LimitExceeded: The prompt is over ``max_prompt_tokens``; or a limit of the call
                (see `ModelCaller.call`), recorded in the ledger with the error.
            ModelError: The model failed.
        """
        chosen = model or self.model
        if chosen is None:
            raise ConfigError("dispatch needs a model", field="model")
        builder = ContextBuilder(count_tokens=chosen.count_tokens)
        prompt = builder.build_isolated_prompt(
            context, agent=agent, max_prompt_tokens=agent.limits.max_prompt_tokens
        )
        recorder, run_id = self.caller.ledger, self.caller.run_id
        if isinstance(recorder, Recorder) and run_id is not None:
            # What the context was made of, so `clearance verify` checks each item's source.
            subject = f"isolated:{context.task_id}"
            recorder.record_event(run_id, EventKind.ISOLATED_CONTEXT, subject, {
                "agent": agent.name,
                "prompt_sha256": prompt.manifest.prompt_sha256,
                "items": {i.origin: sha256_text(i.content) for i in prompt.manifest.items},
            })  # fmt: skip
        result = await dispatch_fresh(self.caller, task_id=context.task_id, agent=agent,
                                      model=chosen, prompt=prompt, budget=budget)  # fmt: skip
        if result.status in ("done", "done_with_concerns"):
            self.complete(context.task_id)
        return result

    # -- internals ------------------------------------------------------------------------

    def _load(self, paths: Sequence[str], *, used: int) -> dict[str, str]:
        contents: dict[str, str] = {}
        for rel in paths:
            budget = self.file_caps.max_total_bytes - used
            text = load_text_file(self.project_root, rel, caps=self.file_caps, budget=budget)
            contents[rel] = text
            used += len(text.encode("utf-8"))
        return contents
