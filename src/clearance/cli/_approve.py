"""``clearance approve`` / ``clearance deny``, and approval at the terminal (``--interactive``).

A run that reaches a tool call or a task requiring approval pauses: ``clearance run`` (and
``resume``) exit with `EXIT_AWAITING_APPROVAL` and name each request (``apr_...``). A person
decides each with ``clearance approve RUN_ID CALL_ID`` or ``clearance deny RUN_ID CALL_ID
--reason ...`` (recorded in the run's ledger with who decided, ``--by``, the OS user by
default), then continues the run with ``clearance resume RUN_ID``. Each decision ends with the
next step the run's recorded status calls for (`next_step`): a run that completed meanwhile
is not sent to ``resume``, and a run still running is resumed once its process has stopped.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from clearance import ApprovalKind
from clearance.cli._common import err, one_line_errors, out, safe_line
from clearance.cli._stdin import LineTooLong, stdin_lines
from clearance.runs import DEFAULT_LEDGER_URL

if TYPE_CHECKING:
    from clearance import ApprovalDecision, ApprovalRequest
    from clearance.runs import Approver


__all__ = ["EXIT_AWAITING_APPROVAL", "next_step", "register", "terminal_approver"]

EXIT_AWAITING_APPROVAL = 3
"""Exit code of ``clearance run`` / ``resume`` when the run paused for approval."""

_Db = Annotated[
    str, typer.Option("--db", envvar="CLEARANCE_DB", help="Ledger database URL (SQLAlchemy form).")
]
_By = Annotated[
    str | None, typer.Option("--by", help="Who decides (default: the OS user running this).")
]
_Run = Annotated[str, typer.Argument(help="Run id (or a unique prefix).")]
_Call = Annotated[str, typer.Argument(help="The approval request's id (apr_...).")]


def _decide(db: str, run_id: str, call_id: str, decision: ApprovalDecision) -> None:
    from clearance import RunLedger
    from clearance.runs import decide

    with RunLedger(db, create=False) as ledger:  # the run's ledger: never a new one
        request = decide(ledger, run_id, call_id, decision)
        record = ledger.get_run(run_id)
    verb = "approved" if decision.approved else "denied"
    outcome = ""
    if not decision.approved:
        outcome = "; the task fails" if request.kind == ApprovalKind.TASK else "; the model is told"
    said = f"{verb} {call_id} by {decision.by}: {request.describe()}{outcome}"
    # Each on its one line: the arguments are model output, the rest read from the ledger.
    out.print(safe_line(said), soft_wrap=True)
    out.print(safe_line(next_step(record.run_id, record.status)), soft_wrap=True)


_NEXT_STEPS = {
    "interrupted": "continue the run with: clearance resume {run}",
    "failed": "run {run} failed; to run its unfinished tasks again, this decision with them: "
    "clearance resume {run}",
    "completed": "run {run} has already completed, so no task will act on this decision (it "
    "is recorded; a completed run is not resumed)",
    "running": "run {run} is still running (or its process stopped without recording an "
    "end); it pauses once nothing else can run: once its process has stopped, continue it "
    "with: clearance resume {run}",
}


def next_step(run_id: str, status: str) -> str:
    """The line ``approve`` / ``deny`` end with: what to do next, for the run's recorded status.

    Args:
        run_id: The run's full id.
        status: Its recorded status (`RunRecord.status`): ``interrupted`` (paused) and
            ``failed`` runs are resumed, a ``completed`` one is not (``resume`` refuses it),
            a ``running`` one once its process has stopped (``resume`` refuses while it
            lives); any other status (a row edited by hand) is named as it is.

    Returns:
        One line, raw (the caller escapes it).
    """
    step = _NEXT_STEPS.get(status)
    if step is None:
        return f"run {run_id} is recorded as {status!r}; see it with: clearance inspect {run_id}"
    return step.format(run=run_id)


@one_line_errors
def approve(run_id: _Run, call_id: _Call, by: _By = None, db: _Db = DEFAULT_LEDGER_URL) -> None:
    """Approve a paused run's tool call or task; resume the run to carry it out."""
    from clearance import ApprovalDecision
    from clearance.runs import default_decider

    _decide(db, run_id, call_id, ApprovalDecision(approved=True, by=by or default_decider()))


@one_line_errors
def deny(
    run_id: _Run,
    call_id: _Call,
    reason: Annotated[str, typer.Option("--reason", help="Why (the model is told).")] = "",
    by: _By = None,
    db: _Db = DEFAULT_LEDGER_URL,
) -> None:
    """Deny a paused run's tool call (the model is told) or task (it fails); then resume."""
    from clearance import ApprovalDecision
    from clearance.runs import default_decider

    decision = ApprovalDecision(approved=False, by=by or default_decider(), reason=reason)
    _decide(db, run_id, call_id, decision)


def terminal_approver() -> Approver:
    """Asks the person at the terminal about each request, one at a time (``--interactive``).

    The request's text (model output among it) is shown escaped; the answer ``y`` or
    ``yes`` approves, anything else denies (the rest of a ``n <reason>`` answer is the
    reason, cut to `MAX_REASON_CHARS` characters; a line over `MAX_LINE_BYTES` denies with no
    reason). With nobody to answer
    (stdin closed), or no answer within the run's ``answer_timeout_s`` (``--answer-timeout``;
    the run cancels the question), the request stays open: its task pauses, as without
    ``--interactive``. Lines come from the shared stdin reader (`stdin_lines`), so a line
    typed after a question was abandoned answers the next one.
    """
    from clearance import ApprovalDecision, ApprovalPending
    from clearance.runs import MAX_REASON_CHARS, default_decider

    lock = asyncio.Lock()
    by = default_decider()

    async def ask(request: ApprovalRequest) -> ApprovalDecision:
        async with lock:
            asked = f"approval {request.call_id}: {request.describe()}"
            err.print(safe_line(asked), soft_wrap=True)  # one line, as `clearance deny`'s
            err.print(Text("approve? [y/N, or n <reason>] "), end="")  # no markup: shown as is
            try:
                line = await stdin_lines().readline()
            except LineTooLong:
                line = b"n\n"
            except OSError:  # stdin cannot be read (opened write-only): as at end of input
                line = b""
            except asyncio.CancelledError:  # its deadline passed: left open, decided later
                err.print()
                err.print(safe_line(f"no answer in time: approval {request.call_id} stays open"))
                raise
            if not line:  # end of input: no answer can come; left open, decided later
                err.print()
                raise ApprovalPending([request.call_id])
            answer = line.decode("utf-8", "replace").strip()
        word, _, reason = answer.partition(" ")
        if word.lower() in ("y", "yes"):
            return ApprovalDecision(approved=True, by=by)
        reason = reason.strip()
        if len(reason) > MAX_REASON_CHARS:  # a decision's limit: still a denial
            reason = reason[:MAX_REASON_CHARS]
            err.print(f"the reason was cut to {MAX_REASON_CHARS} characters")
        return ApprovalDecision(approved=False, by=by, reason=reason)

    return ask


def register(app: typer.Typer) -> None:
    """Add ``approve`` and ``deny`` to the ``clearance`` command."""
    app.command()(approve)
    app.command()(deny)
