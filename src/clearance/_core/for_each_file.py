"""``for_each_file``: a team-file task that stands for one task per matching input file.

The task's ``id``, ``title``, ``description``, ``files``, ``constraints``, fan-out goals and
``output_schema`` strings get ``{path}``, ``{name}``, ``{stem}`` and ``{slug}`` filled in from
the file. ``{slug}`` is the file's path without its suffix, ``/`` as ``.``, made fit for a
task id (`file_slug`). A ``depends_on`` entry equal to such a task's ``id`` template depends
on all of its copies; in a ``for_each_file`` task it depends on the copy for the same file
(when there is one). Expanding is bounded before anything is made: at most
`MAX_FOR_EACH_FILE_TASKS` templates, `MAX_EXPANDED_TASKS` tasks, `MAX_EXPANDED_DEPENDENCIES`
dependencies and `MAX_FILLED_CHARS` characters added by filling in, each refused in one line.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections import Counter
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import pathspec

from clearance._core.confined import walk_confined
from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.input_listing import InputListing, ScanCaps, check_names
from clearance._core.names import MAX_LABEL_CHARS
from clearance._core.routing import EdgeCondition
from clearance._core.run_spec import RunSpec
from clearance._core.spec import FanOut, Task
from clearance._core.teamfile_models import TaskSpec
from clearance._core.workspace_reach import DEFAULT_WORKSPACE_ROOT, state_prefixes

__all__ = [
    "MAX_DEPTH_SCANNED",
    "MAX_ENTRIES_SCANNED",
    "MAX_EXPANDED_DEPENDENCIES",
    "MAX_EXPANDED_TASKS",
    "MAX_FILES_MATCHED",
    "MAX_FILES_SCANNED",
    "MAX_FILLED_CHARS",
    "MAX_FOR_EACH_FILE_TASKS",
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

MAX_FOR_EACH_FILE_TASKS = 64
"""Most ``for_each_file`` tasks one team file may hold (each one matched against the one
listing of the input folder)."""

MAX_EXPANDED_TASKS = 100_000
"""Most tasks a team file's tasks may make once every ``for_each_file`` one is expanded."""

MAX_EXPANDED_DEPENDENCIES = 1_000_000
"""Most dependencies the expanded tasks may have in all (a copy of a ``for_each_file`` task
that depends on another one, matched by other files, depends on every copy of it)."""

MAX_FILLED_CHARS = 16 * 2**20
"""Most characters filling in ``{path}``, ``{name}``, ``{stem}`` and ``{slug}`` may add to the
expanded tasks' text in all; counted before each copy is filled."""


def expand_ids(
    ids: list[str] | None, groups: dict[str, list[str]], tasks: tuple[Task, ...]
) -> tuple[str, ...] | None:
    """``synthesis_from`` with ``for_each_file`` templates expanded; unknown ids refused.

    Each entry is expanded once, however often it is given: a template named 90,000 times
    is not 90,000 lists of its copies.
    """
    if ids is None:
        return None
    known = {t.id for t in tasks}
    expanded: dict[str, None] = {}
    for entry in dict.fromkeys(ids):
        members = groups.get(entry, [entry])
        unknown = [m for m in members if m not in known]
        if unknown:
            raise ConfigError(f"names unknown task {unknown[0]!r}", field="synthesis_from")
        expanded.update(dict.fromkeys(members))
    return tuple(expanded)


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
    return _matches(_Scan(root, leave_out), pattern, include, field)


class _Scan:
    """The input folder's listing: walked on first use, then kept (one walk for every template).

    The caps and the walk are looked up when it is walked, not when it is made.
    """

    def __init__(self, root: Path, leave_out: tuple[str, ...]) -> None:
        self.root, self.leave_out = root, leave_out
        self._listing: InputListing | None = None

    def __call__(self, field: str) -> InputListing:
        if self._listing is None:
            caps = ScanCaps(MAX_FILES_SCANNED, MAX_ENTRIES_SCANNED, MAX_DEPTH_SCANNED)
            self._listing = InputListing.read(self.root, self.leave_out, field, caps,
                                              walk_confined)  # fmt: skip
        return self._listing


