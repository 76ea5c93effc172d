"""`Clearance`: what one task may see, computed from the graph alone."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clearance._context.tool_sections import DELEGATE_TOOL, tool_name
from clearance._core.memory_spec import memory_scopes_of
from clearance._core.spec import Agent
from clearance._core.vocabulary import OriginKind
from clearance._state.grants import StoreGrants, pattern_matches
from clearance._state.graph import TaskGraph
from clearance._state.messages import Message

if TYPE_CHECKING:
    from clearance._state.memory import MemoryRecord

__all__ = ["Clearance"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Clearance:
    """The set of origins one task's prompt may hold. Default deny: nothing else.

    A clearance is computed from the task graph, never from a model's output:

    - always: the assignee's instructions (``instructions``) and the task's own text
      (``task:<id>``);
    - ``repair:<id>``: the task's own rejected answer and why it was rejected, shown on the
      repair attempt of a structured hand-off (``Task.output_schema``);
    - ``hook:<name>/<n>``: an item a user's hook offered the task (`RunHooks.task_context`),
      for the refs in ``hooks`` (recorded with the run);
    - ``review:<id>/<round>``: a reviewer's findings on the task's own earlier candidate,
      for a task with a review loop (``Task.review``), rounds 1 to ``rounds - 1``;
    - ``task_result:<id>`` for each id in ``result_task_ids``, which ``memory_scope``
      decides: the direct dependencies (``"dependencies"``), every ancestor
      (``"transitive"``), or every other task of the graph (``"all"``);
    - ``file:<path>`` for each path listed in the task's ``files``;
    - ``message:<id>`` for each message addressed to the assignee, directly or by broadcast;
    - ``memory:<id>`` for each long-term memory record in one of ``memory_scopes``: the
      assignee's own (``agent:<name>``) and those of the memory groups declared in the team
      file that it belongs to (``group:<name>``).
    - with the assignee's spec (tools, grants), from the team, never from a model's output:
      ``store:<namespace>/<key>`` for namespaces its ``store_grants`` let it read,
      ``tool_spec:<name>`` for each of its tools, and ``tool:<call id>`` for the results of
      its own tool calls (the ledger ties each call id to its prompt subject).

    A delegated run (`for_delegation`) admits ``delegation:<tool call id>`` (the delegated
    task text) instead of any task, result, file or message.

    An isolated task (``Task.mode == "isolated"``) also admits the project's architectural
    context (``arch``), its constraints (``constraint:1`` to ``constraint:<n>``) and the
    answers to its questions (``clarification:1`` to ``clarification:<n>``); files served on
    its request join ``files``. A task that spawned children admits their final results
    (``child_result:<child id>``, for its own children only). A spawned child (`for_child`)
    admits its goal (``child_goal:<child id>``) and its own tools' results, nothing else.
    A reviewer (`for_review`) admits the task's text and its candidate results
    (``candidate:<id>/<round>``), nothing else.

    Attributes:
        task_id: The task (for a delegation, ``delegation:<tool call id>``).
        agent: Its assignee.
        result_task_ids: Tasks whose results the task may see.
        files: Paths whose contents the task may see.
        store_read: Store grant patterns the agent may read (a namespace, or ``prefix*``).
        tools: Names of the tools the agent may call (``delegate`` included).
        delegation_id: For a delegated run, the ``delegate`` tool call it serves.
        memory_scopes: Memory scopes whose records the task may see.
        isolated: Whether the task runs as a fresh isolated subagent.
        constraints: How many constraints the (isolated) task has.
        clarifications: How many answers to its questions the prompt may hold.
        children: Ids of the children this task spawned.
        child_id: For a spawned child's prompt, the child's id.
        review_rounds: For a task with a review loop, its most rounds (``0``: none).
        reviewing: The prompt is a reviewer's (`for_review`).
        hooks: Refs (``<hook name>/<n>``) of the items the user's hooks offered the task.
    """

    task_id: str
    agent: str
    result_task_ids: frozenset[str]
    files: frozenset[str]
    store_read: frozenset[str] = field(default_factory=frozenset)
    tools: frozenset[str] = field(default_factory=frozenset)
    delegation_id: str | None = None
    memory_scopes: frozenset[str] = frozenset()
    isolated: bool = False
    constraints: int = 0
    clarifications: int = 0
    children: frozenset[str] = frozenset()
    child_id: str | None = None
    review_rounds: int = 0
    reviewing: bool = False
    hooks: frozenset[str] = frozenset()

    @staticmethod
    def _agent_parts(agent: Agent | None) -> dict[str, Any]:
        if agent is None or not (
            agent.tools or agent.can_delegate_to or agent.can_spawn or agent.store_grants
        ):
            return {}  # no grants and no tools: the (empty) defaults
        names = {tool_name(t) for t in agent.tools}
        if agent.can_delegate_to:
            names.add(DELEGATE_TOOL)
        if agent.can_spawn:
            names.add("spawn")
        return {
            "store_read": StoreGrants.parse(agent.store_grants).read_patterns,
            "tools": frozenset(names),
        }

    @classmethod
    def for_delegation(cls, tool_call_id: str, agent: Agent) -> Clearance:
        """The clearance of a delegated run: its task text and the delegate's grants and tools.

        Nothing of the delegator's context is admitted.
        """
        return cls(
            task_id=f"delegation:{tool_call_id}",
            agent=agent.name,
            result_task_ids=frozenset(),
            files=frozenset(),
            delegation_id=tool_call_id,
            **cls._agent_parts(agent),
        )

    @classmethod
    def for_child(cls, child_id: str, agent: Agent) -> Clearance:
        """The clearance of a spawned child: its goal, and its own tools' results.

        Nothing of its parent's context (task, results, files, history) is admitted.
        """
        return cls(
            task_id=f"child:{child_id}",
            agent=agent.name,
            result_task_ids=frozenset(),
            files=frozenset(),
            child_id=child_id,
            **cls._agent_parts(agent),
        )

    @classmethod
    def for_review(cls, task_id: str, reviewer: str, *, rounds: int) -> Clearance:
        """The clearance of a reviewer of ``task_id``: its text and the candidates only."""
        return cls(task_id=task_id, agent=reviewer, result_task_ids=frozenset(),
                   files=frozenset(), review_rounds=rounds, reviewing=True)  # fmt: skip

    def _round_ref(self, ref: str) -> bool:
        """Whether ``ref`` is ``<task id>/<round>`` with a round of this task's loop."""
        task_id, _, number = ref.rpartition("/")
        return (
            task_id == self.task_id and number.isascii() and number.isdigit()
            and 1 <= int(number) <= self.review_rounds
        )  # fmt: skip

    @classmethod
    def for_task(
        cls,
        graph: TaskGraph,
        task_id: str,
        *,
        agent: Agent | None = None,
        memory_groups: Mapping[str, Iterable[str]] | None = None,
    ) -> Clearance:
        """Compute the clearance of ``task_id`` from ``graph`` and the declared memory groups.

        Args:
            graph: The task graph.
            task_id: The task.
            agent: The assignee's spec, for its store grants and tools; ``None`` for none.
            memory_groups: ``{group name: members}`` as declared in the team file; ``None``
                for none (the assignee's own memory only).

        Raises:
            KeyError: If the graph has no such task.
        """
        task = graph.get(task_id)
        isolated = task.mode == "isolated"
        if task.memory_scope == "all":
            results = frozenset(t.id for t in graph if t.id != task_id)
        elif task.memory_scope == "transitive":
            results = frozenset(graph.ancestors(task_id))
        else:
            results = frozenset(task.depends_on)
        return cls(
            task_id=task_id,
            agent=task.assignee,
            result_task_ids=results,
            files=frozenset(task.files),
            memory_scopes=memory_scopes_of(task.assignee, memory_groups),
            isolated=isolated,
            constraints=len(task.constraints) if isolated else 0,
            review_rounds=task.review.rounds if task.review is not None else 0,
            **cls._agent_parts(agent),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, recorded in the manifest (ids and paths sorted).

        ``store_read``, ``tools`` and ``delegation_id`` appear only when set.
        """
        data: dict[str, Any] = {
            "task_id": self.task_id,
            "agent": self.agent,
            "result_task_ids": sorted(self.result_task_ids),
            "files": sorted(self.files),
            "memory_scopes": sorted(self.memory_scopes),
        }
        if self.store_read:
            data["store_read"] = sorted(self.store_read)
        if self.tools:
            data["tools"] = sorted(self.tools)
        if self.delegation_id is not None:
            data["delegation_id"] = self.delegation_id
        if self.isolated:
            data["isolated"] = True
            data["constraints"] = self.constraints
            data["clarifications"] = self.clarifications
        if self.children:
            data["children"] = sorted(self.children)
        if self.child_id is not None:
            data["child_id"] = self.child_id
        if self.review_rounds:
            data["review_rounds"] = self.review_rounds
        if self.reviewing:
            data["reviewing"] = True
        if self.hooks:
            data["hooks"] = sorted(self.hooks)
        return data

    def admits_store(self, namespace: str) -> bool:
        """Whether entries of ``namespace`` may enter the prompt."""
        return any(pattern_matches(p, namespace) for p in self.store_read)

    def admits(
        self,
        origin: str,
        *,
        message: Message | None = None,
        memory: MemoryRecord | None = None,
        memory_scope: str | None = None,
    ) -> bool:
        """Whether an item with this origin may enter the task's prompt.

        Args:
            origin: ``kind:ref`` provenance of the item (see `Origin`).
            message: For ``message:<id>`` origins, the message itself (its addressee decides).
            memory: For ``memory:<id>`` origins, the record itself (its scope decides).
            memory_scope: For ``memory:<id>`` origins without the record (``clearance
                verify`` reading a ledger): the scope the record was recorded in.
        """
        kind, colon, ref = origin.partition(":")
        if kind == OriginKind.INSTRUCTIONS:
            return not colon
        if self.reviewing:  # a reviewer: the task's text and the candidates, nothing else
            return (kind == OriginKind.TASK and ref == self.task_id) or (
                kind == OriginKind.CANDIDATE and self._round_ref(ref)
            )
        rule = _OWN_WORK.get(kind)
        if rule is not None:
            return rule(self, ref)
        if self.delegation_id is not None or self.child_id is not None:
            return False  # a delegated run or a child sees nothing of a task's context
        rule = _TASK_CONTEXT.get(kind)
        if rule is not None:
            return rule(self, ref)
        if kind == OriginKind.ARCH:
            return self.isolated and not colon
        if kind == OriginKind.MESSAGE:
            return message is not None and message.id == ref and message.is_for(self.agent)
        if kind == OriginKind.MEMORY:
            if memory is not None:
                return memory.id == ref and memory.scope in self.memory_scopes
            return memory_scope is not None and memory_scope in self.memory_scopes
        return False

    def _admits_store_entry(self, ref: str) -> bool:
        """Whether ``<namespace>/<key>`` may enter (its namespace may hold "/": any split)."""
        return any(self.admits_store(ref[:i]) for i, ch in enumerate(ref) if ch == "/" and i > 0)

    def _nth(self, ref: str, count: int) -> bool:
        """Whether ``ref`` is an isolated task's ``1`` to ``count``."""
        return self.isolated and ref.isascii() and ref.isdigit() and 1 <= int(ref) <= count


_Rule = Callable[[Clearance, str], bool]
"""Whether a clearance admits an origin of one kind, given the origin's ref."""

_OWN_WORK: dict[str, _Rule] = {
    OriginKind.REVIEW: lambda c, ref: c._round_ref(ref),
    OriginKind.HOOK: lambda c, ref: ref in c.hooks,
    OriginKind.STORE: lambda c, ref: c._admits_store_entry(ref),
    OriginKind.TOOL_SPEC: lambda c, ref: ref in c.tools,
    OriginKind.TOOL: lambda c, ref: bool(c.tools) and bool(ref),
    OriginKind.DELEGATION: lambda c, ref: c.delegation_id is not None and ref == c.delegation_id,
    OriginKind.CHILD_GOAL: lambda c, ref: c.child_id is not None and ref == c.child_id,
}
"""`Clearance.admits` for the kinds of the agent's own work, in any prompt (a delegated
run's and a child's included), by kind (a dictionary: one lookup, not a chain of enum
comparisons)."""

_TASK_CONTEXT: dict[str, _Rule] = {
    OriginKind.CHILD_RESULT: lambda c, ref: ref in c.children,
    OriginKind.CONSTRAINT: lambda c, ref: c._nth(ref, c.constraints),
    OriginKind.CLARIFICATION: lambda c, ref: c._nth(ref, c.clarifications),
    OriginKind.QUESTION: lambda c, ref: c.isolated and ref == c.task_id,
    OriginKind.TASK: lambda c, ref: ref == c.task_id,
    OriginKind.REPAIR: lambda c, ref: ref == c.task_id,
    OriginKind.TASK_RESULT: lambda c, ref: ref in c.result_task_ids,
    OriginKind.TASK_STATUS: lambda c, ref: ref in c.result_task_ids,
    OriginKind.FILE: lambda c, ref: ref in c.files,
}
"""`Clearance.admits` for the kinds of a task's context, refused in a delegated run's or a
child's prompt (as are ``arch``, ``message`` and ``memory``, which need more than the ref)."""
