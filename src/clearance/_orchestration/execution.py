"""`RunExecution`: one session of a run, from its recorded graph to its synthesis and result."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Literal

from clearance._agents.telemetry_spans import note_run_outcome
from clearance._context.architecture import ArchitecturalContext
from clearance._core.errors import (
    ApprovalPending,
    BudgetExceeded,
    ClearanceError,
    LedgerError,
    LimitExceeded,
)
from clearance._core.hooks import RunInfo
from clearance._core.prompt import sha256_text
from clearance._core.reasons import failure_reason
from clearance._core.spec import Agent
from clearance._core.vocabulary import EventKind, PromptKind, RunEventKind
from clearance._orchestration.approval import ApprovalGate, awaiting_approval
from clearance._orchestration.children import ChildRunner
from clearance._orchestration.result import RunResult, TaskOutcome
from clearance._orchestration.run import Run, RunSettings, prompt_budget
from clearance._orchestration.runtime import AgentRuntime
from clearance._orchestration.scheduler import Scheduler
from clearance._orchestration.structured import parsed_output
from clearance._orchestration.subagents import IsolatedRunner
from clearance._orchestration.synthesis import Synthesis, synthesize
from clearance._orchestration.task_runner import TaskRunner
from clearance._state.ledger.recorder import record_breach
from clearance._state.ledger.task_view import reads_as
from clearance._state.queue import TaskState, TaskStatus

__all__ = ["RunExecution"]


class RunExecution:
    """Runs a run's tasks, each as soon as its dependencies complete, then the synthesis.

    Args:
        settings: What the orchestrator fixes for the run.
        run: The run's state (its queue holds the graph).
        coordinator: The agent that writes the synthesis and answers isolated tasks.
    """

    def __init__(self, settings: RunSettings, run: Run, *, coordinator: Agent) -> None:
        self.settings = settings
        self.run = run
        self.coordinator = coordinator
        self.tasks = TaskRunner(settings, run)

    async def execute(self, completed: Mapping[str, str] | None = None) -> RunResult:
        """Record the run's tasks, run them, synthesize, and record the outcome.

        Only tasks that do not read as the ledger holds them (`Run.recorded`) are recorded
        now: a new run's tasks are read from its recorded graph until they change.

        Args:
            completed: Results of tasks completed in an earlier session (``None`` for none);
                they are kept, not run again.

        Returns:
            The run's result. Task failures do not raise: they are in ``RunResult.tasks``.

        Raises:
            LedgerError: The ledger failed; the run is left ``interrupted`` (resumable).
        """
        run, ledger = self.run, self.settings.ledger
        settings, recorded = self.settings, self.run.recorded
        run.gate = ApprovalGate(
            ledger, run.run_id, tools=settings.approval_tools, approver=settings.approver,
            timeout_s=settings.answer_timeout_s,
        )  # fmt: skip
        run.runtime = AgentRuntime(
            run_id=run.run_id, team=settings.team, ledger=ledger, caller=run.caller,
            store=settings.store, user_tools=settings.tools, model_for=settings.model_for,
            prompt_budget=prompt_budget, gate=run.gate, workspace_root=settings.workspace_root,
        )  # fmt: skip
        if run.caller.replay is not None:  # a tool call that may have run asks a person
            run.caller.replay.confirm = run.gate.check_rerun
            run.caller.replay.approval_tools = run.gate.tools  # so does a rerun of one of these
        # Records are queued and committed in groups by the ledger's writer thread, in order:
        # the ledger always holds a prefix of the run's history (see `RunLedger.write_behind`).
        with ledger.write_behind():
            self._prepare_subagents()
            ledger.record_messages(run.run_id, self.settings.messages.all())
            changed = []
            for state in run.queue.states():
                if completed and state.task.id in completed:
                    # Kept from the run being resumed: its ledger record stays as it is.
                    run.shared.write(
                        task_id=state.task.id, agent=state.task.assignee, content=state.result or ""
                    )
                elif not reads_as(state, recorded.get(state.task.id) if recorded else None):
                    changed.append(state)  # reset by a resume, or routed out by a kept result
            # A task unstarted is read from the recorded graph: it gets a row when it changes.
            ledger.record_tasks(run.run_id, changed)
            try:
                return await self._execute_recorded()
            except BaseException as exc:
                # Ctrl-C, cancellation or a failing ledger: leave the run resumable.
                self._mark_interrupted(exc if isinstance(exc, ClearanceError) else None)
                raise

    def _mark_interrupted(self, cause: ClearanceError | None = None) -> None:
        """Record running tasks as ``interrupted`` and the run as ``interrupted``.

        ``cause`` (a failing ledger write, say) is named in the run's recorded error.
        """
        run, ledger = self.run, self.settings.ledger
        why = f"{cause}; " if cause is not None else "interrupted; "
        with contextlib.suppress(ClearanceError):
            for state in run.queue.with_status(TaskStatus.RUNNING):
                run.queue.interrupt(state.task.id)
                ledger.record_task(run.run_id, run.queue.get(state.task.id))
            ledger.record_messages(run.run_id, self.settings.messages.all())
            ledger.finish_run(
                run.run_id,
                status="interrupted",
                synthesis=None,
                usage=run.usage,
                error=f"{why}resume with: clearance resume {run.run_id}",
            )
        self.settings.emit(RunEventKind.RUN_FINISHED, run.run_id, detail="interrupted")

    async def _execute_recorded(self) -> RunResult:
        run = self.run
        run_id, ledger = run.run_id, self.settings.ledger
        await run.caller.hooks("before_run", RunInfo(run_id=run_id, goal=run.goal))
        try:
            await self._schedule()
        finally:
            if run.children is not None:
                await run.children.aclose()
        self._stop_if_over_budget()

        status: Literal["completed", "failed", "awaiting_approval"]
        synthesis: str | None
        error: str | None
        failure: str | None = None  # the root span's error.type (see `note_run_outcome`)
        if (waiting := awaiting_approval(run.queue, ledger, run_id)) is not None:
            synthesis, error, status = None, waiting, "awaiting_approval"  # approval hook
        else:
            synthesis, error = await self._synthesize()
            routed = run.queue.routed  # skipped by a condition: as the team file routed them
            all_completed = all(
                s.status is TaskStatus.COMPLETED or s.task.id in routed for s in run.queue.states()
            )
            status = "completed" if synthesis is not None and all_completed else "failed"
            if status == "failed":
                failure = "synthesis_failed" if all_completed else "tasks_failed"
            if error is None and not all_completed:
                bad = [s.task.id for s in run.queue.states()
                       if s.status != TaskStatus.COMPLETED and s.task.id not in routed]  # fmt: skip
                error = f"tasks not completed: {', '.join(bad)}"
        note_run_outcome(status, (s.status for s in run.queue.states()), error_type=failure)
        ledger.record_messages(run_id, self.settings.messages.all())
        recorded = "interrupted" if status == "awaiting_approval" else status
        ledger.finish_run(
            run_id, status=recorded, synthesis=synthesis, usage=run.usage, error=error
        )
        if run.caller.replay is not None:  # "replayed N model calls and M tool calls, sent K"
            self.settings.emit(
                RunEventKind.RUN_REPLAYED, run_id, detail=run.caller.replay.summary()
            )
        self.settings.emit(RunEventKind.RUN_FINISHED, run_id, detail=status)
        info = RunInfo(run_id=run_id, goal=run.goal)
        await run.caller.hooks("after_run", info, status=status, error=error)
        return RunResult(
            run_id=run_id,
            status=status,
            synthesis=synthesis,
            tasks={
                s.task.id: TaskOutcome(
                    task_id=s.task.id,
                    assignee=s.task.assignee,
                    status=s.status,
                    result=s.result,
                    error=s.error,
                    prompt_tokens=run.prompt_tokens.get(s.task.id, 0),
                    output=parsed_output(s.task, s.result),
                )
                for s in run.queue.states()
            },
            usage=run.usage,
            error=error,
        )

    async def _schedule(self) -> None:
        """Run the graph's tasks, each as soon as its dependencies are done."""
        await Scheduler(
            self.run.queue,
            max_concurrency=self.settings.max_concurrency,
            run_task=self.tasks.run_task,
            settle=self._settle,
            on_started=self._record_started,
        ).run()

    def _record_started(self, states: Sequence[TaskState]) -> None:
        """Record tasks that started together, in one ledger write, and announce them."""
        self.settings.ledger.record_tasks(self.run.run_id, states)
        for state in states:
            self.settings.emit(RunEventKind.TASK_STARTED, self.run.run_id, task_id=state.task.id)

    def _settle(self, task_id: str, finished: asyncio.Task[str]) -> None:
        """Record a finished task: its result, or its failure and the skipped dependents."""
        run, ledger, emit = self.run, self.settings.ledger, self.settings.emit
        queue = run.queue
        task = queue.get(task_id).task
        exc = finished.exception()
        if exc is None:
            result = finished.result()
            queue.complete(task_id, result)
            run.shared.write(task_id=task_id, agent=task.assignee, content=result)
            ledger.record_task(run.run_id, queue.get(task_id))
            emit(RunEventKind.TASK_COMPLETED, run.run_id, task_id=task_id)
            for routed_id in queue.routed_out:  # conditional routing (`Task.when`)
                ledger.record_task(run.run_id, queue.get(routed_id))
                emit(RunEventKind.TASK_SKIPPED, run.run_id, task_id=routed_id,
                     detail=queue.get(routed_id).error or "")  # fmt: skip
            return
        if isinstance(exc, LedgerError):
            # The ledger failed, not the task: stop the run, resumable, and say why; the
            # records committed so far stay as they are. (A memory or store backend failing
            # is the task's failure, per its policy.)
            raise exc
        meter = run.caller.meter
        if isinstance(exc, BudgetExceeded) or (meter is not None and meter.exceeded is not None):
            # The run's budget is used: the task waits for a resume with a larger one.
            queue.interrupt(task_id)
            ledger.record_task(run.run_id, queue.get(task_id))
            return
        if isinstance(exc, ApprovalPending):  # approval hook: the task waits (see `approval.py`)
            queue.interrupt(task_id)
            ledger.record_task(run.run_id, queue.get(task_id))
            for call_id in exc.call_ids:
                emit(RunEventKind.AWAITING_APPROVAL, run.run_id, task_id=task_id, detail=call_id)
            return
        if isinstance(exc, LimitExceeded):  # on record once, whichever path the limit stopped
            record_breach(ledger, run.run_id, exc.subject or f"task:{task_id}", exc)
        reason = failure_reason(exc)  # bounded: it reaches dependents' prompts and the ledger
        skipped = queue.fail(task_id, reason)
        run.shared.write(task_id=task_id, agent=task.assignee, content=reason, kind="failure")
        ledger.record_task(run.run_id, queue.get(task_id))
        emit(RunEventKind.TASK_FAILED, run.run_id, task_id=task_id, detail=reason)
        for skipped_id in skipped:
            ledger.record_task(run.run_id, queue.get(skipped_id))
            emit(RunEventKind.TASK_SKIPPED, run.run_id, task_id=skipped_id, detail=reason)

    def _stop_if_over_budget(self) -> None:
        """Stop the run, resumable, once its budget refused a call (every result is kept).

        Raises:
            BudgetExceeded: The first call the budget refused.
        """
        meter = self.run.caller.meter
        if meter is not None and meter.exceeded is not None:
            raise meter.exceeded

    async def _synthesize(self) -> tuple[str | None, str | None]:
        """Write the synthesis; return ``(text, None)`` or ``(None, error)``."""
        run, coordinator = self.run, self.coordinator
        self.settings.emit(RunEventKind.SYNTHESIS_STARTED, run.run_id)
        try:
            model = self.settings.model_for(coordinator)
            text = await synthesize(
                Synthesis(
                    goal=run.goal, coordinator=coordinator, model=model,
                    builder=run.builder(model), caller=run.caller, queue=run.queue,
                    shared_memory=run.shared, budget=prompt_budget(coordinator, model),
                    include=self.settings.synthesis_from,
                    mark=lambda subject, r: self.tasks.marked(subject, r.text, r.finish_reason),
                )
            )  # fmt: skip
        except BudgetExceeded:
            raise  # the run stops, resumable (see `_stop_if_over_budget`)
        except ClearanceError as exc:
            if isinstance(exc, LimitExceeded):  # on record, as a task's breach is
                record_breach(self.settings.ledger, run.run_id, str(PromptKind.SYNTHESIS), exc)
            return None, f"synthesis failed: {exc}"
        if not text.strip():
            return None, "synthesis failed: the coordinator returned an empty completion"
        return text, None

    def _prepare_subagents(self) -> None:
        """Make the run's isolated-task and child runners, when its graph needs them.

        The architectural context is computed once per run from ``project_root`` and
        recorded (event ``architecture``); each run that can spawn gets its own folder under
        ``workspace_root``, created exclusively.
        """
        run, settings = self.run, self.settings
        ledger = settings.ledger
        tasks = [s.task for s in run.queue.states() if s.status is not TaskStatus.COMPLETED]
        if any(t.mode == "isolated" for t in tasks):
            architecture = None
            if settings.project_root is not None:
                architecture = ArchitecturalContext.from_project(
                    settings.project_root, leave_out=(settings.workspace_root,)
                )
                text = architecture.to_text()
                ledger.record_event(run.run_id, EventKind.ARCHITECTURE, "run", {
                    "project": architecture.project, "text": text, "sha256": sha256_text(text),
                })  # fmt: skip
            coordinator = self.coordinator
            coordinator_model = settings.model_for(coordinator)
            run.isolated = IsolatedRunner(
                run_id=run.run_id, ledger=ledger, caller=run.caller,
                architecture=architecture, project_root=settings.project_root,
                file_caps=settings.file_caps, max_rounds=settings.clarification_rounds,
                coordinator=coordinator, coordinator_model=coordinator_model,
                coordinator_builder=run.builder(coordinator_model),
                coordinator_budget=prompt_budget(coordinator, coordinator_model),
                ask_person=settings.ask_person, answer_timeout_s=settings.answer_timeout_s,
                # The project is the input folder: a requested file is one a task reads from it.
                include=settings.input_include
                if settings.project_root == settings.input_root else None,
                workspace_root=settings.workspace_root,
            )  # fmt: skip
        # Any agent that may spawn: a task's assignee, or a delegate of one (its `spawn` tool
        # is served by the task's loop, whichever agent's turn it is).
        if any(a.can_spawn for a in settings.team.agents) or any(t.fan_out for t in tasks):
            assert run.runtime is not None  # made as the run starts
            run.children = ChildRunner(run.runtime, builder_for=run.builder)
