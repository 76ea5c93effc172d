"""The ``graph`` command: a team file's task graph, or its prompt-size estimate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.tree import Tree

from clearance.cli._common import one_line_errors, out, safe_line, safe_text
from clearance.cli._options import InputOption
from clearance.cli._team_setup import load_checked

if TYPE_CHECKING:
    from clearance import LoadedTeam, Task, TaskGraph
    from clearance.runs import TaskEstimate


__all__ = ["RICH_MAX_ROWS", "graph"]

RICH_MAX_ROWS = 500
"""Most tasks drawn with rich's tree or table; a bigger graph is printed as plain lines."""


@one_line_errors
def graph(
    team_file: Annotated[Path, typer.Argument(help="Team file (YAML).")],
    input_dir: InputOption = None,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Print each task's estimated prompt tokens against its budget and the "
            "model's context window (exit 1 if one is over, or its files would fail it).",
        ),
    ] = False,
) -> None:
    """Print a team file's task graph (after validation), in dependency order.

    Validation is what clearance run checks before anything runs (exit 2, one line naming
    the file and field), less what needs a model, ledger, store or network: tools: and
    python: step modules are looked up, not imported (their code does not run), and MCP
    servers are not started.
    """
    loaded, task_graph = load_checked(team_file, input_dir)
    if task_graph is None:
        out.print(safe_text("no tasks: the coordinator plans them from --goal at run time"))
        return
    if estimate:
        _print_estimate(loaded, task_graph)
        return
    head = f"{loaded.spec.name}: {len(task_graph)} tasks"
    tasks = [task_graph.get(t) for t in task_graph.topological_order()]
    if len(tasks) > RICH_MAX_ROWS:  # rich's tree takes about a millisecond a task
        out.print(safe_text(head), soft_wrap=True)
        for task in tasks:
            _print_lines([_task_line(task), *(f"  {line}" for line in _task_details(task))])
        return
    tree = Tree(safe_text(head))
    for task in tasks:
        node = tree.add(safe_text(_task_line(task)))
        for line in _task_details(task):
            node.add(safe_text(line))
    out.print(tree)


def _task_line(task: Task) -> str:
    return f"{task.id}  [{task.assignee}]  {task.title}"


def _task_details(task: Task) -> list[str]:
    """The lines under a task in the graph: its dependencies, scope and files."""
    lines = [f"depends on: {', '.join(task.depends_on) or '-'}"]
    if task.memory_scope != "dependencies":
        lines.append(f"memory scope: {task.memory_scope}")
    if task.files:
        lines.append(f"files: {', '.join(task.files)}")
    return lines


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as lines in columns: the first left-aligned, the next right-aligned, the last as is."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [row[i].rjust(widths[i]) for i in range(1, len(widths))]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def _print_lines(lines: list[str]) -> None:
    """Plain lines, each escaped (`safe_text`) and never wrapped."""
    for line in lines:
        out.print(safe_text(line), soft_wrap=True)


def _print_estimate(loaded: LoadedTeam, task_graph: TaskGraph) -> None:
    """The ``--estimate`` table; exit 1 when a task's estimate is over its budget."""
    from clearance.models import DEFAULT_MODEL_ID
    from clearance.runs import concurrency_notice, estimate_tasks, graph_shape, model_windows

    default = loaded.spec.model or DEFAULT_MODEL_ID
    window = model_windows(loaded.spec)  # the models as the run makes them (weights: lazily)

    ordered = [task_graph.get(t) for t in task_graph.topological_order()]
    rows = estimate_tasks(ordered, loaded.team, input_root=loaded.input_root,
                          context_window=window, project_root=loaded.project_root,
                          file_caps=loaded.file_caps())  # fmt: skip
    shape = graph_shape(ordered)
    out.print(
        safe_text(
            f"graph: {len(ordered)} tasks, width {shape.width}, critical path "
            f"{shape.critical_path} tasks, max_concurrency {loaded.spec.max_concurrency}"
        )
    )
    if (notice := concurrency_notice(ordered, loaded.spec.max_concurrency)) is not None:
        out.print(safe_text(notice), soft_wrap=True)
    columns = ("task", "estimate", "budget", "context window", "")
    cells = [
        (row.task_id, "-", "-", "-", "step (no model)") if row.prompt_tokens == 0 else (
            row.task_id, str(row.prompt_tokens), str(row.budget or "?"),
            str(row.context_window or "?"),
            f"error: {row.error}" if row.error else "OVER BUDGET" if row.over else "ok",
        )
        for row in rows
    ]  # fmt: skip
    if len(cells) > RICH_MAX_ROWS:  # rich's table takes about a millisecond a row
        _print_lines(["Estimated prompt tokens", *_aligned([columns, *cells])])
    else:
        table = Table(title="Estimated prompt tokens", title_justify="left")
        for column in columns:
            table.add_column(column, justify="left" if column in ("task", "") else "right")
        for cell in cells:  # escaped, one line, never read as markup (a file's name)
            table.add_row(*map(safe_line, cell))
        out.print(table)
    _print_wall_time(loaded, ordered, rows, default)
    if any(r.over or r.error for r in rows):
        raise typer.Exit(1)


def _print_wall_time(
    loaded: LoadedTeam, ordered: list[Task], rows: list[TaskEstimate], default: str
) -> None:
    """The wall-time range of a run on the embedded model (others: no figure to give)."""
    from clearance.models import split_model_id
    from clearance.runs import wall_time_range

    names = {a.name: a for a in loaded.team.agents}
    agents = [names[t.assignee] for t in ordered if t.run is None and t.assignee in names]
    coordinator = loaded.team.coordinator
    callers = [*agents, *([coordinator] if coordinator is not None else [])]
    if not callers or any(split_model_id(a.model or default)[0] != "llama-cpp" for a in callers):
        return
    low, high = wall_time_range(
        [r for r in rows if r.prompt_tokens], [a.limits.max_output_tokens for a in callers]
    )
    synthesis = " and the synthesis's answer" if coordinator is not None else ""
    out.print(
        safe_text(
            f"wall time on the embedded model: about {low:.0f} to {high:.0f} s (idle to busy "
            f"2-core machine; {len(callers)} model calls one at a time: the tasks' prompts"
            f"{synthesis}; steps take under a second)"
        ),
        soft_wrap=True,
    )