def _matches(scan: _Scan, pattern: str, include: list[str], field: str) -> list[Path]:
    """The files of ``scan``'s listing matching ``pattern`` and one of ``include``, sorted.

    The pattern is compiled before the folder is walked: one that cannot be used is refused
    first, however large the folder.
    """
    root = scan.root
    try:
        with warnings.catch_warnings():
            # A literal '[' in a set (``[[]``) makes `re` warn of a future nested-set syntax.
            warnings.simplefilter("ignore", FutureWarning)
            spec = pathspec.PathSpec.from_lines("gitignore", ["/" + pattern])
            listing = scan(field)
            found = listing.matching(spec)
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
    except (ValueError, re.error) as exc:  # re.error: a reversed range (``[z-a]``)
        raise ConfigError(f"cannot match {pattern!r}: {exc}", field=field) from exc
    matches = listing.select(found, include)
    if len(matches) > MAX_FILES_MATCHED:
        raise ConfigError(
            f"{pattern!r} matches {len(matches)} files under {str(root)!r}, more than the "
            f"{MAX_FILES_MATCHED} one task may stand for: narrow the pattern or the input folder",
            field=field,
        )
    check_names(matches, root, field)
    return matches


def expand_tasks(
    spec: RunSpec, input_root: Path | None
) -> tuple[tuple[Task, ...], dict[str, list[str]]]:
    """The spec's tasks, each ``for_each_file`` one expanded, and each template's copies.

    Files under the run's workspace root (``workspace:``) or ``.clearance/`` are never matched.
    """
    groups: dict[str, list[str]] = {}
    expanded: list[tuple[int, TaskSpec, dict[str, str]]] = []
    workspace = Path(spec.workspace or DEFAULT_WORKSPACE_ROOT)
    _check_templates(spec.tasks)
    fill = _Filler()
    scan: _Scan | None = None
    for i, task in enumerate(spec.tasks):
        if task.for_each_file is None:
            _check_count(len(expanded) + 1, f"tasks.{i}")
            expanded.append((i, task, {}))
            continue
        if input_root is None:
            raise ConfigError(
                "for_each_file needs an input folder (input.default or --input)",
                field=f"tasks.{i}.for_each_file",
            )
        field = f"tasks.{i}.for_each_file"
        if scan is None:  # one walk of the input folder, matched by every template
            scan = _Scan(input_root, state_prefixes(input_root, [workspace]))
        matches = _matches(scan, task.for_each_file, spec.input.include, field)
        if not matches:
            raise ConfigError(
                f"no file under {str(input_root)!r} matches {task.for_each_file!r}",
                field=field,
            )
        _check_count(len(expanded) + len(matches), field)
        ids = groups.setdefault(task.id, [])
        for file in matches:
            rel = file.relative_to(input_root).as_posix()
            values = {
                "path": rel,
                "name": file.name,
                "stem": file.stem,
                "slug": file_slug(rel),
            }
            _check_title(fill(task.title, values, i, "title"), rel, field=f"tasks.{i}.title")
            ids.append(fill(task.id, values, i, "id"))
            expanded.append((i, task, values))

    tasks = []
    dependencies = 0
    for i, task, values in expanded:
        depends: list[str] = []
        when: list[EdgeCondition] = []
        conditions = task.conditions
        for dep in task.dependency_ids:
            own = fill(dep, values, i, "depends_on")
            # A per-file task depends on the same file's copy, else on every copy.
            edges = [own] if values and own in groups.get(dep, ()) else groups.get(dep, [own])
            dependencies += len(edges)
            if dependencies > MAX_EXPANDED_DEPENDENCIES:
                raise ConfigError(
                    f"the tasks would have more than {MAX_EXPANDED_DEPENDENCIES:,} dependencies "
                    f"once for_each_file is expanded (a copy of {task.id!r} depends on "
                    f"{len(edges):,} copies of {dep!r}): narrow the patterns",
                    field=f"tasks.{i}.depends_on",
                )
            depends.extend(edges)
            if dep in conditions:
                where = f"tasks.{task.id}.depends_on"
                when.extend(EdgeCondition.of(e, conditions[dep], where=where) for e in edges)
        try:
            tasks.append(
                Task(
                    id=fill(task.id, values, i, "id"),
                    title=fill(task.title, values, i, "title"),
                    description=fill(task.description, values, i, "description"),
                    assignee=task.assignee or "step",
                    depends_on=tuple(depends),
                    memory_scope=task.memory_scope,
                    files=tuple(fill(f, values, i, "files") for f in task.files),
                    output_schema=_fill_schema(task.output_schema, values, fill, i),
                    mode=task.mode,
                    constraints=tuple(fill(c, values, i, "constraints") for c in task.constraints),
                    fan_out=FanOut(
                        agent=task.fan_out.agent,
                        goals=tuple(fill(g, values, i, "fan_out") for g in task.fan_out.goals),
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


def _fill_schema(schema: Any, values: dict[str, str], fill: _Filler, index: int) -> Any:
    """``output_schema`` with the placeholders of its strings filled.

    A per-file task's schema can so name its own file (``{"const": "{path}"}``).
    """
    if not values or schema is None:
        return schema
    if isinstance(schema, str):
        return fill(schema, values, index, "output_schema")
    if isinstance(schema, list):
        return [_fill_schema(v, values, fill, index) for v in schema]
    if isinstance(schema, dict):
        return {k: _fill_schema(v, values, fill, index) for k, v in schema.items()}
    return schema


_PLACEHOLDER = re.compile(r"\{(path|name|stem|slug)\}")


class _Filler:
    """Fills in placeholders, within `MAX_FILLED_CHARS` added in all (counted before filling).

    One pass: a value is never searched again, so a file named ``x{slug}.txt`` fills in as
    itself, not as another file's name. Other braces stay as they are.
    """

    def __init__(self) -> None:
        self.added = 0
        self._counts: dict[str, Counter[str]] = {}

    def __call__(self, text: str, values: dict[str, str], index: int, name: str) -> str:
        if not values or "{" not in text:
            return text
        counts = self._counts.get(text)
        if counts is None:
            counts = self._counts[text] = Counter(_PLACEHOLDER.findall(text))
        self.added += max(0, sum(n * (len(values[k]) - len(k) - 2) for k, n in counts.items()))
        if self.added > MAX_FILLED_CHARS:
            raise ConfigError(
                f"filling in {{path}}, {{name}}, {{stem}} and {{slug}} for {values['path']!r} "
                f"would add over {MAX_FILLED_CHARS:,} characters to the tasks in all: use "
                "fewer placeholders in long text",
                field=f"tasks.{index}.{name}",
            )
        return _PLACEHOLDER.sub(lambda m: values[m[1]], text)


def _check_templates(tasks: Iterable[TaskSpec]) -> None:
    """Refuse more than `MAX_FOR_EACH_FILE_TASKS` ``for_each_file`` tasks."""
    templates = [i for i, task in enumerate(tasks) if task.for_each_file is not None]
    if len(templates) > MAX_FOR_EACH_FILE_TASKS:
        raise ConfigError(
            f"the team file has {len(templates):,} for_each_file tasks, more than the "
            f"{MAX_FOR_EACH_FILE_TASKS} it may hold: match several kinds of file with one pattern",
            field=f"tasks.{templates[MAX_FOR_EACH_FILE_TASKS]}.for_each_file",
        )


def _check_count(count: int, field: str) -> None:
    """Refuse ``count`` tasks once expanded when it is over `MAX_EXPANDED_TASKS`."""
    if count > MAX_EXPANDED_TASKS:
        raise ConfigError(
            f"the tasks would be {count:,} once for_each_file is expanded, more than the "
            f"{MAX_EXPANDED_TASKS:,} a run may hold: narrow the patterns or the input folder",
            field=field,
        )
