"""`Report`: what ``clearance run`` writes after a run, in Markdown and as data."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from clearance._context.answers import REPEAT_MARK, TRUNCATED_MARK
from clearance._core.shown_text import shown
from clearance._core.spec import Task
from clearance._orchestration.result import RunResult

__all__ = ["Report", "ReportFunction", "marks", "one_line", "parse_json", "plain"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    """A run's report.

    Attributes:
        markdown: The report as Markdown, each control character or bidirectional override
            in it written as its visible escape (`shown`): a person reads the file.
        data: The same content as JSON-ready data.
        sarif: The findings as a SARIF 2.1.0 log (JSON-ready), for reports that have
            findings; else ``None``.
    """

    markdown: str
    data: dict[str, Any]
    sarif: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # The one place every report's text passes: model answers, reasons quoting them and
        # input files' docstrings are all in it, wherever a report put them.
        object.__setattr__(self, "markdown", shown(self.markdown))


class ReportFunction(Protocol):
    """Builds a report from a finished run (``report: step:<name>`` names one)."""

    def __call__(
        self, result: RunResult, tasks: Sequence[Task], *, model_id: str, team_name: str
    ) -> Report:
        """The report of ``result``, whose tasks were ``tasks``, answered by ``model_id``."""
        ...


def parse_json(text: str | None) -> Any:
    """``text`` as JSON, or ``None`` when it is not JSON (or nests too deep to read)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # ``[[[[...`` thousands deep: a model's answer
        return None


def marks(text: str | None) -> list[str]:
    """What the orchestrator marked in a model's answer (cut off, repetition removed)."""
    found = []
    if text and TRUNCATED_MARK in text:
        found.append("cut off at the output limit")
    if text and REPEAT_MARK in text:
        found.append("repetition removed")
    return found


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+!|~-])")


def plain(text: Any) -> str:
    """``text`` with Markdown's punctuation escaped: shown as written.

    Never a link, an image, a tag or emphasis: a docstring of a reviewed file is someone
    else's text.
    """
    return _MARKDOWN.sub(r"\\\1", str(text))


def one_line(text: Any, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
