"""Reading a project directory: its tree, dependencies, ADRs and conventions.

Helpers for `ArchitecturalContext.from_project`. Every reader is bounded (depth, entries,
bytes read per file) and goes through `clearance._core.confined`: files and folders are opened
beneath the project root one component at a time and symbolic links are never followed, so
a link to a secret outside the project (or to ``/proc/self/environ``), or a folder swapped
for a link during the scan, never reaches a prompt.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pathspec

from clearance._context.project_ignore import (
    ALWAYS_SKIPPED,
    MAX_MATCHED_PATH_CHARS,
    gitignore_spec,
    is_run_state,
)
from clearance._core.confined import (
    EntryKind,
    TreeEntry,
    escape_controls,
    list_confined,
    read_bytes_confined,
)
from clearance._core.errors import ClearanceError, LimitExceeded
from clearance._core.workspace_reach import under_prefixes

__all__ = [
    "AdrSummary",
    "Dependency",
    "read_adrs",
    "read_conventions",
    "read_dependencies",
    "read_project_name",
    "read_text",
    "root_files",
    "walk_structure",
]

MAX_READ_BYTES = 64 * 1024
"""Most bytes read of one file."""
MAX_SCANNED_ENTRIES = 10_000
"""Most folder entries the tree's listing reads, and each other listing (root, ADR folder)."""
MAX_REQUIREMENTS_FILES = 10
"""Most ``requirements*.txt`` files read, in name order."""
IGNORE_MATCH_SECONDS = 2.0
"""Most seconds the tree's listing spends matching entries against ``.gitignore``."""
MAX_DEPENDENCIES = 200
"""Most dependencies kept; the rest are counted (`read_dependencies`)."""
MAX_CONVENTIONS = 100
"""Most conventions kept; one more line counts the rest."""
MAX_FIELD_CHARS = 200
"""Longest name, version, title, status or convention kept; a longer one ends with ``...``."""
ADR_DIRS = ("docs/adr", "docs/decisions", "adr", "doc/adr")


@dataclass(frozen=True, kw_only=True, slots=True)
class Dependency:
    """One declared dependency.

    Attributes:
        name: Package or module name.
        version: The version constraint as declared (``">=2.7"``, ``"1.0.3"``), ``""`` if none.
        source: The manifest it came from, relative to the project root.
        optional: Whether it is optional (an extra, a dev or indirect dependency).
    """

    name: str
    version: str
    source: str
    optional: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class AdrSummary:
    """Summary of one architecture decision record.

    Attributes:
        path: The file, relative to the project root.
        title: Its first heading (or the file name).
        status: Its status (``"Accepted"``...), ``""`` when it states none.
        summary: Its first paragraph of prose, at most 400 characters.
    """

    path: str
    title: str
    status: str
    summary: str


def read_text(root: Path, rel: str) -> str | None:
    """The first `MAX_READ_BYTES` of a regular file of the project, as text.

    Links are not followed; bytes that are not UTF-8 are replaced.

    Returns:
        The text, or ``None`` when the file is missing, a link, not a regular file, or
        otherwise unreadable.
    """
    try:
        read = read_bytes_confined(root, rel, max_bytes=MAX_READ_BYTES, follow_symlinks=False)
    except ClearanceError:
        return None
    return read.data.decode("utf-8", errors="replace")


def _clip(text: str, most: int = MAX_FIELD_CHARS) -> str:
    """``text``, or its start ending with ``...`` when it is over ``most`` characters."""
    return text if len(text) <= most else text[: most - 3] + "..."


def _manifest(root: Path, name: str, loads: Callable[[str], Any]) -> dict[str, Any] | None:
    """The manifest ``name`` parsed as a table; ``None`` if missing or not one.

    A manifest that does not parse, is nested too deep for the parser (``RecursionError``)
    or is not a table at its top (a ``package.json`` holding a list) counts as missing; a
    field of the wrong type is skipped where it is read (`_table`, `_array`).
    """
    text = read_text(root, name)
    if text is None:
        return None
    try:
        data = loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError and JSONDecodeError are ValueErrors
        return None
    return data if isinstance(data, dict) else None


def _table(data: dict[str, Any] | None, *keys: str) -> dict[str, Any]:
    """``data[keys[0]][keys[1]]...``, or ``{}`` where a value is missing or not a table."""
    data = data or {}
    for key in keys:
        value = data.get(key)
        data = value if isinstance(value, dict) else {}
    return data


