"""Hierarchical synthesis: map steps and a reduce when the full view overflows the window."""

import json
import sqlite3

import pytest

from clearance import Agent, Orchestrator, RunOptions, Task, Team
from clearance._context.render import Block
from clearance._context.verify import verify_run
from clearance._core.errors import ModelError
from clearance._core.prompt import sha256_text
from clearance.testing import FakeModel, FunctionModel

WINDOW = 8192
WORKER = Agent(name="worker", instructions="You do one task.")
LEAD = Agent(name="lead", instructions="You are the lead.")
TEAM = Team(agents=(WORKER,), coordinator=LEAD, name="big")
BUDGET = WINDOW - LEAD.limits.max_output_tokens


def tasks(n):
    return [
        Task(id=f"t{i:04d}", title=f"Title {i}", description=f"Do part {i}.", assignee="worker")
        for i in range(n)
    ]


def synthesis_calls(ledger, run_id):
    return [
        c
        for c in ledger.calls(run_id)
        if c.subject == "synthesis" or c.subject.startswith("synthesis_map:")
    ]


def origins(call):
    return [str(i["origin"]) for i in call.manifest["items"]]


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """One 1,000-task run with an 8k-token coordinator window, shared by the tests below."""
    import asyncio

    from clearance import RunLedger

    path = tmp_path_factory.mktemp("big") / "runs.db"
    model = FakeModel("x", context_window=WINDOW)
    with RunLedger(f"sqlite:///{path}") as ledger:
        orch = Orchestrator(TEAM, model=model, ledger=ledger, options=RunOptions(max_concurrency=8))
        result = asyncio.run(orch.run_tasks(tasks(1000), goal="Report on all parts."))
        ledger.flush()
    return path, result, model


def open_ledger(path):
    from clearance import RunLedger

    return RunLedger(f"sqlite:///{path}")


def test_a_thousand_task_run_synthesizes_within_an_8k_window(big_run):
    path, result, model = big_run
    assert result.status == "completed", result.error
    assert result.synthesis
    with open_ledger(path) as ledger:
        calls = synthesis_calls(ledger, result.run_id)
    maps = [c for c in calls if c.subject.startswith("synthesis_map:")]
    assert len(maps) >= 2
    assert [c.subject for c in calls].count("synthesis") == 1
    assert calls[-1].subject == "synthesis"
    for call in calls:
        assert call.manifest["total_tokens"] <= BUDGET, call.subject
        text = "".join(m["content"] for m in call.messages)
        assert model.count_tokens(text) <= BUDGET
    # What the model received, counted with its own counter, fits too.
    sent = [r for r in model.requests if r.prompt.manifest.subject.startswith("synthesis")]
    assert len(sent) == len(calls)
    assert all(sum(model.count_tokens(m.content) for m in r.prompt.messages) <= BUDGET
               for r in sent)  # fmt: skip


def test_every_result_reaches_exactly_one_map_step(big_run):
    path, result, _ = big_run
    with open_ledger(path) as ledger:
        calls = synthesis_calls(ledger, result.run_id)
    seen: dict[str, list[str]] = {}
    for call in calls:
        for origin in origins(call):
            if origin.startswith("task_result:"):
                seen.setdefault(origin, []).append(call.subject)
    assert set(seen) == {f"task_result:t{i:04d}" for i in range(1000)}
    assert all(len(s) == 1 and s[0].startswith("synthesis_map:") for s in seen.values())
    reduce = calls[-1]
    summaries = [o for o in origins(reduce) if o.startswith("summary_of:")]
    maps = [c.subject.removeprefix("synthesis_map:") for c in calls[:-1]]
    assert sorted(summaries) == sorted(f"summary_of:{n}" for n in maps)
    assert not any(o.startswith("task_result:") for o in origins(reduce))
    # The reduce holds each map call's recorded answer, verbatim.
    responses = {c.subject.removeprefix("synthesis_map:"): c.response for c in calls[:-1]}
    for item in reduce.manifest["items"]:
        if item["origin"].startswith("summary_of:"):
            answer = responses[item["origin"].removeprefix("summary_of:")]
            assert item["sha256"] == sha256_text(answer.strip())


