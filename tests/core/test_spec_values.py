"""Specs built in Python, and team files, refuse values of the wrong type in one line.

A spec built in Python is not checked by the team file's pydantic models, and Python lets a
string stand for a list (``depends_on="ab"`` iterates as ``"a"``, ``"b"``) and ``True`` for
the integer 1. Each case here was accepted before: a task that depended on tasks ``a`` and
``b``, a run with ``max_concurrency=True``, a title of ``None`` that failed later with an
``AttributeError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    FanOut,
    FileCaps,
    RetryPolicy,
    RunOptions,
    RunSpec,
    Task,
    Team,
)
from clearance._core.names import check_count, check_number, text_tuple


def _task(**changes: Any) -> Task:
    fields: dict[str, Any] = {"id": "x", "title": "T", "description": "d", "assignee": "a"}
    return Task(**{**fields, **changes})


def _agent(**changes: Any) -> Agent:
    return Agent(**{"name": "a", "instructions": "i", **changes})


REFUSED: list[tuple[str, Callable[[], object], str]] = [
    ("depends_on as a string", lambda: _task(depends_on="ab"), "tasks.x.depends_on"),
    ("depends_on holding a number", lambda: _task(depends_on=[1]), "tasks.x.depends_on"),
    ("files as a string", lambda: _task(files="notes.md"), "tasks.x.files"),
    ("title None", lambda: _task(title=None), "tasks.x.title"),
    ("description None", lambda: _task(description=None), "tasks.x.description"),
    ("assignee None", lambda: _task(assignee=None), "tasks.x.assignee"),
    ("run as a number", lambda: _task(run=5), "tasks.x.run"),
    ("instructions None", lambda: _agent(instructions=None), "agents.a.instructions"),
    ("model as a number", lambda: _agent(model=5), "agents.a.model"),
    ("tools as a string", lambda: _agent(tools="store_get"), "agents.a.tools"),
    ("a tool that is a number", lambda: _agent(tools=[3]), "agents.a.tools"),
    ("can_delegate_to as a string", lambda: _agent(can_delegate_to="bc"), "can_delegate_to"),
    ("can_spawn as a string", lambda: _agent(can_spawn="bc"), "agents.a.can_spawn"),
    (
        "store_read_extends_ttl_s nan",
        lambda: _agent(store_read_extends_ttl_s=math.nan),
        "store_read_extends_ttl_s",
    ),
    ("retries a float", lambda: AgentLimits(retries=1.5), "limits.retries"),
    ("max_children True", lambda: AgentLimits(max_children=True), "limits.max_children"),
    ("timeout_s inf", lambda: AgentLimits(timeout_s=math.inf), "limits.timeout_s"),
    ("timeout_s True", lambda: AgentLimits(timeout_s=True), "limits.timeout_s"),
    ("file caps a float", lambda: FileCaps(max_file_bytes=1.5), "file_caps.max_file_bytes"),
    ("max_concurrency True", lambda: RunOptions(max_concurrency=True), "max_concurrency"),
    ("max_concurrency 1.5", lambda: RunOptions(max_concurrency=1.5), "max_concurrency"),
    ("clarification_rounds 1.5", lambda: RunOptions(clarification_rounds=1.5), "clarification"),
    ("synthesis_from a string", lambda: RunOptions(synthesis_from="ab"), "synthesis_from"),
    ("approval_tools a string", lambda: RunOptions(approval_tools="ab"), "approval_tools"),
    (
        "a model option below 1",
        lambda: RunOptions(model_options={"m": {"n_ctx": -1}}),
        "model_options.m.n_ctx",
    ),
    (
        "an unknown model option",
        lambda: RunOptions(model_options={"m": {"n_gpu_layers": 1}}),
        "model_options.m",
    ),
    ("retry initial_s nan", lambda: RetryPolicy(initial_s=math.nan), "retry_policy.initial_s"),
    ("retry max_s True", lambda: RetryPolicy(max_s=True), "retry_policy.max_s"),
    ("fan-out goals a string", lambda: FanOut(agent="a", goals="ab"), "fan_out.goals"),
    ("team agents one agent", lambda: Team(agents=_agent()), "agents"),  # type: ignore[arg-type]
    ("team agents numbers", lambda: Team(agents=(1,)), "agents"),  # type: ignore[arg-type]
    ("team name None", lambda: Team(agents=(_agent(),), name=None), "name"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("case", "make", "field"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_python_spec_of_the_wrong_type_is_one_config_error_naming_the_field(case, make, field):
    with pytest.raises(ConfigError) as info:
        make()
    assert field in str(info.value)
    assert "\n" not in str(info.value)


def test_the_right_types_are_kept_as_given():
    task = _task(depends_on=["b", "c", "b"], files=("f.md",), constraints=())
    assert task.depends_on == ("b", "c")  # once each, in order
    assert task.files == ("f.md",)
    options = RunOptions(max_concurrency=2, synthesis_from=["x"], approval_tools={"t"})
    assert options.synthesis_from == ("x",)
    assert options.approval_tools == frozenset({"t"})
    agent = _agent(can_spawn=("b",), tools=("store_get", len))
    assert agent.can_spawn == ("b",)
    assert agent.tools == ("store_get", len)
    assert AgentLimits(timeout_s=30).timeout_s == 30  # an int is a number of seconds


def test_the_checks_name_what_was_given():
    with pytest.raises(ConfigError, match=r"^f: must be an integer, got True$"):
        check_count("f", True, least=1)
    with pytest.raises(ConfigError, match=r"^f: must be an integer from 1 to 3, got 4$"):
        check_count("f", 4, least=1, most=3)
    with pytest.raises(ConfigError, match=r"^f: must be a number, got a string$"):
        check_number("f", "3")
    with pytest.raises(ConfigError, match=r"^f: must be a list of strings, it holds an int$"):
        text_tuple("f", ["a", 1])
    with pytest.raises(ConfigError, match=r"^f: must be a list of strings, got a dict$"):
        text_tuple("f", {"a": 1})
    assert text_tuple("f", (x for x in "ab")) == ("a", "b")  # an iterable of strings is fine


@pytest.mark.parametrize(
    "make",
    [
        lambda v: check_count("f", v, least=1, most=3),
        lambda v: check_number("f", v),
        lambda v: AgentLimits(timeout_s=v),
        lambda v: RetryPolicy(max_s=v),
        lambda v: RunOptions(max_concurrency=v),
    ],
    ids=["check_count", "check_number", "timeout_s", "retry max_s", "max_concurrency"],
)
@pytest.mark.parametrize("sign", [1, -1])
def test_an_integer_of_thousands_of_digits_is_one_config_error_naming_its_size(make, sign):
    """Python gives no text for an integer of more than 4,300 digits, and one past a float's
    range overflowed ``math.isfinite``: each was a traceback, not a refusal."""
    with pytest.raises(ConfigError, match=r"got an integer of 16610 bits$"):
        make(sign * 10**5000)


# -- team files -----------------------------------------------------------------------------

TEAM = """\
agents:
  - name: a
    instructions: Do it.
    {limits}
