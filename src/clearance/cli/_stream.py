"""``clearance run --stream``: the running tasks' text, live.

Model output is hostile: every piece is made harmless for the terminal (`safe`: control
characters and escape sequences shown escaped, never obeyed) before it is shown. On a
terminal, each running model call gets a panel with the tail of its text, redrawn as pieces
arrive (rich's ``Live``); elsewhere (a pipe, a log file), the text is printed line by line,
each line prefixed with its call's subject.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from clearance import RunEvent, RunEventKind
from clearance.cli._common import safe, safe_line, safe_lines, safe_text

__all__ = ["StreamView"]

_TAIL_CHARS = 4000
"""Most characters of one call's text kept for display."""

_TAIL_LINES = 8
"""Lines of each running call shown on a terminal."""

_PIECE_CHARS = 4000
"""Most characters of one printed line in a pipe: a longer line is printed in pieces."""


class StreamView:
    """Shows streamed text; passes every other event on to ``progress``.

    Args:
        console: Where to show it.
        progress: Prints the run's progress lines (task started, completed...).
        live: Redraw panels on a terminal; ``False`` prints lines as in a pipe (when the
            terminal also takes answers, ``--interactive``).
    """

    def __init__(
        self, console: Console, progress: Callable[[RunEvent], None], *, live: bool = True
    ) -> None:
        self._console = console
        self._live_wanted = live
        self._progress = progress
        self._texts: dict[str, str] = {}  # subject: its text so far (the tail)
        self._live: Live | None = None

    @contextmanager
    def showing(self) -> Iterator[StreamView]:
        """Show the running calls live while the block runs (on a terminal)."""
        if not (self._console.is_terminal and self._live_wanted):
            yield self
            self._flush_all()
            return
        with Live(console=self._console, refresh_per_second=8, transient=True) as live:
            self._live = live
            try:
                yield self
            finally:
                self._live = None

    def __call__(self, event: RunEvent) -> None:
        subject = event.subject or ""
        if event.kind == RunEventKind.MODEL_CALL:
            self._flush(subject)
            self._texts[subject] = ""
        elif event.kind == RunEventKind.TEXT:
            text = self._texts.get(subject, "") + event.detail
            if self._live is None:  # every line printed, none cut: only a tail is kept
                self._texts[subject] = text
                self._print_lines(subject)
            else:
                self._texts[subject] = text[-_TAIL_CHARS:]
        elif event.kind == RunEventKind.TOOL_CALL:
            self._flush(subject)
            # The name is the model's: one line even when it holds line breaks.
            self._say(safe_line(f"{subject} calls tool {event.detail}"))
        else:
            if (
                event.kind in (RunEventKind.TASK_COMPLETED, RunEventKind.TASK_FAILED)
                and event.task_id is not None
            ):
                self._flush(f"task:{event.task_id}")
            if event.kind == RunEventKind.RUN_FINISHED:
                self._flush_all()
            self._progress(event)
        if self._live is not None:
            self._live.update(self._panels())

    def _say(self, text: Text) -> None:
        (self._live.console if self._live is not None else self._console).print(text)

    def _print_lines(self, subject: str) -> None:
        """Print the complete lines of ``subject``'s text (pipe mode); keep the rest.

        Nothing is dropped: a line longer than `_PIECE_CHARS` (a model writing with no line
        break) is printed in pieces of that length as it grows, so what is kept stays small.
        """
        *lines, rest = self._texts[subject].split("\n")
        while len(rest) > _PIECE_CHARS:
            lines.append(rest[:_PIECE_CHARS])
            rest = rest[_PIECE_CHARS:]
        for line in lines:
            self._console.print(Text(f"{safe(subject)} | {safe_lines(line)}"), soft_wrap=True)
        self._texts[subject] = rest

    def _flush(self, subject: str) -> None:
        """Done with ``subject``'s text: print its last line (pipe mode) and forget it."""
        rest = self._texts.pop(subject, "")
        if rest.strip() and self._live is None:
            self._console.print(Text(f"{safe(subject)} | {safe_lines(rest)}"), soft_wrap=True)

    def _flush_all(self) -> None:
        for subject in list(self._texts):
            self._flush(subject)

    def _panels(self) -> Group:
        panels = []
        for subject, text in self._texts.items():
            tail = "\n".join(text.splitlines()[-_TAIL_LINES:])
            panels.append(Panel(safe_text(tail), title=safe_text(subject), title_align="left"))
        return Group(*panels)
