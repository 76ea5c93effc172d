"""Fan-out research: a parent spawns three isolated children, aggregates, synthesizes.

Each child researches one aspect of a question about the files of an input folder. A child
gets only its goal, the folder's architectural context and the files' contents (size-capped
with a visible truncation marker) — never its siblings' goals or answers. Children are
spawned over the event bus; the aggregator waits for all of them (or the deadline), merges
identical findings with attribution and flags missing children; the parent synthesizes from
that combined text alone.

    python examples/fanout_research.py [INPUT_DIR] [--question TEXT] [--model ID]

Runs on the embedded model by default (``llama-cpp:smollm2``; tiny: it proves the wiring,
not the quality). Workspaces (one folder per agent, ``history/`` and ``outputs/``) go to a
temporary folder unless ``--workdir`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clearance import Agent, AgentLimits, FileCaps
from clearance.models import ChatModel, get_model
from clearance.subagents import (
    AgentSession,
    AggregateResult,
    Aggregator,
    ContextIsolationManager,
    DispatchResult,
    EventBus,
    IsolatedContext,
    SpawnRequest,
    SpawnWorker,
)

DEFAULT_INPUT = Path(__file__).resolve().parents[1] / "docs"
DEFAULT_QUESTION = "What do these documents say about keeping agents' context apart?"
ASPECTS = {
    "purpose": "What problem do the documents address, and for whom? Answer in 3 short bullets.",
    "mechanisms": "Which mechanisms or rules do the documents describe? Answer in 3 short bullets.",
    "limits": "What limitations or caveats do the documents state? Answer in 3 short bullets.",
}
CHILD = Agent(
    name="researcher",
    instructions="You research documents. Answer only from the files you are given, briefly.",
    limits=AgentLimits(max_output_tokens=120, max_steps=4),
)
PARENT = Agent(
    name="lead",
    instructions="You write a short answer from your researchers' findings.",
    limits=AgentLimits(max_output_tokens=160, max_steps=8),
)


@dataclass(frozen=True, kw_only=True)
class ResearchReport:
    """What the example produced: the merged findings and the parent's synthesis."""

    aggregate: AggregateResult
    synthesis: DispatchResult
    children: dict[str, DispatchResult]
    parent: AgentSession


def text_files(folder: Path, limit: int = 3) -> list[str]:
    """Up to ``limit`` text files of ``folder`` (recursively), relative, sorted."""
    suffixes = {".md", ".txt", ".rst", ".py", ".yaml", ".toml"}
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in suffixes)
    return [p.relative_to(folder).as_posix() for p in files[:limit]]


async def research(
    input_dir: Path,
    question: str,
    *,
    model: ChatModel,
    workdir: Path,
    timeout_s: float = 300.0,
) -> ResearchReport:
    """Run the fan-out: three children over the bus, aggregation, parent synthesis."""
    caps = FileCaps(max_file_bytes=1500, max_total_bytes=4500, on_oversize="truncate")
    manager = ContextIsolationManager(input_dir, model=model, file_caps=caps)
    files = text_files(input_dir)
    parent = AgentSession("lead", base_dir=workdir, goal=question, limits=PARENT.limits)
    children: dict[str, DispatchResult] = {}

    async def run_child(request: SpawnRequest) -> str:
        child = parent.spawn_child(request.child_id, request.goal, limits=CHILD.limits)
        context = manager.create_isolated_context(request.child_id, request.goal, files)
        outcome = await manager.dispatch(context, CHILD)
        child.record_step("model", outcome.result, data={"status": outcome.status})
        children[request.child_id] = outcome
        child.finish(outcome.result)
        return outcome.result

    bus = EventBus()
    goals = {
        f"child-{aspect}": f"Question: {question}\nYour aspect: {ask}"
        for aspect, ask in ASPECTS.items()
    }
    async with SpawnWorker(bus, run_child):
        aggregate = await Aggregator(bus, parent.agent_id).fan_out(goals, timeout_s=timeout_s)
    parent.record_step("aggregate", aggregate.combined_text(), ok=aggregate.complete)

    synthesis_context = IsolatedContext(
        task_id="synthesis",
        task_description=f"{question}\nWrite a short answer from the findings below. "
        "If the results are PARTIAL, say which aspect is missing.",
        architectural_context=manager.architecture,
        child_results={"aggregate": aggregate.combined_text()},
    )
    synthesis = await manager.dispatch(synthesis_context, PARENT)
    parent.record_step("model", synthesis.result, data={"status": synthesis.status})
    parent.finish(synthesis.result)
    return ResearchReport(aggregate=aggregate, synthesis=synthesis, children=children,
                          parent=parent)  # fmt: skip


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input_dir", nargs="?", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--question", default=DEFAULT_QUESTION)
    parser.add_argument("--model", default="llama-cpp:smollm2")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    options = {"n_ctx": 4096} if args.model.startswith("llama-cpp:") else {}
    model = get_model(args.model, **options)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        report = asyncio.run(research(args.input_dir, args.question, model=model,
                                      workdir=workdir))  # fmt: skip
        for child_id, outcome in report.children.items():
            print(f"## {child_id} ({outcome.status})\n{outcome.result}\n")
        print("## Aggregated\n" + report.aggregate.combined_text() + "\n")
        print(f"## Synthesis ({report.synthesis.status})\n{report.synthesis.result}")


if __name__ == "__main__":
    main()
