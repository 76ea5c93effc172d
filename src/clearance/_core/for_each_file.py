"""``for_each_file``: a team-file task that stands for one task per matching input file.

The task's ``id``, ``title``, ``description``, ``files``, ``constraints``, fan-out goals and
``output_schema`` strings get ``{path}``, ``{name}``, ``{stem}`` and ``{slug}`` filled in from
the file. ``{slug}`` is the file's path without its suffix, ``/`` as ``.``, made fit for a
task id (`file_slug`). A ``depends_on`` entry equal to such a task's ``id`` template depends
on all of its copies; in a ``for_each_file`` task it depends on the copy for the same file
(when there is one).
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pathspec

from clearance._core.confined import (
    CONTROL_CHARACTER,
    EntryKind,
    TreeEntry,
    escape_controls,
    walk_confined,
)
from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.names import MAX_LABEL_CHARS
from clearance._core.routing import EdgeCondition
from clearance._core.run_spec import RunSpec
from clearance._core.spec import FanOut, Task
from clearance._core.teamfile_models import TaskSpec
from clearance._core.workspace_reach import (
    DEFAULT_WORKSPACE_ROOT,
    is_state_path,
    state_prefixes,
    under_prefixes,
)

__all__ = [
    "MAX_DEPTH_SCANNED",
    "MAX_ENTRIES_SCANNED",
    "MAX_FILES_MATCHED",
    "MAX_FILES_SCANNED",
    "expand_ids",
    "file_slug",
    "expand_tasks",
    "included",
    "matching_files",
]


_NOT_IN_ID = re.compile(r"[^A-Za-z0-9_.-]+")
_SLUG_CHARS = 96
"""Most characters of a slug, so a task id made of it and a short prefix stays within 128."""


def file_slug(rel: str) -> str:
    """``rel`` (a POSIX path under the input folder) as a part of a task id.

    The suffix is dropped and ``/`` becomes ``.`` (``pkg/json/decoder.py`` is
    ``pkg.json.decoder``); any run of other characters a task id may not hold becomes one
    ``-`` (``we ird$.txt`` is ``we-ird``). A slug over 96 characters is cut and ends with 8
    hex digits of the path's SHA-256, so two long paths still differ. Two files whose paths
    differ only in such characters get one slug: their tasks' ids then clash, which is
    refused as a duplicate id.
    """
    stem = rel.rsplit(".", 1)[0] if "." in rel.rsplit("/", 1)[-1] else rel
    slug = _NOT_IN_ID.sub("-", stem.replace("/", ".")).strip("-.") or "file"
    if len(slug) > _SLUG_CHARS:
        digest = hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        slug = f"{slug[: _SLUG_CHARS - 9].rstrip('-.')}-{digest}"
    return slug


MAX_FILES_MATCHED = 10_000
"""Most files one ``for_each_file`` task may stand for (one task each)."""

MAX_FILES_SCANNED = 200_000
"""Most files under the input folder looked at to match a ``for_each_file`` pattern."""

MAX_ENTRIES_SCANNED = 500_000
"""Most entries (files, folders, links) under the input folder read to match a pattern."""

MAX_DEPTH_SCANNED = 100
"""Deepest level of entries under the input folder (1: its own entries); deeper is refused."""


def expand_ids(
    ids: list[str] | None, groups: dict[str, list[str]], tasks: tuple[Task, ...]
) -> tuple[str, ...] | None:
    """``synthesis_from`` with ``for_each_file`` templates expanded; unknown ids refused."""
    if ids is None:
        return None
    known = {t.id for t in tasks}
    expanded: list[str] = []
    for entry in ids:
        members = groups.get(entry, [entry])
        unknown = [m for m in members if m not in known]
        if unknown:
            raise ConfigError(f"names unknown task {unknown[0]!r}", field="synthesis_from")
        expanded.extend(members)
    return tuple(dict.fromkeys(expanded))


def included(path: str, include: Iterable[str]) -> bool:
    r"""Whether ``path`` (relative to the input folder) matches one of ``include``'s globs.

    Matched from the right, as `pathlib.PurePath.match` does (``*.py`` holds ``a/b.py``), with
    ``\`` read as ``/``: the one reading of ``input.include``.
    """
    posix = PurePosixPath(path.replace("\\", "/"))
    return any(posix.match(glob) for glob in include)


def matching_files(
    root: Path, pattern: str, include: list[str], field: str, leave_out: tuple[str, ...] = ()
) -> list[Path]:
    r"""The files under ``root`` matching ``pattern`` and one of ``include``, sorted.

    A file under Clearance's own state folder (``.clearance/``) or under ``leave_out``
    (where the run's workspace root lies in ``root``: `state_prefixes`) is never matched:
    agents' outputs of an earlier run are no input of a new task. Those folders are not even
    read: they count toward none of the caps below.

    ``pattern`` is a gitignore-style pattern (`pathspec`) anchored at ``root``: ``*`` and
    ``?`` stay within one folder, ``**`` spans folders (``**/*.py`` is every ``.py`` file,
    ``*.py`` those at the top), ``[...]`` is a set, a backslash escapes the next character
    (``\\*`` and ``[*]`` match a literal ``*``), and a folder's name matches the files
    beneath it. The folder is walked as every confined listing is (`walk_confined`: each
    folder opened beneath its parent, links never followed), at most
    `MAX_ENTRIES_SCANNED` entries and `MAX_DEPTH_SCANNED` levels deep, counted while it is
    read. A symlinked file is listed (reading it is confined later, as for every task file);
    a FIFO, device or socket is not a file.

    Raises:
        ConfigError: The pattern cannot be used; the input folder holds more than
            `MAX_FILES_SCANNED` files or `MAX_ENTRIES_SCANNED` entries, or nests folders
            deeper than `MAX_DEPTH_SCANNED`; the pattern matches more than
            `MAX_FILES_MATCHED` (narrow the folder or the pattern); or a folder under
            ``root`` may not be read (its files would be left out unseen); or a matching file's
            name is not valid UTF-8 or holds a control character (a newline, an escape),
            which would forge a line of a prompt, the ledger or the terminal: the message
            names the file, escaped, and the field; or two matching names differ only in
            Unicode normalization (``café`` composed and decomposed), which read alike.
    """
    try:
        with warnings.catch_warnings():
            # A literal '[' in a set (``[[]``) makes `re` warn of a future nested-set syntax.
            warnings.simplefilter("ignore", FutureWarning)
            spec = pathspec.PathSpec.from_lines("gitignore", ["/" + pattern])
            # A folder the run may not read is refused: its files would get no task, unsaid.
            # Clearance's state and the workspace root are left unread: never matched,
            # they count toward no cap (an earlier run's outputs do not crowd the input out).
            entries = walk_confined(root, max_depth=MAX_DEPTH_SCANNED + 1,
                                    max_entries=MAX_ENTRIES_SCANNED, unreadable=False,
                                    prune=lambda rel: is_state_path(rel)
                                    or under_prefixes(rel, leave_out))  # fmt: skip
            walked = _Candidates(entries, root, field)
            found = list(spec.match_files(_at_most(walked, root, field)))
    except LimitExceeded:
        raise ConfigError(
            f"the input folder {str(root)!r} holds more than {MAX_ENTRIES_SCANNED} files and "
            "folders: give a narrower --input (or input.default)",
            field=field,
        ) from None
    except ConfigError as exc:
        if exc.field is not None:
            raise
        raise ConfigError(exc.message, field=field) from None  # the folder cannot be read
    except ValueError as exc:
        raise ConfigError(f"cannot match {pattern!r}: {exc}", field=field) from exc
    found = [rel for rel in found if not _in_state(root, rel, walked.files, leave_out)]
    files = sorted(root / rel for rel in found if rel in walked.files or _leads_to_file(root / rel))
    matches = [p for p in files if any(p.match(inc) for inc in include)]
    if len(matches) > MAX_FILES_MATCHED:
        raise ConfigError(
            f"{pattern!r} matches {len(matches)} files under {str(root)!r}, more than the "
            f"{MAX_FILES_MATCHED} one task may stand for: narrow the pattern or the input folder",
            field=field,
        )
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
    return matches


class _Candidates:
    """The paths of the files and links a walk yields; remembers which were regular files."""

    def __init__(self, entries: Iterator[TreeEntry], root: Path, field: str) -> None:
        self._entries, self._root, self._field = entries, root, field
        self.files: set[str] = set()

    def __iter__(self) -> Iterator[str]:
        for entry in self._entries:
            if entry.depth > MAX_DEPTH_SCANNED:
                raise ConfigError(
                    f"the input folder {str(self._root)!r} holds entries more than "
                    f"{MAX_DEPTH_SCANNED} levels deep: give a narrower --input (or "
                    "input.default)",
                    field=self._field,
                )
            if entry.kind == EntryKind.FILE:
                self.files.add(entry.path)
                yield entry.path
            elif entry.kind == EntryKind.SYMLINK:
                yield entry.path  # a file if it leads to one (`Path.is_file` follows it)


def _in_state(root: Path, rel: str, files: set[str], leave_out: tuple[str, ...]) -> bool:
    """Whether ``rel`` lies in Clearance's state or under ``leave_out``, or a link leads there."""
    if is_state_path(rel) or under_prefixes(rel, leave_out):
        return True
    if rel in files:
        return False
    # A link: where it leads counts (a link in the project to an agent's output).
    return any(
        prefix != "." and (is_state_path(prefix) or under_prefixes(prefix, leave_out))
        for prefix in state_prefixes(root, [root / rel])
    )


def _leads_to_file(link: Path) -> bool:
    """Whether a matched link leads to a regular file (followed as the system does).

    A link that cannot be followed for a reason other than its target missing (a name too
    long, permission denied on the way) counts as one: the confined read of the task's
    files then refuses it in one line naming it, where ``is_file`` would raise.
    """
    try:
        return link.is_file()
    except OSError:
        return True


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


def _at_most(files: Iterable[str], root: Path, field: str) -> Iterator[str]:
    """``files`` (a walk of ``root``), refused past `MAX_FILES_SCANNED` of them."""
    for count, name in enumerate(files, 1):
        if count > MAX_FILES_SCANNED:
            raise ConfigError(
                f"the input folder {str(root)!r} holds more than {MAX_FILES_SCANNED} files: "
                "give a narrower --input (or input.default)",
                field=field,
            )
        yield name


def expand_tasks(
    spec: RunSpec, input_root: Path | None
) -> tuple[tuple[Task, ...], dict[str, list[str]]]:
    """The spec's tasks, each ``for_each_file`` one expanded, and each template's copies.

    Files under the run's workspace root (``workspace:``) or ``.clearance/`` are never matched.
    """
    groups: dict[str, list[str]] = {}
    expanded: list[tuple[TaskSpec, dict[str, str]]] = []
    workspace = Path(spec.workspace or DEFAULT_WORKSPACE_ROOT)
    for i, task in enumerate(spec.tasks):
        if task.for_each_file is None:
            expanded.append((task, {}))
            continue
        if input_root is None:
            raise ConfigError(
                "for_each_file needs an input folder (input.default or --input)",
                field=f"tasks.{i}.for_each_file",
            )
        field = f"tasks.{i}.for_each_file"
        leave_out = state_prefixes(input_root, [workspace])
        matches = matching_files(
            input_root, task.for_each_file, spec.input.include, field, leave_out
        )
        if not matches:
            raise ConfigError(
                f"no file under {str(input_root)!r} matches {task.for_each_file!r}",
                field=field,
            )
        ids = groups.setdefault(task.id, [])
        for file in matches:
            rel = file.relative_to(input_root).as_posix()
            values = {
                "path": rel,
                "name": file.name,
                "stem": file.stem,
                "slug": file_slug(rel),
            }
            _check_title(_fill(task.title, values), rel, field=f"tasks.{i}.title")
            ids.append(_fill(task.id, values))
            expanded.append((task, values))

    tasks = []
    for task, values in expanded:
        depends: list[str] = []
        when: list[EdgeCondition] = []
        conditions = task.conditions
        for dep in task.dependency_ids:
            own = _fill(dep, values)
            # A per-file task depends on the same file's copy, else on every copy.
            edges = [own] if values and own in groups.get(dep, ()) else groups.get(dep, [own])
            depends.extend(edges)
            if dep in conditions:
                where = f"tasks.{task.id}.depends_on"
                when.extend(EdgeCondition.of(e, conditions[dep], where=where) for e in edges)
        try:
            tasks.append(
                Task(
                    id=_fill(task.id, values),
                    title=_fill(task.title, values),
                    description=_fill(task.description, values),
                    assignee=task.assignee or "step",
                    depends_on=tuple(depends),
                    memory_scope=task.memory_scope,
                    files=tuple(_fill(f, values) for f in task.files),
                    output_schema=_fill_schema(task.output_schema, values),
                    mode=task.mode,
                    constraints=tuple(_fill(c, values) for c in task.constraints),
                    fan_out=FanOut(
                        agent=task.fan_out.agent,
                        goals=tuple(_fill(g, values) for g in task.fan_out.goals),
                    )
                    if task.fan_out is not None
                    else None,
                    run=task.run,
                    after_failure=task.after_failure,
                    approval=task.approval,
                    when=tuple(when),
                    review=task.review.to_review() if task.review is not None else None,
                )
            )
        except ConfigError as exc:  # a part's own check (fan_out, review): name the task
            if exc.field is None or exc.field.startswith("tasks."):
                raise
            raise ConfigError(
                exc.message, source=exc.source, field=f"tasks.{task.id}.{exc.field}"
            ) from None
    return tuple(tasks), groups


def _check_title(title: str, rel: str, *, field: str) -> None:
    """Refuse a title made longer than a title may be by a file's name filled in."""
    if len(title) > MAX_LABEL_CHARS:
        raise ConfigError(
            f"is {len(title):,} characters once filled in for {rel!r}, over "
            f"{MAX_LABEL_CHARS}: name the file with {{name}} or {{slug}} instead",
            field=field,
        )


def _fill_schema(schema: Any, values: dict[str, str]) -> Any:
    """``output_schema`` with the placeholders of its strings filled.

    A per-file task's schema can so name its own file (``{"const": "{path}"}``).
    """
    if not values or schema is None:
        return schema
    if isinstance(schema, str):
        return _fill(schema, values)
    if isinstance(schema, list):
        return [_fill_schema(v, values) for v in schema]
    if isinstance(schema, dict):
        return {k: _fill_schema(v, values) for k, v in schema.items()}
    return schema


_PLACEHOLDER = re.compile(r"\{(path|name|stem|slug)\}")


def _fill(text: str, values: dict[str, str]) -> str:
    """Replace ``{path}``, ``{name}``, ``{stem}``, ``{slug}``; other braces stay as they are.

    One pass: a value is never searched again, so a file named ``x{slug}.txt`` fills in as
    itself, not as another file's name.
    """
    if not values:
        return text
    return _PLACEHOLDER.sub(lambda m: values[m[1]], text)
