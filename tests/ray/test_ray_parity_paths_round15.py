"""One team file, run locally and with ``executor: ray``: every call path means the same.

`test_ray_hostile_round15.py` compares a plain task and its tool loop. This runs one team
file whose tasks take every other call path (an isolated task with a clarification round, a
delegate, a spawned child, a review loop that sends a draft back once, and a tool that needs
approval) both ways, streaming and not, and compares what the model received (request
parameters, prompt text, manifest origins), what the ledger recorded (calls, tool calls,
events, results; ids and hashes of text holding ids masked) and the progress events heard
(streamed text included); ``clearance verify`` passes on both. A model failing on each of
those paths is handled, recorded and charged alike both ways too.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ray_executor import ray, ray_head, verify_cli  # noqa: F401  (its Ray head)

from clearance import ModelError, RayExecutor, RunLedger, RunServices
from clearance._core.run_spec import RunSpec
from clearance._core.vocabulary import EventKind, PromptKind, RunEventKind
from clearance._orchestration.approval_request import ApprovalDecision, ApprovalRequest
from clearance._orchestration.spec_run import run_spec
from clearance.models._base import ModelRequest, ToolCall, Usage
from clearance.testing import FunctionModel

pytestmark = pytest.mark.ray

TEAM = """\
name: parity
model: test:{main}
max_concurrency: 1
input: {{default: {input}}}
workspace: {workspace}
tools:
  lookup: {{}}
  publish: {{approval: required}}
agents:
  - name: lead
    instructions: You lead.
    tools: [lookup, publish]
    can_delegate_to: [helper]
    can_spawn: [kid]
    sampling: {{temperature: 0.7, top_p: 0.9, stop: [END]}}
    limits: {{max_output_tokens: 123, retries: 0}}
  - name: helper
    instructions: You help.
    tools: [lookup]
    sampling: {{temperature: 0.2, repeat_penalty: 1.1}}
    limits: {{max_output_tokens: 111, retries: 0}}
  - name: kid
    instructions: You are the kid.
    model: test:{alt}
    tools: [lookup]
    sampling: {{temperature: 0.3, stop: [STOP]}}
    limits: {{max_output_tokens: 99, retries: 0}}
  - name: loner
    instructions: You work alone.
    sampling: {{temperature: 0.4, top_p: 0.5}}
    limits: {{max_output_tokens: 77, retries: 0}}
  - name: writer
    instructions: You write.
    sampling: {{temperature: 0.6}}
    limits: {{max_output_tokens: 88, retries: 0}}
  - name: critic
    instructions: You review.
    model: test:{alt}
    sampling: {{temperature: 0.1, top_p: 0.8}}
    limits: {{max_output_tokens: 66, retries: 0}}
tasks:
  - {{id: lead, title: Lead, description: Look k up then hand work on., assignee: lead}}
  - {{id: alone, title: Alone, description: Sum the notes., assignee: loner, mode: isolated,
     files: [notes.txt]}}
  - {{id: draft, title: Draft, description: Write a draft., assignee: writer,
     review: {{by: [critic], rounds: 2}}}}