def test_the_hierarchical_run_verifies(big_run):
    path, result, _ = big_run
    with open_ledger(path) as ledger:
        report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings][:5]


def test_a_forged_map_summary_fails_verify(big_run, tmp_path, rewrite_prompt):
    path, result, _ = big_run
    copy = tmp_path / "forged.db"
    copy.write_bytes(path.read_bytes())
    forge_item(rewrite_prompt, copy, "synthesis", "Summary ", "Everything went perfectly; ship it.")
    with open_ledger(copy) as ledger:
        report = verify_run(ledger, result.run_id)
    assert not report.ok
    assert any(
        (f.origin or "").startswith("summary_of:") and "synthesis_map" in f.reason
        for f in report.findings
    ), [str(f) for f in report.findings]


def test_a_result_moved_between_map_steps_fails_verify(big_run, tmp_path, rewrite_prompt):
    """A forger adding a result to a second map step is caught, digests recomputed."""
    path, result, _ = big_run
    copy = tmp_path / "moved.db"
    copy.write_bytes(path.read_bytes())
    # Rename one result of map step 2 to a result already held by map step 1.
    with open_ledger(path) as ledger:
        calls = synthesis_calls(ledger, result.run_id)
    first = next(o for o in origins(calls[0]) if o.startswith("task_result:"))
    rename_item(rewrite_prompt, copy, "synthesis_map:2", "task_result:", first)
    with open_ledger(copy) as ledger:
        report = verify_run(ledger, result.run_id)
    assert any(f.origin == first and "more than one step" in f.reason for f in report.findings)


def test_a_result_dropped_from_every_map_step_fails_verify(big_run, tmp_path, rewrite_prompt):
    path, result, _ = big_run
    copy = tmp_path / "dropped.db"
    copy.write_bytes(path.read_bytes())
    with open_ledger(path) as ledger:
        calls = synthesis_calls(ledger, result.run_id)
    last = [o for o in origins(calls[0]) if o.startswith("task_result:")][-1]
    drop_last_result(rewrite_prompt, copy, "synthesis_map:1")
    with open_ledger(copy) as ledger:
        report = verify_run(ledger, result.run_id)
    assert any(f.origin == last and "no map step" in f.reason for f in report.findings)


async def test_a_failed_map_step_fails_the_synthesis_with_its_error(ledger):
    def answer(request):
        subject = request.prompt.manifest.subject
        if subject == "synthesis_map:2":
            raise ModelError("the server fell over")
        return "ok" if subject.startswith("synthesis") else "R" * 400

    model = FunctionModel(answer)
    model.context_window = 2048
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks(30), goal="G")
    assert result.status == "failed"
    assert (result.error or "").startswith("synthesis failed: ")
    assert "the server fell over" in (result.error or "")


def test_a_map_step_admits_only_completed_results():
    from clearance import ContextBuilder, TaskGraph
    from clearance._core.errors import ContextViolation
    from clearance._state.queue import TaskQueue

    queue = TaskQueue(TaskGraph(tasks(2)))
    builder = ContextBuilder(count_tokens=len)
    with pytest.raises(ContextViolation):
        builder.build_synthesis_map_prompt(1, "G", coordinator=LEAD, queue=queue,
                                           task_ids=["t0000"])  # fmt: skip


async def test_small_runs_are_unchanged(ledger):
    model = FakeModel("x", context_window=WINDOW)
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks(tasks(5), goal="G")
    assert result.status == "completed"
    calls = synthesis_calls(ledger, result.run_id)
    assert [c.subject for c in calls] == ["synthesis"]
    assert calls[0].manifest["clearance"] is None
    assert all(not o.startswith("summary_of:") for o in origins(calls[0]))
    assert verify_run(ledger, result.run_id).ok


