"""`RunMemory`: agents' long-term memory in orchestrated runs.

An agent with ``memory`` settings (`AgentMemory`) recalls, before each of its tasks, the
records of its memory most relevant to the task's title and description, and records, after
the task completes, its result (or its task and result). Records live in a `PersistentMemory`
database that outlives the run, so a second run of the same team recalls what the first
recorded.

- Private by default: an agent records into ``agent:<name>`` and recalls from its own scope
  and the groups it is a member of (``group:<name>``), nothing else. It records into a group
  only when its ``memory.record_to`` names one it belongs to.
- Recalled records reach the prompt only through the `ContextBuilder`, as ``memory:<id>``
  items the task's clearance admits (the orchestrator passes them to `build_task_prompt`);
  those that would put the prompt over its budget are left out, least relevant first
  (`with_memories_that_fit`).
- Every recall and record is noted in the ledger with the task's tool calls (step 0, names
  ``memory_recall`` and ``memory_record``), with the ids involved or the failure.
- A result over `MAX_RECORD_CHARS` characters is recorded cut, with a visible mark and its
  full size (`cut_to_cap`), and the note says so (`cut_note`): the task's result itself,
  for its dependents and the ledger, is never cut, and the task never fails for its size.
- Failures of the memory database follow ``on_error``: ``"fail"`` (default) fails the task
  with a `StoreError` naming the agent and the database (password masked); ``"continue"``
  runs the task without memory and notes the failure in the ledger. The run itself never
  crashes on a memory failure.
- Every operation has a deadline (``timeout_s``).
- Fake-model output stays apart: an agent whose model is the fake model (``fake:<name>``)
  records and recalls only the fake model's records; an agent on any other model never
  recalls them (see `PersistentMemory`'s ``provider``). The partition is chosen here, from the
  model each agent calls, for every path that reaches memory (task, isolated task, chat), and
  the ledger's notes name it (``"partition": "fake"`` or ``"real"``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from clearance._core.errors import ClearanceError, ConfigError, LimitExceeded, StoreError
from clearance._core.ids import new_id
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._state.db import BUSY_TIMEOUT_MS, failure_cause, mask_url
from clearance._state.db.engine import open_engine
from clearance._state.ledger import Recorder
from clearance._state.memory import MemoryRecord, PersistentMemory, partition_of
from clearance._state.memory_calls import (
    DEFAULT_MEMORY_TIMEOUT_S,
    check_memory_timeout,
    memory_call,
)
from clearance._state.memory_records import MAX_RECORD_CHARS, kept_chars

__all__ = [
    "MemoryOnError",
    "RunMemory",
    "absolute_url",
    "cut_note",
    "default_memory_url",
    "masked_url",
    "with_memories_that_fit",
]

MemoryOnError = Literal["fail", "continue"]
"""What a task does when the memory database fails: fail, or continue without memory."""


def masked_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (as the ledger records it)."""
    return mask_url(url)