tasks:
  - {{id: x, title: T, description: d, assignee: a}}
max_concurrency: {value}
"""


@pytest.mark.parametrize(
    ("value", "given"),
    [
        ("true", "got true"),
        ('"3"', "got '3'"),
        ("2.5", "got 2.5"),
        ("[1]", "got a list"),
        ("{a: 1}", "got a mapping"),
        ("-1", "greater than or equal to 1, got -1"),
    ],
)
def test_a_team_file_number_of_the_wrong_type_is_refused_and_shown(tmp_path, value, given):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(limits="", value=value), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        RunSpec.from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: max_concurrency: Input should be")
    assert message.endswith(given)


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ("limits: {retries: true}", "agents.0.limits.retries"),
        ("limits: {timeout_s: false}", "agents.0.limits.timeout_s"),
        ("sampling: {temperature: true}", "agents.0.sampling.temperature"),
        ("limits: {max_children: 2.0}", "agents.0.limits.max_children"),
    ],
)
def test_a_boolean_is_no_number_in_a_team_file(tmp_path, limits, field):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(limits=limits, value=2), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{field}: Input should be a valid (integer|number)"):
        RunSpec.from_file(path)


def test_a_section_that_is_not_a_mapping_asks_for_one(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(limits="limits: [1]", value=2), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"agents\.0\.limits: Input should be a mapping of keys"):
        RunSpec.from_file(path)


def test_an_int_is_a_number_of_seconds_in_a_team_file(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(limits="limits: {timeout_s: 30}", value=2), encoding="utf-8")
    assert RunSpec.from_file(path).agents[0].limits.timeout_s == 30


# -- labels: a title or a team's name is one short line ---------------------------------------


def _titled(tmp_path, title):
    import json

    path = tmp_path / "team.yaml"
    body = TEAM.format(limits="", value=2).replace("title: T,", f"title: {json.dumps(title)},")
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("title", "problem"),
    [
        ("Find\nthe facts", "must be one line of text: it holds the control character '\\n'"),
        ("a\x00b", "control character '\\x00'"),
        ("tab\there", "control character '\\t'"),
        ("esc\x1b[2J", "control character '\\x1b'"),
        ("sep\u2028arator", "control character '\\u2028'"),
        (" ", "is empty"),
        ("x" * 301, "is 301 characters, over 300"),
    ],
)
def test_a_title_in_a_team_file_is_one_short_line(tmp_path, title, problem):
    # A person wrote it: a line break is a mistake to name. (A title the coordinator's plan
    # writes is shown on one line by the context builder: tests/context/test_spoofing.py.)
    path = _titled(tmp_path, title)
    with pytest.raises(ConfigError) as info:
        RunSpec.from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: tasks.0.title: ") and message.endswith(problem)


def test_a_title_may_hold_any_printable_text(tmp_path):
    title = "Café — “quoted” 100% [x] {y} é " + "x" * 260
    assert RunSpec.from_file(_titled(tmp_path, title)).tasks[0].title == title


@pytest.mark.parametrize("name", ["", "a\nb", "a\x00b", "x" * 129])
def test_a_team_name_is_one_short_line(tmp_path, name):
    from clearance import load_team_file

    path = tmp_path / "team.yaml"
    body = TEAM.format(limits="", value=2).replace("max_concurrency: 2\n", "")
    import json

    path.write_text(f"name: {json.dumps(name)}\n{body}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"team\.yaml: name: "):
        load_team_file(path)


# -- numbers from outside have upper bounds too ------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ("{max_output_tokens: 1000000000000000000000000000000}", "max_output_tokens"),
        ("{max_prompt_tokens: 10000001}", "max_prompt_tokens"),
        ("{retries: 101}", "retries"),
        ("{max_model_calls: 100001}", "max_model_calls"),
        ("{max_tool_calls_per_step: 129}", "max_tool_calls_per_step"),
        ("{max_children: 1001}", "max_children"),
    ],
)
def test_a_limit_past_any_sane_setting_is_refused(tmp_path, limits, field):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(limits=f"limits: {limits}", value=2), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"limits\.{field}: Input should be less than or eq"):
        RunSpec.from_file(path)


def test_every_integer_limit_has_one_range_in_python_and_in_team_files():
    from clearance._core.agent_spec import LIMIT_RANGES
    from clearance._core.teamfile_models import LimitsSpec

    for name, (least, most) in LIMIT_RANGES.items():
        with pytest.raises(ConfigError, match=rf"limits\.{name}: must be an integer from"):
            AgentLimits(**{name: most + 1})
        AgentLimits(**{name: most})  # the bound itself is allowed
        assert LimitsSpec(**{name: most}).model_dump()[name] == most
        with pytest.raises(ValueError):
            LimitsSpec(**{name: most + 1})
        if least > 0:
            with pytest.raises(ConfigError):
                AgentLimits(**{name: least - 1})


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RunOptions(max_concurrency=10**30), "max_concurrency"),
        (lambda: __import__("clearance").RunBudget(tokens=10**13), "budget.tokens"),
        (lambda: __import__("clearance").RunBudget(cost_usd=1e10), "budget.cost_usd"),
        (
            lambda: __import__("clearance").ModelPrice(input_per_mtok=1e308, output_per_mtok=1),
            "input_per_mtok",
        ),
    ],
)
def test_run_settings_past_any_sane_setting_are_refused(make, field):
    with pytest.raises(ConfigError, match=rf"^{field}: must be"):
        make()


# -- model ids are checked when the team file is read -------------------------------------------


@pytest.mark.parametrize("model", ["", "nocolon", "openai:", ":m", "a b:c", "open ai:x", "a:b c"])
def test_a_model_id_that_cannot_be_one_is_refused_naming_the_file(tmp_path, model):
    import json

    path = tmp_path / "team.yaml"
    body = TEAM.format(limits="", value=2)
    path.write_text(f"model: {json.dumps(model)}\n{body}", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        RunSpec.from_file(path)
    assert str(info.value).startswith(f"{path}: model: model id {model!r} must look like")


@pytest.mark.parametrize(
    "model", ["openai:gpt-4o-mini", "openai:meta-llama/Llama-3-8B", "fake:try", "llama-cpp:smollm2"]
)
def test_a_model_id_of_any_provider_loads(tmp_path, model):
    path = tmp_path / "team.yaml"
    path.write_text(f"model: {model}\n" + TEAM.format(limits="", value=2), encoding="utf-8")
    assert RunSpec.from_file(path).model == model


def test_a_value_that_fits_none_of_a_keys_forms_is_said_of_the_key(tmp_path):
    path = tmp_path / "team.yaml"
    body = TEAM.format(limits="tools: [x]", value=2)
    path.write_text(body + "tools: {x: 5}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        RunSpec.from_file(path)
    assert str(info.value) == (
        f"{path}: tools.x: Input should be a valid string or a mapping of keys, got 5"
    )


def test_a_mapping_given_for_a_key_with_a_mapping_form_gets_that_forms_problem(tmp_path):
    path = tmp_path / "team.yaml"
    body = TEAM.format(limits="", value=2).replace(
        "assignee: a}", "assignee: a, depends_on: [{task: b}]}"
    )
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        RunSpec.from_file(path)
    assert str(info.value) == f"{path}: tasks.0.depends_on.0.when: Field required"


def test_a_tool_function_without_a_name_is_refused_when_the_agent_is_made() -> None:
    """A `functools.partial` has no ``__name__``: the run crashed with an AttributeError."""
    import functools

    def add(a: int, b: int) -> str:
        """Add."""
        return str(a + b)

    with pytest.raises(ConfigError, match="needs a name") as info:
        Agent(name="a", instructions="x", tools=(functools.partial(add, b=1),))
    assert info.value.field == "agents.a.tools"
    assert Agent(name="a", instructions="x", tools=(add,)).tools == (add,)
