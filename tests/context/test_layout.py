"""The prompt grammar written once: origins, the layout table, prefixes, framing at the floor."""

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from clearance import Agent, ContextBuilder, Task, TaskGraph
from clearance._context import layout
from clearance._context.render import parse_user_message
from clearance._context.verify_layout import check_layout
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.queue import TaskQueue
from clearance._state.shared_memory import SharedMemory
from clearance.models import estimate_tokens
from clearance.tokens import tiktoken_counter

ROOT = Path(__file__).resolve().parents[2]
WORKER = Agent(name="worker", instructions="You are careful.", tools=("peek",))
LEAD = Agent(name="lead", instructions="You lead the team.")
PEEK = {
    "type": "function",
    "function": {
        "name": "peek",
        "description": "Read a value.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
    },
}


def builder():
    return ContextBuilder(count_tokens=estimate_tokens)


def queue_of(*tasks, done=()):
    queue = TaskQueue(TaskGraph(tasks))
    for task_id in queue.graph.topological_order():
        if task_id in done:
            queue.start(task_id)
            queue.complete(task_id, f"RESULT-{task_id}")
    return queue


# -- origins and subjects: one parser, exact round trips ---------------------------------------

ORIGIN_TEXTS = [
    "instructions", "arch", "goal", "history", "shared_memory", "plan_feedback",
    "task:a", "task_result:t1", "file:src/a:b.py", "store:ns/sub/key", "memory:m-1",
    "tool:call_1", "child_result:c", "constraint:2", "clarification:1", "summary_of:3",
    "arch:", "task:", ":", "", "a:b:c", "weird kind:x y",
]  # fmt: skip


@pytest.mark.parametrize("text", ORIGIN_TEXTS)
def test_origins_and_subjects_round_trip_exactly(text):
    assert str(Origin.parse(text)) == text
    assert str(Subject.parse(text)) == text
    origin = Origin.parse(text)
    assert Origin.text(origin.kind, origin.ref) == Subject.text(origin.kind, origin.ref) == text


def test_origin_parts():
    assert Origin.parse("file:src/a:b.py") == Origin("file", "src/a:b.py")
    assert Origin.parse("arch") == Origin("arch", None) != Origin.parse("arch:")
    assert Origin.parse("store:ns/sub/key").store_split() == ("ns", "sub/key")
    assert Subject.parse("synthesis").ref is None and Subject.task("x") == Subject("task", "x")
    assert Origin.text(OriginKind.TASK, "x") == str(Origin(OriginKind.TASK, "x")) == "task:x"
    assert Subject.text(PromptKind.TASK, "x") == str(Subject.task("x")) == "task:x"


def test_a_colon_form_of_a_bare_origin_is_refused():
    from clearance._context.clearance import Clearance

    graph = TaskGraph([Task(id="t", title="T", description="d", assignee="worker",
                            mode="isolated")])  # fmt: skip
    clearance = Clearance.for_task(graph, "t")
    assert clearance.admits("arch") and not clearance.admits("arch:")
    assert not clearance.admits("instructions:worker")


# -- the layout table ------------------------------------------------------------------------


def test_every_layout_lists_each_section_once_and_stable_sections_first():
    for kind, versions in layout.LAYOUTS.items():
        assert [v.kind for v in versions] == [kind] * len(versions)
        for shape in versions:
            headings = [row.heading for row in shape.rows]
            assert len(headings) == len(set(headings)), kind
            stable = [row.stable for row in shape.rows]
            if shape is versions[0]:  # the layout the builder renders: stable parts first
                assert stable == sorted(stable, reverse=True), kind


def test_unknown_subjects_have_no_layout():
    assert layout.layout_kind(Subject.parse("synthesis")) == "synthesis"
    assert layout.layout_kind(Subject.parse("synthesis"), summaries=True) == "synthesis_reduce"
    assert layout.layout_kind(Subject.parse("task:x")) == "task"
    for text in ("task", "synthesis:x", "plan:1", "bogus:x", ""):
        assert layout.layout_kind(Subject.parse(text)) is None


def _call(prompt):
    return SimpleNamespace(subject=prompt.manifest.subject, manifest=prompt.manifest.to_dict())


def _items(prompt):
    return [dict(i.to_dict()) for i in prompt.manifest.items]


