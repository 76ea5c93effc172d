"""The prompt's vocabulary: item origins and call subjects, as typed values with one parser.

Every item of a prompt names where it came from (its *origin*) and every model call names
what it serves (its *subject*). Both are written ``kind`` or ``kind:ref``; the kinds are
`OriginKind` and `PromptKind` (``_core/vocabulary.py``):

========================  =========================================================
origin                    what the item is
========================  =========================================================
``instructions``          the agent's instructions (the system message)
``task:<id>``             a task's own text
``task_result:<id>``      a completed task's result
``task_status:<id>``      why a task failed or was skipped
``file:<path>``           a file's contents
``message:<id>``          a message from a team member
``memory:<id>``           a long-term memory record
``tool_spec:<name>``      a tool's description
``tool:<call id>``        what a tool call returned
``store:<ns>/<key>``      a store entry a tool call read
``repair:<id>``           the task's rejected answer and why (structured hand-off)
``review:<id>/<n>``       the findings that sent round ``n``'s candidate back (review loop)
``candidate:<id>/<n>``    round ``n``'s candidate result, in a reviewer's prompt
``delegation:<call id>``  a delegated task's text
``child_goal:<id>``       a spawned child's goal
``child_result:<id>``     a spawned child's final result
``arch``                  the project's architectural context
``constraint:<n>``        an isolated task's constraint (from 1)
``clarification:<n>``     an answer to an isolated subagent's question (from 1)
``question:<task id>``    an isolated subagent's question
``history``               an isolated subagent's compacted earlier steps
``goal``                  the run's goal
``agent:<name>``          a roster line of the planning prompt
``plan_feedback``         why the coordinator's plan was rejected
``shared_memory``         the shared memory's summary
``summary_of:<n>``        a hierarchical synthesis' map step summary
``turn:<id>``             a conversation turn
``summary:<id>``          a summary of compressed turns
========================  =========================================================

Subjects: ``task:<id>``, ``isolated:<id>``, ``delegation:<call id>``, ``child:<id>``,
``clarification:<task id>``, ``conversation:<agent>``, ``summary:<agent>``,
``synthesis_map:<n>``, ``review:<task id>/<round>/<stage>``, ``synthesis`` and ``plan``.

`Origin.parse` and `Subject.parse` are the only parsers: ``str(Origin.parse(s)) == s`` for
every string, so ledgers written before these types existed read back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from clearance._core.vocabulary import OriginKind, PromptKind

__all__ = ["Origin", "Subject"]


@dataclass(frozen=True, slots=True)
class _Ref:
    """``kind`` or ``kind:ref``; ``ref is None`` means no colon (``"arch"``)."""

    kind: str
    ref: str | None = None

    @classmethod
    def _split(cls, text: str) -> tuple[str, str | None]:
        kind, colon, ref = text.partition(":")
        return kind, (ref if colon else None)

    def __str__(self) -> str:
        return self.text(self.kind, self.ref)

    @staticmethod
    def text(kind: str, ref: str | None = None) -> str:
        """``str(Origin(kind, ref))`` (or `Subject`'s), without making the object.

        For the prompt builder's per-task strings: a frozen dataclass pays for an
        ``object.__setattr__`` per field.
        """
        return kind if ref is None else f"{kind}:{ref}"

    @property
    def id(self) -> str:
        """The part after the first ``:`` (``""`` when there is none)."""
        return self.ref or ""


@dataclass(frozen=True, slots=True)
class Origin(_Ref):
    """Where one prompt item came from (see the module docstring for the kinds).

    Attributes:
        kind: The part before the first ``:`` (``task_result``, ``file``, ``arch`` ...).
        ref: The part after it (a task id, a path, ``<namespace>/<key>`` ...); ``None``
            when the origin has no ``:``.
    """

    SINGLE: ClassVar[frozenset[str]] = frozenset(
        {OriginKind.TASK, OriginKind.FILE, OriginKind.TASK_RESULT, OriginKind.MESSAGE,
         OriginKind.REPAIR, OriginKind.GOAL, OriginKind.AGENT, OriginKind.PLAN_FEEDBACK,
         OriginKind.TOOL_SPEC, OriginKind.TOOL, OriginKind.DELEGATION, OriginKind.INSTRUCTIONS,
         OriginKind.SUMMARY_OF}
    )  # fmt: skip
    """Kinds a prompt holds at most once per origin."""

    @classmethod
    def parse(cls, text: str) -> Origin:
        """Read an origin string (never fails: an unknown kind is refused by admission)."""
        return cls(*cls._split(text))

    @classmethod
    def of(cls, kind: str, ref: object = None) -> Origin:
        """``Origin(kind, str(ref))``; ``ref=None`` for an origin without ``:``."""
        return cls(kind, None if ref is None else str(ref))

    def store_split(self) -> tuple[str, str]:
        """``(namespace, key)`` of a ``store:<namespace>/<key>`` origin (first ``/``)."""
        namespace, _, key = self.id.partition("/")
        return namespace, key


@dataclass(frozen=True, slots=True)
class Subject(_Ref):
    """What one model call serves: ``task:<id>``, ``synthesis``, ``plan`` ...

    Attributes:
        kind: ``task``, ``isolated``, ``delegation``, ``child``, ``clarification``,
            ``conversation``, ``summary``, ``synthesis_map``, ``synthesis`` or ``plan``.
        ref: The task, call, child, agent or step it serves; ``None`` for ``synthesis`` and
            ``plan``.
    """

    @classmethod
    def parse(cls, text: str) -> Subject:
        """Read a subject string (never fails: an unknown kind is a verification finding)."""
        return cls(*cls._split(text))

    @classmethod
    def of(cls, kind: str, ref: object = None) -> Subject:
        """``Subject(kind, str(ref))``; ``ref=None`` for ``synthesis`` and ``plan``."""
        return cls(kind, None if ref is None else str(ref))

    @classmethod
    def task(cls, task_id: str) -> Subject:
        """``task:<task_id>``."""
        return cls(PromptKind.TASK, task_id)
