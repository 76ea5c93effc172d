"""Structured hand-offs: ``Task.output_schema``, one repair attempt, canonical JSON results."""

import json
from collections import Counter

import pytest

from clearance import (
    Agent,
    Clearance,
    ConfigError,
    ContextBuilder,
    Orchestrator,
    OutputValidationError,
    Task,
    TaskGraph,
    TaskStatus,
    Team,
)
from clearance._context.render import parse_user_message
from clearance._core.teamfile import load_team_file
from clearance._state.queue import TaskQueue
from clearance.models import estimate_tokens
from clearance.testing import FunctionModel

WORKER = Agent(name="alice", instructions="You are Alice.")
COORD = Agent(name="lead", instructions="You are the lead.")
TEAM = Team(agents=(WORKER,), coordinator=COORD, name="t")

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["name", "score"],
    "additionalProperties": False,
}
REJECTED = "## Your previous answer was rejected"


def t(task_id, *deps, schema=None):
    return Task(
        id=task_id,
        title=f"Title {task_id}",
        description=f"Describe {task_id}.",
        assignee="alice",
        depends_on=deps,
        output_schema=schema,
    )


def subject(request):
    return request.prompt.manifest.subject


def requests_for(model, subj):
    return [r for r in model.requests if subject(r) == subj]


def scripted_by_subject(answers, default="plain"):
    """A model answering each subject with its queued answers in turn (then ``default``)."""
    calls = Counter()

    def answer(request):
        s = subject(request)
        if s == "synthesis":
            return "SYNTHESIS"
        queue = answers.get(s, ())
        n = calls[s]
        calls[s] += 1
        return queue[n] if n < len(queue) else f"{default}-{s}"

    return FunctionModel(answer)


async def test_valid_json_passes_and_dependents_receive_canonical_json(ledger):
    answer = '{"score": 7, "name": "Zoë"}'
    model = scripted_by_subject({"task:a": [answer]})
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(
        [t("a", schema=SCHEMA), t("b", "a")]
    )
    canonical = json.dumps(
        {"name": "Zoë", "score": 7}, ensure_ascii=False, indent=2, sort_keys=True
    )
    assert result.status == "completed"
    assert result.result("a") == canonical
    assert len(requests_for(model, "task:a")) == 1  # no repair needed
    b_prompt = requests_for(model, "task:b")[0].prompt
    assert canonical in b_prompt.text
    assert answer not in b_prompt.text  # the raw answer never reaches a dependent
    assert canonical in requests_for(model, "synthesis")[0].prompt.text
    rows = {r.task_id: r for r in ledger.tasks(result.run_id)}
    assert rows["a"].result == canonical


async def test_the_schema_is_passed_to_the_provider_only_for_structured_tasks(ledger):
    model = scripted_by_subject({"task:a": ['{"name": "x", "score": 1}']})
    await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(
        [t("a", schema=SCHEMA), t("b", "a")]
    )
    assert requests_for(model, "task:a")[0].json_schema == SCHEMA
    assert requests_for(model, "task:b")[0].json_schema is None
    assert requests_for(model, "synthesis")[0].json_schema is None


async def test_a_fenced_json_block_is_accepted(ledger):
    fenced = 'Here it is:\n```json\n{"name": "x", "score": 2}\n```\nDone.'
    model = scripted_by_subject({"task:a": [fenced]})
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks([t("a", schema=SCHEMA)])
    assert json.loads(result.result("a") or "") == {"name": "x", "score": 2}
    assert len(requests_for(model, "task:a")) == 1


async def test_invalid_then_valid_makes_exactly_one_repair(ledger):
    bad = '{"name": "x", "score": "high"}'
    good = '{"name": "x", "score": 3}'
    model = scripted_by_subject({"task:a": [bad, good]})
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(
        [t("a", schema=SCHEMA), t("b", "a")]
    )
    assert result.tasks["a"].status is TaskStatus.COMPLETED
    assert json.loads(result.result("a") or "") == {"name": "x", "score": 3}
    first, repair = (r.prompt for r in requests_for(model, "task:a"))
    assert REJECTED not in first.text
    assert "repair:a" not in first.manifest.origins
    # the repair prompt is the task prompt plus one last section with one block
    assert repair.manifest.origins == ("instructions", "task:a", "repair:a")
    sections, _ = parse_user_message(repair.messages[1].content)
    assert sections[0] == parse_user_message(first.messages[1].content)[0][0]
    assert sections[-1].heading == REJECTED
    (block,) = sections[-1].blocks
    assert block.heading == "Previous answer and validation error"
    previous, _, problem = block.content.partition("\n\nProblem: ")
    assert previous == bad
    assert "'high' is not of type 'integer'" in problem and "$.score" in problem
    assert repair.manifest.items[-1].title == "Previous answer and validation error"
    assert requests_for(model, "task:a")[1].json_schema == SCHEMA
    # the dependent receives the repaired, validated answer
    assert '"score": 3' in requests_for(model, "task:b")[0].prompt.text
    assert bad not in requests_for(model, "task:b")[0].prompt.text
    # both calls are recorded under the task's subject
    assert [c.subject for c in ledger.calls(result.run_id)].count("task:a") == 2


