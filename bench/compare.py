"""Before/after: one Clearance case at another revision and at this tree.

``python -m bench.compare REV [--rounds N] [--makespan]`` exports ``src/`` of git revision
REV to a temporary folder and runs the same case against it and against the working tree,
alternating (so machine load hits both alike).

- By default the case is section 1's: 1,000 tasks at D=0 with the ledger on. Writes
  ``bench/results/compare.json``, and a cProfile of the working tree's run to
  ``bench/results/profile.txt``.
- With ``--makespan`` it is section 2's: L=10, W=50 at D=50 ms with the ledger on, compared
  by makespan over the critical path. Writes ``bench/results/compare-makespan.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.run import RESULTS, ROOT, run_case


def export_src(rev: str, into: Path) -> Path:
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def profile(top: int = 30) -> str:
    """cProfile of one ledger-on 1,000-task run (after a warm-up run), top by cumulative time."""
    from bench.frameworks import run_clearance
    from bench.workload import FakeModel, make_graph

    specs = make_graph(10, 100)
    model = FakeModel(latency_s=0, result_tokens=50)
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run_clearance(specs, model, ledger_url=f"sqlite:///{tmp}/w.db"))
        prof = cProfile.Profile()
        prof.enable()
        asyncio.run(run_clearance(specs, model, ledger_url=f"sqlite:///{tmp}/p.db"))
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    text = out.getvalue().replace(str(ROOT) + "/", "")
    for prefix in {sys.prefix, sys.base_prefix}:  # keep machine paths out of the file
        text = text.replace(prefix + "/", "<python>/")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("rev", help="git revision to compare with (the 'before')")
    ap.add_argument(
        "--rounds",
        type=int,
        default=7,
        help="rounds of one 'before' and one 'after' process, 3 runs each (runs on a "
        "shared machine vary by 10-20%%: 7 rounds give 21 runs a side)",
    )
    ap.add_argument(
        "--makespan",
        action="store_true",
        help="compare section 2's case (D=50 ms, L=10, W=50) by makespan over the critical "
        "path, instead of section 1's",
    )
    args = ap.parse_args()
    if args.makespan:
        case = {"framework": "clearance", "layers": 10, "width": 50, "latency_s": 0.05}
    else:
        case = {"framework": "clearance", "layers": 10, "width": 100}
    case["repeats"] = 3
    times: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="clearance-before-") as tmp:
        before = export_src(args.rev, Path(tmp))
        for _ in range(args.rounds):
            for label, src in (("before", before), ("after", ROOT / "src")):
                times[label] += run_case(case, 3600, src=src)["times_s"]
    result: dict[str, object] = {
        "rev": args.rev,
        "rounds": args.rounds,
        "case": case,
        "times_s": times,
    }
    if args.makespan:
        critical_path_s = case["layers"] * case["latency_s"]
        medians = {k: statistics.median(v) / critical_path_s for k, v in times.items()}
        result["critical_path_s"] = critical_path_s
        result["median_over_critical_path"] = medians
        (RESULTS / "compare-makespan.json").write_text(json.dumps(result, indent=2))
    else:
        tasks = case["layers"] * case["width"]
        medians = {k: statistics.median(v) * 1e3 / tasks for k, v in times.items()}
        result["median_ms_per_task"] = medians
        (RESULTS / "compare.json").write_text(json.dumps(result, indent=2))
        (RESULTS / "profile.txt").write_text(profile())
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