def _array(value: Any) -> list[Any]:
    """``value`` if it is an array, else ``[]`` (a manifest's field of the wrong type)."""
    return value if isinstance(value, list) else []


def _listing(root: Path, rel: str = "") -> tuple[TreeEntry, ...]:
    """The folder's entries; none if it cannot be listed or holds over `MAX_SCANNED_ENTRIES`."""
    try:
        return list_confined(root, rel, max_entries=MAX_SCANNED_ENTRIES)
    except ClearanceError:
        return ()


def root_files(root: Path) -> frozenset[str]:
    """Names of the regular files (not links) directly in the project root."""
    return frozenset(e.name for e in _listing(root) if e.kind == EntryKind.FILE)


_clock = time.monotonic  # the scan's clock (a test replaces it)
_TIMED_OUT = f"[not listed: the scan stops after {IGNORE_MATCH_SECONDS:g} s of matching .gitignore]"


def _gitignore_spec(root: Path) -> pathspec.GitIgnoreSpec:
    """The root ``.gitignore``'s spec (`gitignore_spec`: its patterns' count and shape capped).

    Each entry listed is matched against every pattern: their count and shape bound the
    scan's time.
    """
    return gitignore_spec(read_text(root, ".gitignore") or "")


def walk_structure(
    root: Path, *, max_depth: int, max_entries: int, leave_out: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], int]:
    """List the project tree, respecting the root ``.gitignore``, breadth-limited.

    Directories are listed with a trailing ``/``, indented two spaces per level, sorted
    (directories first). ``.git``, ``.clearance``, symbolic links, FIFOs, devices and sockets
    are skipped; each folder is opened beneath its parent without following links. A name holding a
    control character is shown escaped (`escape_controls`), so it stays on its line. At most
    `MAX_SCANNED_ENTRIES` entries are read in all: the folder being read when the scan
    reaches that number is shown by one line, ``[not listed: the scan stops at N
    entries]``, and no further folder is read. Matching entries against ``.gitignore`` stops
    after `IGNORE_MATCH_SECONDS`: the listing then ends with ``[not listed: the scan stops
    after N s of matching .gitignore]``. An entry whose path is over `MAX_MATCHED_PATH_CHARS`
    characters is counted in ``omitted``, not listed.

    Args:
        root: The project root (resolved).
        max_depth: Deepest level listed; 1 lists only the root's entries.
        max_entries: Most lines returned.
        leave_out: Folders never listed, relative to ``root`` and casefolded
            (`clearance._core.workspace_reach.state_prefixes`: the run's workspace root).

    Returns:
        ``(lines, omitted)``: the listing, and how many entries were left out because of
        ``max_entries`` (entries below ``max_depth`` are not counted; once the listing is
        full, entries are counted without matching them against ``.gitignore``).
    """
    spec = _gitignore_spec(root)
    lines: list[str] = []
    omitted = 0
    budget: int | None = MAX_SCANNED_ENTRIES  # None once the scan stopped
    deadline = _clock() + IGNORE_MATCH_SECONDS
    timed_out = False

    def visit(folder: str, depth: int) -> None:
        nonlocal omitted, budget, timed_out
        if budget is None or timed_out:
            return
        try:
            listed = list_confined(root, folder, max_entries=budget)
        except LimitExceeded:
            budget = None
            if len(lines) < max_entries:
                lines.append(
                    "  " * (depth - 1)
                    + f"[not listed: the scan stops at {MAX_SCANNED_ENTRIES} entries]"
                )
            return
        except ClearanceError:
            return
        budget -= len(listed)
        children = [e for e in listed if e.kind in (EntryKind.FILE, EntryKind.DIR)]
        children.sort(key=lambda e: (e.kind != EntryKind.DIR, e.name))
        for child in children:
            is_dir = child.kind == EntryKind.DIR
            if child.name in ALWAYS_SKIPPED or is_run_state(child.name):
                continue
            if under_prefixes(child.path, leave_out):
                continue
            if timed_out:
                return
            if len(lines) >= max_entries or len(child.path) > MAX_MATCHED_PATH_CHARS:
                omitted += 1
                continue
            if _clock() > deadline:
                timed_out = True
                lines.append("  " * (depth - 1) + _TIMED_OUT)
                return
            if spec.match_file(child.path + "/" if is_dir else child.path):
                continue
            lines.append("  " * (depth - 1) + escape_controls(child.name) + ("/" if is_dir else ""))
            if is_dir and depth < max_depth:
                visit(child.path, depth + 1)

    visit("", 1)
    return tuple(lines), omitted


