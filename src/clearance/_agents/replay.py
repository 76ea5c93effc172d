"""Durable resume: an interrupted agent loop rebuilt from its recorded steps.

A resumed run's `ModelCaller` holds a `ReplaySource` read from the ledger. Every model call
and tool call of every call path goes through `ModelCaller.call` and the `AgentLoop`'s tool
step, which ask it first:

- **Model calls.** The recorded calls of each subject (``task:<id>``, ``delegation:<id>``,
  ``synthesis``...) are taken in order: the next call of a subject is answered from its
  record when the prompt it would send has the recorded prompt's hash (so a replayed step
  is only used if the request would be identical), with the tool calls the model asked for
  (the ``model_tool_calls`` event recorded with the answer). The first call whose prompt
  differs, or that has no record, is sent: from then on the subject is live. A recorded
  request left without an outcome (the process stopped while it was in flight) is sent
  again once, and its outcome recorded on that same row. What failed is never replayed: a
  failed or skipped task's calls and its reviewers', a failed or timed-out child's, and a
  rejected plan's are sent again. A task or child that failed and ran again (a later
  session) has the steps recorded after its last failure replayed, by the hash chain's
  order, never a step of the failed attempt.
- **Tool calls.** In a replayed turn each tool call keeps its recorded id, so the next
  prompt is the one the original loop built. A call with a recorded result is not run: the
  result is given to the loop. A call recorded as started (``tool_started``) without a
  result may have run (it is found by its place in the answer: an identical call of the
  same answer that has its result, as a delegation asked for twice, is never taken for
  it): it runs again only when its tool was declared ``idempotent``; otherwise the person
  decides (a ``rerun`` approval, see
  `clearance._orchestration.approval`). A tool declared ``replay: false`` (a live value)
  runs again under a new id (a ``replay_declined`` event names it, and a later resume
  puts that run in the call's place in the answer: `clearance._agents.replay_places`,
  which works it out for older runs' events, naming none), and so do calls
  whose result reached the prompt by more than their text (store reads, spawned children);
  such a call of a tool that needs approval, and is not idempotent, runs again only once a
  person approves the rerun (a ``rerun`` request): its earlier approval was for one run.
  A rerun request names the ``tool_started`` event it would run again (the call's latest
  start), so one decision covers one rerun: a rerun the process stopped inside is asked
  about again.
- **Live turns.** Once a subject is live, a turn's call is known by what it asks, not its
  place: one that finished before (same tool and arguments, that step first, then another)
  is given back as in a replayed turn, under its recorded id, never run again unasked
  (one whose replay is declined runs as a new call); one started without a result is a
  rerun, as above.

Every replayed step is recorded as a ``replayed`` event naming its original record and the
digest of what the loop was given; ``clearance verify`` checks it against the original
(`clearance._context.verify_replay`). Before anything is replayed, the run's hash chain
(and its MACs, when the ledger is keyed) must verify: ``resume`` checks it once, before it
acts on any record (`clearance._orchestration.resume_checks`), and refuses naming the first
record that fails.

Matching pydantic-ai's durable execution (model requests and tool calls as Temporal
activities or DBOS steps) and DBOS's "resume from the last completed step", with the
ledger's hash chain as the proof that a replay matches the original.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from clearance._agents.replay_attempts import after_failures
from clearance._agents.replay_places import Replacements, in_place
from clearance._context.verify_approvals import arguments_sha256
from clearance._context.verify_replay import answer_sha256
from clearance._core.ids import new_id
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.run_spec import PROMPT_FORMAT
from clearance._core.vocabulary import EventKind, PromptKind, RecordKind
from clearance._state.ledger import (
    CallRecord,
    Recorder,
    RunLedger,
    ToolCallRecord,
)
from clearance.models._base import ModelResponse, ToolCall

__all__ = [
    "ConfirmRerun",
    "ReplaySource",
    "answer_sha256",
    "tool_calls_data",
]

ConfirmRerun = Callable[[str, str, str, dict[str, Any], str | None], Awaitable[str | None]]
"""Decides whether a tool call that may have run runs again: ``(task id, agent, tool,
arguments, the id of the tool_started event it would run again)`` to ``None`` (run it again)
or the denial text the model gets; may raise `ApprovalPending` to pause the task until a
person decides."""


def tool_calls_data(tool_calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """The ``model_tool_calls`` event's ``tool_calls``: ``[{"id", "name", "arguments"}]``."""
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in tool_calls]


