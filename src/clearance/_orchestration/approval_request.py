"""What an approval request and a person's decision on it are (see `approval.py`).

`ApprovalRequest` (recorded as an ``awaiting_approval`` event), `ApprovalDecision` (recorded
as ``approval_decided``), what a well-formed decision is (`check_decision`), and the text a
model gets for a denied call.
"""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from clearance._context.verify_approvals import arguments_sha256
from clearance._context.verify_approvals import denial_text as call_denial_text
from clearance._core.errors import ConfigError, MalformedRecord
from clearance._core.event_schema import (
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    parse_event,
)
from clearance._core.names import check_label, check_seconds, check_text, check_utf8
from clearance._core.prompt import canonical_json
from clearance._core.run_spec import MAX_ANSWER_TIMEOUT_S
from clearance._core.vocabulary import ApprovalKind
from clearance._state.ledger import EventRecord

__all__ = [
    "MAX_DECIDER_CHARS",
    "MAX_REASON_CHARS",
    "MAX_SHOWN_ARGUMENTS_CHARS",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "check_answer_timeout",
    "check_decision",
    "decision_data",
    "decision_on",
    "default_decider",
    "denial_text",
    "not_about",
]

MAX_REASON_CHARS = 2000
"""Longest reason a decision may carry."""

MAX_DECIDER_CHARS = 200
"""Longest name of who decided."""

MAX_SHOWN_ARGUMENTS_CHARS = 2000
"""Most characters of a tool call's arguments a person is shown (`ApprovalRequest.describe`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequest:
    """One point of a run that waits for a person's decision.

    Attributes:
        call_id: The request's id (``apr_...``).
        run_id: The run.
        kind: ``"tool"`` (a tool call), ``"task"`` (a task about to start) or ``"rerun"``
            (a tool call the stopped run may have run, about to run again on resume).
        task_id: The task it belongs to.
        agent: The agent that would act.
        tool: The tool's name (``None`` for a task).
        arguments: The tool call's arguments (model output: untrusted), ``None`` for a task.
        reruns: For a ``"rerun"``: the id of the ``tool_started`` event of the run that may
            have happened, the one it would run again. A decision covers that one rerun: when
            the rerun stops inside the tool too, running it again is a new request.
    """

    call_id: str
    run_id: str
    kind: ApprovalKind
    task_id: str
    agent: str
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    reruns: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str | None, str | None, str | None]:
        """What the request would let happen.

        Its kind, task, agent, tool, arguments digest and (a rerun) the start it runs again.
        """
        digest = arguments_sha256(self.arguments) if self.arguments is not None else None
        return (self.kind, self.task_id, self.agent, self.tool, digest, self.reruns)

    def to_data(self) -> dict[str, Any]:
        """The ``awaiting_approval`` event's data (``reruns`` only when it names a start)."""
        data = {
            "call_id": self.call_id, "kind": self.kind, "task_id": self.task_id,
            "agent": self.agent, "tool": self.tool, "arguments": self.arguments,
            "arguments_sha256": self.key[4],
        }  # fmt: skip
        if self.reruns is not None:
            data["reruns"] = self.reruns
        return data

    @classmethod
    def from_event(cls, event: EventRecord) -> ApprovalRequest:
        """The request an ``awaiting_approval`` event records, read through its schema.

        Raises:
            ConfigError: The event is not a well-formed ``awaiting_approval`` event.
        """
        data = parse_event(event.kind, event.data)
        if not isinstance(data, ApprovalRequestedEvent):
            raise ConfigError(f"event {event.event_id} is not an approval request", field="kind")
        return cls(
            call_id=data.call_id,
            run_id=event.run_id,
            kind=data.kind,
            task_id=data.task_id,
            agent=data.agent,
            tool=data.tool,
            arguments=data.arguments,
            reruns=data.reruns,
        )

    def describe(self) -> str:
        """One line for a person: what would happen (arguments in canonical JSON).

        The arguments are model output: past `MAX_SHOWN_ARGUMENTS_CHARS` characters they are
        cut, and the line says how many more there are, their SHA-256 (as recorded) and
        where to read them all, so a wall of text can neither bury the question nor
        scroll the call's other arguments out of sight unnoticed.
        """
        if self.kind == ApprovalKind.TASK:
            return f"start of task {self.task_id} ({self.agent})"
        args = canonical_json(self.arguments or {})
        if len(args) > MAX_SHOWN_ARGUMENTS_CHARS:
            args = (
                f"{args[:MAX_SHOWN_ARGUMENTS_CHARS]}… ({len(args) - MAX_SHOWN_ARGUMENTS_CHARS:,} "
                f"more characters not shown; arguments sha256 {self.key[4]}; all of them: "
                f"clearance inspect {self.run_id} --json)"
            )
        if self.kind == ApprovalKind.RERUN:
            return (
                f"tool {self.tool} may have run ({self.agent} in task {self.task_id}, {args}); "
                "approve to run it again or deny"
            )
        return f"{self.agent} in task {self.task_id} calls {self.tool} {args}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalDecision:
    """A person's decision on an `ApprovalRequest`.

    Attributes:
        approved: Whether it was approved.
        by: Who decided.
        reason: Why (``""`` for no reason given).
    """

    approved: bool
    by: str
    reason: str = ""


Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]
"""Asks a person about a request on the spot (``--interactive``); raises `ApprovalPending` to
leave the request open (nobody can answer now): its task pauses as without an approver."""


