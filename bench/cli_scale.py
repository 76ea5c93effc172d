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

Then, on the largest size's last run, the commands that read a recorded run: ``inspect RUN
--no-pager`` (every prompt), ``verify RUN`` and ``view RUN --output FILE`` (the HTML page),
each in a process of its own: wall time, CPU time, peak memory (``ru_maxrss``) and the bytes
it wrote (the terminal output, or the page).

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


def _clearance(args: list[str], cwd: Path, stdout: Any = subprocess.DEVNULL) -> dict[str, float]:
    """Run ``python -m clearance ARGS`` in a child process: its wall s, CPU s and peak KB.

    Raises:
        SystemExit: The command failed (its last error lines are named).
    """
    command = [sys.executable, "-m", "clearance", *args]
    t0 = time.perf_counter()
    child = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd)
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise SystemExit(f"clearance {args[0]} failed ({code}): {errors.decode()[-500:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "max_rss_kb": float(usage.ru_maxrss)}


def run_once(team: Path, db: Path) -> tuple[float, float]:
    """``(wall s, CPU s)`` of one ``clearance run`` of ``team`` in a child process."""
    for leftover in db.parent.glob(db.name + "*"):
        leftover.unlink()
    used = _clearance(["run", str(team), "--db", f"sqlite:///{db}"], db.parent)
    return used["wall_s"], used["cpu_s"]


def measure_readers(db: Path) -> dict[str, dict[str, float]]:
    """``inspect``, ``verify`` and ``view`` of the one run in ``db``: see the module."""
    import sqlite3

    with sqlite3.connect(db) as connection:
        (run_id,) = connection.execute("SELECT run_id FROM runs").fetchone()
    found: dict[str, dict[str, float]] = {}
    out = db.parent / "reader.out"
    page = db.parent / "page.html"
    commands = {
        "inspect": ["inspect", run_id, "--no-pager"],
        "verify": ["verify", run_id],
        "view": ["view", run_id, "--output", str(page)],
    }
    for name, args in commands.items():
        with out.open("wb") as sink:
            used = _clearance([*args, "--db", f"sqlite:///{db}"], db.parent, stdout=sink)
        written = page if name == "view" else out
        found[name] = {**used, "output_bytes": float(written.stat().st_size)}
        peak_mb, wrote_mb = used["max_rss_kb"] / 1024, found[name]["output_bytes"] / 1e6
        print(
            f"  {name:8s} wall {used['wall_s']:6.2f} s, CPU {used['cpu_s']:6.2f} s, "
            f"peak {peak_mb:7.1f} MB, wrote {wrote_mb:8.2f} MB",
            flush=True,
        )
    return found


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
        print(f"  reading the {rows[-1]['tasks']:,}-task run:", flush=True)
        readers = measure_readers(Path(tmp) / "runs.db")
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
        "readers": {"tasks": rows[-1]["tasks"], **readers},
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
    readers = now.get("readers")
    if readers:
        was_readers = (earlier or {}).get("readers") or {}
        lines += ["", f"Reading the {readers['tasks']:,}-task run back (each command in a process"
                  " of its own; *wrote*: its terminal output, or the page `view` writes):", "",
                  "| command | wall s | CPU s | peak MB | wrote MB | earlier wall s |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for name in ("inspect", "verify", "view"):
            r, old = readers[name], was_readers.get(name)
            was = f"{old['wall_s']:.2f}" if old else "-"
            peak_mb, wrote_mb = r["max_rss_kb"] / 1024, r["output_bytes"] / 1e6
            lines.append(f"| `{name}` | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {peak_mb:.0f} | "
                         f"{wrote_mb:.1f} | {was} |")  # fmt: skip
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
