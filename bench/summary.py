"""The figures the orchestration-overhead targets are checked on, from one run's results.

- CPU per task at 1,000 tasks (D=0; section 1's main rows): the median over runs of each
  run's process CPU time (``time.process_time``: the event loop's thread and the ledger's
  writer alike) over its tasks. CPU time, not wall time, so that other work on a shared
  machine counts as little as possible.
- Makespan over the critical path at D=50 ms, 500 tasks (section 2), for unbounded
  concurrency and for ``max_concurrency=4`` (``clearance-c4``; its lower bound is
  ``max(L * D, tasks * D / 4)``, so it is also shown over that bound).

``python -m bench.summary`` prints them for ``bench/results``; `lines` gives the Markdown
that ``bench.report`` puts in BENCHMARKS.md, beside the same figures of the results kept in
``bench/results/earlier`` (the run before the figures regressed and were brought back).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
EARLIER = RESULTS / "earlier"

CPU_RATIO_TARGET = 0.35
"""Clearance (ledger on) CPU per task over LangGraph's, at most."""
FLOOR_RATIO_TARGET = 4.0
"""Clearance (ledger off) CPU per task over the asyncio floor's, at most."""
MAKESPAN_TARGET = 1.15
"""Makespan over the critical path at D=50 ms, 500 tasks, unbounded concurrency, at most."""


def _load(folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else []


def cpu_per_task_us(overhead: list[dict[str, Any]]) -> dict[str, float]:
    """Median CPU µs per task of each framework's 1,000-task main row."""
    return {
        r["framework"]: statistics.median(r["cpu_s"]) / r["tasks"] * 1e6
        for r in overhead
        if "error" not in r and "series" not in r and r.get("cpu_s") and r["tasks"] == 1000
    }


def makespan_ratios(makespan: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Median makespan over the critical path, and over the concurrency bound, per framework."""
    out = {}
    for r in makespan:
        if "error" in r or not r.get("times_s"):
            continue
        latency, layers = r["latency_s"], r["layers"]
        critical = layers * latency
        limit = r.get("max_concurrency")
        bound = max(critical, r["tasks"] * latency / limit) if limit else critical
        median = statistics.median(r["times_s"])
        out[r["framework"]] = (median / critical, median / bound)
    return out


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else "**not met**"


def lines(folder: Path = RESULTS, earlier: Path = EARLIER) -> list[str]:
    """Markdown: the target figures of ``folder``'s results beside those of ``earlier``."""
    now_cpu = cpu_per_task_us(_load(folder, "overhead"))
    then_cpu = cpu_per_task_us(_load(earlier, "overhead"))
    now_span = makespan_ratios(_load(folder, "makespan"))
    then_span = makespan_ratios(_load(earlier, "makespan"))
    out = [
        "| framework | CPU µs per task (1,000 tasks, D=0) | earlier | makespan ÷ critical "
        "path (D=50 ms, 500 tasks) | earlier |",
        "|---|---|---|---|---|",
    ]
    names = list(dict.fromkeys([*now_cpu, *now_span]))
    for fw in names:
        cpu = f"{now_cpu[fw]:.0f}" if fw in now_cpu else "-"
        was = f"{then_cpu[fw]:.0f}" if fw in then_cpu else "-"
        span = now_span.get(fw)
        span_text = "-" if span is None else f"{span[0]:.3f}"
        if span is not None and fw.endswith("-c4"):
            span_text += f" ({span[1]:.3f} of the 4-slot bound)"
        then = then_span.get(fw)
        out.append(f"| {fw} | {cpu} | {was} | {span_text} | "
                   f"{'-' if then is None else f'{then[0]:.3f}'} |")  # fmt: skip
    out.append("")
    lg, cl = now_cpu.get("langgraph"), now_cpu.get("clearance")
    nl, fl = now_cpu.get("clearance-noledger"), now_cpu.get("floor")
    if lg and cl:
        r = cl / lg
        out.append(f"- Ledger on, CPU per task ÷ LangGraph's: **{r:.2f}** "
                   f"(target ≤ {CPU_RATIO_TARGET}: {_verdict(r, CPU_RATIO_TARGET)}).")  # fmt: skip
    if nl and fl:
        r = nl / fl
        verdict = _verdict(r, FLOOR_RATIO_TARGET)
        out.append(f"- Ledger off, CPU per task ÷ the asyncio floor's: **{r:.1f}** "
                   f"(target ≤ {FLOOR_RATIO_TARGET:g}: {verdict}).")  # fmt: skip
    if "clearance" in now_span:
        r = now_span["clearance"][0]
        out.append(f"- Ledger on, unbounded concurrency, makespan ÷ critical path: **{r:.3f}** "
                   f"(target ≤ {MAKESPAN_TARGET}: {_verdict(r, MAKESPAN_TARGET)}).")  # fmt: skip
    return out


def main() -> None:
    print("\n".join(lines()), flush=True)


if __name__ == "__main__":
    main()
