"""A hierarchical synthesis labels each summary with the tasks it covers.

When the coordinator's full view overflows, map steps summarize groups of results and the
reduce (or a map step of summaries) shows each summary as a block. The block's label is
content: it names the tasks the summary covers (``[<id>] <title> (by <assignee>)``, at most
`SUMMARY_LABEL_TASKS` of them, then how many more), transitively for a summary of summaries,
so the coordinator can say which tasks it relied on. ``clearance verify`` rebuilds each
label from the map steps' recorded clearances and the graph: a label naming other tasks is
a finding.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.labels import SUMMARY_LABEL_TASKS
from clearance._context.layout import SUMMARIES
from clearance._context.render import Block, parse_user_message
from clearance._context.verify import verify_run
from clearance._core.errors import MalformedRecord
from clearance._core.run_spec import PROMPT_FORMAT
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

WORKERS = (
    Agent(name="ana", instructions="You analyse."),
    Agent(name="bo", instructions="You write."),
)
LEAD = Agent(name="lead", instructions="You are the lead.")
TEAM = Team(agents=WORKERS, coordinator=LEAD, name="labels")


def tasks(n: int) -> list[Task]:
    return [
        Task(
            id=f"t{i:02d}",
            title=f"Part {i} of the survey",
            description=f"Do part {i}.",
            assignee=WORKERS[i % 2].name,
        )
        for i in range(n)
    ]


def label(step: int, ids: list[str], summaries: int = 0) -> str:
    """The label the test expects, written out independently of the library."""
    by_id = {t.id: t for t in tasks(100)}
    shown = [f"[{i}] {by_id[i].title} (by {by_id[i].assignee})" for i in ids]
    count = f"{len(ids)} task{'s' if len(ids) != 1 else ''}"
    head = (
        f"Summary {step} of {summaries} summaries, {count}"
        if summaries
        else f"Summary {step} of {count}"
    )
    text = f"{head}: " + "; ".join(shown[:SUMMARY_LABEL_TASKS])
    more = len(ids) - SUMMARY_LABEL_TASKS
    return text + (f"; and {more} more task{'s' if more != 1 else ''}" if more > 0 else "")


class Recording(FunctionModel):
    """A coordinator whose map summaries are long enough that they may need a second level."""

    def __init__(self, summary_chars: int) -> None:
        self.received: dict[str, ModelRequest] = {}

        def answer(request: ModelRequest) -> str:
            subject = request.prompt.manifest.subject
            if subject.startswith("synthesis"):
                self.received[subject] = request
            if subject.startswith("synthesis_map:"):
                held = [
                    i for i in request.prompt.manifest.items if i.origin.startswith("summary_of")
                ]
                return "short" if held else "S" * summary_chars
            return "FINAL" if subject == "synthesis" else "R" * 400

        super().__init__(answer)
        self.context_window = 2048


def covered(model: Recording, step: int) -> tuple[list[str], int]:
    """The tasks map step ``step`` covered (transitively) and how many summaries it held."""
    items = model.received[f"synthesis_map:{step}"].prompt.manifest.items
    ids = [i.origin.partition(":")[2] for i in items if i.origin.startswith("task_result:")]
    steps = [int(i.origin.partition(":")[2]) for i in items if i.origin.startswith("summary_of:")]
    for inner in steps:
        ids += covered(model, inner)[0]
    return ids, len(steps)


def summary_headings(request: ModelRequest) -> dict[int, str]:
    """Each summary block's heading in the user message the model received, by step."""
    sections, _ = parse_user_message(request.prompt.messages[1].content)
    blocks = [b for s in sections if s.heading == SUMMARIES for b in s.blocks]
    origins = [
        i.origin for i in request.prompt.manifest.items if i.origin.startswith("summary_of:")
    ]
    assert len(blocks) == len(origins) > 0
    return {int(o.partition(":")[2]): b.heading for o, b in zip(origins, blocks, strict=True)}


async def run(ledger: RunLedger, model: Recording, n: int) -> str:
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks(n), goal="G")
    assert result.status == "completed", result.error
    return result.run_id


async def test_each_summary_in_the_reduce_names_the_tasks_it_covers(ledger):
    model = Recording(summary_chars=40)
    run_id = await run(ledger, model, 30)
    headings = summary_headings(model.received["synthesis"])
    assert len(headings) >= 2
    every = []
    for step, heading in headings.items():
        ids, merged = covered(model, step)
        assert merged == 0
        assert heading == label(step, ids)
        every += ids
    assert sorted(every) == [t.id for t in tasks(30)]  # together they name every result
    assert any(len(covered(model, s)[0]) > SUMMARY_LABEL_TASKS for s in headings)  # the cap shows
    report = verify_run(ledger, run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_summary_of_summaries_names_the_tasks_it_covers_transitively(ledger):
    model = Recording(summary_chars=1200)  # ~300 tokens each: the reduce overflows
    run_id = await run(ledger, model, 60)
    second = [s for s in model.received if s.startswith("synthesis_map:")
              and covered(model, int(s.partition(":")[2]))[1]]  # fmt: skip
    assert second
    for subject in second:  # a map step of summaries: each summary labelled by its tasks
        for step, heading in summary_headings(model.received[subject]).items():
            assert heading == label(step, covered(model, step)[0])
    headings = summary_headings(model.received["synthesis"])
    every = []
    for step, heading in headings.items():
        ids, merged = covered(model, step)
        assert merged >= 1
        assert heading == label(step, ids, merged)
        every += ids
    assert sorted(every) == [t.id for t in tasks(60)]
    report = verify_run(ledger, run_id)
    assert report.ok, [str(f) for f in report.findings]


def test_the_label_fits_the_budget_it_was_counted_in(tmp_path: Path):
    """Every synthesis prompt, labels included, is within the coordinator's budget."""
    import asyncio

    model = Recording(summary_chars=1200)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        asyncio.run(run(ledger, model, 60))
    budget = model.context_window - LEAD.limits.max_output_tokens
    for request in model.received.values():
        assert request.prompt.manifest.total_tokens <= budget
        assert sum(model.count_tokens(m.content) for m in request.prompt.messages) <= budget


async def test_a_summary_label_naming_other_tasks_fails_verify(
    tmp_path: Path, rewrite_prompt: Any, rechain: Any
):
    db = tmp_path / "runs.db"
    model = Recording(summary_chars=40)
    with RunLedger(f"sqlite:///{db}") as ledger:
        run_id = await run(ledger, model, 30)
        assert verify_run(ledger, run_id).ok
    headings = summary_headings(model.received["synthesis"])
    first, second = sorted(headings)[:2]
    # Label summary `first` as if it covered the tasks of summary `second`.
    forged = label(first, covered(model, second)[0])
    origin = f"summary_of:{first}"

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] != origin:
            return block
        item["title"] = forged
        return Block(heading=forged, content=block.content)

    conn = sqlite3.connect(db)
    try:
        rewrite_prompt(conn, "synthesis", edit)
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id)
    assert not report.ok
    problems = [f for f in report.findings if f.origin == origin]
    assert problems, [str(f) for f in report.findings]
    assert any(f"synthesis_map:{first}" in f.reason and "label" in f.reason for f in problems), [
        str(f) for f in problems
    ]
    assert {f.origin for f in report.findings} == {origin}, [str(f) for f in report.findings]


