"""Isolated tasks, as the orchestrator runs them.

**Isolated tasks** (``mode: isolated``) follow the "fresh subagent per task" controller
pattern (obra/superpowers' subagent-driven development): each dispatch is a fresh prompt
built by `ContextBuilder.build_isolated_task_prompt` from the task's full text, the run's
architectural context, the contents of its files, its constraints, its admitted results and
the memory records recalled for it. The subagent ends with a ``STATUS:`` line.
``needs_context`` with ``FILE: <path>`` asks for a project file, served here within
confinement and the run's file caps; any other question is answered by the coordinator (a
recorded call whose prompt holds the question and what the task is cleared for) or, in an
interactive run, by the person at the terminal. A question over `MAX_QUESTION_CHARS` is
never sent on: the subagent is told to ask a shorter one. The subagent is then dispatched
again, fresh, with the answer as a ``clarification:<n>`` item. After ``max_rounds`` rounds the
task fails with `SubagentError`. On resume, a question the person already answered gets the
recorded answer again (`reusable_person_answer`): the person is not asked twice.

Recorded as events: ``architecture``, ``files`` and ``clarification`` (each round).
Spawned children are in `children.py`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from pathspec import GitIgnoreSpec

from clearance._agents.caller import ModelCaller
from clearance._agents.files import FileCaps, load_text_file
from clearance._agents.isolation import dispatch_fresh
from clearance._context.answers import kept_answer
from clearance._context.architecture import ArchitecturalContext
from clearance._context.builder import ContextBuilder
from clearance._context.isolated import (
    NO_ANSWER,
    file_request,
    question_too_long,
    recorded_question,
)
from clearance._context.project_ignore import (
    STATE_REFUSAL,
    WORKSPACE_REFUSAL,
    gitignore_spec,
    left_out,
)
from clearance._context.project_scan import read_text
from clearance._context.verify_clarifications import reusable_person_answer
from clearance._core.confined import FencedFolderError, folder_identities
from clearance._core.errors import ClearanceError, ModelError, SubagentError
from clearance._core.for_each_file import included
from clearance._core.prompt import sha256_text
from clearance._core.spec import Agent
from clearance._core.vocabulary import ClarificationKind, EventKind
from clearance._core.workspace_reach import state_prefixes
from clearance._orchestration.approval import ANSWER_TIMEOUT_S, check_answer_timeout
from clearance._orchestration.run_memory import with_memories_that_fit
from clearance._orchestration.task_context import TaskContext
from clearance._state.ledger import Recorder, RunLedger
from clearance.models._base import ChatModel

__all__ = ["AskPerson", "IsolatedRunner", "TaskContext"]

AskPerson = Callable[[str, str], Awaitable[str]]
"""Asks the person at the terminal: ``(task id, question)`` to the answer."""


class IsolatedRunner:
    """Runs the isolated tasks of one run (see the module docstring).

    Args:
        run_id: The run.
        ledger: Where clarification rounds are recorded.
        caller: The run's `ModelCaller`.
        architecture: The run's architectural context (computed once), or ``None``.
        project_root: The folder file requests are served from, or ``None`` for none.
        file_caps: Size caps on one task's files, requested ones included.
        max_rounds: Most clarification rounds before the task fails.
        coordinator: The agent that answers questions.
        coordinator_model: Its model.
        coordinator_builder: The run's builder for that model.
        coordinator_budget: Its prompt token budget.
        ask_person: Asks the person at the terminal instead of the coordinator, or ``None``.
        answer_timeout_s: Most seconds ``ask_person`` may take on one question; past it the
            question gets no answer (``"(no answer was given)"``) and the subagent goes on.
        include: Globs a requested file must match (``input.include``, when the project
            folder is the input folder: `included`); ``None`` for any file of the project.
        workspace_root: The run's workspace root: when it lies in the project, no file under
            it is given (another agent's outputs, an earlier run's), however the request
            spells it (a link to it included); ``None`` for none.
    """

    def __init__(
        self,
        *,
        run_id: str,
        ledger: Recorder,
        caller: ModelCaller,
        architecture: ArchitecturalContext | None,
        project_root: Path | None,
        file_caps: FileCaps,
        max_rounds: int,
        coordinator: Agent,
        coordinator_model: ChatModel,
        coordinator_builder: ContextBuilder,
        coordinator_budget: int | None,
        ask_person: AskPerson | None = None,
        answer_timeout_s: float = ANSWER_TIMEOUT_S,
        include: Sequence[str] | None = None,
        workspace_root: Path | None = None,
    ) -> None:
        self.run_id = run_id
        self.answer_timeout_s = check_answer_timeout(answer_timeout_s)
        self.ledger = ledger
        self.caller = caller
        self.architecture = architecture
        self.project_root = project_root
        self.file_caps = file_caps
        self.max_rounds = max_rounds
        self.coordinator = coordinator
        self.coordinator_model = coordinator_model
        self.coordinator_builder = coordinator_builder
        self.coordinator_budget = coordinator_budget
        self.ask_person = ask_person
        self.include = tuple(include) if include is not None else None
        self._gitignore: GitIgnoreSpec | None = None  # the project's, read at the first request
        # Where the workspace root (and Clearance's state folder) lie in the project.
        self._state: tuple[str, ...] = ()
        # The same folders, each with why it is never given: a read refuses to enter one
        # by its identity, however a path or a link swapped in meanwhile leads there.
        self._fenced: list[tuple[Path, str]] = []
        if project_root is not None:
            self._fenced = [(project_root / ".clearance", STATE_REFUSAL)]
            if workspace_root is not None:
                self._fenced.append((workspace_root, WORKSPACE_REFUSAL))
            self._state = state_prefixes(project_root, [folder for folder, _ in self._fenced])

    def listed_files(self, paths: Sequence[str]) -> dict[str, str]:
        """The task's own ``files:``, read from the project within `file_caps`, in order.

        The same caps and policy as a requested file (`_serve_file`), which then counts
        against what these leave of ``max_total_bytes``.

        Raises:
            PathEscapeError: A path leads outside the project.
            ConfigError: A file is missing, not a regular file, or not UTF-8 text.
            LimitExceeded: Under ``on_oversize: error``, a file over ``max_file_bytes`` or
                the files over ``max_total_bytes``.
        """
        files: dict[str, str] = {}
        for path in paths:
            assert self.project_root is not None  # checked before the run started
            used = sum(len(text.encode("utf-8")) for text in files.values())
            files[path] = load_text_file(self.project_root, path, caps=self.file_caps,
                                         budget=self.file_caps.max_total_bytes - used)  # fmt: skip
        return files

    async def run(self, ctx: TaskContext, files: Mapping[str, str]) -> str:
        """Dispatch fresh subagents until one answers ``done`` (or the rounds run out).

        Returns:
            The answer without its status line (``done_with_concerns``: the text before it,
            then the concerns after a ``Concerns:`` line); see `subagent_result`.

        Raises:
            SubagentError: The subagent is blocked, or still needs context after
                ``max_rounds`` rounds.
            LimitExceeded: A limit of a call, a prompt over budget, or the task's calls.
            ModelError: The model failed.
        """
        task = ctx.task
        files = dict(files)
        self.ledger.record_event(self.run_id, EventKind.FILES, f"task:{task.id}", {
            "files": {path: sha256_text(text) for path, text in files.items()},
        })  # fmt: skip
        clarifications: list[str] = []
        for round_no in range(self.max_rounds + 1):
            prompt = with_memories_that_fit(lambda memories: ctx.builder.build_isolated_task_prompt(
                task, agent=ctx.agent, queue=ctx.queue, architecture=self.architecture,
                files=files, clarifications=clarifications, child_results=ctx.child_results,
                child_labels=ctx.child_labels,
                max_prompt_tokens=ctx.max_prompt_tokens,
                max_dependency_tokens=ctx.agent.limits.max_dependency_tokens,
                memories=memories,
            ), ctx.memories)  # fmt: skip
            ctx.prompt_tokens = prompt.manifest.total_tokens
            dispatched = await dispatch_fresh(self.caller, task_id=task.id, agent=ctx.agent,
                                              model=ctx.model, prompt=prompt,
                                              budget=ctx.budget)  # fmt: skip
            status, result = dispatched.status, dispatched.result
            question, concerns = dispatched.question, dispatched.concerns
            if status == "done" or status == "done_with_concerns":
                if not result.strip():
                    raise ModelError("the subagent's answer is empty", model_id=ctx.model.model_id)
                return dispatched.answer
            if status == "blocked":
                raise SubagentError(task.id, "blocked", concerns or result or "no reason given")
            asked = question or "(no question given)"
            if round_no == self.max_rounds:
                raise SubagentError(task.id, "needs_context",
                                    f"{asked} (after {self.max_rounds} rounds)")  # fmt: skip
            answer = await self._answer(ctx, asked, files, round_no + 1, clarifications)
            if answer is not None:
                clarifications.append(answer)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _answer(
        self,
        ctx: TaskContext,
        question: str,
        files: dict[str, str],
        round_no: int,
        given: Sequence[str],
    ) -> str | None:
        """Serve a file request (``None``: the file joins ``files``) or answer a question.

        ``given`` holds the answers of the earlier rounds. In a resumed run, a question the
        person already answered (`reusable_person_answer`) gets that answer again.
        """
        task = ctx.task
        subject = f"task:{task.id}"
        refusal = question_too_long(question)
        if refusal is not None:  # never sent on: to the coordinator, a person or the reader
            self.ledger.record_event(self.run_id, EventKind.CLARIFICATION, subject, {
                "round": round_no, "kind": ClarificationKind.QUESTION,
                "question": recorded_question(question), "answer": refusal,
                "answered_by": "clearance",
            })  # fmt: skip
            return refusal
        path = file_request(question)
        if path is not None:
            reason = self._serve_file(path, files)
            answer = None if reason is None else f"The file {path!r} cannot be given: {reason}"
            self.ledger.record_event(self.run_id, EventKind.CLARIFICATION, subject, {
                "round": round_no, "kind": ClarificationKind.FILE, "path": path,
                "served": reason is None,
                "sha256": sha256_text(files[path]) if reason is None else None,
                "answer": answer,
            })  # fmt: skip
            return answer
        recorded = self._recorded_answer(task.id, round_no, question, given)
        if recorded is not None:  # durable resume: the person is not asked twice
            answer, by = recorded, "person"
        elif self.ask_person is not None:
            answer, by = await self._ask_person(self.ask_person, task.id, question), "person"
        else:
            prompt = self.coordinator_builder.build_clarification_prompt(
                task, question, coordinator=self.coordinator, queue=ctx.queue,
                max_prompt_tokens=self.coordinator_budget,
                max_dependency_tokens=self.coordinator.limits.max_dependency_tokens,
            )  # fmt: skip
            asking = f"clarification:{task.id}"
            response = await self.caller.call(
                subject=asking, agent=self.coordinator,
                model=self.coordinator_model, prompt=prompt, budget=ctx.budget,
            )  # fmt: skip
            # A cut-off answer is marked (and recorded), never passed on as whole; a finished
            # one reaches the subagent byte for byte (a code answer keeps its indentation).
            answer = kept_answer(self.ledger, self.run_id, asking, response.text,
                                 finish_reason=response.finish_reason)  # fmt: skip
            by = "coordinator"
        answer = answer if answer.strip() else NO_ANSWER
        self.ledger.record_event(self.run_id, EventKind.CLARIFICATION, subject, {
            "round": round_no, "kind": ClarificationKind.QUESTION, "question": question,
            "answer": answer, "answered_by": by,
        })  # fmt: skip
        return answer

    def _recorded_answer(
        self, task_id: str, round_no: int, question: str, given: Sequence[str]
    ) -> str | None:
        """In a resumed run, the person's recorded answer to this question, if reusable."""
        replay, ledger = self.caller.replay, self.ledger
        if replay is None or replay.run_id != self.run_id or not isinstance(ledger, RunLedger):
            return None
        return reusable_person_answer(
            ledger.events(self.run_id),
            ledger.calls(self.run_id, subject=f"isolated:{task_id}"),
            task_id=task_id, round_no=round_no, question=question, given=given,
        )  # fmt: skip

    async def _ask_person(self, ask: AskPerson, task_id: str, question: str) -> str:
        """The person's answer, stripped; ``""`` when none came within the deadline."""
        deadline = asyncio.timeout(self.answer_timeout_s)
        try:
            async with deadline:
                return (await ask(task_id, question)).strip()
        except TimeoutError:
            if not deadline.expired():  # the asker's own failure, not our deadline
                raise
            return ""

    def _ignored(self) -> GitIgnoreSpec:
        """The project's root ``.gitignore`` (`gitignore_spec`), read once per run."""
        if self._gitignore is None:
            assert self.project_root is not None
            self._gitignore = gitignore_spec(read_text(self.project_root, ".gitignore") or "")
        return self._gitignore

    def _serve_file(self, path: str, files: dict[str, str]) -> str | None:
        """Load ``path`` into ``files`` within confinement and caps; why not, or ``None``."""
        if self.project_root is None:
            return "the run has no project folder"
        if path in files:
            return "it is already above"
        if self.include is not None and not included(path, self.include):
            return f"it matches none of the run's input.include ({', '.join(self.include)})"
        # What the project's listing leaves out is not given either (unless input.include
        # names it: the user's choice); version-control metadata never is.
        hidden = left_out(path, None if self.include is not None else self._ignored(), self._state)
        if hidden is not None or (hidden := self._linked_to_state(path)) is not None:
            return hidden
        used = sum(len(c.encode("utf-8")) for c in files.values())
        try:
            text = load_text_file(self.project_root, path, caps=self.file_caps,
                                  budget=self.file_caps.max_total_bytes - used,
                                  fenced=folder_identities(self._fenced))  # fmt: skip
        except FencedFolderError as exc:
            return exc.reason
        except ClearanceError as exc:
            # The model needs the path inside the project, never where it is on this host.
            root = str(self.project_root)
            return str(exc).replace(repr(root), "the project folder").replace(root, "<project>")
        files[path] = text
        return None

    def _linked_to_state(self, path: str) -> str | None:
        """Why ``path`` is not given when a link in the project leads it into the run's state."""
        assert self.project_root is not None
        try:
            real = Path(os.path.realpath(self.project_root / path))
        except (OSError, ValueError):
            return None  # the confined read refuses it in its own words
        for rel in state_prefixes(self.project_root, [real]):
            hidden = left_out(rel, None, self._state)
            if rel != "." and hidden is not None:
                return hidden
        return None