def check_answer_timeout(timeout_s: object) -> float:
    """A deadline on a person's answer, in seconds: above 0 and at most a day.

    Raises:
        ConfigError: It is not (the message names ``answer_timeout_s``).
    """
    return check_seconds("answer_timeout_s", timeout_s, most=MAX_ANSWER_TIMEOUT_S)


def check_decision(decision: object, *, by: str = "by", reason: str = "reason") -> None:
    """Refuse what is not a well-formed `ApprovalDecision`.

    ``approved`` must be a bool (``"no"`` is not an approval), ``by`` one line of 1 to
    `MAX_DECIDER_CHARS` characters (it is shown in ``inspect`` and in the denial a model gets),
    ``reason`` text of at most `MAX_REASON_CHARS` characters.

    Args:
        decision: The decision to check.
        by: The name of the decider's field in messages (``--by`` on the command line).
        reason: The name of the reason's field in messages.

    Raises:
        ConfigError: It is not, naming the field.
    """
    if not isinstance(decision, ApprovalDecision):
        raise ConfigError(f"must be an ApprovalDecision, got {type(decision).__name__}",
                          field="decision")  # fmt: skip
    if not isinstance(decision.approved, bool):
        raise ConfigError(f"must be True or False, got {decision.approved!r:.80}",
                          field="approved")  # fmt: skip
    check_label(by, decision.by, most=MAX_DECIDER_CHARS)
    check_text(reason, decision.reason)
    if len(decision.reason) > MAX_REASON_CHARS:
        raise ConfigError(f"must be at most {MAX_REASON_CHARS} characters", field=reason)
    check_utf8(by, decision.by)
    check_utf8(reason, decision.reason)


def default_decider() -> str:
    """The name of the person running this process (the OS user)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid
        return "unknown"


def denial_text(request: ApprovalRequest, decision: ApprovalDecision) -> str:
    """The tool result a model gets for a denied call (see `verify_approvals.denial_text`)."""
    return call_denial_text(request.tool, decision.by, decision.reason)


def decision_on(request: ApprovalRequest, event: EventRecord) -> ApprovalDecision | None:
    """The decision an ``approval_decided`` event records on ``request``, or ``None``.

    The event counts only when it is well-formed and about what the request would let happen
    (the same call id, kind, task, agent, tool, arguments digest and rerun start), as
    ``verify`` reads it:
    a record bearing the request's id but about another call (edited into the ledger)
    decides nothing.
    """
    try:
        data = parse_event(event.kind, event.data)
    except ConfigError:
        return None
    if not isinstance(data, ApprovalDecidedEvent) or data.call_id != request.call_id:
        return None
    about = (data.kind, data.task_id, data.agent, data.tool, data.arguments_sha256, data.reruns)
    if about != request.key:
        return None
    return ApprovalDecision(
        approved=data.decision == "approved", by=data.by, reason=data.reason or ""
    )


def not_about(request: ApprovalRequest) -> MalformedRecord:
    """The error for a request whose recorded decision is about another call (`decision_on`).

    Such a record takes the place of the request's one decision, so nobody can decide the
    request any more; nothing acts on it either.
    """
    return MalformedRecord(
        f"approval {request.call_id} of run {request.run_id} has a recorded decision that is "
        "not about this request (another task, agent, tool or arguments: the ledger was "
        f"edited); nothing acts on it; see: clearance verify {request.run_id}"
    )


def decision_data(request: ApprovalRequest, decision: ApprovalDecision) -> dict[str, Any]:
    """The ``approval_decided`` event's data."""
    data = request.to_data()
    data.pop("arguments")
    data["decision"] = "approved" if decision.approved else "denied"
    data["by"], data["reason"] = decision.by, decision.reason
    return data
