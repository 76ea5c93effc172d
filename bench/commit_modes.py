"""Why the ledger commits in groups on a writer thread: the same runs with one commit per record.

``python -m bench.commit_modes [--runs N]`` runs section 1's case (L=10, W=100, D=0) and
section 2's (L=10, W=50, D=50 ms) with the ledger on, two ways, alternating:

- *group*: as Clearance runs (`RunLedger.write_behind`: a writer thread commits everything
  queued in one transaction, and a request waits only for the group that holds it);
- *per record*: ``write_behind`` made a no-op, so every record is committed in its own
  transaction on the event loop's thread the moment it is made. A request is still committed
  before it is sent, and each task's request goes out as soon as it is built, with no group
  to wait for: the design that would let a layer's sends spread out, as they do without a
  ledger.

Prints the medians of CPU per task (the whole process, D=0) and of makespan over the critical
path (D=50 ms). A diagnostic: it replaces an internal method for the *per record* runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from bench.frameworks import run_clearance
from bench.workload import FakeModel, make_graph

CASES = {"D=0, 1,000 tasks": (100, 0.0), "D=50 ms, 500 tasks": (50, 0.05)}
"""Width and model latency of each case (10 layers each)."""


def _per_record() -> Any:
    @contextlib.contextmanager
    def off(self: Any) -> Iterator[None]:
        yield

    return off


def measure(runs: int) -> dict[tuple[str, str], float]:
    """Median CPU µs per task (D=0) or makespan ÷ critical path (D=50 ms), per case and mode."""
    from clearance._state.ledger.base import LedgerBase

    group = LedgerBase.write_behind
    values: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="clearance-bench-") as tmp:
        for case, (width, latency) in CASES.items():
            specs = make_graph(10, width)
            for n in range(runs + 1):  # the first round warms up
                for mode in ("group", "per record"):
                    LedgerBase.write_behind = group if mode == "group" else _per_record()  # type: ignore[method-assign]
                    try:
                        model = FakeModel(latency_s=latency, result_tokens=50)
                        url = f"sqlite:///{tmp}/{mode.replace(' ', '-')}.db"
                        wall, cpu = time.perf_counter(), time.process_time()
                        asyncio.run(run_clearance(specs, model, ledger_url=url))
                        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    finally:
                        LedgerBase.write_behind = group  # type: ignore[method-assign]
                    if n:
                        value = cpu / len(specs) * 1e6 if not latency else wall / (10 * latency)
                        values.setdefault((case, mode), []).append(value)
    return {key: statistics.median(v) for key, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="measured rounds (default 5)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    results = measure(args.runs)
    print("| case | group commit (writer thread) | one commit per record |")
    print("|---|---|---|")
    for case, (_, latency) in CASES.items():
        unit = "CPU µs per task" if not latency else "makespan ÷ critical path"
        group, single = results[(case, "group")], results[(case, "per record")]
        shown = "{:.0f}" if not latency else "{:.3f}"
        print(f"| {case}: {unit} | {shown.format(group)} | {shown.format(single)} |")


if __name__ == "__main__":
    main()
