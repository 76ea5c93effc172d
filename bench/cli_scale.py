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

``python -m bench.cli_scale [--sizes 500,1000,2000,4000] [--runs 3]`` prints one line per size,
then the marginal wall time per task between the two largest sizes (what each task adds, the
command's fixed start-up cost left out; it grows with size when some cost is superlinear)
and that of the two smallest, and one JSON line.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,1000,2000,4000", help="tasks per run")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per size")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="clearance-cli-scale-") as tmp:
        for tasks in sizes:
            team = Path(tmp) / f"team{tasks}.yaml"
            team.write_text(team_file(tasks), "utf-8")
            runs = [run_once(team, Path(tmp) / "runs.db") for _ in range(args.runs)]
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            rows.append({"tasks": tasks, "wall_s": wall, "cpu_s": cpu, "runs": runs})
            print(
                f"{tasks:6d} tasks: wall {wall:6.2f} s ({wall / tasks * 1e3:.2f} ms/task), "
                f"CPU {cpu:6.2f} s ({cpu / tasks * 1e3:.2f} ms/task)",
                flush=True,
            )
    marginal = {}
    for a, b in ((rows[0], rows[1]), (rows[-2], rows[-1])) if len(rows) > 1 else ():
        span = f"{a['tasks']}-{b['tasks']}"
        marginal[span] = (b["wall_s"] - a["wall_s"]) / (b["tasks"] - a["tasks"])
        print(f"marginal wall per task, {span} tasks: {marginal[span] * 1e3:.2f} ms")
    print(json.dumps({"case": "cli_scale", "rows": rows, "marginal_s_per_task": marginal}))


if __name__ == "__main__":
    main()
