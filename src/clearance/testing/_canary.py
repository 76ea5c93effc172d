"""Canary leak testing: a model whose every completion is traceable, and one-line assertions.

`CanaryModel` marks each completion with a marker no other completion carries, so a test can
tell, for any two tasks X and Y, whether X's result reached Y's prompt. `assert_saw` and
`assert_never_saw` search every prompt one task received, read from a `RunLedger` or from a
recording model, and name the manifest item that held the text when they fail.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from clearance._context.render import PromptParseError, parse_user_message
from clearance._core.errors import ModelError
from clearance._core.vocabulary import PromptKind
from clearance._state.ledger import RunLedger
from clearance.models._base import ModelRequest, ModelResponse
from clearance.testing._models import _RecordingModel

__all__ = ["CanaryModel", "assert_never_saw", "assert_saw"]

COORDINATOR_SUBJECTS = ("synthesis", "plan")
"""Prompt subjects of the coordinator; every other ``task_id`` means ``task:<task_id>``."""


class CanaryModel(_RecordingModel):
    """A recording model whose every completion carries a unique canary.

    A canary is ``CANARY-<key>-<8 hex digits>``, new on every call and never a substring of
    another canary the model issued. ``<key>`` is the task id for a task prompt (subject
    ``task:<id>``, or ``isolated:<id>`` for an isolated task), else the subject
    (``synthesis``, ``plan``, ``child:<id>``...). The completion is:

    - task prompt: ``"result of <id> <canary>"``;
    - synthesis: ``"synthesis of <n> results <canary>"``, ``n`` the number of completed
      results in the prompt;
    - plan: a JSON plan with one task per roster member, in roster order, each depending on
      the one before (``step-1``, ``step-2``...); every task's description carries the plan's
      canary.

    - a reviewer's prompt (subject ``review:<task>/<round>/<stage>``): a review, ``{"verdict":
      "revise", "findings": "<canary>"}`` for a subject in ``revise``, else ``"accept"``.

    Tasks with an ``output_schema`` are not supported: their completions are not JSON. A task
    id equal to ``"synthesis"`` or ``"plan"`` shares its canary key with the coordinator's
    prompt of that name.

    Args:
        model_id: The id it reports.
        fail: Keys (task ids, ``"synthesis"``, ``"plan"``) whose calls raise `ModelError`
            instead of answering; the request is still recorded, no canary is issued.
        revise: Reviewer subjects (``review:<task>/<round>/<stage>``) that send the
            candidate back.

    Attributes:
        canaries: The canary of each key's last completion.
        requests: Every request received, in order (failed calls included).
    """

    def __init__(
        self,
        *,
        model_id: str = "test:canary",
        fail: Collection[str] = (),
        revise: Collection[str] = (),
    ):
        super().__init__(model_id)
        self.fail = frozenset(fail)
        self.revise = frozenset(revise)
        self.canaries: dict[str, str] = {}
        self._issued: list[str] = []

    def canary_of(self, task_id: str) -> str:
        """The canary of the last completion for ``task_id`` (or ``"synthesis"``, ``"plan"``).

        Raises:
            KeyError: The model has completed no call for ``task_id`` (it never reached the
                model, or its calls failed).
        """
        try:
            return self.canaries[task_id]
        except KeyError:
            raise KeyError(
                f"no completion for {task_id!r}: it never reached the model, or its call failed"
            ) from None

    def _new_canary(self, key: str) -> str:
        while True:
            canary = f"CANARY-{key}-{secrets.token_hex(4)}"
            if not any(canary in old or old in canary for old in self._issued):
                self._issued.append(canary)
                return canary

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Record the request; answer with a fresh canary, or raise for a ``fail`` key.

        Raises:
            ModelError: The prompt's key is in ``fail``.
        """
        self.requests.append(request)
        manifest = request.prompt.manifest
        subject = manifest.subject
        key = subject.removeprefix("task:").removeprefix("isolated:")
        if key in self.fail:
            raise ModelError(f"canary failure of {key!r} (scripted)", model_id=self.model_id)
        canary = self._new_canary(key)
        if subject == PromptKind.SYNTHESIS:
            results = sum(1 for o in manifest.origins if o.startswith("task_result:"))
            text = f"synthesis of {results} results {canary}"
        elif subject == PromptKind.PLAN:
            agents = [o.removeprefix("agent:") for o in manifest.origins if o.startswith("agent:")]
            text = json.dumps({"tasks": _plan_tasks(agents, canary)})
        elif subject.startswith("review:"):
            verdict = "revise" if subject in self.revise else "accept"
            text = json.dumps({"verdict": verdict, "findings": canary})
        else:
            text = f"result of {key} {canary}"
        self.canaries[key] = canary
        return self._respond(request, text)


