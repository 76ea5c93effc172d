"""`AgentChat`: one agent in a multi-turn conversation, with memory and a bounded window.

Each turn: the user's message joins the agent's `ConversationMemory`; relevant long-term
memories (and the group's shared conversation, when declared) are retrieved, the least
relevant left out when the prompt would not fit its budget; the
`ContextBuilder` builds the prompt (manifest with every turn, memory record and the last
compression); the model answers; the answer joins the conversation; then the
`ContextWindowMonitor` compresses the conversation if its turns reach the trigger (recalled
memories come on top, bounded by ``recall_limit`` and the prompt budget).
Every call, the monitor's summaries included, is recorded in the ledger when one is given
(one run per conversation, team ``chat:<agent>``), so ``clearance verify`` checks it; the run's
config records where the long-term memory lives (``memory.url``, password masked, SQLite path
absolute), as runs do, so ``verify`` checks memory items with no flags, and the budget it
keeps to (``budget`` and ``prices``, as a run records them).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from clearance._agents.budget_meter import BudgetMeter
from clearance._agents.caller import CallBudget, ModelCaller
from clearance._agents.telemetry import agent_span
from clearance._context.answers import kept_answer, mark_answer
from clearance._context.builder import ContextBuilder
from clearance._context.window import (
    MAX_CONTEXT_WINDOW,
    CompressionRecord,
    ContextWindowMonitor,
    Strategy,
)
from clearance._core.budget import RunBudget
from clearance._core.errors import ConfigError, LimitExceeded, ModelError
from clearance._core.ids import new_id
from clearance._core.memory_spec import MAX_RECALL, MemoryGroup, group_members
from clearance._core.names import check_count
from clearance._core.origins import Subject
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.spec import Agent
from clearance._core.vocabulary import EventKind, PromptKind
from clearance._orchestration.chat_config import chat_config
from clearance._orchestration.model_pool import check_room_for_prompt
from clearance._orchestration.run_memory import with_memories_that_fit
from clearance._state.conversation import USER_AUTHOR, ConversationMemory, Turn
from clearance._state.ledger import Recorder
from clearance._state.ledger.recorder import record_breach
from clearance._state.memory import MemoryRecord, PersistentMemory
from clearance._state.memory_calls import DEFAULT_MEMORY_TIMEOUT_S, memory_call
from clearance._state.team_conversation import TeamConversation
from clearance.models._base import ChatModel, framing_tokens

__all__ = ["KEPT_PROMPTS", "AgentChat", "check_chat_name"]

KEPT_PROMPTS = 100
"""Most prompts `AgentChat.prompts` keeps (the latest): a session of any length holds a
bounded number (every prompt is in the ledger)."""

T = TypeVar("T")


class AgentChat:
    """A conversation between a user and one agent that never overflows the context window.

    The prompt of each turn leaves the agent's ``max_output_tokens`` free in the window:
    when ``trigger_threshold`` of the window would not, the trigger is lowered to the share
    that does, and ``target_ratio`` in proportion. An agent's ``limits.max_prompt_tokens``
    bounds every prompt, as on every call path (the window is narrowed to it plus
    ``max_output_tokens``; a summarizing prompt too), and a summary asks for at most its
    ``max_output_tokens``. Its ``max_model_calls`` bounds the calls of each message: the
    answer and the summaries the message causes, together.

    Args:
        agent: The agent.
        model: Its model; its ``context_window`` and tokenizer bound the prompts.
        memory: Long-term memory of the agent: dropped turns are recorded there before they
            leave the conversation (not when the agent's ``memory.record`` is ``"none"``;
            into the group its ``memory.record_to`` names, when it names one), and relevant
            records are retrieved into each prompt. ``None`` for none.
        memory_groups: The team's declared memory groups.
        shared_group: Name of a group whose shared conversation the agent takes part in
            (the group must declare ``shared_conversation``).
        strategy: Compression strategy of the monitor.
        trigger_threshold: See `ContextWindowMonitor`.
        target_ratio: See `ContextWindowMonitor`.
        recall_limit: Most long-term records retrieved per turn (0 to 50).
        ledger: Where each call is recorded (as run ``run_id``); ``None`` for no record.
        context_window: Overrides ``model.context_window``.
        memory_timeout_s: Deadline in seconds of each long-term memory operation (recall,
            recording dropped turns, posting to the shared conversation). Each runs off the
            event loop (`memory_call`); past its deadline the turn fails with `StoreError`.
        budget: The most tokens and US dollars the conversation may spend, as a run's
            (`RunBudget`): every call of it (summaries too) is checked before it is sent
            and charged after; ``None`` for no cap.

    Attributes:
        prompts: The latest `KEPT_PROMPTS` prompts of the conversation's turns, oldest first.
        last_answer: The answer of the latest `say`, set as soon as the model gave it (before
            the conversation is compressed), ``None`` until then: when `say` fails after the
            answer came (a summary that failed), the answer is still there to show.
        interrupted: Whether the latest `say` was stopped midway (cancelled, Ctrl-C): `finish`
            then records the run ``interrupted``, as a run stopped so is.

    Raises:
        ConfigError: The agent is named ``user`` (`check_chat_name`), the model has no known
            context window and none is given, the window
            is not an integer from 1 to `MAX_CONTEXT_WINDOW` or leaves no room for a prompt
            next to the agent's ``max_output_tokens`` (or for the agent's instructions and a
            message, once compressed to ``target_ratio``), ``recall_limit`` is not an integer
            from 0 to 50, or
            ``shared_group`` is not a declared group, or ``memory_timeout_s`` is not a
            number of seconds above 0 and at most a day, or ``budget`` caps the cost
            and has no price for the model.
    """

    def __init__(
        self,
        *,
        agent: Agent,
        model: ChatModel,
        memory: PersistentMemory | None = None,
        memory_groups: tuple[MemoryGroup, ...] = (),
        shared_group: str | None = None,
        strategy: Strategy = "drop_oldest",
        trigger_threshold: float = 0.75,
        target_ratio: float = 0.40,
        recall_limit: int = 3,
        ledger: Recorder | None = None,
        context_window: int | None = None,
        memory_timeout_s: float = DEFAULT_MEMORY_TIMEOUT_S,
        budget: RunBudget | None = None,
    ):
        check_chat_name(agent)
        if budget is not None:
            budget.check_prices({model.model_id})
        window = context_window if context_window is not None else model.context_window
        if window is None:
            raise ConfigError("the model's context window is unknown", field="context_window")
        check_count("context_window", window, least=1, most=MAX_CONTEXT_WINDOW)
        check_count("recall_limit", recall_limit, least=0, most=MAX_RECALL)
        check_room_for_prompt(agent, window, field="context_window")
        window = _prompt_window(agent, window)
        # Each prompt leaves room for the answer and for what the chat template adds.
        self._reserved = agent.limits.max_output_tokens + framing_tokens(model)
        trigger_threshold, target_ratio = _room_for_answer(
            window, self._reserved, trigger_threshold, target_ratio
        )
        self.agent = agent
        self.model = model
        self.memory = memory
        self.conversation = ConversationMemory(agent=agent.name)
        self.builder = ContextBuilder(
            count_tokens=model.count_tokens, memory_groups=group_members(memory_groups)
        )
        self.monitor = ContextWindowMonitor(
            builder=self.builder,
            context_window=window,
            trigger_threshold=trigger_threshold,
            target_ratio=target_ratio,
            strategy=strategy,
            # An agent whose memory records nothing (`record: none`) keeps nothing it drops.
            long_term=None if agent.memory is not None and agent.memory.record == "none"
            else memory,
            # A summary is a call of the agent: at most its max_output_tokens, as any other.
            summary_max_tokens=max(1, min(max(16, window // 10), agent.limits.max_output_tokens,
                                          int(window * target_ratio) - 1)),
            memory_timeout_s=memory_timeout_s,
            # Into the group its memory.record_to names, as a run records its results.
            record_to=agent.memory.record_to if agent.memory is not None else None,
            # A summarizing prompt leaves room for the chat template too, as every prompt.
            framing_tokens=self._reserved - agent.limits.max_output_tokens,
        )  # fmt: skip
        _check_room_for_instructions(self.monitor, agent, field="context_window")
        self.team: TeamConversation | None = None
        if shared_group is not None:
            group = next((g for g in memory_groups if g.name == shared_group), None)
            if group is None or memory is None:
                raise ConfigError(
                    f"no declared memory group {shared_group!r} (or no memory)",
                    field="shared_group",
                )
            self.team = TeamConversation(memory, group)
        self.recall_limit = recall_limit
        self.memory_timeout_s = self.monitor.memory_timeout_s
        self.ledger = ledger
        self.run_id = new_id("run")
        self.compressions: list[CompressionRecord] = []
        self.prompts: deque[Prompt] = deque(maxlen=KEPT_PROMPTS)
        self.last_answer: str | None = None
        self.interrupted = False
        self._pending: list[CompressionRecord] = []
        meter = BudgetMeter(budget, run_id=self.run_id) if budget is not None else None
        self.caller = ModelCaller(
            ledger=ledger, run_id=self.run_id if ledger else None, meter=meter
        )
        if ledger is not None:
            ledger.start_run(
                run_id=self.run_id,
                team=f"chat:{agent.name}",
                goal=None,
                graph=None,
                config=chat_config(agent, model.model_id, memory, memory_groups, budget),
            )

    def finish(self, *, error: str | None = None, stopped_by: str = "interrupted") -> None:
        """Record the end of the conversation's run: completed, failed or interrupted.

        Failed with ``error`` when one is given. A session ended between messages
        (``/quit``, end of input, Ctrl-C at the prompt) completed. One whose latest `say` was
        stopped midway (`interrupted`) is ``interrupted``, as a run stopped so is; its
        error says how (``stopped_by``: ``"interrupted"``, ``"terminated"``), whether the
        message was answered, and that it is not resumed (a chat has no tasks to run again).
        Does nothing without a ledger.

        Raises:
            StoreError: The ledger failed.
        """
        if self.ledger is None:
            return
        status = "failed" if error else "completed"
        if error is None and self.interrupted:
            status, error = "interrupted", _interruption(stopped_by, self.last_answer)
        self.ledger.finish_run(
            self.run_id,
            status=status,
            synthesis=None,
            usage=self.caller.usage,
            error=error,
        )

    async def say(self, text: str) -> str:
        """Send the user's message; return the agent's answer.

        A limit that stops the turn is recorded (a ``limit_exceeded`` event), as in a run.

        With tracing, each turn is a trace of its own: an ``invoke_agent`` span whose
        ``gen_ai.conversation.id`` is the chat's run id (a chat has no end a span could wait
        for), over the turn's model calls.

        Raises:
            LimitExceeded: The message is too large (`check_message`: the conversation is
                unchanged), the prompt does not fit even after compression, or the message
                would cause more model calls than the agent's ``max_model_calls`` (the call
                over it is not sent).
            ModelError: The model failed, or its answer was empty.
            StoreError: The long-term memory failed or did not answer within
                ``memory_timeout_s``.
        """
        self.interrupted = False
        with agent_span(run_id=self.run_id, agent=self.agent.name, conversation_id=self.run_id):
            try:
                return await self._say(text)
            except (asyncio.CancelledError, KeyboardInterrupt):  # Ctrl-C, SIGTERM, cancelled
                self.interrupted = True
                raise
            except LimitExceeded as exc:  # on record, as a run's breach is
                if self.ledger is not None:
                    subject = exc.subject or f"conversation:{self.agent.name}"
                    record_breach(self.ledger, self.run_id, subject, exc)
                raise

    def check_message(self, text: str) -> None:
        """Refuse a message too large for the conversation, before anything is sent or kept.

        Raises:
            LimitExceeded: ``text`` would not fit even with every earlier turn compressed
                away (`ContextWindowMonitor.check_turn`); the conversation is unchanged.
        """
        turn = Turn(id="turn_check", role="user", content=text, author="user")
        self.monitor.check_turn(self.agent, self.conversation.get_messages(), turn)

    async def _say(self, text: str) -> str:
        self.last_answer = None
        self.check_message(text)
        # A message is a chat's task: its answer and the summaries it causes count toward the
        # agent's max_model_calls, as a task's calls do.
        calls = CallBudget(
            self.agent.limits.max_model_calls, subject=f"conversation:{self.agent.name}"
        )
        turn = Turn(id=new_id("turn"), role="user", content=text, author=USER_AUTHOR)
        if self.ledger is not None:  # received: on record once, before a prompt shows it
            subject = str(Subject(PromptKind.CONVERSATION, self.agent.name))
            data = {"turn_id": turn.id, "sha256": sha256_text(text)}
            self.ledger.record_event(self.run_id, EventKind.USER_MESSAGE, subject, data)
        self.conversation.add(turn)
        await self._compress(calls)  # the user's turn may itself reach the trigger
        budget = self.monitor.context_window - self._reserved
        turns, compression = self.conversation.get_messages(), self._compression()
        prompt = with_memories_that_fit(  # the least relevant left out when over the budget
            lambda memories: self.builder.build_conversation_prompt(
                agent=self.agent,
                turns=turns,
                memories=memories,
                compression=compression,
                max_prompt_tokens=budget,
            ),
            tuple(await self._memory("recall", lambda: self._recall(text))),
        )
        self._pending = []
        self.prompts.append(prompt)
        response = await self.caller.call(
            subject=prompt.manifest.subject, agent=self.agent, model=self.model, prompt=prompt,
            budget=calls,
        )  # fmt: skip
        text = self._kept(prompt.manifest.subject, response.text, response.finish_reason)
        self.last_answer = text  # shown even if compressing after it fails
        answer = Turn(id=new_id("turn"), role="assistant", content=text, author=self.agent.name)
        self.conversation.add(answer)
        if self.team is not None:
            team = self.team
            await self._memory("posting to the shared conversation", lambda: team.post(answer))
        await self._compress(calls, keep_newest=False)  # an answer too long to keep may go too
        return text

    def _kept(self, subject: str, text: str, finish_reason: str | None) -> str:
        """The answer as every call path keeps one: refused empty, marked when cut off.

        A cut-off answer (`kept_answer`: an ``answer_marked`` event) is shown, kept in the
        conversation, posted to the shared conversation and remembered with its marks,
        never as a whole answer.

        Raises:
            ModelError: The answer is empty (nothing would be shown, kept or posted).
        """
        if not text.strip():
            raise ModelError("the model returned an empty completion", model_id=self.model.model_id)
        if self.ledger is None:
            return mark_answer(text, finish_reason=finish_reason).text
        return kept_answer(self.ledger, self.run_id, subject, text, finish_reason=finish_reason)

    async def _compress(self, calls: CallBudget, *, keep_newest: bool = True) -> None:
        record = await self.monitor.after_turn(
            agent=self.agent,
            conversation=self.conversation,
            summarize_with=self.caller.summarizer(self.agent, self.model, budget=calls),
            keep_newest=keep_newest,
        )
        if record is not None:
            self.compressions.append(record)
            self._pending.append(record)

    def _compression(self) -> dict[str, Any] | None:
        """The latest compression since the last prompt; earlier ones under ``"earlier"``."""
        if not self._pending:
            return None
        data = self._pending[-1].to_dict()
        if len(self._pending) > 1:
            data["earlier"] = [r.to_dict() for r in self._pending[:-1]]
        return data

    async def _memory(self, what: str, function: Callable[[], T]) -> T:
        """A long-term memory operation, off the event loop and under its deadline."""
        return await memory_call(
            what, function, timeout_s=self.memory_timeout_s, where="the memory store"
        )

    def _recall(self, text: str) -> list[MemoryRecord]:
        held = {t.id for t in self.conversation.get_messages()}
        found: list[MemoryRecord] = []
        if self.memory is not None:
            found = self.memory.retrieve(text, limit=self.recall_limit)
        if self.team is not None:
            found.extend(self.team.view(text))
        unique = {r.id: r for r in found if r.id not in held}
        return list(unique.values())


def check_chat_name(agent: Agent, *, field: str = "agent") -> None:
    """Refuse an agent named ``user`` for a chat: its answers would read as the user's.

    A chat titles each turn with its author, ``user`` for the user's messages.

    Raises:
        ConfigError: The agent is named ``user``; ``field`` names where the name was given.
    """
    if agent.name == USER_AUTHOR:
        raise ConfigError(
            f"an agent named {USER_AUTHOR!r} cannot chat: its answers would be titled as the "
            "user's messages (rename the agent, or run the team file)",
            field=field,
        )


def _interruption(stopped_by: str, answer: str | None) -> str:
    """The recorded error of a session stopped during a message."""
    if answer is None:
        during = "while a message waited for its answer (not answered)"
    else:
        during = "while the conversation was compressed after an answer"
    return f"{stopped_by} {during}; a chat session is not resumed"


def _check_room_for_instructions(
    monitor: ContextWindowMonitor, agent: Agent, *, field: str
) -> None:
    """Refuse a window in which no message could ever be sent: the instructions fill it.

    Raises:
        ConfigError: The prompt of an empty message (the agent's instructions, the closing
            line) is over what the conversation is compressed to; ``field`` names the window.
    """
    empty = Turn(id="turn_check", role="user", content="", author="user")
    try:
        monitor.check_turn(agent, [], empty)
    except LimitExceeded as exc:
        raise ConfigError(
            f"a context window of {monitor.context_window} tokens is compressed to "
            f"{exc.maximum} tokens, fewer than the {exc.value} the instructions of agent "
            f"{agent.name!r} take with an empty message: use a larger context window",
            field=field,
        ) from None


def _prompt_window(agent: Agent, window: int) -> int:
    """The window the conversation is kept within: the agent's ``max_prompt_tokens`` applies.

    A turn's prompt may take at most ``window - max_output_tokens`` tokens, and at most the
    agent's ``limits.max_prompt_tokens`` when it declares one (as on every other call path):
    the window is narrowed to that prompt plus the answer's room.
    """
    most = agent.limits.max_prompt_tokens
    if most is None:
        return window
    return min(window, most + agent.limits.max_output_tokens)


def _room_for_answer(
    window: int, reserved: int, trigger_threshold: float, target_ratio: float
) -> tuple[float, float]:
    """The monitor's ratios, lowered so a compressed prompt leaves room for the answer.

    A prompt may take at most ``window - reserved`` tokens (the answer's ``max_output_tokens``
    and the model's `framing_tokens`). When that is below the trigger, the trigger becomes
    that share of the window and the target shrinks in proportion; otherwise both are kept.

    Raises:
        ConfigError: ``reserved`` leaves no room for a prompt in the window.
    """
    if window <= reserved:
        raise ConfigError(
            f"a context window of {window} tokens leaves no room for a prompt next to the "
            f"{reserved} tokens kept for the answer and the chat template",
            field="context_window",
        )
    share = (window - reserved) / window
    if share >= trigger_threshold:
        return trigger_threshold, target_ratio
    return share, target_ratio * share / trigger_threshold
