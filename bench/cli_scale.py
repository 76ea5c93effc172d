"""Case: `clearance run`, the product path, at growing team sizes (fake model).

The other overhead sections call `Orchestrator.run_tasks` from Python. A user runs a team file
with ``clearance run``, which also reads and checks the file, prints a progress line per task
event, records the run in its ledger (a SQLite file) and prints the result. This case writes
team files of L=10 layers of W tasks (each task of layer i>0 depends on 2 tasks of layer i-1,
seeded), with the fake model (``fake:echo``) and every task startable at once, and runs each
in a process of its own: ``python -m clearance run FILE --db sqlite:///…``, its output to
``/dev/null`` (rich still renders every line). Per size: the median wall time and CPU time
(the child's user + system, `os.wait4`) of ``--runs`` runs, and per task. The largest size
stays under the team file's 1 MiB cap.

``python -m bench.cli_scale [--sizes 500,1000,2000,4000] [--runs 3] [--out FILE]`` prints one
line per size, then the marginal wall time per task between the two smallest and between the
two largest sizes (what each task adds, the command's start-up left out; it grows with size
when some cost is superlinear), and one JSON line. `make bench` runs it as the ``cli``
section (``bench/results/cli_scale.json``; section 2b of BENCHMARKS.md, beside
``bench/results/earlier/cli_scale.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LAYERS = 10


def team_file(tasks: int, seed: int = 7) -> str:
    """A team file of `LAYERS` layers of ``tasks // LAYERS`` tasks on the fake model."""
    width = tasks // LAYERS
    rng = random.Random(seed)
    lines = [
        "name: scale",
        "goal: Summarize the work.",
        "model: fake:echo",
        f"max_concurrency: {width}",
        "agents:",
        "  - name: worker",
        "    role: Works on one item.",
        "    instructions: Do the task; use the results you are given.",
        "tasks:",
    ]
    for layer in range(LAYERS):
        for i in range(width):
            tid = f"t{layer:02d}_{i:04d}"
            lines += [
                f"  - id: {tid}",
                f"    title: Item {i} of layer {layer}",
                f"    description: Work on item {i} of layer {layer}.",
                "    assignee: worker",
            ]
            if layer:
                a, b = (f"t{layer - 1:02d}_{j:04d}" for j in rng.sample(range(width), 2))
                lines.append(f"    depends_on: [{a}, {b}]")
    return "\n".join(lines) + "\n"


def run_once(team: Path, db: Path) -> tuple[float, float]:
    """``(wall s, CPU s)`` of one ``clearance run`` of ``team`` in a child process."""
    for leftover in db.parent.glob(db.name + "*"):
        leftover.unlink()
    command = [sys.executable, "-m", "clearance", "run", str(team), "--db", f"sqlite:///{db}"]
    t0 = time.perf_counter()
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=db.parent
    )
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"clearance run failed ({child.returncode}): {errors.decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(sizes: list[int], runs: int) -> dict[str, Any]:
    """Time ``clearance run`` at each of ``sizes`` (tasks), ``runs`` times; see the module."""
    rows: list[dict[str, Any]] = []
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="clearance-cli-scale-") as tmp:
        for tasks in sorted(sizes):
            team = Path(tmp) / f"team{tasks}.yaml"
            team.write_text(team_file(tasks), "utf-8")
            measured = [run_once(team, Path(tmp) / "runs.db") for _ in range(runs)]
            wall = statistics.median(w for w, _ in measured)
            cpu = statistics.median(c for _, c in measured)
            rows.append({"tasks": tasks, "wall_s": wall, "cpu_s": cpu, "runs": measured})
            print(
                f"  {tasks:6d} tasks: wall {wall:6.2f} s ({wall / tasks * 1e3:.2f} ms/task), "
                f"CPU {cpu:6.2f} s ({cpu / tasks * 1e3:.2f} ms/task)",
                flush=True,
            )
    marginal: dict[str, float] = {}
    if len(rows) > 1:
        for a, b in ((rows[0], rows[1]), (rows[-2], rows[-1])):
            span = f"{a['tasks']}-{b['tasks']}"
            marginal[span] = (b["wall_s"] - a["wall_s"]) / (b["tasks"] - a["tasks"])
            print(f"  marginal wall per task, {span} tasks: {marginal[span] * 1e3:.2f} ms")
    return {
        "case": "cli_scale",
        "layers": LAYERS,
        "started_at": started_at,
        "load_average": os.getloadavg()[0],
        "rows": rows,
        "marginal_s_per_task": marginal,
    }


def report_lines(now: dict[str, Any] | None, earlier: dict[str, Any] | None) -> list[str]:
    """Section 2b of BENCHMARKS.md from ``measure``'s results, beside an earlier run's."""
    if now is None:
        return []
    lines = [
        "## 2b. `clearance run` at 500 to 4,000 tasks (fake model; `python -m bench.cli_scale`)",
        "",
        "Sections 1 and 2 call `Orchestrator.run_tasks` from Python. A user runs a team file with",
        "`clearance run`, which also reads and checks the file, prints a progress line per task",
        "event, records the run in its ledger and prints the result. Team files of 10 layers",
        "(each task of layer i>0 depends on 2 tasks of layer i-1, seeded) on `fake:echo`, every",
        "task startable at once; `python -m clearance run FILE --db sqlite:///…` in a process of",
        "its own, output to `/dev/null` (rich still renders every line). The largest size is",
        "near the team file's 1 MiB cap. *Earlier*: `bench/results/earlier/cli_scale.json`.",
        "",
        f"Run {now['started_at']} (load average {now['load_average']:.1f})"
        + (
            f"; earlier {earlier['started_at']}, {earlier.get('label', 'an earlier tree')} "
            f"(load average {earlier['load_average']:.1f})."
            if earlier
            else "."
        ),
        "",
        "| tasks | median wall s | ms/task | CPU s | earlier wall s | earlier ms/task |",
        "|---|---|---|---|---|---|",
    ]
    before = {r["tasks"]: r for r in (earlier or {}).get("rows", [])}
    for r in now["rows"]:
        n, old = r["tasks"], before.get(r["tasks"])
        was = f"{old['wall_s']:.2f} | {old['wall_s'] / n * 1e3:.2f}" if old else "- | -"
        now_s = f"{r['wall_s']:.2f} | {r['wall_s'] / n * 1e3:.2f} | {r['cpu_s']:.2f}"
        lines.append(f"| {n:,} | {now_s} | {was} |")
    lines += ["", "Marginal wall time per task (what a task adds, the command's start-up left out;"
              " it grows with the run when some cost is superlinear):", ""]  # fmt: skip
    was_marginal = (earlier or {}).get("marginal_s_per_task", {})
    for span, value in now["marginal_s_per_task"].items():
        was = f" (earlier {was_marginal[span] * 1e3:.2f} ms)" if span in was_marginal else ""
        lines.append(f"- {span} tasks: **{value * 1e3:.2f} ms**{was}")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,1000,2000,4000", help="tasks per run")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per size")
    parser.add_argument("--out", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--label", help="what was measured, e.g. the revision of PYTHONPATH's src")
    args = parser.parse_args()
    result = measure([int(s) for s in args.sizes.split(",")], args.runs)
    if args.label:
        result["label"] = args.label
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
