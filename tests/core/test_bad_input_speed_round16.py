"""Bad team files near the caps are refused after work linear in their size, never more.

Each test counts work done (nodes composed, tag resolutions, garbage collections, deep
copies, agents built), not wall time: a count is the same on a busy machine, and it is what
grows when a step becomes quadratic or does per entry what it could do once.
"""

from __future__ import annotations

import copy
import cProfile
import gc
import pstats
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from clearance import ConfigError, RunSpec
from clearance._core.safe_yaml import MAX_YAML_BYTES, MAX_YAML_NODES, _LimitedLoader, load_yaml_file
from clearance._core.teamfile_models import AgentSpec

HEAD = "name: big\nagents:\n  - {name: w, instructions: Do it.}\ntasks:\n"


def write(tmp_path: Path, text: str) -> Path:
    assert len(text.encode()) <= MAX_YAML_BYTES
    path = tmp_path / "team.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def tasks(n: int) -> str:
    return "".join(
        f"  - {{id: t{i}, title: T{i}, description: Do task {i}., assignee: w}}\n" for i in range(n)
    )


def calls(function: Callable[[], Any], *names: str) -> dict[str, int]:
    """How many times each Python function called ``name`` ran while ``function`` ran."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        function()
    except ConfigError:
        pass
    finally:
        profile.disable()
    stats: Any = pstats.Stats(profile).stats
    counts = dict.fromkeys(names, 0)
    for (_, _, name), (_, ncalls, *_) in stats.items():
        if name in counts:
            counts[name] += ncalls
    return counts


# -- YAML: the number of nodes is capped -----------------------------------------------------


def test_a_file_of_tiny_values_stops_at_the_node_cap(tmp_path: Path) -> None:
    # 1 MiB of "1," is half a million values: each one costs a node and a value, so the
    # file is refused once the cap is passed, not read to its end.
    head = HEAD + "  - {id: a, title: A, description: d, assignee: w}\nnumbers: ["
    text = head + "1," * ((MAX_YAML_BYTES - len(head) - 3) // 2) + "1]\n"
    loader = _LimitedLoader(text)
    with pytest.raises(yaml.YAMLError, match=f"holds more than {MAX_YAML_NODES} keys and values"):
        loader.get_single_node()
    assert loader.nodes_composed == MAX_YAML_NODES + 1
    with pytest.raises(ConfigError) as info:
        load_yaml_file(write(tmp_path, text))
    assert str(info.value).endswith(f"holds more than {MAX_YAML_NODES} keys and values (line 6)")


def test_aliases_count_toward_the_node_cap(tmp_path: Path) -> None:
    head = HEAD + "  - {id: a, title: &t A, description: d, assignee: w}\ntitles: ["
    text = head + "*t," * ((MAX_YAML_BYTES - len(head) - 4) // 3) + "*t]\n"
    with pytest.raises(ConfigError, match=f"holds more than {MAX_YAML_NODES} keys and values"):
        load_yaml_file(write(tmp_path, text))


def test_a_large_team_file_is_under_the_node_cap(tmp_path: Path) -> None:
    # 20,000 tasks in flow style fill most of 1 MiB and stay well under the cap.
    text = HEAD + "".join(f"  - {{id: t{i}, title: T{i}, description: d}}\n" for i in range(20_000))
    assert len(text.encode()) > MAX_YAML_BYTES * 3 // 4
    loaded = load_yaml_file(write(tmp_path, text))
    assert len(loaded["tasks"]) == 20_000
    loader = _LimitedLoader(text)
    loader.get_single_node()
    assert loader.nodes_composed < MAX_YAML_NODES * 4 // 5


# -- YAML: the work per node -----------------------------------------------------------------


def test_a_scalar_tag_is_resolved_once_per_distinct_value(tmp_path: Path) -> None:
    # Every task repeats the keys id, title, description and assignee, and the value w:
    # PyYAML's resolver (a regular expression per scalar) runs once for each.
    text = HEAD + tasks(2_000)
    counted = calls(lambda: load_yaml_file(write(tmp_path, text)), "resolve")
    # ids, titles and descriptions; a mapping tag per task; the few words said once
    assert counted["resolve"] <= 3 * 2_000 + 2_000 + 20


def test_no_garbage_collection_runs_while_a_file_is_loaded(tmp_path: Path) -> None:
    # Loading makes ~100,000 objects and frees none: each collection walked a heap that
    # only grew, three quarters of the loading time of a 1 MiB file.
    path = write(tmp_path, HEAD + tasks(10_000))
    runs: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        loaded = load_yaml_file(path)
    finally:
        gc.callbacks.remove(count)
    assert len(loaded["tasks"]) == 10_000
    assert len(runs) <= 1  # at most the one that comes due as it is turned back on
    assert gc.isenabled()  # turned back on after the load


def test_the_collector_is_back_on_after_a_refused_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the key 'a' is given twice"):
        load_yaml_file(write(tmp_path, "a: 1\na: 2\n"))
    assert gc.isenabled()
    gc.disable()
    try:  # and left off for a caller that had it off
        load_yaml_file(write(tmp_path, "a: 1\n"))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_string_value_is_not_constructed_through_the_constructor_table(
    tmp_path: Path,
) -> None:
    text = HEAD + tasks(1_000)
    counted = calls(lambda: load_yaml_file(write(tmp_path, text)), "construct_yaml_str")
    assert counted["construct_yaml_str"] == 0
    assert load_yaml_file(write(tmp_path, text))["tasks"][999]["description"] == "Do task 999."


# -- validation: nothing is deep-copied per entry ----------------------------------------------


def test_entries_that_leave_defaults_out_are_not_deep_copied() -> None:
    # pydantic deep-copies a shared mutable default (a list, a dict, a model holding one)
    # for every entry that leaves it out: with 2,000 agents and tasks that copying was most
    # of the validation time.
    raw = {
        "agents": [{"name": f"a{i}", "instructions": "i"} for i in range(2_000)],
        "tasks": [
            {"id": f"t{i}", "title": f"T{i}", "description": "d", "assignee": "a0"}
            for i in range(2_000)
        ],
    }
    holder: list[RunSpec] = []
    counted = calls(lambda: holder.append(RunSpec.model_validate(raw)), "deepcopy")
    assert counted["deepcopy"] < 50
    spec = holder[0]
    assert spec.agents[0].sampling is not spec.agents[1].sampling
    assert spec.tasks[0].files is not spec.tasks[1].files
    spec.tasks[0].files.append("x")  # fresh per entry, never shared
    assert spec.tasks[1].files == []
    assert copy.deepcopy(spec) == spec


def test_defaults_still_read_as_defaults() -> None:
    spec = RunSpec.model_validate({"agents": [{"name": "a", "instructions": "i"}], "tasks": []})
    assert "sampling" not in spec.to_data()["agents"][0]
    schema = RunSpec.model_json_schema()
    agent = schema["$defs"]["AgentSpec"]["properties"]
    assert agent["tools"]["default"] == []
    assert agent["sampling"]["default"] == {
        "temperature": None,
        "top_p": None,
        "repeat_penalty": None,
        "stop": [],
    }
    assert schema["$defs"]["TaskSpec"]["properties"]["depends_on"]["default"] == []


# -- a duplicate agent name is refused before any entry becomes an Agent -----------------------


def test_a_duplicate_agent_name_is_refused_before_agents_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = {
        "agents": [{"name": f"a{i}", "instructions": "i"} for i in range(3_000)]
        + [{"name": "a0", "instructions": "again"}],
        "tasks": [],
    }
    spec = RunSpec.model_validate(raw)
    built: list[str] = []
    original = AgentSpec.to_agent

    def counting(self: AgentSpec) -> Any:
        built.append(self.name)
        return original(self)

    monkeypatch.setattr(AgentSpec, "to_agent", counting)
    with pytest.raises(ConfigError) as info:
        spec.team()
    assert str(info.value) == "agents: duplicate agent name 'a0'"
    assert built == []


# -- the one-line message: several problems of one mapping are not the forms of a union ----------


def refusal(tmp_path: Path, task: str) -> str:
    path = write(tmp_path, HEAD + f"  - {task}\n")
    with pytest.raises(ConfigError) as info:
        RunSpec.from_file(path)
    return str(info.value).removeprefix(f"{path}: ")


def test_two_keys_left_out_are_two_problems_not_two_forms(tmp_path: Path) -> None:
    # was: "tasks.0: Input should be Field required or Field required"
    assert refusal(tmp_path, "{id: a, assignee: w}") == (
        "tasks.0.title: Field required (and 1 more problems)"
    )


def test_thousands_of_unknown_keys_make_one_short_line(tmp_path: Path) -> None:
    # was one "Extra inputs are not permitted or ..." per key: a line of megabytes
    keys = ", ".join(f"k{i}: 1" for i in range(20_000))
    message = refusal(tmp_path, f"{{id: a, title: A, description: d, assignee: w, {keys}}}")
    assert message == "tasks.0.k0: Extra inputs are not permitted (and 19999 more problems)"


def test_the_forms_of_a_union_are_still_listed(tmp_path: Path) -> None:
    text = HEAD + "  - {id: a, title: A, description: d, assignee: w}\ntools: {x: 5}\n"
    with pytest.raises(ConfigError) as info:
        RunSpec.from_file(write(tmp_path, text))
    assert str(info.value).endswith(
        "tools.x: Input should be a valid string or a mapping of keys, got 5"
    )
    message = refusal(tmp_path, "{id: b, title: B, description: d, depends_on: [{task: a}]}")
    assert message == "tasks.0.depends_on.0.when: Field required"


def test_no_garbage_collection_runs_while_a_team_file_is_validated(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + tasks(10_000))
    runs: list[int] = []
    gc.callbacks.append(lambda phase, info: runs.append(info["generation"]))
    try:
        spec = RunSpec.from_file(path)
    finally:
        gc.callbacks.pop()
    assert len(spec.tasks) == 10_000
    assert len(runs) <= 4  # start and stop of one each, as loading and validating end
    assert 2 not in runs  # never a walk of the whole heap
    assert gc.isenabled()
