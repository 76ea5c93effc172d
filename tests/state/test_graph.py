import itertools

import pytest

from clearance import (
    CycleError,
    DuplicateTaskError,
    SelfDependencyError,
    Task,
    TaskGraph,
    UnknownDependencyError,
)


def t(task_id: str, *deps: str) -> Task:
    return Task(
        id=task_id, title=f"Title {task_id}", description="d", assignee="a", depends_on=deps
    )


def test_duplicate_ids_are_all_named():
    with pytest.raises(DuplicateTaskError) as info:
        TaskGraph([t("a"), t("b"), t("a"), t("b"), t("c")])
    assert info.value.task_ids == ("a", "b")
    assert "a, b" in str(info.value)


def test_unknown_dependency_names_task_and_dependency():
    with pytest.raises(UnknownDependencyError) as info:
        TaskGraph([t("a"), t("b", "a", "zzz")])
    assert (info.value.task_id, info.value.dependency) == ("b", "zzz")
    assert "'b'" in str(info.value) and "'zzz'" in str(info.value)


def test_self_dependency():
    with pytest.raises(SelfDependencyError) as info:
        TaskGraph([t("a", "a")])
    assert info.value.task_id == "a"


def test_cycle_names_the_cycle_in_order():
    # a depends on c, c on b, b on a: runs-before order a -> b -> c -> a
    with pytest.raises(CycleError) as info:
        TaskGraph([t("a", "c"), t("b", "a"), t("c", "b"), t("d")])
    cycle = info.value.cycle
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"a", "b", "c"}
    assert len(cycle) == 4
    # each element runs before the next: the next depends on it
    deps = {"a": {"c"}, "b": {"a"}, "c": {"b"}}
    for before, after in itertools.pairwise(cycle):
        assert before in deps[after]
    assert " -> ".join(cycle) in str(info.value)


def test_cycle_in_a_deep_chain_does_not_recurse():
    n = 5000
    tasks = [t("n0", f"n{n - 1}")] + [t(f"n{i}", f"n{i - 1}") for i in range(1, n)]
    with pytest.raises(CycleError) as info:
        TaskGraph(tasks)
    assert len(info.value.cycle) == n + 1


def test_topological_order_ancestors_descendants():
    g = TaskGraph([t("d", "b", "c"), t("b", "a"), t("c", "a"), t("a"), t("e")])
    order = g.topological_order()
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("c") < order.index("d")
    assert set(g.ancestors("d")) == {"a", "b", "c"}
    assert g.ancestors("a") == ()
    assert set(g.descendants("a")) == {"b", "c", "d"}
    assert g.dependents("a") == ("b", "c")
    assert "e" in g and "zz" not in g and len(g) == 5


def test_round_trip_through_dict():
    g = TaskGraph([t("a"), t("b", "a")])
    again = TaskGraph.from_dict(g.to_dict())
    assert again.tasks == g.tasks


def test_duplicate_dependency_entries_are_collapsed():
    assert t("b", "a", "a").depends_on == ("a",)


def test_topological_order_keeps_the_given_order_where_dependencies_allow():
    g = TaskGraph([t("a"), t("b", "a"), t("c"), t("d", "b", "c")])
    assert g.topological_order() == ("a", "b", "c", "d")
    g = TaskGraph([t("d", "b", "c"), t("b", "a"), t("c", "a"), t("a"), t("e")])
    assert g.topological_order() == ("a", "b", "c", "d", "e")


def test_a_two_task_cycle_is_named_in_runs_before_order():
    with pytest.raises(CycleError) as info:
        TaskGraph([t("x"), t("a", "b"), t("b", "a")])
    cycle = info.value.cycle
    assert list(cycle) in (["a", "b", "a"], ["b", "a", "b"])
    assert "x" not in cycle