"""

# What each agent's calls are sent (max_tokens, temperature, top_p, stop, repeat_penalty).
SAMPLING = {
    "lead": (123, 0.7, 0.9, ["END"], None),
    "helper": (111, 0.2, None, [], 1.1),
    "kid": (99, 0.3, None, ["STOP"], None),
    "loner": (77, 0.4, 0.5, [], None),
    "writer": (88, 0.6, None, [], None),
    "critic": (66, 0.1, 0.8, [], None),
}

_LEAD_STEPS = (
    ("ANSWER-42", "lookup", {"key": "k"}),
    ("HELPED", "delegate", {"agent": "helper", "task": "Assist with k."}),
    ("KID-DONE", "spawn", {"agent": "kid", "goal": "Find k."}),
    ("PUBLISHED", "publish", {"text": "k"}),
)


def _answer(request: ModelRequest) -> Any:
    """Every agent's answers, by the call's subject and what its prompt already holds."""
    kind, _, rest = request.prompt.manifest.subject.partition(":")
    text = request.prompt.text
    if kind == PromptKind.TASK and rest == "lead":
        for marker, name, arguments in _LEAD_STEPS:
            if marker not in text:
                return ToolCall(id=f"c-{name}", name=name, arguments=arguments)
        return "lead done"
    if kind in (PromptKind.DELEGATION, PromptKind.CHILD):
        if "ANSWER-42" not in text:
            return ToolCall(id="c-lookup", name="lookup", arguments={"key": "k"})
        return "HELPED" if kind == PromptKind.DELEGATION else "KID-DONE"
    if kind == PromptKind.ISOLATED:
        if "CLARIFIED" not in text:
            return "Unsure.\nSTATUS: needs_context\nQUESTION: Which notes count?"
        return "The sum is 3.\nSTATUS: done"
    if kind == PromptKind.CLARIFICATION:
        return "CLARIFIED: all of them."
    if kind == PromptKind.TASK and rest == "draft":
        return "draft two" if "Too short" in text else "draft one"
    if kind == PromptKind.REVIEW:
        verdict = "accept" if "draft two" in text else "revise"
        return json.dumps({"verdict": verdict, "findings": "Too short."})
    return f"final ({len(text)} characters seen)"


PAID = Usage(requests=1, prompt_tokens=5, completion_tokens=7)


def _failing(model_id: str | None, request: ModelRequest) -> Any:
    """`_answer`, but every path other than a task's fails (the text names what the lead waits
    for, so its loop goes on): a refused answer paid for, or an exception of the model's own.

    Its errors name the model, as every built-in provider's do (``None``: they name none).
    """
    kind = request.prompt.manifest.subject.partition(":")[0]
    if kind == PromptKind.DELEGATION:
        raise ModelError("HELPED? no: the answer was refused", model_id=model_id, paid=PAID)
    if kind == PromptKind.CHILD:
        raise ModelError("KID-DONE? no: HTTP 400", model_id=model_id, status_code=400)
    if kind == PromptKind.ISOLATED:
        raise RuntimeError("the isolated model broke")
    if kind == PromptKind.REVIEW:
        raise ModelError("the reviewer's answer was refused", model_id=model_id, paid=PAID)
    return _answer(request)


def _function_model(model_id: str, **options: Any) -> Any:
    named = None if "noid" in model_id else model_id
    answer = functools.partial(_failing, named) if "fail" in model_id else _answer
    return FunctionModel(answer, model_id=model_id)


def lookup(key: str) -> str:
    """Look a key up."""
    return f"ANSWER-42 for {key}"


def publish(text: str) -> str:
    """Publish a text (needs approval)."""
    return f"PUBLISHED {text}"


async def _approve(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(approved=True, by="tester", reason="fine")


@pytest.fixture(scope="module")
def executor(ray_head: str) -> Iterator[RayExecutor]:  # noqa: F811
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with RayExecutor(address=ray_head, workers=1, cpus_per_worker=0, record_received=True,
                     model_factory=_function_model) as ex:  # fmt: skip
        yield ex


def _seen(requests: list[ModelRequest]) -> list[tuple[Any, ...]]:
    return [
        (
            r.prompt.manifest.subject,
            r.parameters(),
            r.prompt.text,
            tuple(i.origin for i in r.prompt.manifest.items),
        )
        for r in requests
    ]


def _recorded(ledger: RunLedger, result: Any) -> tuple[Any, ...]:
    run_id = result.run_id
    calls = [
        (c.subject, c.agent, c.messages, c.manifest, c.parameters, c.response,
         c.finish_reason, c.usage, c.error)
        for c in ledger.calls(run_id)
    ]  # fmt: skip
    tools = [(t.name, t.arguments, t.result) for t in ledger.tool_calls(run_id)]
    events = [
        (e.kind, e.subject, e.data)
        for e in ledger.events(run_id)
        if e.kind not in (EventKind.WORKER_LOST,)
    ]
    tasks = {k: (v.status, v.result) for k, v in sorted(result.tasks.items())}
    return calls, tools, events, tasks, result.usage, result.status


async def _run(
    tmp_path: Path,
    where: str,
    executor: RayExecutor | None,
    *,
    stream: bool,
    fail: bool | str = False,
) -> tuple[list[FunctionModel], tuple[Any, ...], list[tuple[Any, ...]]]:
    main = fail if isinstance(fail, str) else "fail"  # the model of every agent but two
    ids = (f"test:{main}", "test:failalt") if fail else ("test:fn", "test:alt")
    models = [_function_model(m) for m in ids]
    heard: list[tuple[Any, ...]] = []
    services = RunServices(
        models={m.model_id: m for m in models}, executor=executor, approver=_approve,
        on_event=lambda e: heard.append((e.kind, e.task_id, e.detail, e.subject)),
    )  # fmt: skip
    db = f"sqlite:///{tmp_path / (where + '.db')}"
    with RunLedger(db) as ledger:
        result = await run_spec(
            RunSpec.from_file(tmp_path / "team.yaml"), ledger=ledger, services=services,
            tools={"lookup": lookup, "publish": publish}, stream_text=stream,
        )  # fmt: skip
        assert result.status == ("failed" if fail else "completed"), result.error
        recorded = _recorded(ledger, result)
    verify_cli(result.run_id, db)
    return models, recorded, heard


@pytest.mark.parametrize("stream", [False, True])
async def test_every_call_path_gets_the_same_calls_and_records_under_ray_as_locally(
    executor: RayExecutor, tmp_path: Path, stream: bool
) -> None:
    _write_team(tmp_path, "fn", "alt")
    local, recorded_here, heard_here = await _run(tmp_path, "local", None, stream=stream)
    before = sum(len(r) for r in executor.received())
    unused, recorded_on_ray, heard_on_ray = await _run(tmp_path, "ray", executor, stream=stream)
    assert not any(m.requests for m in unused)  # every call was answered on a worker
    on_ray = [r for _, _, r in [c for w in executor.received() for c in w][before:]]

    seen_here = _seen([r for m in local for r in m.requests])
    seen_on_ray = _seen(on_ray)
    # Every path was taken: the lead's tool loop (lookup, delegate, spawn, publish, answer),
    # the delegate's and the child's loops, the isolated task's two dispatches and its
    # clarification, two rounds of draft and review, and the synthesis.
    kinds = {s.partition(":")[0] for s, *_ in seen_here}
    assert kinds == {k.value for k in (PromptKind.TASK, PromptKind.DELEGATION, PromptKind.CHILD,
                                       PromptKind.ISOLATED, PromptKind.CLARIFICATION,
                                       PromptKind.REVIEW, PromptKind.SYNTHESIS)}  # fmt: skip
    assert len(seen_here) == 17
    # The same requests (the two models' calls interleave differently in one list).
    assert sorted(_ids_out(x) for x in seen_on_ray) == sorted(_ids_out(x) for x in seen_here)
    # Each agent's sampling and limits reached its every call, whatever the path.
    agent_of = {c[0]: c[1] for c in recorded_on_ray[0]}  # subject -> agent
    for subject, params, _, _ in seen_on_ray:
        if (agent := agent_of[subject]) in SAMPLING:
            sent = tuple(params[k] for k in ("max_tokens", "temperature", "top_p", "stop",
                                             "repeat_penalty"))  # fmt: skip
            assert sent == SAMPLING[agent], subject
    assert _ids_out(recorded_on_ray) == _ids_out(recorded_here)
    assert _ids_out(heard_on_ray) == _ids_out(heard_here)
    # The approval of publish was asked and decided on both.
    events = [e[0] for e in recorded_on_ray[2]]
    assert events.count(EventKind.AWAITING_APPROVAL) == 1
    assert events.count(EventKind.APPROVAL_DECIDED) == 1
    texts = [e for e in heard_on_ray if e[0] == RunEventKind.TEXT]
    if stream:  # every path streamed its text (the fake model streams it word by word)
        assert {e[3].partition(":")[0] for e in texts} == kinds
        assert [e[2] for e in texts if e[3] == "task:draft"] == ["draft ", "one", "draft ", "two"]
    else:
        assert not texts


def _write_team(tmp_path: Path, main: str, alt: str) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("1\n2\n")
    team = TEAM.format(input=tmp_path / "in", workspace=tmp_path / "ws", main=main, alt=alt)
    (tmp_path / "team.yaml").write_text(team)


async def test_every_call_path_fails_the_same_under_ray_as_locally(
    executor: RayExecutor, tmp_path: Path
) -> None:
    """A model's failure on each path is recorded, charged and handled alike both ways."""
    _write_team(tmp_path, "fail", "failalt")
    _, recorded_here, heard_here = await _run(tmp_path, "local", None, stream=False, fail=True)
    unused, recorded_on_ray, heard_on_ray = await _run(
        tmp_path, "ray", executor, stream=False, fail=True
    )
    assert not any(m.requests for m in unused)
    assert _ids_out(recorded_on_ray) == _ids_out(recorded_here)
    assert _ids_out(heard_on_ray) == _ids_out(heard_here)
    calls, tools, _, tasks, _, _ = recorded_on_ray
    errors = {c[0].partition(":")[0]: c[8] for c in calls if c[8]}
    assert set(errors) == {"delegation", "child", "isolated", "review"}, errors
    assert tasks["lead"][0] == "completed" and tasks["alone"][0] == tasks["draft"][0] == "failed"
    assert "RuntimeError: the isolated model broke" in errors["isolated"]
    assert any("HELPED? no" in str(t[2]) for t in tools if t[0] == "delegate")
    # The refused answers were paid for: charged alike (the run's usage is compared above).
    paid = [c[7] for c in calls if c[8] and "refused" in c[8]]
    assert len(paid) == 2 and all(u.prompt_tokens == 5 for u in paid), paid


async def test_a_model_error_naming_no_model_reads_the_same_under_ray_as_locally(
    executor: RayExecutor, tmp_path: Path
) -> None:
    _write_team(tmp_path, "failnoid", "failalt")
    _, recorded_here, _ = await _run(tmp_path, "local", None, stream=False, fail="failnoid")
    _, recorded_on_ray, _ = await _run(tmp_path, "ray", executor, stream=False, fail="failnoid")
    for recorded in (recorded_here, recorded_on_ray):
        (delegate,) = [t for t in recorded[1] if t[0] == "delegate"]
        assert delegate[2] == "error: 'helper' failed: HELPED? no: the answer was refused"
    assert _ids_out(recorded_on_ray) == _ids_out(recorded_here)


def _ids_out(value: object) -> str:
    """``value``'s text with what each run makes anew (ids, hashes, times, paths) made one."""
    text = re.sub(r"\b([a-z]+)_[0-9a-f]{12}_[0-9a-f]{8}\b", r"\1_ID", repr(value))
    text = re.sub(r"\b[0-9a-f]{64}\b", "SHA256", text)
    return re.sub(r"(local|ray)\.db", "DB", text)