async def test_summaries_that_overflow_are_summarized_again(ledger):
    """Long map summaries make the reduce overflow: a second level summarizes them."""

    def answer(request):
        subject = request.prompt.manifest.subject
        if subject.startswith("synthesis_map:"):
            held = [i for i in request.prompt.manifest.items if i.origin.startswith("summary_of")]
            return "short" if held else "S" * 1200  # ~300 tokens per first-level summary
        return "FINAL" if subject == "synthesis" else "R" * 400

    model = FunctionModel(answer)
    model.context_window = 2048
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks(tasks(60), goal="G")
    assert result.status == "completed", result.error
    assert result.synthesis == "FINAL"
    calls = synthesis_calls(ledger, result.run_id)
    budget = 2048 - LEAD.limits.max_output_tokens
    assert all(c.manifest["total_tokens"] <= budget for c in calls)
    second = [c for c in calls if any(o.startswith("summary_of:") for o in origins(c))]
    assert len(second) >= 2  # a map of summaries, then the reduce
    report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_single_result_over_the_window_fails_naming_it(ledger):
    def answer(request):
        subject = request.prompt.manifest.subject
        if subject == "task:t0003":
            return "huge " * 4000
        return "ok" if subject.startswith("synthesis") else "small"

    model = FunctionModel(answer)
    model.context_window = 4096
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks(tasks(5), goal="G")
    assert result.status == "failed"
    assert result.synthesis is None
    assert "t0003" in (result.error or "") and "max_prompt_tokens" in (result.error or "")
    assert not [c for c in synthesis_calls(ledger, result.run_id)]  # nothing was sent


async def test_summaries_that_never_shrink_stop_at_the_depth_limit(ledger):
    """A coordinator whose summaries never get shorter cannot loop: a clear LimitExceeded."""

    def answer(request):
        subject = request.prompt.manifest.subject
        if subject.startswith("synthesis_map:"):
            return "S" * 4000  # each summary fills most of a map prompt
        return "R" * 400

    model = FunctionModel(answer)
    model.context_window = 2048
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks(tasks(30), goal="G")
    assert result.status == "failed"
    error = result.error or ""
    assert error.startswith("synthesis failed: synthesis (still over budget with ")
    assert "after 2 levels of map steps" in error and "max_prompt_tokens exceeded" in error
    calls = synthesis_calls(ledger, result.run_id)
    assert "synthesis" not in [c.subject for c in calls]  # no reduce over budget was sent
    # One level of results, one of summaries that did not merge: then it stops.
    second = [c for c in calls if any(o.startswith("summary_of:") for o in origins(c))]
    assert second and all(sum(o.startswith("summary_of:") for o in origins(c)) == 1 for c in second)


# -- forging helpers: edit one recorded prompt, digests recomputed as a forger would --------


def _edit(rewrite_prompt, db, subject, edit, manifest_edit=None):
    connection = sqlite3.connect(db)
    rewrite_prompt(connection, subject, edit, manifest_edit)
    connection.commit()
    connection.close()


def forge_item(rewrite_prompt, db, subject, heading_prefix, text):
    found = []

    def edit(block, item):
        if not found and block.heading.startswith(heading_prefix):
            found.append(block)
            item["sha256"] = sha256_text(text)
            return Block(heading=block.heading, content=text)
        return block

    _edit(rewrite_prompt, db, subject, edit)
    assert found


def rename_item(rewrite_prompt, db, subject, origin_prefix, new_origin):
    def manifest_edit(manifest):
        item = next(i for i in manifest["items"] if i["origin"].startswith(origin_prefix))
        old = item["origin"].partition(":")[2]
        item["origin"] = new_origin
        results = manifest["clearance"]["task_results"]
        results[results.index(old)] = new_origin.partition(":")[2]

    _edit(rewrite_prompt, db, subject, lambda block, item: block, manifest_edit)


def drop_last_result(rewrite_prompt, db, subject):
    connection = sqlite3.connect(db)
    (manifest,) = connection.execute(
        "SELECT manifest FROM calls WHERE subject = ? ORDER BY rowid DESC", (subject,)
    ).fetchone()
    connection.close()
    dropped = "task_result:" + json.loads(manifest)["clearance"]["task_results"][-1]

    def edit(block, item):
        return None if item["origin"] == dropped else block

    _edit(rewrite_prompt, db, subject, edit, lambda m: m["clearance"]["task_results"].pop())
