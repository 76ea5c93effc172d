"""Write ``BENCHMARKS.md`` and its plots from ``bench/results/*.json`` (no figure is typed in)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from bench import cli_scale, report_real, summary

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
COMMAND = "make bench"


def _load(name: str) -> Any:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _med(r: dict[str, Any]) -> float:
    return statistics.median(r["times_s"])


def _net_med(r: dict[str, Any]) -> float:
    """Median time of a case's runs less each run's garbage-collection time."""
    return statistics.median(t - g for t, g in zip(r["times_s"], r["gc_s"], strict=True))


def _spread(r: dict[str, Any]) -> str:
    t = r["times_s"]
    if len(t) < 2:
        return "n=1"
    return f"{min(t) * 1e3 / r['tasks']:.3f}–{max(t) * 1e3 / r['tasks']:.3f} (n={len(t)})"


def _cpu(r: dict[str, Any]) -> tuple[float, float] | None:
    """Median CPU ms per task of a case's runs: on the event-loop thread, on other threads."""
    loop, total = r.get("cpu_loop_s"), r.get("cpu_s")
    if not loop or not total:
        return None
    # Clock granularity can put the process a hair below its one thread: that is zero.
    others = [max(0.0, t - lo) for lo, t in zip(loop, total, strict=True)]
    per_task = 1e3 / r["tasks"]
    return statistics.median(loop) * per_task, statistics.median(others) * per_task


def _cpu_table(rows: list[dict[str, Any]], *, wall: bool) -> list[str]:
    """A table of CPU per task (event-loop thread, other threads) per framework.

    With ``wall``, the wall time per task too (meaningful where tasks do not wait).
    """
    head = "| framework | " + ("wall ms/task | " if wall else "")
    out = [head + "event-loop thread CPU ms/task | other threads CPU ms/task |",
           "|---|---|---|" + ("---|" if wall else "")]  # fmt: skip
    for r in rows:
        cpu = _cpu(r)
        if cpu is not None:
            cell = f"{_med(r) * 1e3 / r['tasks']:.3f} | " if wall else ""
            out.append(f"| {r['framework']} | {cell}{cpu[0]:.3f} | {cpu[1]:.3f} |")
    return out if len(out) > 2 else []


def _ok(flag: bool) -> str:
    return "met" if flag else "**not met**"


def _started(meta: dict[str, Any]) -> str:
    """When the run started, or when each section did if they were run apart (``--only``)."""
    sections: dict[str, str] = meta.get("sections") or {}
    if all(t >= meta["started_at"] for t in sections.values()):  # all from this run
        return f"run started {meta['started_at']}"
    return "sections started " + ", ".join(f"{name} {t}" for name, t in sections.items())


