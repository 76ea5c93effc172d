"""`Review`: a bounded review loop on a task (a fresh implementer per round, then reviewers).

Round 1 runs the task as usual. Its result (the *candidate*) goes to each reviewer in
order (two stages, spec then quality, are two reviewers); a reviewer sees the task's text
and the candidate, nothing else, and answers with `REVIEW_SCHEMA`: a ``verdict`` and its
``findings``. The first reviewer whose answer does not meet ``accept_when`` sends the task
back: the next round is a fresh call of the assignee whose prompt holds the task, its
dependencies and that reviewer's findings (origin ``review:<task>/<round>``), never an
earlier round's answer or conversation. The candidate every reviewer accepts is the task's
result; after ``rounds`` rounds without that, the task fails.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clearance._core.errors import ConfigError
from clearance._core.routing import EdgeCondition

__all__ = ["MAX_REVIEW_ROUNDS", "REVIEW_SCHEMA", "Review"]

MAX_REVIEW_ROUNDS = 10
"""Most rounds a review loop may have."""

REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["accept", "revise"]},
        "findings": {"type": "string"},
    },
    "required": ["verdict", "findings"],
}
"""What a reviewer answers: ``{"verdict": "accept" | "revise", "findings": "..."}``."""

_ACCEPT = {"/verdict": "accept"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Review:
    """A task's review loop (see the module docstring).

    Attributes:
        by: The reviewers' agent names, in order (at least one).
        rounds: Most implementer rounds, 1 to `MAX_REVIEW_ROUNDS` (the fix-loop cap).
        accept_when: When a reviewer's answer accepts the candidate: JSON Pointers into
            the answer and the values they must equal (see `EdgeCondition`); by default
            ``{"/verdict": "accept"}``.

    Raises:
        ConfigError: No reviewer, a reviewer twice, rounds out of range, or a bad
            ``accept_when``.
    """

    by: tuple[str, ...]
    rounds: int = 3
    accept_when: Mapping[str, Any] = field(default_factory=lambda: dict(_ACCEPT), hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", tuple(self.by))
        if not self.by or len(set(self.by)) < len(self.by):
            raise ConfigError("name one or more reviewers, each once", field="review.by")
        if (
            isinstance(self.rounds, bool)
            or not isinstance(self.rounds, int)
            or not (1 <= self.rounds <= MAX_REVIEW_ROUNDS)
        ):
            raise ConfigError(
                f"must be 1 to {MAX_REVIEW_ROUNDS}, got {self.rounds!r}", field="review.rounds"
            )
        condition = EdgeCondition.of("review", self.accept_when, where="review.accept_when")
        object.__setattr__(self, "accept_when", condition.when())

    def verdict(self, answer: str) -> tuple[bool, str]:
        """Whether a reviewer's answer accepts the candidate, and its findings.

        Args:
            answer: The reviewer's validated JSON answer.
        """
        findings = json.loads(answer).get("findings", "")
        accepted = EdgeCondition.of("review", self.accept_when).unmet(answer) is None
        return accepted, findings if isinstance(findings, str) else json.dumps(findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded with the graph)."""
        return {"by": list(self.by), "rounds": self.rounds, "accept_when": dict(self.accept_when)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Review:
        """The review `to_dict` recorded."""
        return cls(by=tuple(data["by"]), rounds=data["rounds"],
                   accept_when=data.get("accept_when", _ACCEPT))  # fmt: skip
