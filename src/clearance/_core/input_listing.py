"""The input folder listed once for ``for_each_file``; every template's pattern matched on it.

One confined walk (`walk_confined`) reads the folder, within the caps it is given; each
``for_each_file`` template then matches its pattern against that listing, so 64 templates
read a 200,000-file folder once, not 64 times, and all of them see one state of the folder.
The caps and the refusals of a pattern are `clearance._core.for_each_file`'s.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

from clearance._core.confined import CONTROL_CHARACTER, EntryKind, TreeEntry, escape_controls
from clearance._core.errors import ConfigError
from clearance._core.workspace_reach import is_state_path, state_prefixes, under_prefixes

__all__ = ["InputListing", "ScanCaps", "check_names"]

Walk = Callable[..., Iterator[TreeEntry]]
"""`walk_confined`, or a stand-in with its signature."""


@dataclass(frozen=True, slots=True)
class ScanCaps:
    """Most files, entries and levels one walk of the input folder may read."""

    files: int
    entries: int
    depth: int


class InputListing:
    """The files and links under an input folder, in walk order, read by one confined walk.

    A folder under Clearance's own state (``.clearance/``) or under ``leave_out`` is left
    unread (`walk_confined`'s ``prune``): never listed, counted toward no cap.
    """

    def __init__(
        self, root: Path, leave_out: tuple[str, ...], candidates: list[str], files: set[str]
    ) -> None:
        self.root, self.leave_out = root, leave_out
        self.candidates: tuple[str, ...] = tuple(candidates)
        """The paths of the regular files and links, relative to ``root``, in walk order."""
        self.files: frozenset[str] = frozenset(files)
        """Which of ``candidates`` are regular files (the rest are links)."""
        self._links_to_state: dict[str, bool] = {}
        self._links_to_files: dict[str, bool] = {}

    @classmethod
    def read(
        cls, root: Path, leave_out: tuple[str, ...], field: str, caps: ScanCaps, walk: Walk
    ) -> InputListing:
        """Walk ``root`` once, refusing it past ``caps`` while it is read.

        Raises:
            ConfigError: More than ``caps.files`` files (and links), or entries deeper than
                ``caps.depth`` levels (named with ``field``); a folder that may not be read
                (without a field: the caller names it).
            LimitExceeded: More than ``caps.entries`` entries were read.
        """
        # A folder the run may not read is refused: its files would get no task, unsaid.
        # Clearance's state and the workspace root are left unread: never matched,
        # they count toward no cap (an earlier run's outputs do not crowd the input out).
        entries = walk(root, max_depth=caps.depth + 1, max_entries=caps.entries,
                       unreadable=False, prune=lambda rel: is_state_path(rel)
                       or under_prefixes(rel, leave_out))  # fmt: skip
        candidates: list[str] = []
        files: set[str] = set()
        for entry in entries:
            if entry.depth > caps.depth:
                raise ConfigError(
                    f"the input folder {str(root)!r} holds entries more than {caps.depth} "
                    "levels deep: give a narrower --input (or input.default)",
                    field=field,
                )
            if entry.kind == EntryKind.FILE:
                files.add(entry.path)
            elif entry.kind != EntryKind.SYMLINK:
                continue  # a folder, FIFO, device or socket is no file
            candidates.append(entry.path)  # a link is a file if it leads to one
            if len(candidates) > caps.files:
                raise ConfigError(
                    f"the input folder {str(root)!r} holds more than {caps.files} files: "
                    "give a narrower --input (or input.default)",
                    field=field,
                )
        return cls(root, leave_out, candidates, files)

    def matching(self, spec: pathspec.PathSpec[Any]) -> list[str]:
        """The listed paths ``spec`` matches, in walk order."""
        return list(spec.match_files(self.candidates))

    def select(self, found: list[str], include: list[str]) -> list[Path]:
        """``found`` (matched paths) that are files outside the state and match ``include``.

        A link counts as where it leads: one into Clearance's state or under ``leave_out``
        is dropped, one leading to no regular file is not a file. Sorted by path.
        """
        kept = [rel for rel in found if not self._in_state(rel)]
        files = sorted(self.root / rel for rel in kept if rel in self.files or self._to_file(rel))
        return [p for p in files if any(p.match(inc) for inc in include)]

    def _in_state(self, rel: str) -> bool:
        """Whether ``rel`` lies in Clearance's state or under ``leave_out``, or leads there."""
        if is_state_path(rel) or under_prefixes(rel, self.leave_out):
            return True
        if rel in self.files:
            return False
        verdict = self._links_to_state.get(rel)
        if verdict is None:
            # A link: where it leads counts (a link in the project to an agent's output).
            verdict = self._links_to_state[rel] = any(
                prefix != "." and (is_state_path(prefix) or under_prefixes(prefix, self.leave_out))
                for prefix in state_prefixes(self.root, [self.root / rel])
            )
        return verdict

    def _to_file(self, rel: str) -> bool:
        """Whether the link ``rel`` leads to a regular file (followed as the system does).

        A link that cannot be followed for a reason other than its target missing (a name too
        long, permission denied on the way) counts as one: the confined read of the task's
        files then refuses it in one line naming it, where ``is_file`` would raise.
        """
        verdict = self._links_to_files.get(rel)
        if verdict is None:
            try:
                verdict = (self.root / rel).is_file()
            except OSError:
                verdict = True
            self._links_to_files[rel] = verdict
        return verdict


def check_names(matches: list[Path], root: Path, field: str) -> None:
    """Refuse a matched file's name that is not UTF-8 or holds a control character.

    Two names one Unicode normalization apart (``café`` composed and decomposed) are refused
    too: they read alike.
    """
    seen: dict[str, str] = {}
    for path in matches:
        rel = path.relative_to(root).as_posix()
        _check_name(rel, root, field)
        # Two names one Unicode normalization apart look alike: their tasks' titles and
        # descriptions would too, and a dependent could not tell their results apart.
        if (other := seen.setdefault(unicodedata.normalize("NFC", rel), rel)) != rel:
            raise ConfigError(
                f"the file names {other!a} and {rel!a} under {str(root)!r} differ "
                "only in Unicode normalization and would read alike: rename one or narrow "
                "the pattern",
                field=field,
            )


def _check_name(rel: str, root: Path, field: str) -> None:
    """Refuse a matched file's name that is not UTF-8 or holds a control character."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
        raise ConfigError(
            f"the file name '{escape_controls(shown)}' under {str(root)!r} is not valid "
            "UTF-8: rename it or narrow the pattern",
            field=field,
        ) from None
    if (found := CONTROL_CHARACTER.search(rel)) is not None:
        raise ConfigError(
            f"the file name '{escape_controls(rel)}' under {str(root)!r} holds the control "
            f"character {found[0]!r}: rename it or narrow the pattern",
            field=field,
        )
