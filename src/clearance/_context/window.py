"""`ContextWindowMonitor`: keep an agent's conversation prompt inside its context window.

After each turn the monitor measures the prompt the agent's next turn would get (built by the
`ContextBuilder`, counted with the model's tokenizer). When it reaches ``trigger_threshold`` of
the context window, the conversation is compressed until the prompt is at most
``target_ratio`` of the window, with one of two strategies:

- ``"drop_oldest"``: remove the oldest turns; system turns and the newest turn are kept.
- ``"summarize"``: remove the oldest turns as above and put in their place a summary written
  by the agent's own model through a `SummaryCall` the caller passes in (in practice
  `ModelCaller.summarizer`, so the summary is a recorded call under the agent's limits; the
  context layer never calls a model itself). The summarizing prompt is built by the builder
  too, from the dropped turns only.

This is the usual "summary buffer" design of conversation memory (for example LangChain's
``ConversationSummaryBufferMemory``, and MemGPT's queue eviction with recursive summaries,
Packer et al., 2023), with thresholds expressed as fractions of the context window.

When long-term memory is given, every dropped turn is recorded there *before* it leaves the
conversation, so nothing is lost; each recording runs off the event loop, under a deadline
(``memory_timeout_s``, `memory_call`). What was dropped or summarized is returned as a
`CompressionRecord`, which the caller passes to the next prompt's manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from clearance._context.builder import ContextBuilder
from clearance._core.errors import ConfigError, LimitExceeded, ModelError
from clearance._core.ids import new_id
from clearance._core.names import check_count, check_number
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.spec import Agent
from clearance._state.conversation import ConversationMemory, Turn
from clearance._state.memory import MemoryRecord, PersistentMemory
from clearance._state.memory_calls import (
    DEFAULT_MEMORY_TIMEOUT_S,
    check_memory_timeout,
    memory_call,
)

__all__ = [
    "MAX_CONTEXT_WINDOW",
    "CompressionRecord",
    "ContextWindowMonitor",
    "Strategy",
    "SummaryCall",
]

MAX_CONTEXT_WINDOW = 10_000_000
"""Largest context window accepted, in tokens (as ``clearance chat --context-window``)."""


class SummaryCall(Protocol):
    """Writes a summary: calls the agent's model on ``prompt`` and returns the text.

    `ModelCaller.summarizer` makes one that records the call under the agent's limits.
    """

    async def __call__(self, prompt: Prompt, *, max_tokens: int) -> str: ...


Strategy = Literal["drop_oldest", "summarize"]
"""How a conversation over its window is compressed: drop the oldest turns, or summarize them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CompressionRecord:
    """What one compression did.

    Attributes:
        strategy: ``"drop_oldest"`` or ``"summarize"``.
        context_window: The window the ratios refer to, in tokens.
        tokens_before: Prompt tokens when the trigger was reached.
        tokens_after: Prompt tokens after compression.
        dropped: Ids of the turns removed from the conversation, oldest first.
        summary_id: Id of the summary turn that replaced them (``"summarize"`` only).
        summary_sha256: Hash of the summary text (``"summarize"`` only).
        recorded_to_memory: Ids of the dropped turns recorded in long-term memory first
            (already-held ones included).
    """

    strategy: Strategy
    context_window: int
    tokens_before: int
    tokens_after: int
    dropped: tuple[str, ...]
    summary_id: str | None = None
    summary_sha256: str | None = None
    recorded_to_memory: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, for `ContextManifest.compression`."""
        return {
            "strategy": self.strategy,
            "context_window": self.context_window,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "dropped": list(self.dropped),
            "summary_id": self.summary_id,
            "summary_sha256": self.summary_sha256,
            "recorded_to_memory": list(self.recorded_to_memory),
        }


class ContextWindowMonitor:
    """Watches one agent's conversation and compresses it when it nears the context window.

    Args:
        builder: The builder that makes the agent's prompts (and counts their tokens).
        context_window: The model's context window in tokens (prompt plus completion).
        trigger_threshold: Compress when the next prompt is at least this fraction of the
            window.
        target_ratio: Compress until the prompt is at most this fraction of the window.
        strategy: ``"drop_oldest"`` or ``"summarize"``.
        long_term: Where dropped turns are recorded before they are removed; ``None`` to
            drop them for good.
        record_to: The memory group of ``long_term`` they are recorded into (the agent's
            ``memory.record_to``); ``None`` for the agent's private scope.
        summary_max_tokens: Most tokens a summary may take; ``None`` means a tenth of the
            window. The room is reserved below the target before turns are chosen.
        memory_timeout_s: Deadline in seconds of each recording in ``long_term``.
        framing_tokens: Tokens the model's chat template adds around every prompt
            (`framing_tokens`): a summarizing prompt leaves room for them next to the
            summary, as a conversation prompt does next to the answer.

    Raises:
        ConfigError: A ratio that is not a number in (0, 1], a target not below the
            trigger, an unknown strategy, a window that is not an integer from 1 to
            `MAX_CONTEXT_WINDOW`, or
            a ``summary_max_tokens`` that is not a positive integer below the target, or a
            ``memory_timeout_s`` that is not a number of seconds above 0 and at most a day,
            or a ``framing_tokens`` that is not a count of tokens below the window.
    """

    def __init__(
        self,
        *,
        builder: ContextBuilder,
        context_window: int,
        trigger_threshold: float = 0.75,
        target_ratio: float = 0.40,
        strategy: Strategy = "drop_oldest",
        long_term: PersistentMemory | None = None,
        summary_max_tokens: int | None = None,
        memory_timeout_s: float = DEFAULT_MEMORY_TIMEOUT_S,
        record_to: str | None = None,
        framing_tokens: int = 0,
    ):
        check_count("context_window", context_window, least=1, most=MAX_CONTEXT_WINDOW)
        check_count("framing_tokens", framing_tokens, least=0, most=context_window - 1)
        self.memory_timeout_s = check_memory_timeout(memory_timeout_s, field="memory_timeout_s")
        check_number("trigger_threshold", trigger_threshold)
        check_number("target_ratio", target_ratio)
        if not 0 < trigger_threshold <= 1:
            raise ConfigError("must be in (0, 1]", field="trigger_threshold")
        if not 0 < target_ratio < trigger_threshold:
            raise ConfigError("must be above 0 and below the trigger", field="target_ratio")
        if strategy not in ("drop_oldest", "summarize"):
            raise ConfigError(f"unknown strategy {strategy!r}", field="strategy")
        if summary_max_tokens is not None:
            check_count("summary_max_tokens", summary_max_tokens, least=1)
            if summary_max_tokens >= int(context_window * target_ratio):
                raise ConfigError(
                    f"{summary_max_tokens} tokens leave no room below the target of "
                    f"{int(context_window * target_ratio)}",
                    field="summary_max_tokens",
                )
        self.builder = builder
        self.context_window = context_window
        self.trigger_threshold = trigger_threshold
        self.target_ratio = target_ratio
        self.strategy: Strategy = strategy
        self.long_term = long_term
        self.record_to = record_to
        self.framing_tokens = framing_tokens
        self.summary_max_tokens = summary_max_tokens or max(16, context_window // 10)

    @property
    def trigger_tokens(self) -> int:
        """Prompt tokens at which compression starts."""
        return int(self.context_window * self.trigger_threshold)

    @property
    def target_tokens(self) -> int:
        """Most prompt tokens after compression."""
        return int(self.context_window * self.target_ratio)

    def measure(
        self, agent: Agent, turns: Sequence[Turn], memories: Sequence[MemoryRecord] = ()
    ) -> int:
        """Tokens of the conversation prompt these turns and memories would make."""
        prompt = self.builder.build_conversation_prompt(agent=agent, turns=turns, memories=memories)
        return prompt.manifest.total_tokens

    async def after_turn(
        self,
        *,
        agent: Agent,
        conversation: ConversationMemory,
        memories: Sequence[MemoryRecord] = (),
        summarize_with: SummaryCall | None = None,
        keep_newest: bool = True,
    ) -> CompressionRecord | None:
        """Compress ``conversation`` if its next prompt reaches the trigger.

        The oldest turns go first; which ones is found by a binary search over how many to
        drop, so a compression builds a number of prompts logarithmic in the turns held.

        Args:
            agent: The conversation's agent.
            conversation: Its conversation; changed in place.
            memories: Memory records the next prompt will hold (they count toward usage
                but are never dropped).
            summarize_with: Writes the summary with the agent's model; required by
                ``"summarize"``.
            keep_newest: Keep the newest turn whatever its size (the message about to be
                answered); ``False`` after an answer, which then goes last, only when the
                target cannot be met without it (recorded in ``long_term`` first, like
                every dropped turn).

        Returns:
            What was done, or ``None`` when usage was below the trigger.

        Raises:
            ConfigError: ``"summarize"`` without ``summarize_with``.
            LimitExceeded: Even with every droppable turn gone, the prompt is above the
                target (instructions, system turns, the newest turn and memories alone are
                too large).
            ModelError: The summary could not be written.
            StoreError: Recording the dropped turns in ``long_term`` failed or did not
                finish within ``memory_timeout_s``; the conversation is unchanged.
        """
        turns = conversation.get_messages()
        before = self.measure(agent, turns, memories)
        if before < self.trigger_tokens:
            return None
        if self.strategy == "summarize" and summarize_with is None:
            raise ConfigError(
                "the summarize strategy needs the agent's model", field="summarize_with"
            )

        reserve = self.summary_max_tokens if self.strategy == "summarize" else 0
        budget = self.target_tokens - reserve
        dropped = self._choose(agent, turns, memories, budget, keep_newest=keep_newest)
        recorded = await self._record(dropped)

        summary: Turn | None = None
        if self.strategy == "summarize" and dropped:
            assert summarize_with is not None
            summary = await self._summarize(agent, dropped, summarize_with)
        ids = {t.id for t in dropped}
        start = next((i for i, t in enumerate(turns) if t.id in ids), len(turns))
        first_kept = next((t.id for t in turns[start:] if t.id not in ids), None)
        conversation.remove(ids)
        if summary is not None:
            conversation.insert_before(summary, first_kept)
        after = self.measure(agent, conversation.get_messages(), memories)
        if after > self.target_tokens:
            # A summary longer than expected: fall back to dropping more of the oldest turns.
            extra = self._choose(
                agent, conversation.get_messages(), memories, self.target_tokens,
                keep_newest=keep_newest,
            )  # fmt: skip
            recorded += await self._record(extra)
            conversation.remove(t.id for t in extra)
            dropped = [*dropped, *extra]
            after = self.measure(agent, conversation.get_messages(), memories)
        return CompressionRecord(
            strategy=self.strategy,
            context_window=self.context_window,
            tokens_before=before,
            tokens_after=after,
            dropped=tuple(t.id for t in dropped),
            summary_id=summary.id if summary else None,
            summary_sha256=sha256_text(summary.content) if summary else None,
            recorded_to_memory=recorded,
        )

    async def _record(self, turns: Sequence[Turn]) -> tuple[str, ...]:
        """Record dropped turns (not summaries) in long-term memory; their ids (none without).

        Raises:
            StoreError: The memory failed or did not answer within ``memory_timeout_s``.
        """
        real = [t for t in turns if not t.id.startswith("summary_")]
        long_term, group = self.long_term, self.record_to
        if long_term is None or not real:
            return ()
        await memory_call(
            "recording dropped turns",
            lambda: long_term.record(real, group=group, cut=True),  # a long turn: its start
            timeout_s=self.memory_timeout_s,
            where="the memory store",
        )
        return tuple(t.id for t in real)

    def _choose(
        self,
        agent: Agent,
        turns: Sequence[Turn],
        memories: Sequence[MemoryRecord],
        budget: int,
        *,
        keep_newest: bool = True,
    ) -> list[Turn]:
        """The fewest oldest droppable turns whose removal brings the prompt to ``budget``.

        A binary search over how many to drop (removing turns never makes the prompt
        longer), so the prompts measured are logarithmic in the turns, not linear.

        Raises:
            LimitExceeded: Even with every droppable turn gone the prompt is over ``budget``.
        """
        candidates = turns if not keep_newest else turns[:-1]
        droppable = [t for t in candidates if t.role != "system"]

        def tokens_without(count: int) -> int:
            gone = {t.id for t in droppable[:count]}
            return self.measure(agent, [t for t in turns if t.id not in gone], memories)

        if tokens_without(0) <= budget:
            return []
        if (left := tokens_without(len(droppable))) > budget:
            raise self._over(agent, left, budget)
        over, fits = 0, len(droppable)  # dropping `over` is not enough, `fits` is
        while fits - over > 1:
            middle = (over + fits) // 2
            if tokens_without(middle) <= budget:
                fits = middle
            else:
                over = middle
        return droppable[:fits]

    def check_turn(self, agent: Agent, turns: Sequence[Turn], turn: Turn) -> None:
        """Refuse ``turn`` before it joins ``turns`` if no compression could make room for it.

        Compression never drops system turns or the newest turn, so ``turn`` fits only if the
        instructions, the system turns and ``turn`` itself are within the target (less the
        summary's room with ``"summarize"``). Recalled memories are left out: they are
        dropped before a prompt fails.

        Raises:
            LimitExceeded: ``turn`` does not fit (``limit`` is ``"target_ratio"``); nothing
                was changed.
        """
        kept = [t for t in turns if t.role == "system"]
        kept.append(turn)
        reserve = self.summary_max_tokens if self.strategy == "summarize" else 0
        budget = self.target_tokens - reserve
        if (tokens := self.measure(agent, kept)) > budget:
            raise self._over(agent, tokens, budget)

    def _over(self, agent: Agent, tokens: int, budget: int) -> LimitExceeded:
        """The error of a conversation whose undroppable part is ``tokens``, over ``budget``."""
        return LimitExceeded(
            "target_ratio",
            value=tokens,
            maximum=budget,
            subject=f"conversation:{agent.name}",
            hint=(
                f"what cannot be dropped (the newest message, system turns, recalled "
                f"memories) is {tokens} tokens, over the {budget} the conversation is "
                f"compressed to in a context window of {self.context_window}: send a "
                "shorter message or use a larger context window"
            ),
        )

    async def _summarize(
        self, agent: Agent, dropped: Sequence[Turn], summarize_with: SummaryCall
    ) -> Turn | None:
        """The summary of ``dropped``, written in as many calls as the model's window needs.

        The turns go to the model in order, as many per summarizing prompt as fit in the
        window (less the summary's room, and within the agent's ``max_prompt_tokens``); each
        later prompt opens with the summary so far, so the last summary covers them all
        (MemGPT's recursive summaries). A turn too large to sit next to the summary so far in
        one prompt is left out of the summary (it was recorded in long-term memory first,
        when there is one).

        Returns:
            The summary turn; ``None`` when no turn fitted a summarizing prompt.

        Raises:
            ModelError: The model wrote an empty summary.
        """
        summary: Turn | None = None
        start = 0
        while start < len(dropped):
            head = _held(summary)
            if not self._fits_summary(agent, [*head, dropped[start]]):
                start += 1  # too large next to the summary so far: left out of it
                continue
            # The most turns from `start` that fit one prompt: a binary search.
            fits = over = len(dropped) - start
            if not self._fits_summary(agent, [*head, *dropped[start:]]):
                fits = 1  # one fits, `over` does not
                while over - fits > 1:
                    middle = (fits + over) // 2
                    if self._fits_summary(agent, [*head, *dropped[start : start + middle]]):
                        fits = middle
                    else:
                        over = middle
            batch = dropped[start : start + fits]
            summary = await self._summary_of(agent, [*head, *batch], summarize_with)
            start += fits
        return summary

    def _summary_limit(self, agent: Agent) -> int:
        """Most tokens of a summarizing prompt.

        The window less the summary's room and the chat template's tokens, and at most the
        agent's ``max_prompt_tokens`` (which bounds every prompt of the agent, on every call
        path).
        """
        limit = self.context_window - self.summary_max_tokens - self.framing_tokens
        most = agent.limits.max_prompt_tokens
        return limit if most is None else min(limit, most)

    def _fits_summary(self, agent: Agent, turns: Sequence[Turn]) -> bool:
        """Whether the summarizing prompt of ``turns`` fits `_summary_limit`."""
        return self._summary_tokens(agent, turns) <= self._summary_limit(agent)

    def _summary_tokens(self, agent: Agent, turns: Sequence[Turn]) -> int:
        """Tokens of the summarizing prompt of ``turns``."""
        prompt = self.builder.build_conversation_prompt(agent=agent, turns=turns, summarize=True)
        return prompt.manifest.total_tokens

    async def _summary_of(
        self, agent: Agent, turns: Sequence[Turn], summarize_with: SummaryCall
    ) -> Turn:
        """One summarizing call over ``turns`` (which fit its prompt)."""
        prompt = self.builder.build_conversation_prompt(
            agent=agent,
            turns=turns,
            summarize=True,
            max_prompt_tokens=self._summary_limit(agent),
        )
        text = (await summarize_with(prompt, max_tokens=self.summary_max_tokens)).strip()
        if not text:
            raise ModelError("the model wrote an empty summary")
        return Turn(
            id=new_id("summary"),
            role="assistant",
            content=text,
            author="summary of earlier turns",
        )


def _held(summary: Turn | None) -> list[Turn]:
    """The summary so far as the first turn of the next summarizing prompt (none yet: none)."""
    return [summary] if summary is not None else []