_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*?)\s*(?:#.*)?$")


def _pep508(spec: str, source: str, *, optional: bool) -> Dependency | None:
    match = _REQ.match(spec.split(";", 1)[0])
    if not match:
        return None
    return Dependency(
        name=match.group(1), version=match.group(3).strip(), source=source, optional=optional
    )


def _pyproject(root: Path) -> Iterator[Dependency]:
    data = _manifest(root, "pyproject.toml", tomllib.loads)
    project = _table(data, "project")
    for spec in _array(project.get("dependencies")):
        if (dep := _pep508(str(spec), "pyproject.toml", optional=False)) is not None:
            yield dep
    for specs in _table(project, "optional-dependencies").values():
        for spec in _array(specs):
            if (dep := _pep508(str(spec), "pyproject.toml", optional=True)) is not None:
                yield dep
    for name, version in _table(data, "tool", "poetry", "dependencies").items():
        if name != "python":
            yield Dependency(
                name=name, version=str(version), source="pyproject.toml", optional=False
            )


def _requirements(root: Path) -> Iterator[Dependency]:
    names = [
        e.name
        for e in _listing(root)
        if e.kind == EntryKind.FILE and fnmatch.fnmatchcase(e.name, "requirements*.txt")
    ]
    for name in names[:MAX_REQUIREMENTS_FILES]:
        dev = name != "requirements.txt"
        for line in (read_text(root, name) or "").splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "-")):
                continue
            if (dep := _pep508(line, name, optional=dev)) is not None:
                yield dep


def _package_json(root: Path) -> Iterator[Dependency]:
    data = _manifest(root, "package.json", json.loads)
    for key, dev in (("dependencies", False), ("devDependencies", True)):
        for name, version in _table(data, key).items():
            yield Dependency(name=name, version=str(version), source="package.json", optional=dev)


def _cargo(root: Path) -> Iterator[Dependency]:
    data = _manifest(root, "Cargo.toml", tomllib.loads)
    for key, dev in (("dependencies", False), ("dev-dependencies", True)):
        for name, value in _table(data, key).items():
            version = value.get("version", "") if isinstance(value, dict) else str(value)
            yield Dependency(name=name, version=str(version), source="Cargo.toml", optional=dev)


_GO_REQUIRE = re.compile(r"^\s*(?:require\s+)?([\w.\-/]+\.[\w.\-/]+)\s+(v[\w.\-+]+)")


def _go_mod(root: Path) -> Iterator[Dependency]:
    for line in (read_text(root, "go.mod") or "").splitlines():
        if line.strip().startswith("module "):
            continue
        match = _GO_REQUIRE.match(line)
        if match:
            yield Dependency(
                name=match.group(1),
                version=match.group(2),
                source="go.mod",
                optional="// indirect" in line,
            )


def read_project_name(root: Path) -> str:
    """The name the root's manifest declares (pyproject, package.json, Cargo.toml, go.mod).

    Falls back to the folder's name. Shown escaped (`escape_controls`): the name heads the
    context in every isolated prompt, so a control character in it (a newline, an escape
    sequence, a byte that is not UTF-8) never reaches that heading raw.
    """
    return _clip(escape_controls(_declared_name(root)))


def _declared_name(root: Path) -> str:
    for name, loads, table in (
        ("pyproject.toml", tomllib.loads, ("project",)),
        ("package.json", json.loads, ()),
        ("Cargo.toml", tomllib.loads, ("package",)),
    ):
        declared = _table(_manifest(root, name, loads), *table).get("name")
        if isinstance(declared, str) and declared.strip():
            return declared.strip()
    for line in (read_text(root, "go.mod") or "").splitlines():
        if line.startswith("module ") and len(line.split()) > 1:
            return line.split()[1]
    return root.name


def read_dependencies(root: Path) -> tuple[tuple[Dependency, ...], int]:
    """Dependencies declared in the root's manifests, as declared.

    Reads ``pyproject.toml``, ``requirements*.txt`` (the first `MAX_REQUIREMENTS_FILES` by
    name), ``package.json``, ``Cargo.toml`` and ``go.mod``, in that order.

    A manifest that does not parse is skipped, not an error. Returns the first
    `MAX_DEPENDENCIES` (names and versions clipped to `MAX_FIELD_CHARS`) and how many more.
    """
    found: list[Dependency] = []
    omitted = 0
    for reader in (_pyproject, _requirements, _package_json, _cargo, _go_mod):
        for dep in reader(root):
            if len(found) < MAX_DEPENDENCIES:
                found.append(replace(dep, name=_clip(dep.name), version=_clip(dep.version)))
            else:
                omitted += 1
    return tuple(found), omitted


