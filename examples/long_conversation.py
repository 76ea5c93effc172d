"""A conversation longer than the model's context window, on the embedded model.

The agent talks with a user for more turns than its context window (512 tokens here) can
hold. After each turn the `ContextWindowMonitor` checks the next prompt: at 75% of the window
it compresses the conversation to 40%, by summarizing the oldest turns with the agent's own
model (or dropping them, with ``--strategy drop_oldest``). Dropped turns are recorded in the
agent's long-term memory first, and relevant ones come back through retrieval, so facts from
early turns stay reachable. Every call is recorded in a ledger and checked with
``clearance verify`` at the end.

Run it (needs the embedded model, see the README)::

    python examples/long_conversation.py --turns 40
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clearance import Agent, AgentChat, AgentLimits, RunLedger, verify_run
from clearance.memory import PersistentMemory, memory_lookup
from clearance.models import get_model

TOPICS = [
    "My name is Dana and I keep bees on a rooftop in Lisbon.",
    "The hive count is seven, and the strongest hive is called Marta.",
    "What should I check during a spring inspection?",
    "How do I know if a queen is laying well?",
    "Tell me one thing about varroa mites.",
    "What plants near a rooftop help bees?",
    "How much honey can a single hive make in a good year?",
    "What is a good way to label honey jars?",
]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What the example did."""

    turns: int
    compressions: int
    max_prompt_tokens: int
    context_window: int
    verified: bool
    recalled_early_fact: bool


async def main(
    turns: int = 40, *, strategy: str = "summarize", workdir: Path | None = None
) -> Outcome:
    """Run the conversation; return what happened."""
    folder = Path(workdir or tempfile.mkdtemp(prefix="clearance-chat-"))
    model = get_model("llama-cpp:smollm2", n_ctx=512, n_threads=1)
    agent = Agent(
        name="helper",
        instructions="You are a friendly beekeeping helper. Answer in one or two sentences.",
        limits=AgentLimits(max_output_tokens=32),
    )
    memory_url = f"sqlite:///{folder / 'memory.db'}"
    ledger = RunLedger(f"sqlite:///{folder / 'runs.db'}")
    try:
        with PersistentMemory(memory_url, agent=agent.name) as memory:
            chat = AgentChat(
                agent=agent,
                model=model,
                memory=memory,
                strategy="summarize" if strategy == "summarize" else "drop_oldest",
                recall_limit=2,
                ledger=ledger,
            )
            for i in range(turns):
                question = TOPICS[i % len(TOPICS)]
                if i == turns - 1:
                    question = "What is the strongest hive called?"
                answer = await chat.say(question)
                print(f"[{i + 1:02d}] user: {question}\n     {agent.name}: {answer.strip()}")
            for record in chat.compressions:
                print(
                    f"compressed ({record.strategy}): {record.tokens_before} -> "
                    f"{record.tokens_after} tokens, {len(record.dropped)} turns"
                )
            with memory_lookup(memory_url) as lookup:
                report = verify_run(ledger, chat.run_id, memories=lookup)
            print(f"verify: {'OK' if report.ok else report.findings}")
            return Outcome(
                turns=len(chat.prompts),
                compressions=len(chat.compressions),
                max_prompt_tokens=max(p.manifest.total_tokens for p in chat.prompts),
                context_window=512,
                verified=report.ok,
                recalled_early_fact="Marta" in chat.prompts[-1].text,
            )
    finally:
        ledger.close()
        model.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--strategy", choices=["summarize", "drop_oldest"], default="summarize")
    args = parser.parse_args()
    print(asyncio.run(main(args.turns, strategy=args.strategy)))
