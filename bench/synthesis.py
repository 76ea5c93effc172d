"""Synthesis prompt tokens at 100 / 1,000 / 10,000 tasks with an 8k-token coordinator window.

``python -m bench.synthesis '{"tasks": 1000}'`` prints one JSON line. The fake model
(`clearance.testing.FakeModel`, ``context_window=8192``) answers every task; the synthesis is
hierarchical when the full view does not fit (map steps ``synthesis_map:<n>``, then the reduce
``synthesis``). Token counts are the prompts' manifests (the model's own counter).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from clearance import RunOptions

WINDOW = 8192


def run(case: dict[str, Any]) -> dict[str, Any]:
    from clearance import Agent, NullLedger, Orchestrator, Task, Team
    from clearance.testing import FakeModel

    n = case["tasks"]
    lead = Agent(name="lead", instructions="You are the lead.")
    team = Team(agents=(Agent(name="worker", instructions="You do one task."),),
                coordinator=lead, name="synthesis-bench")  # fmt: skip
    tasks = [Task(id=f"t{i:05d}", title=f"Title {i}", description=f"Do part {i}.",
                  assignee="worker") for i in range(n)]  # fmt: skip
    model = FakeModel("bench", context_window=WINDOW)
    t0 = time.perf_counter()
    result = asyncio.run(
        Orchestrator(
            team, model=model, ledger=NullLedger(), options=RunOptions(max_concurrency=64)
        ).run_tasks(tasks, goal="Report on all parts.")
    )
    wall_s = time.perf_counter() - t0
    steps = [r.prompt.manifest for r in model.requests
             if r.prompt.manifest.subject.startswith("synthesis")]  # fmt: skip
    maps = [m for m in steps if m.subject != "synthesis"]
    results_in = [i for m in steps for i in m.items if str(i.origin).startswith("task_result:")]
    return {
        **case,
        "status": str(result.status),
        "run_error": result.error,
        "window": WINDOW,
        "budget": WINDOW - lead.limits.max_output_tokens,
        "synthesis_calls": len(steps),
        "map_calls": len(maps),
        "max_step_prompt_tokens": max(m.total_tokens for m in steps),
        "reduce_prompt_tokens": next(m.total_tokens for m in steps if m.subject == "synthesis"),
        "total_synthesis_prompt_tokens": sum(m.total_tokens for m in steps),
        "result_tokens": sum(i.tokens for i in results_in),
        "results_seen": len(results_in),
        "distinct_results_seen": len({str(i.origin) for i in results_in}),
        "wall_s": wall_s,
    }


def main() -> None:
    print(json.dumps(run(json.loads(sys.argv[1]))))


if __name__ == "__main__":
    main()