_STATUS = re.compile(r"^\s*(?:[*_]*status[*_]*\s*:?[*_]*)\s*(.*)$", re.IGNORECASE)


def _adr(path: str, text: str) -> AdrSummary:
    lines = text.splitlines()
    title, status = "", ""
    paragraph: list[str] = []
    expect_status = False
    for line in lines:
        stripped = line.strip()
        if not title and stripped.startswith("#"):
            title = stripped.lstrip("#").strip()
            continue
        if expect_status and stripped:
            status, expect_status = stripped, False
            continue
        status_match = _STATUS.match(stripped.lstrip("#"))
        if not status and status_match:
            if status_match.group(1):
                status = status_match.group(1).strip()
            else:
                expect_status = True  # "## Status" heading, value on a following line
            continue
        if stripped.startswith("#"):
            if paragraph:
                break
            continue
        if stripped:
            paragraph.append(stripped)
        elif paragraph:
            break
    summary = " ".join(paragraph)
    if len(summary) > 400:
        summary = summary[:397] + "..."
    return AdrSummary(
        path=path,
        title=_clip(title or Path(path).stem),
        status=_clip(status),
        summary=summary,
    )


def read_adrs(root: Path, *, max_adrs: int = 20) -> tuple[AdrSummary, ...]:
    """Summaries of the ADRs (``*.md``) in ``docs/adr``, ``docs/decisions``, ``adr/``.

    Args:
        root: The project root (resolved).
        max_adrs: Most records returned (and files read), in file-name order.
    """
    found: list[AdrSummary] = []
    for folder in ADR_DIRS:
        for entry in _listing(root, folder):
            if len(found) >= max_adrs:
                return tuple(found)
            if entry.kind != EntryKind.FILE or not fnmatch.fnmatchcase(entry.name, "*.md"):
                continue
            if entry.name.lower() in ("readme.md", "index.md", "template.md"):
                continue
            text = read_text(root, entry.path)
            if text is not None:
                found.append(_adr(entry.path, text))
    return tuple(found)


def read_conventions(root: Path) -> tuple[str, ...]:
    """Naming and style conventions stated by ruff, ``.editorconfig`` and ``CONTRIBUTING``.

    Returns:
        One line per convention found, each naming its source.
    """
    out: list[str] = []
    ruff = _table(_manifest(root, "pyproject.toml", tomllib.loads), "tool", "ruff")
    for name in ("ruff.toml", ".ruff.toml"):
        if (parsed := _manifest(root, name, tomllib.loads)) is not None:
            ruff = parsed
    if ruff:
        if "line-length" in ruff:
            out.append(f"ruff: line length {ruff['line-length']}")
        lint = _table(ruff, "lint") if "lint" in ruff else ruff
        select = _array(lint.get("select"))
        if select:
            out.append(f"ruff: lint rules {', '.join(map(str, select))}")
            if "N" in select:
                out.append("ruff: pep8-naming (snake_case functions, CapWords classes)")
        convention = _table(lint, "pydocstyle").get("convention")
        if convention:
            out.append(f"ruff: {convention}-style docstrings")
    editorconfig = read_text(root, ".editorconfig")
    if editorconfig is not None:
        section = ""
        for line in editorconfig.splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line
            elif "=" in line and not line.startswith(("#", ";")):
                key, _, value = line.partition("=")
                out.append(f"editorconfig {section}: {key.strip()} = {value.strip()}")
    for name in ("CONTRIBUTING.md", "CONTRIBUTING.rst", "CONTRIBUTING", "docs/CONTRIBUTING.md"):
        text = read_text(root, name)
        if text is not None:
            for line in text.splitlines():
                low = line.lower()
                if any(w in low for w in ("naming", "name ", "names ", "snake_case", "camelcase")):
                    text = line.strip().lstrip("-*# ").strip()
                    if text:
                        out.append(f"{name}: {text[:200]}")
            break
    out = [_clip(line) for line in out]
    if len(out) > MAX_CONVENTIONS:
        out[MAX_CONVENTIONS:] = [f"... {len(out) - MAX_CONVENTIONS} more conventions"]
    return tuple(out)
