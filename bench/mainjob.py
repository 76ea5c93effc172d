"""The main job against its floor: prompt and cached tokens, wall time, and the model's floor.

    python bench/mainjob.py                          # make run: the json package
    python bench/mainjob.py --input python:click     # one real package
    python bench/mainjob.py --input DIR --json out.json

The floor is what the embedded model cannot go below on this machine right now:
prompt tokens / measured prefill rate + completion tokens / measured generation rate (both
rates measured on the same model, with the same threads, just before the run). It is given
twice: for every prompt token (the definition of the issue that set the target), and for
the prompt tokens the cache did not reuse. The ratio is wall time / floor. The machine may
be shared: the figures are what this machine gave, with the command that produced them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION_TEXT = (
    "The module reads a configuration file, checks each key against a schema, and reports "
    "every problem with the line it was found on. "
)


def measure_rates(threads: int | None = None) -> dict[str, float]:
    """Prefill and generation rates (tokens/s) of the embedded model, from llama.cpp's timers."""
    import llama_cpp

    from clearance.models import get_model

    model: Any = get_model("llama-cpp:smollm2")
    if threads is not None:
        model._n_threads = model._n_threads_batch = threads
    llm = model._ensure_loaded()
    ctx = llm._ctx.ctx
    tokens = llm.tokenize((CALIBRATION_TEXT * 30).encode("utf-8"))[:700]
    llm.reset()
    llama_cpp.llama_perf_context_reset(ctx)
    t0 = time.perf_counter()
    llm.eval(tokens)
    prefill_wall = time.perf_counter() - t0
    perf = llama_cpp.llama_perf_context(ctx)
    prefill = perf.n_p_eval / (perf.t_p_eval_ms / 1000) if perf.t_p_eval_ms else 0.0
    if not prefill:
        prefill = len(tokens) / prefill_wall
    llm.reset()
    llama_cpp.llama_perf_context_reset(ctx)
    t0 = time.perf_counter()
    out = llm.create_completion(
        prompt="Write a long list of fruits, one per line:\n", max_tokens=96, temperature=0.0
    )
    gen_wall = time.perf_counter() - t0
    perf = llama_cpp.llama_perf_context(ctx)
    generated = int(out["usage"]["completion_tokens"])
    generation = perf.n_eval / (perf.t_eval_ms / 1000) if perf.t_eval_ms else 0.0
    if not generation:
        generation = generated / gen_wall
    return {
        "prefill_tokens_per_s": prefill,
        "generation_tokens_per_s": generation,
        "plain_ms_per_token": 1000 * gen_wall / max(generated, 1),
        "grammar_ms_per_token": _grammar_ms_per_token(llm),
    }


def _grammar_ms_per_token(llm: Any) -> float:
    """Wall milliseconds per generated token under the review's JSON-schema grammar."""
    from llama_cpp.llama_grammar import LlamaGrammar

    schema = {
        "type": "object",
        "required": ["summary", "findings"],
        "properties": {
            "summary": {"type": "string", "maxLength": 200},
            "findings": {
                "type": "array",
                "maxItems": 2,
                "items": {
                    "type": "object",
                    "required": ["symbol", "note"],
                    "properties": {
                        "symbol": {"enum": ["", "loads", "detect_encoding", "dump", "dumps"]},
                        "note": {"type": "string", "maxLength": 200},
                    },
                },
            },
        },
    }
    grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    llm.reset()
    t0 = time.perf_counter()
    out = llm.create_completion(
        prompt="Review the json module's loads function as JSON:\n",
        max_tokens=96,
        temperature=0.0,
        grammar=grammar,
    )
    return 1000 * (time.perf_counter() - t0) / max(int(out["usage"]["completion_tokens"]), 1)


def run_job(team: str, input_dir: str | None, report: Path | None = None) -> dict[str, Any]:
    """Run ``clearance run TEAM`` with the embedded model; read its calls from the ledger."""
    from clearance import RunLedger

    with tempfile.TemporaryDirectory(prefix="clearance-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'runs.db'}"
        cli = [sys.executable, "-m", "clearance", "run", team, "--db", url]
        if input_dir:
            cli += ["--input", input_dir]
        if report is not None:
            cli += ["--output", str(report.resolve())]
        t0 = time.perf_counter()
        proc = subprocess.run(cli, capture_output=True, text=True, cwd=tmp, check=False)
        wall_s = time.perf_counter() - t0
        if proc.returncode not in (0, 1):
            raise SystemExit(f"run failed: {proc.stderr.strip()[-500:]}")
        with RunLedger(url) as ledger:
            runs = ledger.list_runs(limit=1)
            if not runs:
                raise SystemExit(
                    f"no run recorded (exit {proc.returncode}): {proc.stderr.strip()[-800:]}"
                    f"{proc.stdout.strip()[-800:]}"
                )
            run = runs[0]
            calls = ledger.calls(run.run_id)
    reviews = [c for c in calls if c.subject.startswith("task:review-")]
    prompt = sum(c.usage.prompt_tokens for c in calls)
    cached = sum(c.usage.cached_prompt_tokens or 0 for c in calls)
    return {
        "run_status": run.status,
        "wall_s": wall_s,
        "calls": len(calls),
        "model_s": sum(c.latency_s for c in calls),
        "prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
        "completion_tokens": sum(c.usage.completion_tokens for c in calls),
        "module_reviews": len(reviews),
        "prompt_tokens_per_review": statistics.mean(c.usage.prompt_tokens for c in reviews)
        if reviews
        else 0.0,
    }


def _shown_args(argv: list[str] | None) -> list[str]:
    """The command's arguments as recorded: where the files were written is left out."""
    args = list(sys.argv[1:] if argv is None else argv)
    shown: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--report", "--json"):
            skip = True
        elif not arg.startswith(("--report=", "--json=")):
            shown.append(arg)
    return shown


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure rates, run the job, print the figures (and write them as JSON if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--team", default=str(ROOT / "examples" / "code_review.yaml"))
    parser.add_argument("--input", default=None, help="--input of clearance run")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--report", type=Path, default=None, help="keep the run's report")
    parser.add_argument(
        "--save", action="store_true", help="keep them in bench/results/mainjob.json (by input)"
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    rates = measure_rates()
    job = run_job(args.team, args.input, args.report)
    floor_all = (
        job["prompt_tokens"] / rates["prefill_tokens_per_s"]
        + job["completion_tokens"] / rates["generation_tokens_per_s"]
    )
    floor_uncached = (job["prompt_tokens"] - job["cached_prompt_tokens"]) / rates[
        "prefill_tokens_per_s"
    ] + job["completion_tokens"] / rates["generation_tokens_per_s"]
    figures = {
        "command": " ".join(["python", "bench/mainjob.py", *_shown_args(argv)]),
        "input": args.input or "team default",
        "load_1min": round(load, 1),
        **rates,
        **job,
        "cached_share": job["cached_prompt_tokens"] / job["prompt_tokens"]
        if job["prompt_tokens"]
        else 0.0,
        "floor_s": floor_all,
        "floor_uncached_s": floor_uncached,
        "wall_over_floor": job["wall_s"] / floor_all if floor_all else 0.0,
        "wall_over_floor_uncached": job["wall_s"] / floor_uncached if floor_uncached else 0.0,
    }
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    if args.save:
        kept = ROOT / "bench" / "results" / "mainjob.json"
        rows = json.loads(kept.read_text()) if kept.exists() else []
        rows = [r for r in rows if r.get("input") != figures["input"]] + [figures]
        kept.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return figures


if __name__ == "__main__":
    main()