def test_the_builders_prompts_follow_their_layout():
    q = queue_of(
        Task(id="a", title="A", description="Do a.", assignee="worker"),
        Task(id="b", title="B", description="Do b.", assignee="worker", depends_on=["a"]),
        done={"a"},
    )
    b = builder()
    prompts = [
        b.build_task_prompt(q.graph.get("b"), agent=WORKER, queue=q, tools=[PEEK]),
        b.build_task_prompt(q.graph.get("b"), agent=WORKER, queue=q),
        b.build_synthesis_prompt("G", coordinator=LEAD, queue=q, shared_memory=SharedMemory()),
        b.build_plan_prompt("G", coordinator=LEAD, roster=[WORKER]),
        b.build_child_prompt("c1", "Count.", agent=WORKER, tools=[PEEK]),
    ]
    for prompt in prompts:
        assert list(check_layout(_call(prompt), prompt.messages[1].content, _items(prompt))) == []


# A task prompt as the first layout rendered it (runs recorded before the trimmed framing).
V1_TASK = (
    "# Task\n\n### B (task b)\n~~~~\nDo b.\n~~~~\n\n"
    "## Context from prerequisite tasks\n\n### A (by worker)\n~~~~\nRESULT-a\n~~~~\n\n"
    "Complete the task above. Reply with your result only."
)


def _v1_items():
    return [
        {"origin": "instructions", "title": "worker", "sha256": sha256_text("x")},
        {"origin": "task:b", "title": "B (task b)", "sha256": sha256_text("Do b.")},
        {"origin": "task_result:a", "title": "A (by worker)", "sha256": sha256_text("RESULT-a")},
    ]


def test_a_prompt_recorded_in_the_first_layout_still_verifies():
    call = SimpleNamespace(subject="task:b", manifest={"clearance": {}})
    assert list(check_layout(call, V1_TASK, _v1_items())) == []


# The same prompt as the second layout rendered it (bare blocks, titles in the manifest only).
V2_TASK = (
    "# Task\n\n~~~~\nDo b.\n~~~~\n\n"
    "## Context from prerequisite tasks\n\n~~~~\nRESULT-a\n~~~~\n\n"
    "Reply with your result only."
)


def test_a_prompt_recorded_in_the_bare_layout_still_verifies_and_the_builder_labels():
    call = SimpleNamespace(subject="task:b", manifest={"clearance": {}})
    assert list(check_layout(call, V2_TASK, _v1_items())) == []
    q = queue_of(
        Task(id="a", title="A", description="Do a.", assignee="worker"),
        Task(id="b", title="B", description="Do b.", assignee="worker", depends_on=["a"]),
        done={"a"},
    )
    plain = Agent(name="worker", instructions="x")
    prompt = builder().build_task_prompt(q.graph.get("b"), agent=plain, queue=q)
    assert prompt.messages[1].content == (
        "# Task\n\n~~~~ B\nDo b.\n~~~~\n\n"
        "## Context from prerequisite tasks\n\n~~~~ A (by worker)\nRESULT-a\n~~~~\n\n"
        "Reply with your result only."
    )
    assert [i.title for i in prompt.manifest.items[1:]] == ["B", "A (by worker)"]


@pytest.mark.parametrize(
    "forged",
    [
        # the second layout's bare blocks with the first layout's trailer: no layout has both
        V1_TASK.replace("### B (task b)\n", "").replace("### A (by worker)\n", ""),
        # a bare task text (the second layout) beside a headed result (the first)
        V1_TASK.replace("### B (task b)\n", "").replace("Complete the task above. Reply", "Reply"),
        # headed blocks (the first layout) under the current trailer: the current layout
        # labels them on their fence lines
        V1_TASK.replace("Complete the task above. Reply", "Reply"),
        # sections out of order
        "## Context from prerequisite tasks\n\n~~~~\nRESULT-a\n~~~~\n\n# Task\n\n~~~~\nDo b.\n"
        "~~~~\n\nReply with your result only.",
        # a section no task prompt has
        V1_TASK.replace("## Context from prerequisite tasks", "## Completed tasks"),
    ],
)
def test_a_prompt_that_follows_no_layout_of_its_kind_is_a_finding(forged):
    items = _v1_items()
    if parse_user_message(forged)[0][0].heading != "# Task":
        items = [items[0], items[2], items[1]]
    call = SimpleNamespace(subject="task:b", manifest={"clearance": {}})
    assert list(check_layout(call, forged, items))


