"""Human approval of tool calls and tasks.

A tool (``approval: required`` on its ``tools:`` entry, `Orchestrator` ``approval_tools``)
or a task (``approval: required``) runs only once a person approved it. Each point that
needs approval is an *approval request*, recorded in the ledger as an
``awaiting_approval`` event with its own id (``apr_...``, the "call id" a person approves);
a decision is an ``approval_decided`` event naming the request, the decision, who made it
and why. Both are ordinary events of the run's hash chain, so ``verify`` can check that
every executed call that required approval has an approval recorded before it.

A request is identified by what it would let happen: its task, its agent, the tool and the
digest of its arguments (for a task: the task alone; for a rerun, also the ``tool_started``
event it would run again, so each rerun of a call is asked about on its own; a rerun request
recorded before requests named their start is about the call's latest start before it; one
recorded naming no task, as a declined call's once was, is about the same call in any task). When
a paused run resumes, its interrupted tasks run again; when a model asks again for the same
call, the recorded decision applies; a different call is a new request. Without a person at hand (no
``approver``), an undecided request stops its task (`ApprovalPending`): the run finishes
``interrupted`` once nothing else can run, and continues with ``clearance resume`` after
``clearance approve`` / ``clearance deny``. With an ``approver`` (``--interactive``), the
person is asked on the spot and the run goes on.

A denied tool call is not run: the model gets the denial as the tool's (error) result, and
the loop goes on. A denied task fails, like any failed task (its dependents follow their
``after_failure``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import Any

from clearance._context.verify_approvals import request_problems
from clearance._core.errors import ApprovalDenied, ApprovalPending, ConfigError, MalformedRecord
from clearance._core.ids import new_id
from clearance._core.reasons import bounded_reason
from clearance._core.run_spec import ANSWER_TIMEOUT_S
from clearance._core.spec import Task
from clearance._core.vocabulary import ApprovalKind, EventKind
from clearance._orchestration.approval_request import (
    MAX_REASON_CHARS,
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    check_answer_timeout,
    check_decision,
    decision_data,
    decision_on,
    default_decider,
    denial_text,
    not_about,
)
from clearance._state.ledger import EventRecord, Recorder, RunLedger
from clearance._state.queue import TaskQueue, TaskStatus

__all__ = [
    "ANSWER_TIMEOUT_S",
    "MAX_REASON_CHARS",
    "ApprovalDecision",
    "ApprovalGate",
    "check_answer_timeout",
    "check_decision",
    "ApprovalRequest",
    "Approver",
    "awaiting_approval",
    "check_requests",
    "decide",
    "decision_data",
    "default_decider",
    "denial_text",
    "pending_approvals",
]


class ApprovalGate:
    """A run's approvals: finds recorded decisions, records requests, asks or pauses.

    Args:
        ledger: The run's ledger.
        run_id: The run.
        tools: Names of the tools whose calls require approval.
        approver: Asks a person on the spot; ``None`` pauses the task instead.
        timeout_s: Most seconds ``approver`` may take on one request; past it the request
            stays open and its task pauses, as without an approver.

    A decision another process records on a request (``clearance approve``/``deny``) before
    or while ``approver`` is asked about it is the one that counts: ``approver`` is not
    asked, or its later answer is not recorded, so a request has one decision only.
    """

    def __init__(
        self,
        ledger: Recorder,
        run_id: str,
        *,
        tools: Iterable[str] = (),
        approver: Approver | None = None,
        timeout_s: float = ANSWER_TIMEOUT_S,
    ) -> None:
        self.ledger = ledger
        self.timeout_s = check_answer_timeout(timeout_s)
        self.run_id = run_id
        self.tools = frozenset(tools)
        self.approver = approver
        self._requests: dict[tuple[Any, ...], ApprovalRequest] = {}
        self._decisions: dict[str, ApprovalDecision] = {}
        self._loaded = False

    def _load(self) -> None:
        """Read what earlier sessions of the run recorded (once, when first needed)."""
        if self._loaded:
            return
        self._loaded = True
        if not isinstance(self.ledger, RunLedger):  # keeps no record: nothing was decided
            return
        asked: dict[str, ApprovalRequest] = {}
        latest: dict[tuple[Any, Any], str] = {}  # (tool, arguments digest): its last start
        events = self.ledger.events(self.run_id)
        check_requests(events, self.run_id)  # what runs is what a person is shown
        for event in events:
            if event.kind == EventKind.TOOL_STARTED:
                latest[(event.data.get("name"), event.data.get("arguments_sha256"))] = (
                    event.event_id
                )
            elif event.kind == EventKind.AWAITING_APPROVAL:
                request = ApprovalRequest.from_event(event)
                self._requests.setdefault(request.key, request)
                asked.setdefault(request.call_id, request)
                if request.kind == ApprovalKind.RERUN and request.reruns is None:
                    # Recorded before rerun requests named their start: it is about the
                    # call's latest start before it, so its decision (a person's, maybe
                    # made already) covers that rerun, and no other.
                    start = latest.get((request.tool, request.key[4]))
                    if start is not None:
                        named = dataclasses.replace(request, reruns=start)
                        self._requests.setdefault(named.key, request)
            elif event.kind == EventKind.APPROVAL_DECIDED:
                call_id = str(event.data.get("call_id"))
                before = asked.get(call_id)  # a decision counts after its request only
                decision = None if before is None else decision_on(before, event)
                if decision is not None:  # one about another call decides nothing
                    self._decisions.setdefault(call_id, decision)

    async def check_task(self, task: Task) -> None:
        """Let ``task`` start if it needs no approval or was approved.

        Raises:
            ApprovalPending: Nobody decided yet (and there is no approver).
            ApprovalDenied: It was denied.
        """
        if task.approval != "required":
            return
        wanted = ApprovalRequest(
            call_id="",
            run_id=self.run_id,
            kind=ApprovalKind.TASK,
            task_id=task.id,
            agent=task.assignee,
        )
        ((request, decision),) = await self._decide_all([wanted])
        if not decision.approved:
            raise ApprovalDenied(task.id, request.call_id, by=decision.by, reason=decision.reason)

    async def check_tools(
        self, task_id: str, agent: str, calls: Iterable[tuple[str, dict[str, Any]]]
    ) -> list[str | None]:
        """Decide a model turn's tool calls before any of them runs.

        Args:
            task_id: The task the calls serve.
            agent: The calling agent.
            calls: ``(tool name, arguments)`` of each call of the turn, in order.

        Returns:
            For each call: ``None`` to run it (no approval needed, or approved), or the
            denial text to give the model instead.

        Raises:
            ApprovalPending: Some call is undecided (every undecided call of the turn is
                requested, so a person can decide them all at once).
        """
        calls = list(calls)
        wanted = [
            ApprovalRequest(
                call_id="",
                run_id=self.run_id,
                kind=ApprovalKind.TOOL,
                task_id=task_id,
                agent=agent,
                tool=name,
                arguments=arguments,
            )
            for name, arguments in calls
            if name in self.tools
        ]
        decided = iter(await self._decide_all(wanted))
        answers: list[str | None] = []
        for name, _ in calls:
            if name not in self.tools:
                answers.append(None)
                continue
            request, decision = next(decided)
            answers.append(None if decision.approved else denial_text(request, decision))
        return answers

    async def check_rerun(
        self, task_id: str, agent: str, tool: str, arguments: dict[str, Any], reruns: str | None
    ) -> str | None:
        """Decide whether a tool call the stopped run may have run runs again.

        ``reruns`` is the id of the call's ``tool_started`` event it would run again: a
        decision is about that start, so a rerun that stops inside the tool too is asked
        about again (``None``: a call recorded without one).

        Returns:
            ``None`` to run it again (approved), or the denial text the model gets.

        Raises:
            ApprovalPending: Nobody decided yet ("tool X may have run; approve to run it
                again or deny").
        """
        wanted = ApprovalRequest(
            call_id="", run_id=self.run_id, kind=ApprovalKind.RERUN, task_id=task_id, agent=agent,
            tool=tool, arguments=arguments, reruns=reruns,
        )  # fmt: skip
        ((request, decision),) = await self._decide_all([wanted])
        return None if decision.approved else denial_text(request, decision)

    async def _decide_all(
        self, wanted: list[ApprovalRequest]
    ) -> list[tuple[ApprovalRequest, ApprovalDecision]]:
        """The decision on each request (recording new requests); pause if any is open."""
        if not wanted:
            return []
        self._load()
        requests = []
        for item in wanted:
            request = self._requests.get(item.key)
            if request is None and item.kind == ApprovalKind.RERUN and item.task_id:
                # Recorded before a declined call's rerun request named its task ("").
                request = self._requests.get(dataclasses.replace(item, task_id="").key)
            if request is None:
                request = dataclasses.replace(item, call_id=new_id("apr"))
                self._requests[item.key] = request
                self.ledger.record_event(
                    self.run_id,
                    EventKind.AWAITING_APPROVAL,
                    f"task:{item.task_id}",
                    request.to_data(),
                )
            requests.append(request)
        for request in requests:
            if request.call_id in self._decisions or self.approver is None:
                continue
            # Someone may decide with `clearance approve`/`deny` while the person here is
            # asked: the decision recorded first counts (as it does for verify and resume).
            earlier = self._recorded_decision(request)
            if earlier is None:
                decision = await self._ask(self.approver, request)
                earlier = self._record_decision(request, decision)
            self._decisions[request.call_id] = earlier
        waiting = [r.call_id for r in requests if r.call_id not in self._decisions]
        if waiting:
            raise ApprovalPending(waiting)
        return [(r, self._decisions[r.call_id]) for r in requests]

    async def _ask(self, approver: Approver, request: ApprovalRequest) -> ApprovalDecision:
        """``approver``'s decision on ``request``, under the deadline.

        Raises:
            ApprovalPending: No decision came within ``timeout_s`` (the approver is
                cancelled), or the approver left the request open.
            ConfigError: The approver's answer is not a well-formed `ApprovalDecision`
                (`check_decision`); nothing is recorded.
        """
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                decision = await approver(request)
        except TimeoutError:
            if not deadline.expired():  # the approver's own failure, not our deadline
                raise
            raise ApprovalPending([request.call_id]) from None
        try:
            check_decision(decision)
        except ConfigError as exc:  # the user's approver: its answer decides nothing
            raise ConfigError(f"the approver's answer on {request.call_id} decides nothing: {exc}",
                              field="approver") from None  # fmt: skip
        return decision

    def _recorded_decision(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """The first decision on ``request`` another process recorded, or ``None``.

        Raises:
            MalformedRecord: The recorded decision bearing its id is about another call
                (`not_about`): no person's answer could be recorded in its place.
        """
        if not isinstance(self.ledger, RunLedger):  # keeps no record: nobody else decides
            return None
        for event in self.ledger.events(self.run_id, EventKind.APPROVAL_DECIDED):
            if event.data.get("call_id") == request.call_id:
                decision = decision_on(request, event)
                if decision is None:
                    raise not_about(request)
                return decision
        return None

    def _record_decision(
        self, request: ApprovalRequest, decision: ApprovalDecision
    ) -> ApprovalDecision:
        """Record ``decision`` unless one is recorded already; the decision that counts.

        On a `RunLedger` the check and the write are one transaction (`record_first_event`),
        so a decision another process records meanwhile is never recorded beside this one.
        """
        data = decision_data(request, decision)
        subject = f"task:{request.task_id}"
        if not isinstance(self.ledger, RunLedger):  # keeps no record: nobody else decides
            self.ledger.record_event(self.run_id, EventKind.APPROVAL_DECIDED, subject, data)
            return decision
        earlier = self.ledger.record_first_event(
            self.run_id, EventKind.APPROVAL_DECIDED, subject, data, unique="call_id"
        )
        if earlier is None:
            return decision
        recorded = decision_on(request, earlier)
        if recorded is None:
            raise not_about(request)
        return recorded


def check_requests(events: list[EventRecord], run_id: str) -> None:
    """Refuse a run whose approval requests were edited in the ledger (`request_problems`).

    A resumed run runs the tool call of the model's recorded answer once a request with its
    digest is approved, while ``approve`` and the terminal show the request's recorded
    arguments: a request recorded twice under one id, whose arguments do not match its
    digest, or about a call no recorded answer asked for is acted on by nobody.

    Raises:
        MalformedRecord: One is, naming the first.
    """
    for subject, _, reason in request_problems(events):
        call_id = subject.removeprefix("approval ")
        raise MalformedRecord(
            f"approval request {call_id} of run {run_id} was edited in the ledger: {reason}; "
            f"nothing acts on it; see: clearance verify {run_id}"
        )


def pending_approvals(ledger: RunLedger, run_id: str) -> list[ApprovalRequest]:
    """The run's approval requests that no decision answers yet, oldest first.

    Raises:
        StoreError: The ledger cannot be read.
    """
    events = ledger.events(run_id)
    requests = [
        ApprovalRequest.from_event(e) for e in events if e.kind == EventKind.AWAITING_APPROVAL
    ]
    answers: dict[str, list[EventRecord]] = {}
    for event in events:
        if event.kind == EventKind.APPROVAL_DECIDED:
            answers.setdefault(str(event.data.get("call_id")), []).append(event)
    decided = {  # a record about another call decides nothing (`decision_on`)
        request.call_id
        for request in requests
        if any(decision_on(request, e) is not None for e in answers.get(request.call_id, ()))
    }
    return [request for request in requests if request.call_id not in decided]


def decide(
    ledger: RunLedger, run_id: str, call_id: str, decision: ApprovalDecision
) -> ApprovalRequest:
    """Record a person's decision on one of a run's approval requests.

    Args:
        ledger: The ledger holding the run.
        run_id: The run's id, or a unique prefix of it.
        call_id: The request's id, as the run reported it (``apr_...``).
        decision: The decision, who made it, and why.

    Returns:
        The request decided.

    Raises:
        ConfigError: The run has no such request, it was decided already (a decision is
            final; checked and recorded in one transaction, so of two decisions made at once
            the second is refused), or the decision is malformed (`check_decision`).
        MalformedRecord: The decision recorded on the request is about another call (the
            ledger was edited): it cannot be decided (`not_about`); or an approval request of
            the run was edited (`check_requests`).
        StoreError: The run is unknown (or several match), or the ledger failed.
    """
    run = ledger.get_run(run_id)
    check_decision(decision, by="--by", reason="--reason")
    events = ledger.events(run.run_id)
    check_requests(events, run.run_id)  # a person decides on what would run, or not at all
    asked = [
        e
        for e in events
        if e.kind == EventKind.AWAITING_APPROVAL and e.data.get("call_id") == call_id
    ]
    if not asked:
        raise ConfigError(
            f"run {run.run_id} has no approval request {bounded_reason(repr(call_id), 100)} "
            f"(see them with: clearance inspect {run.run_id})",
            field="call_id",
        )
    request = ApprovalRequest.from_event(asked[0])
    # The check for an earlier decision and the write are one transaction: of two people
    # deciding at once, the second is told the first's decision.
    earlier = ledger.record_first_event(
        run.run_id,
        EventKind.APPROVAL_DECIDED,
        f"task:{request.task_id}",
        decision_data(request, decision),
        unique="call_id",
    )
    if earlier is not None and decision_on(request, earlier) is None:
        raise not_about(request)
    if earlier is not None:
        raise ConfigError(
            f"approval {call_id} of run {run.run_id} was already {earlier.data.get('decision')} "
            f"by {earlier.data.get('by')}; a decision is final",
            field="call_id",
        )
    return request


def awaiting_approval(queue: TaskQueue, ledger: Recorder, run_id: str) -> str | None:
    """Why a run pauses when its tasks stopped for approval, or ``None`` when none did.

    Tasks waiting for approval are ``interrupted`` in the queue once the run has done all it
    could; the reason names the open requests and the commands that decide them.

    Raises:
        StoreError: The ledger cannot be read.
    """
    if not queue.with_status(TaskStatus.INTERRUPTED):
        return None
    if not isinstance(ledger, RunLedger):
        return "awaiting approval, but the run keeps no ledger to decide it in and resume from"
    commands = "; ".join(
        f"clearance approve {run_id} {r.call_id}" for r in pending_approvals(ledger, run_id)
    )
    return (
        f"awaiting approval: {commands} (or clearance deny in place of approve), "
        f"then continue with: clearance resume {run_id}"
    )