def absolute_url(url: str, *, field: str = "memory") -> str:
    """``url`` with a relative SQLite path made absolute (other URLs unchanged).

    Raises:
        ConfigError: ``url`` is not a database URL (``field`` names the setting).
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"not a database URL: {masked_url(url)!r}", field=field) from exc
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database:
        return url
    if database == ":memory:" or database.startswith("file:") or Path(database).is_absolute():
        return url
    return parsed.set(database=_resolved(database)).render_as_string(hide_password=False)


def default_memory_url(ledger_url: str) -> str:
    """Where a run's memory lives by default.

    ``memory.db`` next to an SQLite ledger file, or the ledger's own database for any other
    ledger (PostgreSQL).
    """
    try:
        parsed = make_url(ledger_url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"not a database URL: {masked_url(ledger_url)!r}", field="db") from exc
    database = parsed.database
    if parsed.drivername.startswith("sqlite"):
        if not database or database == ":memory:" or database.startswith("file:"):
            return "sqlite:///" + _resolved(".clearance/memory.db")
        memory_file = Path(_resolved(database)).with_name("memory.db")
        return parsed.set(database=str(memory_file)).render_as_string(hide_password=False)
    return ledger_url


def _resolved(path: str) -> str:
    """``path`` made absolute, its symbolic links resolved as far as they go.

    ``os.path.realpath`` rather than ``Path.resolve``, which raises `RuntimeError` on a loop
    of links (before Python 3.13): the loop is left in the path, for opening it to name.
    """
    return os.path.realpath(path)


def with_memories_that_fit(
    build: Callable[[tuple[MemoryRecord, ...]], Prompt], memories: tuple[MemoryRecord, ...]
) -> Prompt:
    """Build a task's prompt with as many recalled records as its budget has room for.

    Recalled records are optional context: when the prompt with all of them is over its
    ``max_prompt_tokens``, the least relevant are left out (the records come most relevant
    first; the most relevant that fit are kept, found by a binary search), as a conversation
    leaves them out. The prompt's manifest lists the records it holds.

    Args:
        build: Builds the prompt with the given records; raises `LimitExceeded`
            (``max_prompt_tokens``) when it is over budget.
        memories: The recalled records, most relevant first.

    Raises:
        LimitExceeded: The prompt is over budget even with no record, or another limit.
    """
    try:
        return build(memories)
    except LimitExceeded as exc:
        if exc.limit != "max_prompt_tokens" or not memories:
            raise
    prompt = build(())  # over budget even without memory: that error is the task's
    fits, over = 0, len(memories)  # keeping `fits` records fits the budget, `over` does not
    while over - fits > 1:
        middle = (fits + over) // 2
        try:
            prompt = build(memories[:middle])
        except LimitExceeded as exc:
            if exc.limit != "max_prompt_tokens":
                raise
            over = middle
        else:
            fits = middle
    return prompt if fits == 0 else build(memories[:fits])


def cut_note(content: str) -> str:
    """What a ``memory_record`` note adds when ``content`` is recorded cut, else ``""``.

    A record holds at most `MAX_RECORD_CHARS` characters: a longer result is recorded cut
    (`PersistentMemory.record` with ``cut``), and the note says how much of it was kept.
    """
    total = len(content)
    if total <= MAX_RECORD_CHARS:
        return ""
    return (
        f" (cut to the first {kept_chars(total):,} of {total:,} characters: over the "
        f"{MAX_RECORD_CHARS:,} a record may hold)"
    )


class RunMemory:
    """The long-term memory a run's agents recall from and record to.

    Args:
        url: SQLAlchemy URL of the memory database (``sqlite:///memory.db``,
            ``postgresql+psycopg://user@host/db``); a relative SQLite path is made absolute,
            so the ledger records where the file is.
        on_error: ``"fail"`` (default) or ``"continue"``; see the module docstring.
        timeout_s: Deadline of each recall and record, in seconds.

    Raises:
        ConfigError: The URL is malformed, ``on_error`` is unknown or ``timeout_s`` is not
            a number of seconds above 0 and at most a day.
    """

    def __init__(
        self,
        url: str,
        *,
        on_error: MemoryOnError = "fail",
        timeout_s: float = DEFAULT_MEMORY_TIMEOUT_S,
    ):
        if on_error not in ("fail", "continue"):
            raise ConfigError(
                f"must be 'fail' or 'continue', got {on_error!r}", field="memory.on_error"
            )
        self.url = absolute_url(url)
        self.on_error: MemoryOnError = on_error
        self.timeout_s = check_memory_timeout(timeout_s, field="memory.timeout_s")
        self._engine: sa.Engine | None = None
        self._memories: dict[_MemoryKey, PersistentMemory] = {}
        self._lock = threading.Lock()
        self._recalled: dict[tuple[str, str], tuple[MemoryRecord, ...]] = {}

    @property
    def masked_url(self) -> str:
        """The URL with its password masked (as recorded in the ledger)."""
        return masked_url(self.url)

    def config(self) -> dict[str, Any]:
        """What the ledger records about the memory: ``{"url": masked, "on_error": ...}``."""
        return {"url": self.masked_url, "on_error": self.on_error}

    def close(self) -> None:
        """Release the database connections."""
        with self._lock:
            for memory in self._memories.values():
                memory.close()
            self._memories.clear()
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    # -- per agent --------------------------------------------------------------------------

    def memory_of(
        self, agent: str, groups: Mapping[str, Iterable[str]], *, model_id: str
    ) -> PersistentMemory:
        """The `PersistentMemory` of ``agent`` in this database (opened on first use).

        Args:
            agent: The agent's name (its private scope is ``agent:<name>``).
            groups: The team's memory groups with their members.
            model_id: The ``"provider:name"`` id of the model the agent calls: its provider
                is recorded with each record, and ``fake:`` models read only the fake
                model's records (others never read them).

        Raises:
            StoreError: The database cannot be opened (the message names it, password
                masked).
        """
        return self._memory(agent, groups, model_id)

    def _memory(
        self, agent: str, groups: Mapping[str, Iterable[str]], model_id: str
    ) -> PersistentMemory:
        """The agent's `PersistentMemory` (opened on first use; runs in a worker thread).

        One per agent, provider and the groups the agent is a member of, with their members
        (a group's records are read only when by its members): a memory opened for one team's
        groups is never handed to a team where the agent is in other groups, or in a group of
        that name with other members.
        """
        provider = _provider_of(model_id)
        member_of = frozenset(
            (name, frozenset(members))
            for name, members in ((n, set(m)) for n, m in groups.items())
            if agent in members
        )
        key = (agent, provider, member_of)
        with self._lock:
            held = self._memories.get(key)
            if held is not None:
                return held
            try:
                if self._engine is None:  # shared by the agents' memories
                    self._engine = open_engine(  # a write waits for a lock as a store's does
                        self.url, label="memory store", lock_timeout_ms=BUSY_TIMEOUT_MS
                    )
                memory = PersistentMemory(
                    self._engine, agent=agent, groups=groups, provider=provider
                )
            except (SQLAlchemyError, OSError) as exc:
                raise StoreError(
                    f"cannot open the memory store at {self.masked_url}: {failure_cause(exc)}"
                ) from exc
            self._memories[key] = memory
            return memory

    async def _in_thread(self, what: str, function: Any) -> Any:
        """Run a blocking database operation with the deadline (`memory_call`)."""
        return await memory_call(
            what, function, timeout_s=self.timeout_s, where=f"the memory store at {self.masked_url}"
        )

    # -- the hooks --------------------------------------------------------------------------

    def recalled(self, run_id: str, task_id: str) -> tuple[MemoryRecord, ...]:
        """The records recalled for a task of a run (empty when none)."""
        return self._recalled.get((run_id, task_id), ())

    async def recall(
        self,
        *,
        run_id: str,
        task: Task,
        agent: Agent,
        model_id: str,
        groups: Mapping[str, Iterable[str]],
        ledger: Recorder,
    ) -> tuple[MemoryRecord, ...]:
        """Recall the records most relevant to ``task`` from what ``agent`` may read.

        ``model_id`` is the model the agent calls for the task: a ``fake:`` model recalls
        only the fake model's records, any other model none of them.

        Returns:
            The records, most relevant first (kept for `recalled`); empty when the agent has
            no memory settings or recalls none, or when the store failed and ``on_error`` is
            ``"continue"``.

        Raises:
            StoreError: The memory store failed and ``on_error`` is ``"fail"``.
        """
        settings = agent.memory
        if settings is None or settings.recall == 0:
            return ()
        query = f"{task.title}\n{task.description}"

        def retrieve() -> list[MemoryRecord]:
            memory = self._memory(agent.name, groups, model_id)
            return memory.retrieve(query, limit=settings.recall)

        try:
            found = tuple(await self._in_thread(f"recall for task {task.id!r}", retrieve))
        except ClearanceError as exc:
            note = _Note(run_id, task, agent.name, "memory_recall", model_id)
            self._note(ledger, note, str(exc), error=True)
            if self.on_error == "fail":
                raise
            return ()
        self._recalled[(run_id, task.id)] = found
        ids = ", ".join(r.id for r in found) or "none"
        note = _Note(run_id, task, agent.name, "memory_recall", model_id)
        self._note(ledger, note, f"recalled: {ids}")
        return found

    async def record(
        self,
        *,
        run_id: str,
        task: Task,
        agent: Agent,
        model_id: str,
        groups: Mapping[str, Iterable[str]],
        result: str,
        ledger: Recorder,
    ) -> None:
        """Record a completed task's result (or task and result) per ``agent.memory``.

        Each record carries the provider of ``model_id``, the model that wrote the result.

        Raises:
            StoreError: The memory store failed and ``on_error`` is ``"fail"``.
        """
        self._recalled.pop((run_id, task.id), None)
        settings = agent.memory
        if settings is None or settings.record == "none":
            return
        content = result
        if settings.record == "task_and_result":
            content = f"Task: {task.title}\n{task.description}\n\nResult: {result}"

        def store() -> list[MemoryRecord]:  # a result over the cap is recorded cut
            memory = self._memory(agent.name, groups, model_id)
            return memory.record(content, group=settings.record_to, cut=True)

        note = _Note(run_id, task, agent.name, "memory_record", model_id)
        try:
            stored = await self._in_thread(f"record for task {task.id!r}", store)
        except ClearanceError as exc:
            self._note(ledger, note, str(exc), error=True)
            if self.on_error == "fail":
                raise
            return
        where = f"group:{settings.record_to}" if settings.record_to else f"agent:{agent.name}"
        ids = ", ".join(r.id for r in stored)
        self._note(ledger, note, f"recorded {ids} in {where}{cut_note(content)}")

    def _note(self, ledger: Recorder, note: _Note, text: str, *, error: bool = False) -> None:
        """Note a memory operation in the ledger, with the task's tool calls (step 0).

        Its arguments name the memory (password masked) and the partition read or written
        (``"fake"`` or ``"real"``).
        """
        if error and self.on_error == "continue":
            text = f"continued without memory: {text}"
        ledger.record_tool_call(
            run_id=note.run_id,
            tool_call_id=new_id("memop"),
            subject=f"task:{note.task.id}",
            agent=note.agent,
            step=0,
            name=note.name,
            arguments={
                "memory": self.masked_url,
                "partition": partition_of(_provider_of(note.model_id)),
            },
            result=text,
            is_error=error,
        )


_MemoryKey = tuple[str, str, frozenset[tuple[str, frozenset[str]]]]
"""An opened memory's agent, model provider and the groups the agent is a member of (each
with its members)."""


@dataclass(frozen=True, slots=True)
class _Note:
    """What a ledger note of a memory operation is about."""

    run_id: str
    task: Task
    agent: str
    name: str
    model_id: str


def _provider_of(model_id: str) -> str:
    """The provider of a ``"provider:name"`` model id (the whole id when it has no colon)."""
    return model_id.partition(":")[0]
