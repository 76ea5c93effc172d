"""What ``clearance run`` and ``resume`` print and write once a run has ended.

The task table (bounded: `TABLE_ROWS`), the synthesis (bounded: `MAX_PRINTED_CHARS`), the
run's totals, a named report and the files asked for (``--output``, ``--json``, ``--sarif``),
and the exit code for the run's status.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table

from clearance import TaskStatus
from clearance.cli._approve import EXIT_AWAITING_APPROVAL
from clearance.cli._common import err, out, safe_line, safe_lines, safe_text, write_output_file

if TYPE_CHECKING:
    from clearance import RunResult
    from clearance.runs import Report

__all__ = [
    "MAX_PRINTED_CHARS",
    "TABLE_ROWS",
    "exit_for",
    "json_text",
    "made_report",
    "print_result",
    "print_run",
    "task_data",
    "write_report",
]


def made_report(make: Callable[[], Report], result: RunResult) -> Report | None:
    """The run's report, or ``None`` (said in one line) if making it failed.

    The run is recorded whatever the report does: a report that raises (a defect of the
    report's own) loses neither the run nor the other files asked for.
    """
    try:
        return make()
    except Exception as exc:  # the report's own defect: the run stays as recorded
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        line = (
            f"error: the report could not be made ({reason}); the run is recorded: "
            f"clearance inspect {result.run_id}"
        )
        err.print(safe_text(line), soft_wrap=True)
        return None


def write_report(
    report: Report | None,
    result: RunResult,
    *,
    shown: bool,
    output: Path | None,
    json_output: Path | None,
    sarif_output: Path | None,
) -> None:
    """Print a named report, and write the files asked for.

    Without a report (`made_report` failed), ``--json`` holds the tasks alone and neither
    ``--output`` nor ``--sarif`` is written.

    Raises:
        ConfigError: A file cannot be written; the run stays recorded, and the error says
            where to read it.
    """
    kept = f"; the run is recorded: clearance inspect {result.run_id}"
    if report is None:
        if json_output is not None:
            text = json_text({"tasks": task_data(result)})
            write_output_file(json_output, text, flag="--json", after=kept)
            out.print(safe_text(f"result written to {json_output}"))
        return
    if shown:  # model text and input files' docstrings: shown escaped, never obeyed
        # No hyperlinks: a link's target would be hidden behind its text (an OSC 8
        # sequence); shown as "text (target)" instead.
        out.print(Markdown(safe_lines(report.markdown), hyperlinks=False))
    if output is not None:
        write_output_file(output, report.markdown, flag="--output", after=kept)
        out.print(safe_text(f"report written to {output}"))
    if json_output is not None:
        data = {**report.data, "tasks": task_data(result)}
        text = json_text(data)
        write_output_file(json_output, text, flag="--json", after=kept)
        out.print(safe_text(f"result written to {json_output}"))
    if sarif_output is not None and report.sarif is not None:
        text = json_text(report.sarif)
        write_output_file(sarif_output, text, flag="--sarif", after=kept)
        out.print(safe_text(f"SARIF written to {sarif_output}"))


# DEL, the C1 controls and the bidirectional overrides and isolates: JSON may hold them raw,
# a terminal or an editor showing the file would obey them. As ``\uXXXX`` escapes the
# document's values are the same.
_JSON_ESCAPES = {
    code: f"\\u{code:04x}"
    for code in (*range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


def json_text(value: Any) -> str:
    r"""``value`` as an indented JSON document for ``--json`` or ``--sarif``, with a last newline.

    Text stays readable (not ASCII-escaped), but no control character or bidirectional
    override is in the file raw: ``json`` escapes the C0 controls, and DEL, C1 and the
    overrides are written as ``\u`` escapes (outside strings JSON has none of them), so
    ``cat`` obeys none and the values read back unchanged.
    """
    return json.dumps(value, indent=2, ensure_ascii=False).translate(_JSON_ESCAPES) + "\n"


def task_data(result: RunResult) -> list[dict[str, Any]]:
    """Every task's outcome as JSON-ready data (results as text)."""
    return [
        {
            "task_id": o.task_id,
            "assignee": o.assignee,
            "status": str(o.status),
            "result": o.result,
            "error": o.error,
            "prompt_tokens": o.prompt_tokens,
        }
        for o in result.tasks.values()
    ]


def exit_for(result: RunResult) -> None:
    """Exit 1 for a failed run, `EXIT_AWAITING_APPROVAL` for one paused for approval."""
    if result.status == "awaiting_approval":
        raise typer.Exit(EXIT_AWAITING_APPROVAL)
    if result.status != "completed":
        raise typer.Exit(1)


TABLE_ROWS = 200
"""Most task rows in the result's table; a larger run lists the tasks that did not complete."""


def print_result(result: RunResult) -> None:
    outcomes = list(result.tasks.values())
    title = "Tasks"
    if len(outcomes) > TABLE_ROWS:
        # A table of thousands of rows scrolls the run off the terminal (and rich lays it
        # out for about a second per 4,000 rows): the count per status, then the tasks that
        # need a look. Every task is in `--json` and in `clearance inspect`.
        counts = Counter(str(o.status) for o in outcomes)
        listed = ", ".join(f"{n} {status}" for status, n in counts.items())
        every = f"every task: --json FILE, or clearance inspect {result.run_id}"
        out.print(safe_text(f"Tasks: {len(outcomes)} ({listed}); {every}"), soft_wrap=True)
        unfinished = [o for o in outcomes if o.status != TaskStatus.COMPLETED]
        title = "Tasks not completed"
        if len(unfinished) > TABLE_ROWS:
            title = f"The first {TABLE_ROWS} of {len(unfinished)} tasks not completed"
        outcomes = unfinished[:TABLE_ROWS]
    if outcomes:
        table = Table(title=title, title_justify="left")
        for column in ("task", "agent", "status", "prompt tokens"):
            table.add_column(column, justify="right" if column == "prompt tokens" else "left")
        for o in outcomes:
            table.add_row(*map(safe_text, (o.task_id, o.assignee, o.status, o.prompt_tokens)))
        out.print(table)
    print_run(result)


MAX_PRINTED_CHARS = 20_000
"""Most characters of the synthesis `clearance run` prints; the rest is in the ledger."""


def print_run(result: RunResult) -> None:
    """The synthesis, the run's error and its totals."""
    if result.synthesis is not None:
        shown = result.synthesis  # cut: laying out megabytes in a panel takes minutes
        if len(shown) > MAX_PRINTED_CHARS:
            where = f"clearance inspect {result.run_id} --task synthesis"
            cut = f"[cut at {MAX_PRINTED_CHARS:,} of {len(shown):,} characters; all: {where}]"
            shown = f"{shown[:MAX_PRINTED_CHARS]}\n{cut}"
        out.print(Panel(safe_text(shown), title="Synthesis", title_align="left"))
    if result.error:  # one line even when it quotes a server's body with line breaks
        err.print(safe_line(f"run {result.run_id}: {result.error}"), soft_wrap=True)
    usage = result.usage
    out.print(
        safe_text(
            f"run id: {result.run_id}  status: {result.status}  model calls: {usage.requests}  "
            f"prompt tokens: {usage.prompt_tokens}  completion tokens: {usage.completion_tokens}"
        )
    )
    out.print(safe_text(f"see every prompt: clearance inspect {result.run_id}"))