# -- cache-friendly prefixes ------------------------------------------------------------------


def _first_per_task_part(prompt):
    """Offset in the prompt's text of the first section the layout marks per-task."""
    text = prompt.text
    kind = layout.layout_kind(Subject.parse(prompt.manifest.subject))
    sections, _ = parse_user_message(prompt.messages[1].content)
    first = next(s.heading for s in sections if not layout.current(kind).row(s.heading).stable)
    return text.index(f"\n\n{first}\n\n") + 2


def test_two_tasks_of_one_agent_share_a_byte_identical_prefix():
    q = queue_of(
        Task(id="a", title="A", description="Do a.", assignee="worker"),
        Task(id="b", title="B", description="Bring b, then more.", assignee="worker",
             depends_on=["a"]),
        Task(id="c", title="C", description="Count c.", assignee="worker"),
        done={"a"},
    )  # fmt: skip
    b = builder()
    one = b.build_task_prompt(q.graph.get("b"), agent=WORKER, queue=q, tools=[PEEK])
    two = b.build_task_prompt(q.graph.get("c"), agent=WORKER, queue=q, tools=[PEEK])
    cut = _first_per_task_part(one)
    assert cut == _first_per_task_part(two)
    assert one.text[:cut] == two.text[:cut]
    assert "You are careful." in one.text[:cut] and "Read a value." in one.text[:cut]
    # The shared prefix runs on into the task section, to the first byte of the task's text.
    shared = len(_common_prefix(one.text, two.text))
    assert one.text[shared:].startswith("B\nBring b") and two.text[shared:].startswith("C\nCount c")


def _common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_the_coordinators_planning_and_synthesis_prompts_share_its_prefix():
    q = queue_of(Task(id="a", title="A", description="Do a.", assignee="worker"), done={"a"})
    b = builder()
    plan = b.build_plan_prompt("The goal.", coordinator=LEAD, roster=[WORKER])
    synthesis = b.build_synthesis_prompt(
        "The goal.", coordinator=LEAD, queue=q, shared_memory=SharedMemory()
    )
    step = b.build_synthesis_map_prompt(1, "The goal.", coordinator=LEAD, queue=q, task_ids=["a"])
    prefix = _common_prefix(_common_prefix(plan.text, synthesis.text), step.text)
    assert prefix.startswith("You lead the team.\n\n# Goal\n\n")
    assert "The goal.\n~~~~\n\n## " in prefix


# -- framing at the floor ----------------------------------------------------------------------


def test_default_scope_prompts_are_within_5_percent_of_the_labelled_dependency_text():
    """The benchmark's 10x10 graph (R=200), counted in cl100k_base as `bench` counts it.

    The floor is the task's id, title and text plus each dependency's result under its label
    (title and assignee): labels are content, the rest (headings, fences, the closing
    instruction) is framing.
    """
    sys.path.insert(0, str(ROOT))
    try:
        from bench import frameworks
        from bench.workload import FakeModel, make_graph
    finally:
        sys.path.remove(str(ROOT))
    specs = make_graph(10, 10)
    model = FakeModel(latency_s=0, result_tokens=200)
    floor = asyncio.run(frameworks.run_floor(specs, model))
    ours = asyncio.run(frameworks.run_clearance(specs, model, ledger_url=None))
    assert set(floor) == set(ours) and len(ours) == 100
    count = tiktoken_counter("cl100k_base")
    ratio = sum(map(count, ours.values())) / sum(map(count, floor.values()))
    assert ratio <= 1.05, ratio
    # every result reached its dependents, fenced under its label
    titles = {spec.id: spec.title for spec in specs}
    for spec in specs:
        assert f"# Task\n\n~~~~ {spec.title}\n{spec.description}\n~~~~" in ours[spec.id]
        for dep in spec.depends_on:
            label = f"{titles[dep]} (by {frameworks.ASSIGNEE})"
            assert f"~~~~ {label}\n{model.text(dep)}\n~~~~" in ours[spec.id]
            assert f"{label}\n{model.text(dep)}" in floor[spec.id]  # labels are content