def _plan_tasks(agents: Sequence[str], canary: str) -> list[dict[str, object]]:
    return [
        {
            "id": f"step-{i}",
            "title": f"Step {i}",
            "description": f"Step {i} of the plan ({canary}).",
            "assignee": agent,
            "depends_on": [f"step-{i - 1}"] if i > 1 else [],
        }
        for i, agent in enumerate(agents, start=1)
    ]


# -- assertions ---------------------------------------------------------------------------


class _HasRequests(Protocol):
    """Anything that records the requests it received (the `clearance.testing` models)."""

    @property
    def requests(self) -> Sequence[ModelRequest]:
        """Every request received, in order."""
        ...


@dataclass(frozen=True, slots=True)
class _Item:
    """One manifest item of a prompt, with its content where it is known."""

    origin: str
    title: str
    content: str | None

    def holding(self, text: str) -> str | None:
        where = f"manifest item {self.origin!r} (titled {self.title!r})"
        if self.content is not None and text in self.content:
            return f"in the content of {where}"
        if text in self.title:
            return f"in the heading of {where}"
        return None


@dataclass(frozen=True, slots=True)
class _Received:
    """One prompt a task received: where it is recorded, its messages, its manifest items."""

    label: str
    messages: tuple[tuple[str, str], ...]
    items: tuple[_Item, ...]


def _subject(task_id: str) -> str:
    return task_id if task_id in COORDINATOR_SUBJECTS else f"task:{task_id}"


def _ledger_items(messages: list[dict[str, Any]], manifest: dict[str, Any]) -> list[_Item]:
    """A recorded manifest's items, with content recovered from the recorded prompt.

    The system message is the first item's content; the blocks of the user message are the
    others', in order. Content that cannot be recovered (a prompt that does not parse) is
    ``None``, and only titles are searched.
    """
    raw = manifest.get("items")
    records: list[Any] = raw if isinstance(raw, list) else []
    contents: list[str | None] = [None] * len(records)
    if records and messages and messages[0].get("role") == "system":
        contents[0] = str(messages[0].get("content", ""))
    user = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), None)
    if user is not None:
        try:
            sections, _ = parse_user_message(user)
        except PromptParseError:
            sections = ()
        blocks = [b for s in sections for b in s.blocks]
        for i, block in enumerate(blocks[: max(len(records) - 1, 0)], start=1):
            contents[i] = block.content
    return [
        _Item(str(r.get("origin")), str(r.get("title")), content)
        for r, content in zip(records, contents, strict=True)
    ]