async def test_a_summary_of_summaries_label_must_count_what_it_merged(
    tmp_path: Path, rewrite_prompt: Any, rechain: Any
):
    """Labelling a summary of summaries as if it summarized the results directly is caught."""
    db = tmp_path / "runs.db"
    model = Recording(summary_chars=1200)
    with RunLedger(f"sqlite:///{db}") as ledger:
        run_id = await run(ledger, model, 60)
    step = sorted(summary_headings(model.received["synthesis"]))[0]
    ids, merged = covered(model, step)
    assert merged >= 1
    forged, origin = label(step, ids), f"summary_of:{step}"

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] != origin:
            return block
        item["title"] = forged
        return Block(heading=forged, content=block.content)

    conn = sqlite3.connect(db)
    try:
        rewrite_prompt(conn, "synthesis", edit)
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id)
    assert [(f.origin, "label" in f.reason) for f in report.findings] == [(origin, True)], [
        str(f) for f in report.findings
    ]


# -- a run records its prompt format: a plain label in a labelled run is a finding -----------


def _relabel_plainly(db: Path, run_id: str, step: int, rewrite_prompt: Any, rechain: Any) -> None:
    """Put the plain ``Summary <step>`` label of older runs on summary ``step``, chain rebuilt."""
    origin = f"summary_of:{step}"

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] != origin:
            return block
        item["title"] = f"Summary {step}"
        return Block(heading=f"Summary {step}", content=block.content)

    conn = sqlite3.connect(db)
    try:
        rewrite_prompt(conn, "synthesis", edit)
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)


async def test_a_run_records_the_prompt_format_its_summaries_were_labelled_in(ledger):
    run_id = await run(ledger, Recording(summary_chars=40), 30)
    assert ledger.get_run(run_id).config["prompt_format"] == PROMPT_FORMAT


async def test_a_plain_summary_label_in_a_run_that_labels_summaries_fails_verify(
    tmp_path: Path, rewrite_prompt: Any, rechain: Any
):
    """The plain label of older runs names no false task, but it drops what the summary covers."""
    db = tmp_path / "runs.db"
    model = Recording(summary_chars=40)
    with RunLedger(f"sqlite:///{db}") as ledger:
        run_id = await run(ledger, model, 30)
    step = sorted(summary_headings(model.received["synthesis"]))[0]
    expected = label(step, covered(model, step)[0])
    _relabel_plainly(db, run_id, step, rewrite_prompt, rechain)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id)
    assert [(f.subject, f.origin, f.reason) for f in report.findings] == [
        (
            "synthesis",
            f"summary_of:{step}",
            f"the summary's label 'Summary {step}' does not name the tasks "
            f"synthesis_map:{step} covered: {expected!r}",
        )
    ], [str(f) for f in report.findings]


async def test_a_run_recorded_before_the_prompt_format_keeps_its_plain_labels(
    tmp_path: Path, rewrite_prompt: Any, rechain: Any
):
    """A run whose config records no prompt format (an older run) verifies with plain labels."""
    db = tmp_path / "runs.db"
    model = Recording(summary_chars=40)
    with RunLedger(f"sqlite:///{db}") as ledger:
        run_id = await run(ledger, model, 30)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE runs SET config = json_remove(config, '$.prompt_format') WHERE run_id = ?",
        (run_id,),
    )
    conn.commit()
    conn.close()
    for step in sorted(summary_headings(model.received["synthesis"])):
        _relabel_plainly(db, run_id, step, rewrite_prompt, rechain)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_prompt_format_that_is_not_a_version_is_refused_by_verify(tmp_path: Path):
    """A forger may not make a run read as older by writing a prompt format that is no number."""
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        run_id = await run(ledger, Recording(summary_chars=40), 30)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE runs SET config = json_set(config, '$.prompt_format', '1') WHERE run_id = ?",
        (run_id,),
    )
    conn.commit()
    conn.close()
    with (
        RunLedger(f"sqlite:///{db}") as ledger,
        pytest.raises(MalformedRecord, match="prompt_format is not a version: '1'"),
    ):
        verify_run(ledger, run_id)
