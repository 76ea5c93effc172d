"""``BENCHMARKS.md`` sections 6–8: the real server and the synthesis (figures from results)."""

from __future__ import annotations

import statistics
from typing import Any

COMMAND = "make bench BENCH_ARGS=--only=real,synthesis"


def sections(real: dict[str, Any] | None, synthesis: list[dict[str, Any]] | None) -> list[str]:
    """Markdown lines of sections 6, 7 and 8 (a note where a section was not run)."""
    return [*_makespan(real), *_code_review(real), *_synthesis(synthesis)]


def _makespan(real: dict[str, Any] | None) -> list[str]:
    lines = ["", "## 6. Makespan over critical path on a real server", ""]
    m = (real or {}).get("makespan")
    if not m or "error" in m:
        return [*lines, f"Not run{': ' + m['error'][:200] if m else ''} (`{COMMAND}`)."]
    slots, layers, width = m["servers"], m["layers"], m["width"]
    lines += [
        f"`{COMMAND}`: the L={layers} × W={width} workload graph ({m['tasks']} tasks), each "
        "task one chat completion (at most 8 tokens) of SmolLM2-135M served by llama-cpp-python's "
        f"`python -m llama_cpp.server`. That server runs one request at a time and 0.3.36 has no "
        f"parallel slots, so the slots are {slots} server processes (one thread each) with a pool "
        "in front: a call takes a free server or waits for one. Clearance (through its own "
        "`OpenAIModel`, `max_concurrency` = the task count) and LangGraph (a `StateGraph`, one "
        "node per task, the OpenAI SDK) share the pool and run alternately in one process, "
        f"{len(m['runs']['clearance'])} runs each.",
        "",
        "*Critical path* is the longest dependency chain of the run's own call times (so the "
        "ratio is what scheduling adds); *slot bound* is the least the slots allow: "
        f"L × ⌈W / slots⌉ = {m['slot_bound_rounds']} calls in a row, against L = {layers}.",
        "",
        "| framework | makespan s | critical path s | makespan ÷ critical path | median call s "
        "| graph build ms | synthesis s (after) |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, float] = {}
    for fw, runs in m["runs"].items():
        ratio = statistics.median(r["makespan_s"] / r["critical_path_s"] for r in runs)
        ratios[fw] = ratio
        each = ", ".join(f"{r['makespan_s'] / r['critical_path_s']:.2f}" for r in runs)
        build = (f"{statistics.median(r['build_s'] for r in runs) * 1e3:.1f}"
                 if "build_s" in runs[0] else "—")  # fmt: skip
        synth = (f"{statistics.median(r['synthesis_s'] for r in runs):.2f}"
                 if "synthesis_s" in runs[0] else "none")  # fmt: skip
        lines.append(
            f"| {fw} | {statistics.median(r['makespan_s'] for r in runs):.2f} | "
            f"{statistics.median(r['critical_path_s'] for r in runs):.2f} | **{ratio:.2f}** "
            f"({each}) | "
            f"{statistics.median(r['median_call_s'] for r in runs):.2f} | {build} | {synth} |"
        )
    lines += [
        "",
        f"Slot bound ÷ L = {m['slot_bound_rounds'] / layers:.2f}: with {slots} slots and "
        f"{width}-wide levels, no scheduler can do better than that multiple of the chain. "
        "LangGraph's makespan starts after its graph is built and compiled (the build "
        "column); Clearance's ends at the last task's answer, and its synthesis call "
        "(LangGraph has none) follows it, timed apart. The two frameworks' calls differ: "
        "Clearance sends its framed prompt (instructions, fenced dependency results), "
        "LangGraph here a bare one, so their calls take different times; each ratio is "
        "against its own chain of calls.",
    ]
    if len(ratios) == 2:
        lines.append(
            f"Clearance ÷ LangGraph (makespan over its own critical path): "
            f"{ratios['clearance'] / ratios['langgraph']:.2f}."
        )
    return lines


def _code_review(real: dict[str, Any] | None) -> list[str]:
    lines = ["", "## 7. Prompt and cached tokens per call: the code-review job, real server", ""]
    c = (real or {}).get("code_review")
    if not c or "error" in c:
        return [*lines, f"Not run{': ' + c['error'][:200] if c else ''} (`{COMMAND}`)."]
    lines += [
        "`clearance run examples/code_review.yaml --model openai:smollm2 --max-concurrency 1 "
        f"--input DIR` against one `llama_cpp.server` (two threads), DIR holding "
        f"{', '.join(c.get('modules') or ['the default input'])} of the standard library's "
        "json package (two small modules: two review calls of one agent, whose prompts share "
        "their agent's prefix, keep the run short on a 2-core machine). "
        "*Recorded* is the ledger's "
        "`cached_prompt_tokens`: llama_cpp.server 0.3.36 reports no cached tokens, so it "
        "records none (NULL, not 0). *Server log* is what the server reused all the same: its "
        "prompt tokens less the tokens its log says it evaluated for that request "
        f"(calls one at a time; log matched the calls: {c['log_matches_calls']}).",
        "",
        f"Run status: {c['status']}, {c['wall_s']:.1f} s.",
        "",
        "| call | agent | prompt tokens | completion tokens | cached (recorded) "
        "| cached (server log) | reused |",
        "|---|---|---|---|---|---|---|",
    ]
    prompt = cached = 0
    for row in c["calls"]:
        log = row["cached_from_server_log"]
        share = (
            f"{log / row['prompt_tokens']:.0%}" if log is not None and row["prompt_tokens"] else "—"
        )
        recorded = row["cached_recorded"]
        lines.append(
            f"| {row['subject']} | {row['agent']} | {row['prompt_tokens']} | "
            f"{row['completion_tokens']} | {'not reported' if recorded is None else recorded} | "
            f"{'—' if log is None else log} | {share} |"
        )
        prompt += row["prompt_tokens"]
        cached += log or 0
    tasks = [r for r in c["calls"] if r["subject"].startswith("task:")]
    if tasks:
        per_task = statistics.mean(r["prompt_tokens"] for r in tasks)
        lines += ["", f"Per task call: {per_task:.0f} prompt tokens on average over "
                  f"{len(tasks)} task calls."]  # fmt: skip
    if prompt and c["log_matches_calls"]:
        lines.append(f"Whole run: {cached:,} of {prompt:,} prompt tokens reused by the server "
                     f"({cached / prompt:.1%}).")  # fmt: skip
    return lines


def _synthesis(rows: list[dict[str, Any]] | None) -> list[str]:
    lines = ["", "## 8. Synthesis prompt tokens at 100 / 1,000 / 10,000 tasks (8k window)", ""]
    if not rows:
        return [*lines, f"Not run (`{COMMAND}`)."]
    lines += [
        "The fake model with an 8,192-token coordinator window (`bench/synthesis.py`); each "
        "task's result is about 23 tokens. When the full view does not fit the coordinator's "
        "budget (window less its output limit), results are summarized in groups (map calls) "
        "and the coordinator writes the answer from the summaries (reduce). Tokens are the "
        "prompts' manifests.",
        "",
        "| tasks | synthesis calls | of which map | largest prompt | budget | reduce prompt "
        "| all synthesis prompts | results in them | each result seen |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tasks']} | failed: {r['error'][:80]} | | | | | | | |")
            continue
        once = r["results_seen"] == r["distinct_results_seen"] == r["tasks"]
        lines.append(
            f"| {r['tasks']:,} | {r['synthesis_calls']} | {r['map_calls']} | "
            f"{r['max_step_prompt_tokens']:,} | {r['budget']:,} | {r['reduce_prompt_tokens']:,} | "
            f"{r['total_synthesis_prompt_tokens']:,} | {r['result_tokens']:,} | "
            f"{'once' if once else 'NOT once'} |"
        )
    done = [r for r in rows if "error" not in r]
    if done:
        ratios = ", ".join(
            f"{r['tasks']:,} tasks {r['total_synthesis_prompt_tokens'] / r['result_tokens']:.2f}×"
            for r in done
        )
        fits = all(r["max_step_prompt_tokens"] <= r["budget"] for r in done)
        lines += [
            "",
            f"All synthesis prompt tokens ÷ the results' own tokens: {ratios}. "
            + ("No prompt exceeds the budget." if fits else "A prompt EXCEEDS the budget."),
        ]
    return lines
