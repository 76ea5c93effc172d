import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance import GraphError, Task, TaskGraph, TaskStatus
from clearance._state.queue import TaskQueue


def t(task_id: str, *deps: str) -> Task:
    return Task(id=task_id, title=task_id, description="d", assignee="a", depends_on=deps)


def test_initial_statuses_and_get():
    q = TaskQueue(TaskGraph([t("a"), t("b", "a")]))
    assert q.get("a").status is TaskStatus.READY
    assert q.get("b").status is TaskStatus.PENDING
    with pytest.raises(KeyError):
        q.get("nope")


def test_dependent_becomes_ready_only_when_all_dependencies_complete():
    q = TaskQueue(TaskGraph([t("a"), t("b"), t("c", "a", "b")]))
    q.start("a")
    assert q.complete("a", "ra") == ()
    assert q.get("c").status is TaskStatus.PENDING
    q.start("b")
    assert q.complete("b", "rb") == ("c",)
    assert q.get("c").status is TaskStatus.READY
    assert q.get("a").result == "ra"


def test_failure_cascades_to_transitive_dependents_only():
    q = TaskQueue(TaskGraph([t("a"), t("b", "a"), t("c", "b"), t("x"), t("y", "x")]))
    q.start("a")
    skipped = q.fail("a", "boom")
    assert skipped == ("b", "c")
    assert q.get("a").status is TaskStatus.FAILED and q.get("a").error == "boom"
    assert q.get("c").status is TaskStatus.SKIPPED
    assert "'a'" in (q.get("c").error or "")
    assert q.get("x").status is TaskStatus.READY
    assert q.get("y").status is TaskStatus.PENDING
    assert not q.is_finished()


def test_failure_never_erases_completed_results():
    q = TaskQueue(TaskGraph([t("a"), t("b"), t("c", "a", "b")]))
    q.start("a")
    q.complete("a", "kept")
    q.start("b")
    q.fail("b", "boom")
    assert q.get("a").status is TaskStatus.COMPLETED and q.get("a").result == "kept"
    assert q.get("c").status is TaskStatus.SKIPPED
    assert q.is_finished()


def test_illegal_transitions_raise():
    q = TaskQueue(TaskGraph([t("a"), t("b", "a")]))
    with pytest.raises(GraphError, match="'a' is ready"):
        q.complete("a", "x")
    with pytest.raises(GraphError, match="'b' is pending"):
        q.start("b")
    q.start("a")
    q.complete("a", "x")
    with pytest.raises(GraphError):
        q.fail("a", "late")
    assert q.get("a").result == "x"


def test_completed_results_start_completed_and_unblock_dependents():
    from clearance import GraphError, Task, TaskGraph, TaskStatus
    from clearance._state.queue import TaskQueue

    graph = TaskGraph(
        [
            Task(id="a", title="A", description="d", assignee="x"),
            Task(id="b", title="B", description="d", assignee="x", depends_on=("a",)),
            Task(id="c", title="C", description="d", assignee="x", depends_on=("b",)),
        ]
    )
    queue = TaskQueue(graph, completed={"a": "kept"})
    assert [s.status for s in queue.states()] == [
        TaskStatus.COMPLETED,
        TaskStatus.READY,
        TaskStatus.PENDING,
    ]
    assert queue.get("a").result == "kept"
    queue.start("b")
    queue.interrupt("b")
    assert queue.get("b").status is TaskStatus.INTERRUPTED
    with pytest.raises(GraphError, match="expected running"):
        queue.interrupt("c")
    with pytest.raises(GraphError, match="unknown task"):
        TaskQueue(graph, completed={"zzz": "x"})


def test_ready_is_in_graph_order_and_tracks_every_transition():
    q = TaskQueue(TaskGraph([t("z"), t("m"), t("b", "z"), t("a", "z", "m"), t("c", "m")]))
    assert [x.id for x in q.ready()] == ["z", "m"]
    assert q.graph.position("a") == 3
    q.start("m")
    assert [x.id for x in q.ready()] == ["z"]
    q.complete("m", "rm")
    assert [x.id for x in q.ready()] == ["z", "c"]
    q.start("z")
    q.complete("z", "rz")
    assert [x.id for x in q.ready()] == ["b", "a", "c"]
    q.fail("a", "boom")
    assert [x.id for x in q.ready()] == ["b", "c"]
    assert [x.id for x in q.ready()] == [s.task.id for s in q.with_status(TaskStatus.READY)]


@given(data=st.data(), size=st.integers(min_value=1, max_value=25))
def test_ready_with_a_limit_is_the_first_of_ready_in_graph_order(data, size):
    # A random DAG (each task depends on some earlier ones), driven through random
    # starts, completions and failures: ready(limit) always equals ready()[:limit].
    tasks = []
    for i in range(size):
        deps = data.draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        tasks.append(t(f"n{i}", *(f"n{d}" for d in sorted(deps))))
    order = data.draw(st.permutations(tasks))  # graph order need not be topological
    q = TaskQueue(TaskGraph(order))
    for _ in range(3 * size):
        everything = q.ready()
        limit = data.draw(st.integers(1, size + 1))
        assert q.ready(limit=limit) == everything[:limit]
        running = [s.task.id for s in q.with_status(TaskStatus.RUNNING)]
        choices = [("start", x.id) for x in everything] + [("end", r) for r in running]
        if not choices:
            break
        action, task_id = data.draw(st.sampled_from(choices))
        if action == "start":
            q.start(task_id)
        elif data.draw(st.booleans()):
            q.complete(task_id, "r")
        else:
            q.fail(task_id, "boom")
    assert q.ready(limit=1) == q.ready()[:1]