def _received(
    source: RunLedger | _HasRequests, task_id: str, run_id: str | None
) -> tuple[str, list[_Received]]:
    """Where the prompts come from (for messages), and every prompt ``task_id`` received."""
    subject = _subject(task_id)
    if isinstance(source, RunLedger):
        if run_id is None:
            runs = source.list_runs(limit=1)
            if not runs:
                raise AssertionError(f"the run ledger at {source.url} holds no runs")
            run = runs[0]
        else:
            run = source.get_run(run_id)
        if subject.startswith("task:") and run.graph is not None:
            known = sorted(str(t.get("id")) for t in run.graph)
            if task_id not in known:
                raise AssertionError(
                    f"run {run.run_id} has no task {task_id!r} (its tasks: {', '.join(known)})"
                )
        calls = source.calls(run.run_id, subject=subject)
        return f"in run {run.run_id}", [
            _Received(
                label=f"call {n} of {len(calls)} ({call.call_id})",
                messages=tuple(
                    (str(m.get("role")), str(m.get("content", ""))) for m in call.messages
                ),
                items=tuple(_ledger_items(call.messages, call.manifest)),
            )
            for n, call in enumerate(calls, start=1)
        ]
    if run_id is not None:
        raise TypeError("run_id applies only when the source is a RunLedger")
    requests = [r for r in source.requests if r.prompt.manifest.subject == subject]
    return "in the requests the model recorded", [
        _Received(
            label=f"request {n} of {len(requests)}",
            messages=tuple((m.role, m.content) for m in r.prompt.messages),
            items=tuple(_Item(i.origin, i.title, i.content) for i in r.prompt.manifest.items),
        )
        for n, r in enumerate(requests, start=1)
    ]


def _hits(prompts: Sequence[_Received], text: str) -> Iterator[str]:
    """One line per message of ``prompts`` that contains ``text``, saying where it is."""
    for prompt in prompts:
        for role, content in prompt.messages:
            if text not in content:
                continue
            # The system message is the instructions item; the user message holds the rest.
            items = [i for i in prompt.items if (i.origin == "instructions") == (role == "system")]
            where = next(
                (w for w in (i.holding(text) for i in items) if w is not None),
                "outside any single manifest item (in the prompt's layout, or across items)",
            )
            yield f"{prompt.label}, {role} message, {where}"


def assert_never_saw(
    source: RunLedger | _HasRequests, task_id: str, text: str, *, run_id: str | None = None
) -> None:
    """Assert that no prompt ``task_id`` received contains ``text``.

    A task that never reached a model saw nothing, so the assertion holds for it.

    Args:
        source: A `RunLedger` (prompts are read from its recorded calls) or a recording model
            such as `CanaryModel` (prompts are its ``requests``).
        task_id: A task id, or ``"synthesis"`` / ``"plan"`` for the coordinator's prompts.
        text: The text that must not occur (an exact substring match).
        run_id: For a ledger: the run (full id or unique prefix); ``None`` for the newest run.
            Not allowed with a model.

    Raises:
        AssertionError: ``text`` occurs in a prompt; the message names the task, the text,
            the call and the manifest item whose content held it. Also when the ledger holds
            no run, or the run's graph has no such task.
        TypeError: ``run_id`` given with a model as ``source``.
        StoreError: The ledger failed, or ``run_id`` matches no run or several.
    """
    label, prompts = _received(source, task_id, run_id)
    hits = list(_hits(prompts, text))
    if hits:
        raise AssertionError(f"{task_id!r} saw {text!r} {label}: " + "; ".join(hits))


def assert_saw(
    source: RunLedger | _HasRequests, task_id: str, text: str, *, run_id: str | None = None
) -> None:
    """Assert that some prompt ``task_id`` received contains ``text``.

    Args:
        source: A `RunLedger` (prompts are read from its recorded calls) or a recording model
            such as `CanaryModel` (prompts are its ``requests``).
        task_id: A task id, or ``"synthesis"`` / ``"plan"`` for the coordinator's prompts.
        text: The text that must occur (an exact substring match).
        run_id: For a ledger: the run (full id or unique prefix); ``None`` for the newest run.
            Not allowed with a model.

    Raises:
        AssertionError: ``task_id`` never reached a model, or none of its prompts contains
            ``text``. Also when the ledger holds no run, or the run's graph has no such task.
        TypeError: ``run_id`` given with a model as ``source``.
        StoreError: The ledger failed, or ``run_id`` matches no run or several.
    """
    label, prompts = _received(source, task_id, run_id)
    if not prompts:
        raise AssertionError(f"{task_id!r} never reached a model {label}")
    if next(_hits(prompts, text), None) is None:
        raise AssertionError(
            f"{task_id!r} never saw {text!r} {label}: it is in none of its {len(prompts)} prompt(s)"
        )
