"""Where a run's ledger CPU goes, and what the garbage collector costs at scale (fake model).

Two measurements behind the overhead and makespan sections, both on `Orchestrator.run_tasks`
with a `RunLedger` on an SQLite file (as `bench.frameworks.run_clearance` runs it):

- **writer**: the CPU time (``time.thread_time``) the ledger's writer thread spends in each
  step of its group commits, per run and per task: building rows from the queued records
  (the rest of ``_commit_writes``), writing them (``_write_rows``: ``sqlite3`` executemany),
  computing the hash chain's digests (``ChainWriter.entries_of``) and appending its entries
  (``append``), SQLite's ``COMMIT`` (``do_commit``); and, apart, the write-ahead-log
  checkpoints it runs when idle (``_checkpoint_wal``). Each step's wall time is given too:
  where it exceeds the CPU time, the writer waited for the disk or the interpreter lock.
- **gc**: per generation, the cyclic collector's collections and their time during one run
  (``gc.callbacks``), and how many objects were promoted into the oldest generation per task
  (counted after each collection of the middle generation). A full collection walks every
  tracked object, so its cost grows with the heap; how often one runs grows with the
  objects promoted.

``python -m bench.writer [--tasks 1000] [--latency-ms 0] [--runs 3] [--gc]`` prints a table
per measurement and one JSON line. The steps are measured by wrapping the ledger's methods,
which adds a little time of its own to each. A collection of the garbage collector runs on
whichever thread allocated when it was due, so at 10,000 tasks, where full collections take
tens of milliseconds, a writer step's time may hold one.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import gc
import json
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from bench import frameworks
from bench.workload import FakeModel, make_graph

WRITER_THREAD = "clearance-ledger-writer"
LAYERS = 10


def _steps() -> list[tuple[Any, str]]:
    """``(class, method)`` of each writer step measured, outermost first."""
    from sqlalchemy.engine.default import DefaultDialect

    from clearance._state.db.engine import DatabaseBase
    from clearance._state.ledger.base import LedgerBase
    from clearance._state.ledger.chaining import ChainWriter

    return [
        (LedgerBase, "_commit_writes"),
        (LedgerBase, "_write_rows"),
        (ChainWriter, "entries_of"),
        (ChainWriter, "append"),
        (DefaultDialect, "do_commit"),
        (DatabaseBase, "_checkpoint_wal"),
    ]


def _timed(method: Callable[..., Any], name: str, totals: dict[str, list[float]]) -> Any:
    """``method`` adding its wall and CPU seconds to ``totals[name]`` on the writer thread."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name != WRITER_THREAD:
            return method(*args, **kwargs)
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            total = totals[name]
            total[0] += time.perf_counter() - wall
            total[1] += time.thread_time() - cpu
            total[2] += 1

    return wrapper


def _run(specs: list[Any], model: FakeModel, url: str) -> None:
    model.reset_clock()
    asyncio.run(frameworks.run_clearance(specs, model, ledger_url=url))


def writer(tasks: int, latency_s: float, runs: int) -> dict[str, Any]:
    """Per writer step: wall and CPU milliseconds per run, calls per run, µs of CPU per task."""
    specs = make_graph(LAYERS, tasks // LAYERS, seed=7)
    model = FakeModel(latency_s=latency_s, result_tokens=50)
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    patched = [(cls, name, getattr(cls, name)) for cls, name in _steps()]
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/runs.db"
        _run(specs, model, url)  # warm-up: schema made, modules loaded
        for cls, name, method in patched:
            setattr(cls, name, _timed(method, name, totals))
        try:
            for _ in range(runs):
                _run(specs, model, url)
        finally:
            for cls, name, method in patched:
                setattr(cls, name, method)
    n = len(specs)
    order = [name for _, name, _ in patched if name in totals]
    return {
        name: {
            "wall_ms_per_run": wall / runs * 1e3,
            "cpu_ms_per_run": cpu / runs * 1e3,
            "calls_per_run": calls / runs,
            "cpu_us_per_task": cpu / runs / n * 1e6,
        }
        for name, (wall, cpu, calls) in ((name, totals[name]) for name in order)
    }


def collector(tasks: int, latency_s: float) -> dict[str, Any]:
    """One run's collections per generation (count, ms) and objects promoted per task."""
    specs = make_graph(LAYERS, tasks // LAYERS, seed=7)
    model = FakeModel(latency_s=latency_s, result_tokens=50)
    stats: dict[int, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    started = [0.0]
    promoted = [0]
    oldest = [0]

    def callback(phase: str, info: dict[str, int]) -> None:
        generation = info["generation"]
        if phase == "start":
            if generation == 1:  # counted before the clock starts: not the collector's time
                oldest[0] = len(gc.get_objects(2))
            started[0] = time.perf_counter()
            return
        stats[generation][0] += 1
        stats[generation][1] += time.perf_counter() - started[0]
        if generation == 1:
            promoted[0] += len(gc.get_objects(2)) - oldest[0]

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/runs.db"
        _run(specs, model, url)
        gc.collect()
        gc.callbacks.append(callback)
        wall = time.perf_counter()
        try:
            _run(specs, model, url)
        finally:
            wall = time.perf_counter() - wall
            gc.callbacks.remove(callback)
    return {
        "run_s": wall,
        "promoted_per_task": promoted[0] / len(specs),
        "generations": {
            str(g): {"collections": int(c), "ms": s * 1e3} for g, (c, s) in sorted(stats.items())
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gc", action="store_true", help="Also measure the collector.")
    args = parser.parse_args()
    if args.tasks < LAYERS or args.runs < 1 or args.latency_ms < 0:
        parser.error(f"--tasks must be at least {LAYERS}, --runs at least 1, --latency-ms >= 0")
    latency_s = args.latency_ms / 1e3
    steps = writer(args.tasks, latency_s, args.runs)
    print(f"writer thread, {args.tasks} tasks, D={args.latency_ms:g} ms, {args.runs} runs")
    print("| step | calls/run | wall ms/run | CPU ms/run | CPU µs/task |")
    print("|---|---|---|---|---|")
    for name, s in steps.items():
        print(
            f"| {name} | {s['calls_per_run']:.1f} | {s['wall_ms_per_run']:.1f} | "
            f"{s['cpu_ms_per_run']:.1f} | {s['cpu_us_per_task']:.1f} |"
        )
    result: dict[str, Any] = {"tasks": args.tasks, "latency_ms": args.latency_ms, "writer": steps}
    if args.gc:
        found = collector(args.tasks, latency_s)
        result["gc"] = found
        print(f"\ncollector, one run of {args.tasks} tasks ({found['run_s']:.2f} s)")
        print("| generation | collections | ms |")
        print("|---|---|---|")
        for g, s in found["generations"].items():
            print(f"| {g} | {s['collections']} | {s['ms']:.1f} |")
        per_task = found["promoted_per_task"]
        print(f"objects promoted to the oldest generation per task: {per_task:.1f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
