"""Where a layer's time goes in section 2's run (L=10, W=50, D=50 ms, ledger on).

``python -m bench.layers [--runs N]`` runs the makespan case N times (after a warm-up) and
prints, as medians over every layer after the first of every run:

- *answers spread*: from a layer's first answer to its last;
- *loop*: from the layer's last answer to the start of the ledger commit that holds the
  next layer's requests (the event loop settling the answers and building the prompts);
- *commit*: that commit, on the ledger's writer thread;
- *wake*: from the commit's end to the first request sent;
- *sends*: from the first request sent to the last;
- *gap*: from the layer's last answer to the next layer's last request sent, the time a
  layer adds to the critical path (about the sum of the four before).

Also the time to the first request and after the last answer. A diagnostic: it times the
writer's groups by wrapping `WriteBehind`'s commit, an internal method.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import defaultdict
from typing import Any

from bench.frameworks import run_clearance
from bench.workload import FakeModel, make_graph

LAYERS, WIDTH, LATENCY_S = 10, 50, 0.05


class _TimedModel(FakeModel):
    """The fake model, noting when each layer's requests are sent and answered."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(latency_s=LATENCY_S, result_tokens=50)
        self.clock = clock
        self.sent: dict[int, list[float]] = defaultdict(list)
        self.answered: dict[int, list[float]] = defaultdict(list)

    def _now(self) -> float:
        return (time.perf_counter() - self.clock[0]) * 1e3

    async def answer(self, tid: str) -> str:
        layer = int(tid[1:3])  # "tLL_NNNN" (`bench.workload.make_graph`)
        self.sent[layer].append(self._now())
        text = await super().answer(tid)
        self.answered[layer].append(self._now())
        return text


def measure(runs: int) -> dict[str, float]:
    """Median milliseconds of each part (see the module docstring) over ``runs`` runs."""
    from clearance._state.write_behind import WriteBehind

    clock = [0.0]
    groups: list[tuple[float, float]] = []  # (start, end) of each commit, in ms
    commit = WriteBehind._commit_group

    def timed(self: WriteBehind, group: Any) -> Any:
        start = time.perf_counter()
        try:
            return commit(self, group)
        finally:
            end = time.perf_counter()
            groups.append(((start - clock[0]) * 1e3, (end - clock[0]) * 1e3))

    WriteBehind._commit_group = timed  # type: ignore[method-assign]
    parts: dict[str, list[float]] = defaultdict(list)
    specs = make_graph(LAYERS, WIDTH)
    try:
        with tempfile.TemporaryDirectory(prefix="clearance-bench-") as tmp:
            url = f"sqlite:///{tmp}/runs.db"
            for n in range(runs + 1):  # the first run warms up
                model = _TimedModel(clock)
                groups.clear()
                clock[0] = time.perf_counter()
                asyncio.run(run_clearance(specs, model, ledger_url=url))
                total = (time.perf_counter() - clock[0]) * 1e3
                if n == 0:
                    continue
                parts["first request"].append(min(model.sent[0]))
                parts["after the last answer"].append(total - max(model.answered[LAYERS - 1]))
                for layer in range(1, LAYERS):
                    first_answer = min(model.answered[layer - 1])
                    last_answer = max(model.answered[layer - 1])
                    first_sent, last_sent = min(model.sent[layer]), max(model.sent[layer])
                    held = [g for g in groups if first_answer <= g[0] < first_sent]
                    if not held:
                        continue
                    start, end = held[-1]
                    parts["answers spread"].append(last_answer - first_answer)
                    parts["loop"].append(start - last_answer)
                    parts["commit"].append(end - start)
                    parts["wake"].append(first_sent - end)
                    parts["sends"].append(last_sent - first_sent)
                    parts["gap"].append(last_sent - last_answer)
    finally:
        WriteBehind._commit_group = commit  # type: ignore[method-assign]
    return {name: statistics.median(values) for name, values in parts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs (default 5)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    for name, value in measure(args.runs).items():
        print(f"{name:>22}: {value:6.2f} ms")


if __name__ == "__main__":
    main()
