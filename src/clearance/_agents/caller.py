"""`ModelCaller`: the one way a model is called.

Every model call of the project (a task, a tool-loop step, a delegate, an isolated subagent,
a clarification, a spawned child, a memory summary, the plan and the synthesis) goes through
`ModelCaller.call`, which applies the calling agent's limits in one place:

- ``max_model_calls``: a `CallBudget` shared by everything one task causes (its tool loop,
  its delegates, its clarification rounds and its spawned children; a delegate or child
  also within its own agent's), so a model that answers with many delegate or spawn calls
  per turn cannot fan out without bound;
- ``max_output_tokens`` and ``max_tokens_per_step``: the completion limit sent, and checked
  against the usage the provider reports; the answer's size is capped too
  (`max_response_chars` of the ``max_tokens`` sent);
- ``max_tool_calls_per_step``: an answer asking for more tool calls fails the call before any
  of them is recorded or run, on every call path (the tool loop runs only what this returns);
- ``timeout_s``: the deadline of the whole call, every attempt and backoff included;
  ``attempt_timeout_s``: the most one attempt may take before it is abandoned and retried;
- ``retries``: transient errors are retried with backoff (see `with_retries`);
- the run's budget (`BudgetMeter`): once the run has used its tokens or cost, the call is
  refused with `BudgetExceeded` before anything is sent, and a call in flight holds a
  reservation so that concurrent calls cannot all cross it;

then translates provider errors into `ModelError`, validates what came back (Unicode text,
token counts within range), adds the usage up, and records every attempt in the ledger:
the request is recorded, and committed, before it is sent, and its outcome (the response, or
the error) after, so the ledger shows every request that left the process, even one in
flight when the process was killed.
The shape follows pydantic-ai's ``WrapperModel`` and ``UsageLimits``: one wrapper around
the model, limits that carry their own checks.

With a `CallListener`, every call streams: the listener hears each attempt start
(``"model_call"``), each piece of text as the provider streams it (``"text"``; a provider
that cannot stream is heard once, with the whole text) and each tool call the model asks
for (``"tool_call"``). A `ServingListener` also hears the task each call serves: the task of
its budget (`CallBudget.task_id`), so a delegate's, a child's, an isolated dispatch's, a
clarification's or a review's call names the task it serves. Streaming changes nothing
else: the same deadline (over the whole stream, a server trickling its answer included), the
same checks, and the same records (the whole text as the response, exactly as without
streaming).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from clearance._agents.answer_checks import checked_response, paid_usage
from clearance._agents.budget_meter import BudgetMeter
from clearance._agents.call_budget import (
    CallBudget,
    CallEventKind,
    CallListener,
    ServingListener,
    task_of,
)
from clearance._agents.replay import ReplaySource, tool_calls_data
from clearance._agents.retry import RetryPolicy, retry_after
from clearance._agents.telemetry import model_call_span
from clearance._agents.tools import checked_tool_call
from clearance._context.answers import kept_answer, mark_answer
from clearance._context.window import SummaryCall
from clearance._core.clock import Clock, utc_now
from clearance._core.deadline import deadline
from clearance._core.errors import ClearanceError, LimitExceeded, ModelError
from clearance._core.hooks import HookRunner, ModelCallInfo
from clearance._core.prompt import Prompt
from clearance._core.reasons import bounded_reason
from clearance._core.spec import Agent
from clearance._core.vocabulary import EventKind, RunEventKind
from clearance._state.ledger import Recorder
from clearance.models._base import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    Usage,
)

__all__ = ["CallBudget", "CallEventKind", "CallListener", "ModelCaller", "ServingListener"]

_Hear = Callable[[CallEventKind, str, str | None, str], None]


def _hearing(listener: CallListener | ServingListener | None) -> _Hear | None:
    """What the caller tells each call event: ``(kind, subject, task_id, detail)``."""
    if listener is None or isinstance(listener, ServingListener):
        return None if listener is None else listener.hear
    return lambda kind, subject, task_id, detail: listener(kind, subject, detail)


@dataclass(kw_only=True, slots=True)
class _Call:
    """One call's fixed parts, shared by its attempts.

    Nothing assigns to its fields; it is not frozen because one is made per model call and a
    frozen dataclass pays for an ``object.__setattr__`` per field.
    """

    subject: str
    agent: Agent
    model: ChatModel
    request: ModelRequest
    attempts: int
    # A recorded request left pending, sent again under its id by the first attempt.
    reuse: list[str] = dataclasses.field(default_factory=list)
    # This attempt's stream: [pieces heard, 1 while open] (see `ModelCaller._streaming`).
    stream: list[int] = dataclasses.field(default_factory=lambda: [0, 1])
    # The task the call serves (its budget's), told to a `ServingListener`.
    task_id: str | None = None


class ModelCaller:
    """Calls models under their agents' limits, retrying, validating and recording each call.

    Args:
        ledger: Where every attempt is recorded; ``None`` records nothing.
        run_id: The run the calls belong to (already started in ``ledger``); required
            with a ledger.
        retry_policy: Backoff between attempts; ``None`` means `RetryPolicy()`.
        clock: Timestamps of the records (aware UTC).
        monotonic: Seconds counter for latencies and deadlines.
        listener: Hears every call's progress, and makes calls stream (see the module
            docstring); a `ServingListener` hears the task each call serves too; ``None``
            for neither.
        meter: The run's budget, checked before and charged after each call; ``None``
            for no budget.
        hooks: User hooks told before and after each call (`RunHooks`); ``None`` for none.
        replay: The recorded steps of a run being resumed (`ReplaySource`): a call whose
            prompt is the recorded one is answered from its record, not sent; ``None``
            sends every call.

    Attributes:
        usage: Tokens of every answer received through this caller: each successful call's,
            and each answer that arrived but failed its checks (it was paid for); replayed
            calls are not counted again.
    """

    def __init__(
        self,
        *,
        ledger: Recorder | None = None,
        run_id: str | None = None,
        retry_policy: RetryPolicy | None = None,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.perf_counter,
        listener: CallListener | ServingListener | None = None,
        meter: BudgetMeter | None = None,
        hooks: HookRunner | None = None,
        replay: ReplaySource | None = None,
    ) -> None:
        if ledger is not None and run_id is None:
            raise ValueError("a ModelCaller that records needs the run_id")
        self.ledger = ledger
        self.run_id = run_id
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy()
        self.usage = Usage()
        self._clock = clock
        self._monotonic = monotonic
        self.listener = listener
        self._hear = _hearing(listener)
        self.meter = meter
        self.hooks = hooks or HookRunner()
        self.replay = replay

    async def call(
        self,
        *,
        subject: str,
        agent: Agent,
        model: ChatModel,
        prompt: Prompt,
        json_schema: dict[str, Any] | None = None,
        tools: tuple[dict[str, Any], ...] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
        budget: CallBudget | None = None,
    ) -> ModelResponse:
        """Make one model call for ``agent`` with ``prompt`` (built by the `ContextBuilder`).

        Args:
            subject: What the call is for (``task:<id>``, ``delegation:<call id>``,
                ``isolated:<task id>``, ``child:<id>``, ``synthesis``...); recorded.
            agent: Whose limits apply and in whose name the call is recorded.
            model: The model to call.
            prompt: The prompt (its manifest is recorded with the call).
            json_schema: Ask for a JSON answer matching this schema.
            tools: Tools offered, in the OpenAI function-calling format.
            max_tokens: Most tokens to generate; ``None`` means the agent's
                ``max_output_tokens`` (never more than its ``max_tokens_per_step``).
            temperature: Sampling temperature; ``None`` means the agent's
                ``sampling.temperature``, else 0. The agent's other sampling settings
                (``top_p``, ``repeat_penalty``, ``stop``) are sent as they are.
            budget: The task's call budget, charged one call; ``None`` for none. A
                listener hears the call as serving its task (`CallBudget.task_id`).

        Returns:
            The response of the first successful attempt.

        Raises:
            BudgetExceeded: The run has used its budget (nothing is sent).
            LimitExceeded: ``max_model_calls`` (nothing is sent), ``timeout_s`` (the call's
                deadline passed), ``attempt_timeout_s`` (the last attempt was abandoned),
                ``max_tokens_per_step`` (the model reported more completion tokens) or
                ``max_tool_calls_per_step`` (the answer asked for more tool calls).
            ModelError: The model failed (after the agent's retries if transient), or
                returned something unusable (see `checked_response`): fields of the wrong
                type, text that is not valid Unicode, more than `max_response_chars`, or
                token counts out of range.
        """
        if budget is not None:
            budget.take()
        limits = agent.limits
        cap = limits.max_output_tokens if max_tokens is None else max_tokens
        if limits.max_tokens_per_step is not None:
            cap = min(cap, limits.max_tokens_per_step)
        sampling = agent.sampling
        if temperature is None:
            temperature = sampling.temperature if sampling.temperature is not None else 0.0
        request = ModelRequest(
            prompt=prompt,
            max_tokens=cap,
            json_schema=json_schema,
            tools=tools,
            temperature=temperature,
            timeout_s=limits.timeout_s,
            top_p=sampling.top_p,
            repeat_penalty=sampling.repeat_penalty,
            stop=sampling.stop,
        )
        found = (
            self.replay.answer(subject, prompt, request.parameters())
            if self.replay is not None
            else None
        )
        if isinstance(found, ModelResponse):  # durable resume: taken from the ledger
            return found
        if self.meter is not None:  # the run's budget: a replayed answer costs nothing
            self.meter.check(subject)
        call = _Call(
            subject=subject, agent=agent, model=model, request=request,
            attempts=limits.retries + 1, reuse=[found] if found is not None else [],
            task_id=budget.task_id if budget is not None else task_of(subject),
        )  # fmt: skip
        started = self._monotonic()
        info = None
        if self.hooks:
            info = ModelCallInfo(run_id=self.run_id, subject=subject, agent=agent.name,
                                 model_id=model.model_id, prompt=prompt)  # fmt: skip
            await self.hooks("before_model_call", info)
        if self.meter is None:  # no run budget: nothing to reserve
            response = await self._made(call, started, info)
        else:
            async with self.meter.reserved(  # concurrent calls do not race past the budget
                subject, model.model_id, prompt_tokens=prompt.manifest.total_tokens,
                max_tokens=cap,
            ):  # fmt: skip
                response = await self._made(call, started, info)
        if info is not None:
            await self.hooks("after_model_call", info, text=response.text, usage=response.usage,
                             error=None)  # fmt: skip
        return response

    async def _made(self, call: _Call, started: float, info: ModelCallInfo | None) -> ModelResponse:
        """The call's attempts (retried as its agent allows) in its span, then its charge."""
        limits = call.agent.limits
        with model_call_span(
            run_id=self.run_id, subject=call.subject, agent=call.agent.name,
            model_id=call.model.model_id, request=call.request,
        ) as record:  # fmt: skip
            try:
                # `with_retries`, its first attempt awaited here: no coroutine in between.
                first: Exception | None = None
                try:
                    response = await self._attempt(call, 1, started)
                except Exception as exc:
                    first = exc  # retried outside this handler, as `with_retries` does
                if first is not None:
                    response = await retry_after(
                        first, partial(self._attempt, call, started=started),
                        retries=limits.retries, policy=self.retry_policy,
                        time_left=self._time_left(limits.timeout_s, started),
                    )  # fmt: skip
            except ClearanceError as exc:
                if info is not None:
                    await self.hooks("after_model_call", info, text=None, usage=None,
                                     error=str(exc))  # fmt: skip
                raise
            record(response)
        self._charge(call.model.model_id, response.usage)
        return response

    def summarizer(
        self, agent: Agent, model: ChatModel, *, budget: CallBudget | None = None
    ) -> SummaryCall:
        """A `SummaryCall` for the context-window monitor: each summary is a call made here.

        The call's subject is the prompt's (``summary:<agent>``); its ``max_tokens`` is the
        monitor's summary budget (within the agent's ``max_tokens_per_step``); each summary
        is charged to ``budget`` (a chat message's ``max_model_calls``), ``None`` for none.
        A summary cut off at ``max_tokens`` is kept marked as every cut-off answer is
        (`kept_answer`, recorded as an ``answer_marked`` event), never as a whole summary.
        """

        async def summarize(prompt: Prompt, *, max_tokens: int) -> str:
            subject = prompt.manifest.subject
            response = await self.call(
                subject=subject, agent=agent, model=model, prompt=prompt,
                max_tokens=max_tokens, budget=budget,
            )  # fmt: skip
            finish = response.finish_reason
            if not response.text.strip():  # refused by the monitor, not marked into text
                return response.text
            if self.ledger is None or self.run_id is None:
                return mark_answer(response.text, finish_reason=finish).text
            return kept_answer(self.ledger, self.run_id, subject, response.text,
                               finish_reason=finish)  # fmt: skip

        return summarize

    async def _attempt(self, call: _Call, number: int, started: float) -> ModelResponse:
        """One attempt: the request recorded (and committed) before it is sent, then its outcome.

        The outcome is recorded whether the attempt succeeds, fails or is cancelled. An answer
        received that then failed (refused by `checked_response`, or the attempt stopped after
        it came) was paid for: its usage is recorded with the failed attempt and charged to
        the caller's usage and the run's budget, both or neither.

        Raises:
            StoreError: The request could not be recorded (nothing was sent).
        """
        started_at, t0 = self._clock(), self._monotonic()
        error: str | None = None
        response: ModelResponse | None = None
        # The answer as it arrived, before its checks; or the provider's error refusing it.
        received: object = None
        call_id: str | None = None
        if self.ledger is not None:
            assert self.run_id is not None
            call_id = call.reuse.pop() if call.reuse else self.ledger.record_request(
                run_id=self.run_id, subject=call.subject, agent=call.agent.name,
                model_id=call.model.model_id, prompt=call.request.prompt, started_at=started_at,
                parameters=call.request.parameters(),
            )  # fmt: skip
            await self.ledger.wait_committed()  # what leaves the process is on record first
        streamed = self._streaming(call, number)
        try:
            received = await self._send(streamed or call, started)
            response = checked_response(
                received, model_id=call.model.model_id, agent=call.agent, request=call.request,
                subject=call.subject,
            )  # fmt: skip
            if response.tool_calls:
                calls = tuple(checked_tool_call(c) for c in response.tool_calls)
                response = dataclasses.replace(response, tool_calls=calls)
            if streamed is not None:
                self._heard(call, streamed, response)
            return response
        except ClearanceError as exc:
            error = bounded_reason(f"attempt {number} of {call.attempts}: {exc}")
            received = exc if received is None else received  # its `paid`, if any
            raise
        except BaseException:  # cancelled (Ctrl-C, a sibling's failure): the request left
            error = f"attempt {number} of {call.attempts}: cancelled"
            raise
        finally:
            # An answer that arrived and then failed (refused by its checks or its provider's,
            # or the attempt stopped after it came: a listener that cannot write, Ctrl-C) was
            # paid for: it is charged exactly when its usage is recorded, so the run's totals,
            # a resumed run's budget and the sum of its calls agree.
            paid = paid_usage(received) if error is not None else None
            if paid is not None:
                self._charge(call.model.model_id, paid)
            if streamed is not None:
                streamed.stream[1] = 0  # nothing more is heard from this attempt
            if self.ledger is not None and call_id is not None:
                assert self.run_id is not None
                if error is None and response is not None and response.tool_calls:
                    self.ledger.record_event(  # before the answer: it is on record with its calls
                        self.run_id, EventKind.MODEL_TOOL_CALLS, call.subject,
                        {"call_id": call_id, "tool_calls": tool_calls_data(response.tool_calls)},
                    )  # fmt: skip
                self.ledger.finish_call(
                    call_id, run_id=self.run_id, response=response if error is None else None,
                    error=error, latency_s=self._monotonic() - t0, usage=paid,
                )  # fmt: skip

    def _time_left(self, timeout_s: float | None, started: float) -> Callable[[], float] | None:
        """Seconds left before the call's deadline (``timeout_s`` from ``started``), if any."""
        if timeout_s is None:
            return None
        return lambda: timeout_s - (self._monotonic() - started)

    def _charge(self, model_id: str, usage: Usage) -> None:
        """Add ``usage`` to the caller's total and charge it to the run's budget."""
        self.usage = self.usage + usage
        if self.meter is not None:
            self.meter.charge(model_id, usage)

    def _streaming(self, call: _Call, number: int) -> _Call | None:
        """The attempt's call with a streaming request, when there is a listener."""
        hear = self._hear
        if hear is None:
            return None
        subject, task_id = call.subject, call.task_id
        hear(RunEventKind.MODEL_CALL, subject, task_id, f"attempt {number}")
        state = [0, 1]  # pieces heard; 1 while the attempt is open

        def sink(piece: str) -> None:
            if state[1]:  # a provider thread may go on briefly after an abandoned attempt
                state[0] += 1
                hear(RunEventKind.TEXT, subject, task_id, piece)

        request = dataclasses.replace(call.request, stream=sink)
        return dataclasses.replace(call, request=request, stream=state)

    def _heard(self, call: _Call, streamed: _Call, response: ModelResponse) -> None:
        """Tell the listener the text a provider did not stream, and the tool calls."""
        hear = self._hear
        assert hear is not None
        if not streamed.stream[0] and response.text:
            hear(RunEventKind.TEXT, call.subject, call.task_id, response.text)
        for tool_call in response.tool_calls:
            hear(RunEventKind.TOOL_CALL, call.subject, call.task_id, tool_call.name)

    async def _send(self, call: _Call, started: float) -> ModelResponse:
        """Send the request within the attempt's time; translate the provider's errors."""
        limits = call.agent.limits
        t0 = self._monotonic()
        remaining = None
        if limits.timeout_s is not None:
            remaining = limits.timeout_s - (t0 - started)
            if remaining <= 0:
                raise _deadline(call, t0 - started)
        wait = remaining
        if limits.attempt_timeout_s is not None and (
            wait is None or limits.attempt_timeout_s < wait
        ):
            wait = limits.attempt_timeout_s
        try:
            if wait is None:  # no limit: no timer to arm and cancel
                return await call.model.request(call.request)
            async with deadline(wait):  # `asyncio.timeout`, one timer for all calls
                return await call.model.request(call.request)
        except TimeoutError as exc:
            elapsed = self._monotonic() - started
            if remaining is not None and wait == remaining:
                raise _deadline(call, elapsed) from exc
            raise LimitExceeded(
                "attempt_timeout_s",
                value=round(self._monotonic() - t0, 3),
                maximum=limits.attempt_timeout_s or 0,
                subject=call.subject,
            ) from exc
        except ClearanceError:
            raise
        except ConnectionError as exc:
            raise ModelError(
                f"{type(exc).__name__}: {exc}", model_id=call.model.model_id, transient=True
            ) from exc
        except Exception as exc:
            raise ModelError(f"{type(exc).__name__}: {exc}", model_id=call.model.model_id) from exc


def _deadline(call: _Call, elapsed: float) -> LimitExceeded:
    return LimitExceeded(
        "timeout_s",
        value=round(elapsed, 3),
        maximum=call.agent.limits.timeout_s or 0,
        subject=call.subject,
    )
