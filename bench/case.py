"""Run one benchmark case in this process and print its figures as JSON (one line).

Each case runs in a fresh process, so its peak RSS is its own and no framework's imports or
caches help another. ``python -m bench.case '{"framework": "clearance", ...}'``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import frameworks as F
from bench.workload import FakeModel, make_graph

FRAMEWORKS = (
    "floor",
    "clearance",
    "clearance-noledger",
    "clearance-c4",
    "langgraph",
    "crewai",
    "crewai-nocontext",
    "global-memory",
)


def _run_once(
    framework: str, specs: Any, model: FakeModel, opts: dict[str, Any], tmp: Path, i: int
) -> dict[str, str]:
    if framework == "floor":
        return asyncio.run(F.run_floor(specs, model))
    if framework in ("clearance", "clearance-c4"):
        # One ledger file for all runs of the case, as `.clearance/runs.db` is reused from
        # run to run; the warm-up run creates its tables (about 20 ms, once per file).
        url = f"sqlite:///{tmp / 'runs.db'}"
        # clearance-c4: the default max_concurrency (4) instead of every task at once.
        limit = 4 if framework == "clearance-c4" else None
        scope = opts.get("scope", "dependencies")
        return asyncio.run(
            F.run_clearance(specs, model, ledger_url=url, scope=scope, max_concurrency=limit)
        )
    if framework == "clearance-noledger":
        return asyncio.run(
            F.run_clearance(specs, model, ledger_url=None, scope=opts.get("scope", "dependencies"))
        )
    if framework == "langgraph":
        return asyncio.run(F.run_langgraph(specs, model))
    if framework == "crewai":
        return F.run_crewai(specs, model, use_context=True)
    if framework == "crewai-nocontext":
        return F.run_crewai(specs, model, use_context=False)
    if framework == "global-memory":
        return F.global_memory_prompts(specs, model)
    raise SystemExit(f"unknown framework {framework!r}")


class GCTimer:
    """Seconds spent in CPython's cyclic garbage collector, summed over collections."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> GCTimer:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    framework = case["framework"]
    layers, width = case["layers"], case["width"]
    latency_s, result_tokens = case.get("latency_s", 0.0), case.get("result_tokens", 50)
    repeats, warmup = case.get("repeats", 5), case.get("warmup", 1)
    specs = make_graph(layers, width, seed=case.get("seed", 7))
    model = FakeModel(latency_s=latency_s, result_tokens=result_tokens)
    times: list[float] = []
    first_call: list[float] = []  # seconds from the start of a run to its first model call
    graph_done: list[float] = []  # ... to the last task's answer (the graph is done)
    gc_s: list[float] = []  # of each run's time, spent in the garbage collector
    # CPU seconds of each run: on this (the event loop's) thread, and in the whole process
    # (the difference is other threads': Clearance's ledger writer, CrewAI's task threads).
    cpu_loop_s: list[float] = []
    cpu_s: list[float] = []
    build_s: list[float] = []
    prompts: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="clearance-bench-") as tmp:
        for i in range(warmup + repeats):
            gc.collect()
            model.reset_clock()
            with GCTimer() as collector:
                c0, p0 = time.thread_time(), time.process_time()
                t0 = time.perf_counter()
                prompts = _run_once(framework, specs, model, case, Path(tmp), i)
                elapsed = time.perf_counter() - t0
                c1, p1 = time.thread_time(), time.process_time()
            if i >= warmup:
                times.append(elapsed)
                if F.BUILD_S:  # LangGraph: its graph's build and compilation, inside `elapsed`
                    build_s.append(F.BUILD_S[-1])
                gc_s.append(collector.seconds)
                cpu_loop_s.append(c1 - c0)
                cpu_s.append(p1 - p0)
                if model.first_call_at is not None and model.last_answer_at is not None:
                    first_call.append(model.first_call_at - t0)
                    graph_done.append(model.last_answer_at - t0)
    out: dict[str, Any] = {
        **case,
        "tasks": len(specs),
        "times_s": times,
        "first_call_s": first_call,
        "graph_done_s": graph_done,
        "gc_s": gc_s,
        "cpu_loop_s": cpu_loop_s,
        "cpu_s": cpu_s,
        "build_s": build_s,
        "prompts_captured": len(prompts),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if case.get("count_tokens"):
        from bench import tokens

        out["prompt_tokens"] = sum(tokens.count(p) for p in prompts.values())
        out["prompt_chars"] = sum(len(p) for p in prompts.values())
    return out


def main() -> None:
    case = json.loads(sys.argv[1])
    print(json.dumps(run_case(case)))


if __name__ == "__main__":
    main()