async def test_invalid_json_text_is_explained_in_the_repair(ledger):
    model = scripted_by_subject({"task:a": ["not json", '{"name": "x", "score": 1}']})
    await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks([t("a", schema=SCHEMA)])
    repair = requests_for(model, "task:a")[1].prompt.text
    assert "not json\n\nProblem: the answer is not valid JSON" in repair


async def test_invalid_twice_fails_the_task_and_the_run_goes_on(ledger):
    model = scripted_by_subject({"task:a": ['{"name": 1}', "still not right"]})
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks(
        [t("a", schema=SCHEMA), t("b", "a"), t("c", "b"), t("x"), t("y", "x")]
    )
    status = {k: v.status for k, v in result.tasks.items()}
    assert status == {
        "a": TaskStatus.FAILED,
        "b": TaskStatus.SKIPPED,
        "c": TaskStatus.SKIPPED,
        "x": TaskStatus.COMPLETED,
        "y": TaskStatus.COMPLETED,
    }
    error = result.tasks["a"].error or ""
    assert "task 'a': the result does not match the task's output_schema" in error
    assert "after one repair attempt" in error and "not valid JSON" in error
    assert len(requests_for(model, "task:a")) == 2  # one repair, not more
    assert requests_for(model, "task:b") == []  # skipped tasks never reach a model
    assert result.synthesis == "SYNTHESIS" and result.status == "failed"
    synth = requests_for(model, "synthesis")[0].prompt.text
    assert "## Failed tasks" in synth and "output_schema" in synth


def test_output_validation_error_fields():
    exc = OutputValidationError("a", "the answer is empty")
    assert exc.task_id == "a" and exc.reason == "the answer is empty"
    assert "'a'" in str(exc) and "the answer is empty" in str(exc)


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "nope"}, "not a valid JSON Schema"),
        ({"properties": {"n": {"minLength": -1}}}, "$.properties.n.minLength"),
        ({"required": "name"}, "not a valid JSON Schema"),
        (["type", "object"], "must be a JSON Schema object"),
        ({"enum": [{1, 2}]}, "not JSON-serializable"),
    ],
)
def test_invalid_schema_is_refused_at_construction(schema, problem):
    with pytest.raises(ConfigError) as info:
        t("a", schema=schema)
    assert info.value.field == "tasks.a.output_schema"
    assert problem in str(info.value)


def test_structured_task_stays_hashable_and_keeps_a_private_copy():
    schema = {"type": "object"}
    task = t("a", schema=schema)
    schema["type"] = "nope"  # later edits by the caller do not reach the checked schema
    assert task.output_schema == {"type": "object"}
    assert hash(task) == hash(t("a", schema={"type": "array"}))
    assert task == t("a", schema={"type": "object"})
    assert task != t("a", schema={"type": "array"})


def test_graph_round_trip_keeps_the_schema():
    graph = TaskGraph([t("a", schema=SCHEMA), t("b", "a")])
    data = graph.to_dict()
    assert data[0]["output_schema"] == SCHEMA and data[1]["output_schema"] is None
    again = TaskGraph.from_dict(json.loads(json.dumps(data)))
    assert again.get("a").output_schema == SCHEMA
    assert again.get("b").output_schema is None


def test_team_file_declares_output_schema(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents:\n"
        "  - name: alice\n"
        "    instructions: You are Alice.\n"
        "tasks:\n"
        "  - id: a\n"
        "    title: A\n"
        "    description: Do A.\n"
        "    assignee: alice\n"
        "    output_schema:\n"
        "      type: object\n"
        "      required: [name]\n",
        encoding="utf-8",
    )
    loaded = load_team_file(path)
    assert loaded.tasks[0].output_schema == {"type": "object", "required": ["name"]}

    path.write_text(
        path.read_text(encoding="utf-8").replace("type: object", "type: nope"), encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"tasks\.a\.output_schema: not a valid JSON Schema"):
        load_team_file(path)


def test_repair_origin_is_admitted_only_for_the_task_itself():
    graph = TaskGraph([t("a"), t("b", "a", schema=SCHEMA)])
    clearance = Clearance.for_task(graph, "b")
    assert clearance.admits("repair:b")
    assert not clearance.admits("repair:a")
    assert not clearance.admits("repair:")
    assert not clearance.admits("repair")


def test_builder_renders_the_repair_section_last():
    queue = TaskQueue(TaskGraph([t("a"), t("b", "a", schema=SCHEMA)]))
    queue.start("a")
    queue.complete("a", "RESULT-a")
    builder = ContextBuilder(count_tokens=estimate_tokens)
    prompt = builder.build_task_prompt(
        queue.graph.get("b"), agent=WORKER, queue=queue, repair="{}\n\nProblem: missing name"
    )
    assert prompt.manifest.origins == ("instructions", "task:b", "task_result:a", "repair:b")
    user = prompt.messages[1].content
    assert (
        f"{REJECTED}\n\n### Previous answer and validation error\n~~~~\n"
        "{}\n\nProblem: missing name\n~~~~\n\n"
    ) in user
    assert user.index("RESULT-a") < user.index(REJECTED)
