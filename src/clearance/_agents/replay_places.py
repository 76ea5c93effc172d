"""Where a declined call's later run takes its place in a replayed answer.

A finished call whose replay was declined (``replay: false``, store reads, spawns) runs again
under a new id, recorded after the calls that follow it in the same answer. A resume matches
a turn's calls to the step's rows by their place in the answer, so that later run must take
the declined call's place (`in_place`). Today's ``replay_declined`` event names it
(``replacement``); older runs' events name none, and each names the answer's first run:
`Replacements` works it out from the records (module `clearance._agents.replay`).
"""

from __future__ import annotations

from typing import Any

from clearance._state.ledger import ToolCallRecord

__all__ = ["Replacements", "in_place"]

_StartKey = tuple[str, Any, Any, Any]
"""A ``tool_started`` event's subject, step, tool name and arguments digest."""


class Replacements:
    """A run's declined calls and the id each ran again under, read in recorded order.

    Feed it the run's ``replay_declined`` and ``tool_started`` events in the order recorded;
    `replaced` maps each declined run to the run that replaced it. A decline that names no
    replacement (recorded before the event named one) is replaced by the first new start of
    the same call (subject, step, tool and arguments digest) recorded after it; older
    declines all name the answer's first run, so each is taken for the latest run of the
    chain so far.
    """

    def __init__(self) -> None:
        self.replaced: dict[str, str] = {}
        self._keys: dict[str, _StartKey] = {}  # every started call's, by id
        self._waiting: dict[_StartKey, list[str]] = {}  # older declines, oldest first

    def declined(self, data: dict[str, Any]) -> None:
        """A ``replay_declined`` event's data (a later decline of a call comes later)."""
        original = str(data.get("original"))
        new = data.get("replacement")
        if isinstance(new, str):
            self.replaced[original] = new
        elif (key := self._keys.get(original)) is not None:
            self._waiting.setdefault(key, []).append(original)

    def started(self, subject: str, data: dict[str, Any]) -> None:
        """A ``tool_started`` event's subject and data."""
        call_id = str(data.get("tool_call_id"))
        if call_id in self._keys:  # run again under its own id: no decline's replacement
            return
        key = (subject, data.get("step"), data.get("name"), data.get("arguments_sha256"))
        self._keys[call_id] = key
        waiting = self._waiting.get(key)
        if not waiting:
            return
        latest = waiting.pop(0)
        for _ in range(len(self.replaced)):  # each older session's run declined by the next
            if latest not in self.replaced:
                break
            latest = self.replaced[latest]
        self.replaced.setdefault(latest, call_id)


def in_place(rows: list[ToolCallRecord], replaced: dict[str, str]) -> list[ToolCallRecord]:
    """A step's rows in the order of its answer's calls, one row per call.

    A finished call whose replay was declined ran again under the id `Replacements` names,
    recorded after the calls that follow it in the answer: its latest run takes its place,
    so each later call keeps its own (a call's place is how the turn finds its row).
    """
    if not replaced:
        return rows
    by_id = {row.tool_call_id: row for row in rows}
    moved = {new for old, new in replaced.items() if old in by_id and new in by_id}
    placed = []
    for row in rows:
        if row.tool_call_id in moved:
            continue
        latest = row
        for _ in range(len(rows)):  # each session's run declined by the next
            new = replaced.get(latest.tool_call_id)
            if new is None or new not in by_id:
                break
            latest = by_id[new]
        placed.append(latest)
    return placed