def _store(store: dict[str, Any]) -> list[str]:
    """The store section: ops/s of both sides per operation, their ratio, the target."""
    if "summary" not in store:
        why = store.get("error") or store.get("note") or "not run"
        return [f"Not measured: {why}"]
    m, v = store["meta"], store["meta"]["versions"]
    s, r = store["sides"]["store"], store["sides"]["raw"]
    same = store["same_sql"]
    lines = [
        "`python -m bench.run --only store` (`bench/store.py`), on one SQLite file (WAL) in a "
        f"temporary folder: {store['keys']:,} keys written with one `set` call each (each its "
        "own `BEGIN IMMEDIATE` … `COMMIT`; half of them with a TTL), each read back with "
        f"`get`, then {store['prefixes']} `query_by_prefix` calls returning "
        f"{store['rows_per_prefix']} entries each (each read one `SELECT` in autocommit, "
        "without `BEGIN`: one statement is one consistent snapshot).",
        "The store keeps one connection per thread; raw `sqlite3` does the same on one "
        "connection: the same pragmas, table and indexes, "
        "the same SQL text with the same parameters (timestamps as text, the TTL filter on "
        "every read), rows turned back into entries with aware datetimes.",
        "Checked from SQLite's own statement trace, the two sides send "
        + ("**identical** statements, pragmas and schema." if same
           else "**different** statements: the ratios below are not comparable."),
        "Each side runs in its own process, the two alternating; one warm-up and one measured "
        f"run per process, {m['rounds']} rounds"
        f"{' (QUICK smoke run)' if m['quick'] else ''}; median ops/s, with the range.",
        "",
        "| operation | calls | ContextStore ops/s | range | raw sqlite3 ops/s | range "
        "| store / raw | per-round range | extra µs per call |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for op, row in store["summary"].items():
        sr, rr, qr = row["store_range"], row["raw_range"], row["ratio_range"]
        extra = 1e6 / row["store_ops_s"] - 1e6 / row["raw_ops_s"]
        lines.append(
            f"| `{op}` | {row['calls']:,} | {row['store_ops_s']:,.0f} | {sr[0]:,.0f}–{sr[1]:,.0f} "
            f"| {row['raw_ops_s']:,.0f} | {rr[0]:,.0f}–{rr[1]:,.0f} | **{row['ratio']:.2f}** "
            f"| {qr[0]:.2f}–{qr[1]:.2f} | {extra:,.0f} |"
        )
    low_op, low = min(store["summary"].items(), key=lambda kv: kv[1]["ratio"])
    lines += [
        "",
        f"Peak RSS: ContextStore {s['peak_rss_mb']:.0f} MB, raw sqlite3 {r['peak_rss_mb']:.0f} MB"
        " (each its process's; the raw side imports neither SQLAlchemy nor Clearance).",
        "Both sides give SQLite the same work, so the extra time per call is the store's Python"
        " side. `set` and `get`, the hot paths, send SQLAlchemy's compiled SQL with its"
        " bind-processed parameters straight to the thread's `sqlite3` connection"
        " (`DriverStatement`): one `Connection.execute` of the cached `SELECT` through Core's"
        " execution machinery (compiled-cache lookup, execution context, parameter"
        " processing, the cursor result) costs several times a whole raw `get`. So those two"
        " do about what the raw side does, and a negative extra time is noise. "
        "`query_by_prefix` still runs through Core's execution, plus building the entries.",
        f"Machine: {m['cpu_count']} cores, {m['platform']}; run started {m['started_at']}. "
        f"Versions: python {v['python']}, clearance {v['clearance']}, sqlalchemy "
        f"{v['sqlalchemy']}, SQLite {store['sqlite']}.",
        "",
        f"Store throughput at least half of raw sqlite3: {_ok(store['target_met'])} (lowest: "
        f"`{low_op}` at {low['ratio']:.2f}×).",
    ]
    return lines


def _mainjob(rows: list[dict[str, Any]]) -> list[str]:
    """Section 5b: the main job against the embedded model's floor (``bench/mainjob.py``)."""
    lines = ["## 5b. The main job against its floor (`python bench/mainjob.py`)", ""]
    if not rows:
        return [*lines, "Not run.", ""]
    lines += [
        "| input | wall s | floor s | wall / floor | prompt tokens | cached | per review "
        "| completion | prefill tok/s | generation tok/s | grammar ms/token | plain ms/token "
        "| load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['input']} | {r['wall_s']:.1f} | {r['floor_s']:.1f} | "
            f"{r['wall_over_floor']:.2f} | {r['prompt_tokens']} | "
            f"{r['cached_prompt_tokens']} ({r['cached_share']:.0%}) | "
            f"{r['prompt_tokens_per_review']:.0f} | {r['completion_tokens']} | "
            f"{r['prefill_tokens_per_s']:.0f} | {r['generation_tokens_per_s']:.0f} | "
            f"{r.get('grammar_ms_per_token', 0):.1f} | {r.get('plain_ms_per_token', 0):.1f} | "
            f"{r.get('load_1min', '?')} |"
        )
    lines += [
        "",
        "Floor: prompt tokens / prefill rate + completion tokens / generation rate, both rates",
        "measured on the same model and machine just before the run (llama.cpp's timers).",
        "Per review: mean prompt tokens of the module reviews (about 1,300 before the brief",
        "step). Load: the one-minute load average when the run started (2 cores, shared).",
        "Command per row: `python bench/mainjob.py --save [--input python:PKG]`.",
        "The rates are re-measured before each run, so on a shared machine the floor moves",
        "with the load: a ratio under 1 means the run got more of the machine than the",
        "calibration just before it. Grammar ms/token: generation under the reviews' JSON",
        "schema; plain: without it.",
        "",
    ]
    return lines


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, overhead = _load("meta"), _load("overhead") or []
    makespan, prompt = _load("makespan") or [], _load("prompt") or []
    store, embedded = _load("store") or {}, _load("embedded") or {}
    ok = [r for r in overhead if "error" not in r]
    main_rows = [r for r in ok if "series" not in r]
    per = {r["framework"]: _med(r) * 1e3 / r["tasks"] for r in main_rows}
    lines = [
        "# Benchmarks",
        "",
        "Clearance against the plain-asyncio floor, LangGraph and CrewAI on one seeded workload",
        "(`bench/workload.py`: L layers × W tasks, each task of layer i>0 depends on 2 distinct",
        "tasks of layer i−1; a fake model answers after D seconds with about R tokens).",
        "",
        f"Reproduce: `{COMMAND}` (creates `.venv-bench`, runs `python -m bench.run`, then",
        "`python -m bench.report`). Absolute times depend on the machine and its load; compare",
        "the ratios. Each case runs in its own process (peak RSS is that process's).",
        "",
        f"Machine: {meta['cpu_count']} cores, {meta['platform']}; {_started(meta)}; "
        f"{meta['repeats']} measured runs per case after one warm-up "
        f"({meta['peer_repeats']} for CrewAI){' — QUICK smoke run' if meta['quick'] else ''}.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
        "",
        "What users pay for is tokens and model latency: sections 6–8 measure those on a real",
        "model server and on the synthesis of large runs. Sections 1–3 use a fake model and",
        "are kept as a regression guard for the orchestrator's own overhead.",
        "",
        "## 0. Orchestration overhead targets, now and earlier",
        "",
        "CPU per task (the whole process: event loop and ledger writer) and makespan over the",
        "critical path, from the results of sections 1 and 2; *earlier* is the run kept in",
        "`bench/results/earlier` (see `bench/summary.py`). *clearance-c4* runs at the default",
        "`max_concurrency=4`; the other rows start every ready task at once.",
        "",
        *summary.lines(),
        "",
        "## 1. Orchestration overhead per task (D=0, R=50; fake model, regression guard)",
        "",
        "| framework | tasks | median ms/task | range ms/task | × floor | peak RSS MB |",
        "|---|---|---|---|---|---|",
    ]
    floor = per.get("floor")
    for r in main_rows:
        x = per[r["framework"]] / floor if floor else float("nan")
        lines.append(
            f"| {r['framework']} | {r['tasks']} | {per[r['framework']]:.3f} | {_spread(r)} "
            f"| {x:.1f} | {r['peak_rss_mb']:.0f} |"
        )
    for r in overhead:
        if "error" in r:
            lines.append(f"| {r['framework']} | — | failed: {r['error'][:80]} | | | |")
    lines.append("")
    cl, lg = per.get("clearance"), per.get("langgraph")
    if cl and lg and floor:
        by_fw = {r["framework"]: r for r in main_rows}
        rounds = [
            b / a
            for a, b in zip(
                by_fw["clearance"].get("round_medians_s", []),
                by_fw["langgraph"].get("round_medians_s", []),
                strict=False,
            )
        ]
        per_round = (
            f"; per round, the frameworks alternating: {min(rounds):.2f}–{max(rounds):.2f}×"
            if len(rounds) > 1
            else ""
        )
        lines += [
            f"- LangGraph / Clearance (ledger on): **{lg / cl:.2f}×** (target ≥ 3×: "
            f"{_ok(lg / cl >= 3)}{per_round}).",
            f"- Clearance (ledger on) / floor: **{cl / floor:.1f}×** (target ≤ 10×: "
            f"{_ok(cl / floor <= 10)}).",
        ]
        if per.get("clearance-noledger"):
            nl = per["clearance-noledger"]
            lines.append(
                f"- Ledger off: LangGraph / Clearance **{lg / nl:.2f}×**, Clearance / floor "
                f"**{nl / floor:.1f}×**; the ledger costs {cl - nl:.3f} ms/task."
            )
    cpu_rows = _cpu_table(main_rows, wall=True)
    if cpu_rows:
        lines += ["", "### Where the time goes", "", *cpu_rows, "",
                  "CPU time of each run (medians), measured in the run's process: on the thread "
                  "running the event loop (`time.thread_time`), and on every other thread (the "
                  "process's `time.process_time` less the loop's). For Clearance with its "
                  "ledger, the other thread is the ledger's writer, which turns the queued "
                  "records into rows and commits them. It waits for the loop to pause (see "
                  "`RunLedger.write_behind`), and at D=0 the loop never pauses, so its work "
                  "follows the last task: wall time is about the sum of the two columns, not "
                  "the larger. CrewAI's other threads run its asynchronous tasks."]  # fmt: skip
    scaling = [r for r in ok if r.get("series") == "scaling"]
    if scaling:
        lines += ["", "### Growth with graph size (L=10)", "",
                  "| framework | tasks | median ms/task | of which garbage collection ms/task |",
                  "|---|---|---|---|"]  # fmt: skip
        for r in scaling:
            gc_s = r.get("gc_s")
            gc_ms = f"{statistics.median(gc_s) * 1e3 / r['tasks']:.3f}" if gc_s else "—"
            lines.append(
                f"| {r['framework']} | {r['tasks']} | {_med(r) * 1e3 / r['tasks']:.3f} | {gc_ms} |"
            )
        growth, net_growth = [], []
        for fw in ("floor", "clearance", "clearance-noledger"):
            rs = sorted((r for r in scaling if r["framework"] == fw), key=lambda r: r["tasks"])
            if len(rs) >= 2:
                a, b = rs[-2], rs[-1]
                g = (_med(b) / b["tasks"]) / (_med(a) / a["tasks"])
                rounds = [
                    (tb / b["tasks"]) / (ta / a["tasks"])
                    for ta, tb in zip(
                        a.get("round_medians_s", []), b.get("round_medians_s", []), strict=False
                    )
                ]
                per_round = (
                    f" (per round {min(rounds):.2f}–{max(rounds):.2f}×)" if len(rounds) > 1 else ""
                )
                growth.append(f"{fw} {g:.2f}×{per_round}")
                if a.get("gc_s") and b.get("gc_s"):
                    net = (_net_med(b) / b["tasks"]) / (_net_med(a) / a["tasks"])
                    net_growth.append(f"{fw} {net:.2f}×")
                plt.plot([r["tasks"] for r in rs], [_med(r) * 1e3 / r["tasks"] for r in rs],
                         marker="o", label=fw)  # fmt: skip
        lines += ["", "Per-task time at the largest size over the next smaller one (1.0 = "
                  "linear total cost; every size runs in every round, one after the other, "
                  "and a round's ratio is that of its medians): " + ", ".join(growth) + "."
                  + (" Less the garbage collector's time: " + ", ".join(net_growth) + "."
                     if net_growth else ""), "",
                  "*Garbage collection* is the time CPython's cyclic collector ran during the "
                  "run (`gc.callbacks`). A full collection walks every live container object, "
                  "and one runs each time the long-lived objects grow by a quarter, so a run "
                  "that holds more objects (10,000 tasks' states, results and queued ledger "
                  "records) pays more per task; the rest of the per-task time is what to "
                  "compare for linearity."]  # fmt: skip
        plt.xscale("log"), plt.yscale("log"), plt.xlabel("tasks"), plt.ylabel("ms per task")
        plt.title("Overhead per task vs graph size (D=0)"), plt.legend(), plt.grid(alpha=0.3)
        plt.savefig(ROOT / "bench" / "overhead.png", dpi=100, bbox_inches="tight"), plt.close()
        lines += ["", "![overhead per task](bench/overhead.png)"]
    lines += ["", "## 2. Makespan (D=50 ms, L=10, W=50; critical path = L×D = 0.5 s; fake model)",
              "",
              "| framework | median makespan s | ÷ critical path | range ÷ critical path "
              "| before the first call ms | graph done ÷ critical path "
              "| after the last answer ms | runs | peak RSS MB |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    builds: list[str] = []
    for r in makespan:
        if "error" in r:
            lines.append(f"| {r['framework']} | failed | | | | | | | |")
            continue
        cp = r["layers"] * r["latency_s"]
        first, done = r.get("first_call_s") or [], r.get("graph_done_s") or []
        tail = [t - d for t, d in zip(r["times_s"], done, strict=False)]
        parts = (
            f"{statistics.median(first) * 1e3:.1f} | {statistics.median(done) / cp:.3f} | "
            f"{statistics.median(tail) * 1e3:.1f}"
            if first and done
            else "— | — | —"
        )
        span = f"{min(r['times_s']) / cp:.3f}–{max(r['times_s']) / cp:.3f}"
        lines.append(f"| {r['framework']} | {_med(r):.3f} | {_med(r) / cp:.3f} | {span} | "
                     f"{parts} | {len(r['times_s'])} | {r['peak_rss_mb']:.0f} |")  # fmt: skip
        if r.get("build_s"):
            build = statistics.median(r["build_s"])
            net = statistics.median(t - b for t, b in zip(r["times_s"], r["build_s"], strict=False))
            builds.append(f"{r['framework']}: building and compiling its graph took "
                          f"{build * 1e3:.1f} ms (median), inside its makespan above; without "
                          f"it, {net / cp:.3f}× the critical path")  # fmt: skip
    if builds:
        lines += ["", *(f"- {b}." for b in builds)]
    elif any(r.get("framework") == "langgraph" and "error" not in r for r in makespan):
        lines += ["", "- LangGraph's makespan above includes building and compiling its graph "
                  "(these results predate timing it apart; a run of this section now reports "
                  "it separately, as section 6 does)."]  # fmt: skip
    cm = [r for r in makespan if r["framework"] == "clearance" and "error" not in r]
    if cm:
        ratio = _med(cm[0]) / (cm[0]["layers"] * cm[0]["latency_s"])
        lines += ["", f"Clearance: {ratio:.2f}× the critical path (target ≤ "
                  f"{summary.MAKESPAN_TARGET}×: {_ok(ratio <= summary.MAKESPAN_TARGET)}).", "",
                  "Where a run's time goes (medians): *before the first call* is setup (graph "
                  "validation, and for Clearance opening the ledger and queuing the run's "
                  "record); *graph done* is when the last task's model answered; *after the "
                  "last answer* is what follows: for Clearance the coordinator's synthesis "
                  "prompt over every result, its call, and committing and closing the ledger "
                  "(the other frameworks have no synthesis step)."]  # fmt: skip
    cpu_rows = _cpu_table([r for r in makespan if "error" not in r], wall=False)
    if cpu_rows:
        lines += ["", *cpu_rows, "",
                  "CPU per task as in section 1. A layer's 50 tasks start one after another on "
                  "the event loop, so the loop's CPU per task, times 50, is about how far apart "
                  "the first and the last start of a layer are, and the next layer's tasks that "
                  "depend on the last ones start that much later. The ledger's writer commits "
                  "while the tasks wait for their model, but while it holds the interpreter "
                  "lock the loop waits."]  # fmt: skip
    lines += ["", *cli_scale.report_lines(_load("cli_scale"), _load("earlier/cli_scale"))]
    label = {
        "clearance": "Clearance, default scope (dependencies)",
        "clearance-noledger": 'Clearance, memory_scope="all"',
        "global-memory": "global shared memory (every earlier result)",
        "floor": "instructions, task and labelled dependency results (no framework text)",
        "crewai": "CrewAI with context=",
        "crewai-nocontext": "CrewAI, async configuration, without context= (not its default "
        "sequential crew)",
    }
    lines += ["", "## 3. Prompt tokens (L=10, W=10, R=200; cl100k_base via tiktoken, offline)",
              "", "Summed over the 100 task prompts, as each framework's model received them.",
              "", "| prompts | total tokens | per task |", "|---|---|---|"]  # fmt: skip
    tok = {}
    for r in prompt:
        if "error" in r:
            lines.append(f"| {label[r['framework']]} | failed | |")
            continue
        tok[r["framework"]] = r["prompt_tokens"]
        lines.append(f"| {label[r['framework']]} | {r['prompt_tokens']:,} | "
                     f"{r['prompt_tokens'] / r['prompts_captured']:.0f} |")  # fmt: skip
    if "clearance" in tok and "global-memory" in tok:
        q = tok["global-memory"] / tok["clearance"]
        lines += ["", f"Global memory / Clearance default: **{q:.1f}×** (target ≥ 10×: "
                  f"{_ok(q >= 10)})."]  # fmt: skip
        if "floor" in tok:
            f = tok["clearance"] / tok["floor"]
            lines += ["", f"Clearance default / floor: **{f:.3f}×**: the framing (headings, "
                      "fences, the closing instruction) over the instructions, task and "
                      "dependency results with their labels, which count as content (target "
                      f"≤ 1.05×: {_ok(f <= 1.05)}). Measured alone with `python -m bench.run "
                      "--only prompt --skip-peers`; `tests/context/test_layout.py` checks "
                      "it."]  # fmt: skip
        plt.barh([label[k] for k in tok], list(tok.values()))
        plt.xlabel("total prompt tokens (100 tasks)"), plt.title("Prompt tokens per scope")
        plt.savefig(ROOT / "bench" / "prompt_tokens.png", dpi=100, bbox_inches="tight")
        plt.close()
        lines += ["", "![prompt tokens](bench/prompt_tokens.png)"]
    lines += ["", "## 4. Store: `ContextStore` against raw `sqlite3`", "", *_store(store), ""]
    lines += ["## 5. Embedded model end to end", ""]
    if embedded.get("skipped", True):
        lines.append(f"Skipped: {embedded.get('note', 'not run')}.")
    else:
        lines += [
            "| example | wall s | model calls | prompt tokens/task | completion tokens/s of "
            "call time | completion tokens per wall s | peak RSS MB |",
            "|---|---|---|---|---|---|---|",
            f"| {embedded['example']} | {embedded['wall_s']:.1f} | {embedded['calls']} | "
            f"{embedded['prompt_tokens_per_task']:.0f} | "
            f"{embedded['completion_tokens_per_s']:.1f} | "
            f"{embedded['completion_tokens_total'] / embedded['wall_s']:.1f} "
            f"| {embedded['peak_rss_mb']:.0f} |",
            "",
            "Read from the run's ledger: prompt tokens as the model counted them, per task call;",
            "call time is summed over calls, which overlap (the example runs 2 at once).",
        ]  # fmt: skip
    lines += ["", *_mainjob(_load("mainjob") or [])]
    compare = _load("compare")
    if compare:
        b, a = compare["median_ms_per_task"]["before"], compare["median_ms_per_task"]["after"]
        lines += [
            "",
            "## Hot path: before and after",
            "",
            f"`python -m bench.compare {compare['rev']} --rounds {compare.get('rounds', 3)}`: "
            "the 1,000-task D=0 run with the "
            f"ledger on, at revision `{compare['rev']}` and at this tree, alternating "
            f"({len(compare['times_s']['after'])} runs each).",
            "",
            "| Clearance | median ms/task | runs (s) |",
            "|---|---|---|",
            f"| before ({compare['rev']}) | {b:.3f} | "
            + ", ".join(f"{t:.2f}" for t in compare["times_s"]["before"])
            + " |",
            "| after (this tree) | "
            f"{a:.3f} | " + ", ".join(f"{t:.2f}" for t in compare["times_s"]["after"]) + " |",
            "",
            f"Speed-up: **{b / a:.1f}×**. The profile of the run after the fixes is in "
            "`bench/results/profile.txt`.",
        ]
    makespan = _load("compare-makespan")
    if makespan:
        b, a = (makespan["median_over_critical_path"][k] for k in ("before", "after"))
        cp = makespan["critical_path_s"]
        lines += [
            "",
            f"`python -m bench.compare {makespan['rev']} --rounds {makespan['rounds']} "
            "--makespan`: section 2's run (D=50 ms, L=10, W=50, ledger on), the same way "
            f"({len(makespan['times_s']['after'])} runs each).",
            "",
            "| Clearance | median makespan ÷ critical path | runs ÷ critical path |",
            "|---|---|---|",
            f"| before ({makespan['rev']}) | {b:.3f} | "
            + ", ".join(f"{t / cp:.3f}" for t in makespan["times_s"]["before"])
            + " |",
            f"| after (this tree) | {a:.3f} | "
            + ", ".join(f"{t / cp:.3f}" for t in makespan["times_s"]["after"])
            + " |",
        ]
    lines += report_real.sections(_load("real"), _load("synthesis"))
    ray_results = _load("ray")
    if ray_results is not None:
        from bench.ray import section

        lines += section(ray_results)
    lines += [
        "",
        "## History of the storage fast path",
        "",
        "Measurements taken when each change was made (commits named), kept here rather than in",
        "code comments; they are not re-run by `make bench`.",
        "",
        "- **Write-behind with group commit** (`589b296`): committing each ledger record in its",
        "  own transaction on the event-loop thread cost about 0.9 ms per task on SQLite, the",
        "  largest cost of a run; a writer thread now commits all that is queued in one go.",
        "- **Statements built once** (`972f1c4`): building a statement and its cache key cost more",
        "  than SQLite's own work per call; the store's statements are built once per dialect.",
        "- **Checkpoints between groups** (`2dc6b26`): the ledger's writer runs a `PASSIVE`",
        "  checkpoint of the write-ahead log when idle, so a run's last commit does not copy the",
        "  whole log into the database file.",
        "- **Compiled SQL on the held `sqlite3` connection** (`8d1231e`, `DriverStatement`): the",
        "  store's `get` went from 66 to 12 µs per call and `set` from 183 to 110 µs.",
        "- **The writer waits for a 10 ms pause** (`d889af9`): with a 2 ms wait the gaps of a",
        "  burst of answers were taken for pauses; section 2's D=50 ms makespan ran at 1.217× its",
        "  critical path with 2 ms and 1.193× with 10 ms (medians of 7 alternating 5-run medians).",
        "",
        "## Other figures behind design choices",
        "",
        "- **Embedded tokenizer.** `LlamaCppModel.count_tokens` loads the model on first use:",
        "  about 0.15 s for SmolLM2-135M.",
    ]
    lines += [
        "",
        "## How to read this",
        "",
        "- *floor*: a plain asyncio scheduler that starts each task when its dependencies finish",
        "  and builds the prompt as the agent's instructions, the task's id, title and",
        "  description, and each dependency's result under its label (its title and assignee);",
        "  nothing else.",
        "- *clearance*: `Orchestrator.run_tasks` with its SQLite `RunLedger` (every task state and",
        "  every call with its prompt, manifest and hashes is recorded, and committed before the",
        "  run returns; during the run a writer thread commits the records in groups, in order,",
        "  see `RunLedger.write_behind`; all runs of a case share one ledger file, as the",
        "  default `.clearance/runs.db` is shared by a user's runs); *clearance-noledger*: the",
        "  same with `NullLedger`. Both",
        "  include the final synthesis call, graph validation, the per-prompt manifest (token",
        "  estimate and SHA-256 per item) and fencing. Its fake is a `ChatModel` that, like",
        "  the peers' fakes, keeps each prompt's text and nothing else of the request.",
        "- *langgraph*: a `StateGraph` with one async node per task, joined with",
        "  `add_edge([deps], task)`, results merged into state by a reducer.",
        "- *crewai*: one `Task` per task with `context=` its dependencies and a `BaseLLM` fake;",
        "  every task but the last of its layer is `async_execution=True` (CrewAI refuses an",
        "  asynchronous task whose context names another task of the same asynchronous run, and",
        "  an agent runs one task at a time, so there is one agent per position in a layer).",
        "  CrewAI takes minutes per 1,000-task run, so it gets no warm-up run and",
        "  `--peer-repeats` runs.",
        "- Every case runs in a fresh process; graph construction is inside the timed region",
        "  for every framework. The same `FakeModel` (cached results) serves all of them.",
        "- Section 1 (but CrewAI) runs in rounds: in each round every framework runs once, in",
        "  its own fresh process, one after the other, so a slow spell of the machine hits",
        "  them alike; medians and ranges are over the runs of every round.",
        "- Figures from a shared, loaded machine are noisy; re-run `make bench` on a quiet one.",
    ]
    (ROOT / "BENCHMARKS.md").write_text("\n".join(lines) + "\n")
    print("wrote BENCHMARKS.md")


if __name__ == "__main__":
    main()