@dataclasses.dataclass(slots=True)
class _Turn:
    """How one tool call of a replayed turn is handled."""

    call_id: str
    output: str | None = None  # the recorded result, when replayed
    rerun: bool = False  # started, no result: may have run
    reruns: str | None = None  # the tool_started event it runs again (a decision's subject)


class ReplaySource:
    """The recorded steps of one run being resumed, handed out in order.

    Build it with `load`. Attributes count what the resume did.

    Attributes:
        replayed_calls: Model calls answered from their records.
        replayed_tools: Tool calls whose recorded result was used.
        sent: Model calls sent (a pending request sent again included).
        prompt_format: The run's recorded ``prompt_format`` (0 when it records none, or one
            that is not a version): the resume numbers its children as that format says
            (`PROMPT_FORMAT` for a source built by hand).
        confirm: Decides re-running a tool call that may have run (set by the run);
            ``None`` denies it.
        approval_tools: The tools whose calls need a person's approval (set by the run): a
            finished call of one that is run again, not replayed, is confirmed first.
    """

    def __init__(
        self,
        recorder: Recorder,
        run_id: str,
        *,
        calls: dict[str, list[CallRecord]],
        asked: dict[str, list[dict[str, Any]]],
        tools: dict[tuple[str, int], list[ToolCallRecord]],
        started: dict[str, dict[str, Any]],
        owners: dict[str, str],
        prompt_format: int = PROMPT_FORMAT,
        last_starts: dict[tuple[str, int, str, str], str] | None = None,
        replaced: dict[str, str] | None = None,
    ) -> None:
        self.recorder = recorder
        self.prompt_format = prompt_format
        self.run_id = run_id
        self._calls = calls
        self._asked = asked
        self._tools = tools
        self._started = started
        # The calls started at each (subject, step), in recorded order: a turn looks up its
        # own, not every started call of the run (a scan per turn grew with the run squared).
        self._started_at: dict[tuple[str, Any], list[str]] = {}
        for call_id, data in started.items():
            subject, step = data.get("subject"), data.get("step")
            if isinstance(subject, str) and isinstance(step, int | float | str):
                self._started_at.setdefault((subject, step), []).append(call_id)
        # The calls with a result: a started call among them finished (never the one the
        # process stopped inside), and its id is never handed out again.
        self._recorded = {row.tool_call_id for rows in tools.values() for row in rows}
        self._steps: dict[str, list[int]] = {}  # each subject's steps with rows, in order
        for subject, step in sorted(tools):
            self._steps.setdefault(subject, []).append(step)
        self._owners = owners
        # (subject, step, tool, arguments digest): the id of the latest ``tool_started``
        # event of that call, under whichever id it ran: what a rerun would run again.
        self._last_starts = last_starts or {}
        # A finished call whose replay was declined: the id it ran again under.
        self._replaced = replaced or {}
        self._replacements = set(self._replaced.values())
        self._cursor: dict[str, int] = {}
        self._live: set[str] = set()
        self._turns: dict[str, _Turn] = {}
        self._used: set[str] = set()  # finished calls already replayed or declined
        self.replayed_calls = 0
        self.replayed_tools = 0
        self.sent = 0
        self.confirm: ConfirmRerun | None = None
        self.approval_tools: frozenset[str] = frozenset()

    @classmethod
    def load(
        cls, ledger: RunLedger, run_id: str, *, recorder: Recorder | None = None
    ) -> ReplaySource:
        """Read a run's replayable steps.

        The caller checks the run's records against its hash chain first (``resume`` does, in
        `clearance._orchestration.resume_checks.check_run_record`, before it acts on anything
        recorded): only verified records are replayed.

        Args:
            ledger: The ledger holding the run.
            run_id: The run's full id.
            recorder: Where replays are recorded; ``None`` means ``ledger``.

        Raises:
            StoreError: The ledger cannot be read.
        """
        # What failed is asked again, never replayed into the same failure: a failed or
        # skipped task's own calls and its reviewers' (`review:<task>/<round>/<stage>`), a
        # child recorded as failed or timed out, and the plan of a run that failed before it
        # had one (the coordinator's rejected plans).
        stopped = {t.task_id for t in ledger.tasks(run_id) if t.status in ("failed", "skipped")}
        excluded = {f"{kind}:{t}" for t in stopped for kind in ("task", "isolated")}
        reviews = tuple(f"{PromptKind.REVIEW}:{t}/" for t in stopped)
        record = ledger.get_run(run_id)
        if record.graph is None and record.status == "failed":
            excluded.add(str(PromptKind.PLAN))
        events = ledger.events(run_id)
        after = after_failures(ledger, run_id, events)
        calls: dict[str, list[CallRecord]] = {}
        for call in ledger.calls(run_id):
            if (
                call.error is None
                and call.subject not in excluded
                and after(call.subject, RecordKind.CALL, call.call_id)
            ):
                if reviews and call.subject.startswith(reviews):
                    continue
                calls.setdefault(call.subject, []).append(call)
        for records in calls.values():  # only a last pending request is still in flight
            records[:] = [
                c for i, c in enumerate(records) if not c.pending or i == len(records) - 1
            ]
        asked: dict[str, list[dict[str, Any]]] = {}
        started: dict[str, dict[str, Any]] = {}
        owners: dict[str, str] = {}
        last_starts: dict[tuple[str, int, str, str], str] = {}
        replacements = Replacements()
        for event in events:
            if event.kind == EventKind.MODEL_TOOL_CALLS:
                asked[str(event.data.get("call_id"))] = list(event.data.get("tool_calls") or [])
            elif event.kind == EventKind.REPLAY_DECLINED:
                replacements.declined(event.data)
            elif event.kind == EventKind.TOOL_STARTED:
                replacements.started(event.subject, event.data)  # a failed attempt's too
                if not after(event.subject, RecordKind.EVENT, event.event_id):
                    continue
                call_id = str(event.data.get("tool_call_id"))
                started[call_id] = {**event.data, "subject": event.subject}
                owners[call_id] = event.subject
                step, name = event.data.get("step"), event.data.get("name")
                sha = event.data.get("arguments_sha256")
                if isinstance(step, int) and isinstance(name, str) and isinstance(sha, str):
                    last_starts[(event.subject, step, name, sha)] = event.event_id
        tools: dict[tuple[str, int], list[ToolCallRecord]] = {}
        for row in ledger.tool_calls(run_id):
            if after(row.subject, RecordKind.TOOL_CALL, row.tool_call_id):
                tools.setdefault((row.subject, row.step), []).append(row)
            owners[row.tool_call_id] = row.subject
        fmt = (record.config or {}).get("prompt_format", 0)
        if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 0:
            fmt = 0  # not a version: as a run recorded before runs named one
        return cls(
            recorder if recorder is not None else ledger, run_id, calls=calls, asked=asked,
            tools=tools, started=started, owners=owners, prompt_format=fmt,
            last_starts=last_starts, replaced=replacements.replaced,
        )  # fmt: skip

    # -- model calls --------------------------------------------------------------------

    def answer(
        self, subject: str, prompt: Prompt, parameters: dict[str, Any] | None = None
    ) -> ModelResponse | str | None:
        """The recorded answer of a subject's next call, if its request is the recorded one.

        A recorded call matches when its prompt hash is this prompt's and, where the call
        recorded its request parameters, they equal ``parameters`` (sampling, max tokens,
        tools offered, JSON schema: `ModelRequest.parameters`).

        Returns:
            The recorded response (a ``replayed`` event is recorded); or the id of a
            recorded request left pending, to send again under that id; or ``None``: send
            it (the subject is live from now on).
        """
        if subject not in self._live:
            records = self._calls.get(subject, ())
            at = self._cursor.get(subject, 0)
            if at < len(records) and _same_request(records[at], prompt, parameters):
                record = records[at]
                self._cursor[subject] = at + 1
                if not record.pending:
                    return self._replay_call(record)
                self._live.add(subject)
                self.sent += 1
                return record.call_id
            self._live.add(subject)
        self.sent += 1
        return None

    def _replay_call(self, record: CallRecord) -> ModelResponse:
        asked = self._asked.get(record.call_id, [])
        self.recorder.record_event(self.run_id, EventKind.REPLAYED, record.subject, {
            "record": RecordKind.CALL, "original": record.call_id,
            "sha256": answer_sha256(record.response, asked),
        })  # fmt: skip
        self.replayed_calls += 1
        calls = tuple(
            ToolCall(id=str(c["id"]), name=str(c["name"]), arguments=dict(c["arguments"]))
            for c in asked
        )
        return ModelResponse(
            text=record.response or "", usage=record.usage, model_id=record.model_id,
            finish_reason=record.finish_reason, tool_calls=calls,
        )  # fmt: skip

    # -- tool calls ---------------------------------------------------------------------

    def tool_ids(self, subject: str, step: int, calls: Sequence[ToolCall]) -> list[str]:
        """The ids of a turn's tool calls: the recorded ones in a replayed turn, else new."""
        rows = in_place(self._tools.get((subject, step), []), self._replaced)
        ids = []
        for index, call in enumerate(calls):
            if subject in self._live:  # a new answer: known calls are found by what they ask
                turn = (
                    self._finished(subject, step, call)
                    or self._in_flight(subject, step, call)
                    or _Turn(call_id=new_id("tool"))
                )
            else:
                turn = self._plan(subject, step, rows, index, call)
            self._turns[turn.call_id] = turn
            self._owners.setdefault(turn.call_id, subject)  # a new id too: its rerun's task
            ids.append(turn.call_id)
        return ids

    def _plan(
        self, subject: str, step: int, rows: list[ToolCallRecord], index: int, call: ToolCall
    ) -> _Turn:
        if index < len(rows):
            row = rows[index]
            if row.name != call.name or row.arguments != call.arguments:
                return _Turn(call_id=new_id("tool"))
            return self._recorded_turn(subject, row, call)
        if index == len(rows):  # the call the process may have stopped inside
            # Its place in the answer tells it apart: the turn's calls run in order, so the
            # ones before it have their results (rows), and an identical call of the same
            # answer (a delegation asked for twice) that finished is never this one.
            turn = self._in_flight(subject, step, call)
            if turn is not None:
                return turn
        return _Turn(call_id=new_id("tool"))

    def _recorded_turn(self, subject: str, row: ToolCallRecord, call: ToolCall) -> _Turn:
        """A finished call asked for again: its result replayed, or its replay declined."""
        self._used.add(row.tool_call_id)
        started = self._started.get(row.tool_call_id, {})
        why = _declined_why(row, started)
        if why is None:
            return _Turn(call_id=row.tool_call_id, output=row.result)
        replacement = new_id("tool")  # recorded: the rows keep the answer's order by it
        self.recorder.record_event(self.run_id, EventKind.REPLAY_DECLINED, subject, {
            "record": RecordKind.TOOL_CALL, "original": row.tool_call_id, "why": why,
            "replacement": replacement,
        })  # fmt: skip
        # It ran: running it again is a second side effect, which the approval of its
        # first run does not cover (`may_rerun` asks), unless its tool is idempotent; so
        # is running it once more after an earlier resume's run of it, started and
        # never finished, may have run.
        stopped = self._replaced.get(row.tool_call_id)
        unfinished = stopped in self._started and stopped not in self._recorded
        again = (unfinished or row.name in self.approval_tools) and not started.get("idempotent")
        last = self._last_starts.get(
            (subject, row.step, call.name, arguments_sha256(call.arguments))
        )
        return _Turn(call_id=replacement, rerun=again, reruns=last)

    def _finished(self, subject: str, step: int, call: ToolCall) -> _Turn | None:
        """The finished call of a subject that a live turn's ``call`` asks for again.

        A live turn (its prompt differed from the recorded one: an earlier call ran again
        under a new id, say) may ask for a call that had run and finished before the run
        stopped. Running it again would be a second side effect nobody asked for; so it is
        given back as in a replayed turn, found by its tool and arguments instead of its
        place: a call of the same step first, then of any other step (the live loop may
        take its steps otherwise). Only calls recorded as started (a tool that ran) are
        found, each at most once per resume; one whose replay a replayed turn would decline
        (``replay: false``, store reads, spawns) runs again as the new call it is.
        """
        candidates = in_place(self._tools.get((subject, step), []), self._replaced)
        for at in self._steps.get(subject, ()):
            if at != step:
                candidates += in_place(self._tools[(subject, at)], self._replaced)
        for row in candidates:
            started = self._started.get(row.tool_call_id)
            if (
                started is not None
                and row.tool_call_id not in self._used
                and row.tool_call_id not in self._turns
                and row.name == call.name
                and row.arguments == call.arguments
                and _declined_why(row, started) is None
            ):
                return self._recorded_turn(subject, row, call)
        return None

    def _in_flight(self, subject: str, step: int, call: ToolCall) -> _Turn | None:
        """The call of a step recorded as started without a result that ``call`` repeats.

        Such a call may have run. A live turn (its prompt differed from the recorded one:
        an earlier call of the loop ran again under a new id, say) that asks for it again
        runs it under its started id, as a rerun: only if idempotent, or a person approves.
        """
        for call_id in self._started_at.get((subject, step), ()):
            data = self._started[call_id]
            if (
                call_id not in self._recorded
                and call_id not in self._turns
                and call_id not in self._replacements  # a declined call's, in its place
                and data.get("name") == call.name
                and data.get("arguments_sha256") == arguments_sha256(call.arguments)
            ):
                last = self._last_starts.get((subject, step, call.name, data["arguments_sha256"]))
                return _Turn(call_id=call_id, rerun=True, reruns=last)
        return None

    def recorded_output(self, subject: str, call_id: str) -> str | None:
        """The recorded result of a replayed tool call (a ``replayed`` event is recorded)."""
        turn = self._turns.get(call_id)
        if turn is None or turn.output is None:
            return None
        self.recorder.record_event(self.run_id, EventKind.REPLAYED, subject, {
            "record": RecordKind.TOOL_CALL, "original": call_id, "sha256": sha256_text(turn.output),
        })  # fmt: skip
        self.replayed_tools += 1
        return turn.output

    async def may_rerun(
        self, call_id: str, agent: str, name: str, arguments: dict[str, Any]
    ) -> str | None:
        """Whether a tool call about to run may run: ``None``, or the denial text.

        A call recorded as started without a result runs again only if its tool was
        declared idempotent when it started, or a person approves (`confirm`); so does a
        finished call of a tool that needs approval, run again rather than replayed. The
        person decides on the call's latest start (``tool_started``): once that rerun has
        started, running the call again is asked about again.

        Raises:
            ApprovalPending: Nobody decided yet (from `confirm`).
        """
        turn = self._turns.get(call_id)
        if turn is None or not turn.rerun or self._started.get(call_id, {}).get("idempotent"):
            return None
        if self.confirm is None:
            return f"error: tool {name} may have run before the run stopped; not run again"
        return await self.confirm(self.task_of(call_id), agent, name, arguments, turn.reruns)

    def task_of(self, call_id: str) -> str:
        """The task a tool call serves (through the delegations it was made in)."""
        subject = self._owners.get(call_id, "")
        for _ in range(64):
            kind, _, rest = subject.partition(":")
            if kind != PromptKind.DELEGATION:
                return rest or subject
            subject = self._owners.get(rest, "")
        return subject

    def summary(self) -> str:
        """``"replayed N model calls and M tool calls, sent K"``."""
        return (
            f"replayed {self.replayed_calls} model calls and {self.replayed_tools} tool calls, "
            f"sent {self.sent}"
        )


def _declined_why(row: ToolCallRecord, started: dict[str, Any]) -> str | None:
    """Why a finished call is run again rather than replayed, or ``None``: replay it."""
    if started.get("replay") is False:
        return "replay: false"
    if row.store_reads or row.name == "spawn":  # children's results: prompt items
        return "its result reached the prompt by more than its text"
    return None


def _same_request(record: CallRecord, prompt: Prompt, parameters: dict[str, Any] | None) -> bool:
    """Whether a recorded call asked what this call would ask (prompt, then parameters)."""
    if record.prompt_sha256 != prompt.manifest.prompt_sha256:
        return False
    if record.parameters is None or parameters is None:  # recorded before parameters were
        return True
    return json.dumps(record.parameters, sort_keys=True) == json.dumps(parameters, sort_keys=True)
