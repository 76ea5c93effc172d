"""The benchmark workload: a seeded layered DAG and a fake model, framework-neutral.

L layers of W tasks; every task of layer i > 0 depends on exactly 2 distinct tasks of layer
i - 1, chosen with ``random.Random(seed)``. The fake model answers after a simulated latency
``D`` seconds (``asyncio.sleep``; none when ``D == 0``) with a deterministic text of about ``R``
tokens that contains the task id. Nothing here imports a framework.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from dataclasses import dataclass

_VOCABULARY = (
    "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud "
    "forest copper signal harbor lantern meadow orbit quartz ridge timber velvet willow"
)
_WORDS = tuple(_VOCABULARY.split())


@dataclass(frozen=True)
class Spec:
    """One task of the workload: its id, layer, description and dependencies (ids)."""

    id: str
    layer: int
    title: str
    description: str
    depends_on: tuple[str, ...]


def task_id(layer: int, index: int) -> str:
    return f"t{layer:02d}_{index:04d}"


def make_graph(layers: int, width: int, seed: int = 7) -> list[Spec]:
    """The L x W layered DAG, in topological (layer) order. Needs ``width >= 2`` when L > 1."""
    rng = random.Random(seed)
    specs: list[Spec] = []
    for layer in range(layers):
        for index in range(width):
            tid = task_id(layer, index)
            deps: tuple[str, ...] = ()
            if layer > 0:
                picks = rng.sample(range(width), 2)
                deps = tuple(task_id(layer - 1, j) for j in picks)
            specs.append(
                Spec(
                    id=tid,
                    layer=layer,
                    title=f"Task {tid}",
                    description=f"Work on item {tid}: combine what the prerequisites found.",
                    depends_on=deps,
                )
            )
    return specs


def result_text(tid: str, tokens: int) -> str:
    """Deterministic result of about ``tokens`` tokens (one short word is about one token)."""
    digest = hashlib.sha256(tid.encode()).digest()
    words = [f"Result of {tid}:"]
    n = max(round((tokens - 6) / 1.2), 1)  # these words average about 1.2 tokens
    words.extend(_WORDS[digest[i % len(digest)] % len(_WORDS)] for i in range(n))
    return " ".join(words)


class FakeModel:
    """The framework-neutral fake: ``await answer(tid)`` sleeps ``D`` then returns the result.

    Results are computed once per task id and cached, so every framework pays the same
    (near-zero) cost for the model itself.
    """

    def __init__(self, *, latency_s: float, result_tokens: int):
        self.latency_s = latency_s
        self.result_tokens = result_tokens
        self._cache: dict[str, str] = {}
        # `time.perf_counter` of the first call and of the last answer since `reset_clock`:
        # where a run's makespan goes (before the first call, the graph, after it).
        self.first_call_at: float | None = None
        self.last_answer_at: float | None = None

    def reset_clock(self) -> None:
        """Forget the first-call and last-answer times (before each run)."""
        self.first_call_at = self.last_answer_at = None

    def text(self, tid: str) -> str:
        cached = self._cache.get(tid)
        if cached is None:
            cached = self._cache[tid] = result_text(tid, self.result_tokens)
        return cached

    async def answer(self, tid: str) -> str:
        if self.first_call_at is None:
            self.first_call_at = time.perf_counter()
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        self.last_answer_at = time.perf_counter()
        return self.text(tid)

    def answer_sync(self, tid: str) -> str:
        """For frameworks that call their model synchronously (sleeps the thread)."""
        if self.first_call_at is None:
            self.first_call_at = time.perf_counter()
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        self.last_answer_at = time.perf_counter()
        return self.text(tid)


def critical_path_s(layers: int, latency_s: float) -> float:
    """Longest chain of model calls: one per layer."""
    return layers * latency_s
