"""Reading a project directory: its tree, dependencies, ADRs and conventions.

Helpers for `ArchitecturalContext.from_project`. Every reader is bounded (depth, entries,
bytes read per file) and never follows a symlink out of the project.
"""

from __future__ import annotations

import contextlib
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

__all__ = [
    "AdrSummary",
    "Dependency",
    "read_adrs",
    "read_conventions",
    "read_dependencies",
    "read_project_name",
    "walk_structure",
]

MAX_READ_BYTES = 64 * 1024
ADR_DIRS = ("docs/adr", "docs/decisions", "adr", "doc/adr")
ALWAYS_SKIPPED = frozenset({".git", ".hg", ".svn"})


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


def _read_text(path: Path) -> str:
    with path.open("rb") as fh:
        data = fh.read(MAX_READ_BYTES)
    return data.decode("utf-8", errors="replace")


def _inside(root: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except OSError:
        return False


def _gitignore_spec(root: Path) -> pathspec.GitIgnoreSpec:
    lines: list[str] = []
    gitignore = root / ".gitignore"
    if gitignore.is_file():
        lines = _read_text(gitignore).splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def walk_structure(root: Path, *, max_depth: int, max_entries: int) -> tuple[tuple[str, ...], int]:
    """List the project tree, respecting the root ``.gitignore``, breadth-limited.

    Directories are listed with a trailing ``/``, indented two spaces per level, sorted
    (directories first). ``.git`` and symlinks resolving outside the root are skipped.

    Args:
        root: The project root (resolved).
        max_depth: Deepest level listed; 1 lists only the root's entries.
        max_entries: Most lines returned.

    Returns:
        ``(lines, omitted)``: the listing, and how many entries were left out because of
        ``max_entries`` (entries below ``max_depth`` are not counted).
    """
    spec = _gitignore_spec(root)
    lines: list[str] = []
    omitted = 0

    def visit(folder: Path, depth: int) -> None:
        nonlocal omitted
        try:
            children = sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name))
        except OSError:
            return
        for child in children:
            rel = child.relative_to(root).as_posix()
            is_dir = child.is_dir()
            if child.name in ALWAYS_SKIPPED or not _inside(root, child):
                continue
            if spec.match_file(rel + "/" if is_dir else rel):
                continue
            if len(lines) >= max_entries:
                omitted += 1
                continue
            lines.append("  " * (depth - 1) + child.name + ("/" if is_dir else ""))
            if is_dir and depth < max_depth:
                visit(child, depth + 1)

    visit(root, 1)
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
    path = root / "pyproject.toml"
    if not path.is_file():
        return
    try:
        data = tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError:
        return
    project: dict[str, Any] = data.get("project", {})
    for spec in project.get("dependencies", []):
        if (dep := _pep508(str(spec), "pyproject.toml", optional=False)) is not None:
            yield dep
    for specs in project.get("optional-dependencies", {}).values():
        for spec in specs:
            if (dep := _pep508(str(spec), "pyproject.toml", optional=True)) is not None:
                yield dep
    poetry: dict[str, Any] = data.get("tool", {}).get("poetry", {})
    for name, version in poetry.get("dependencies", {}).items():
        if name != "python":
            yield Dependency(
                name=name, version=str(version), source="pyproject.toml", optional=False
            )


def _requirements(root: Path) -> Iterator[Dependency]:
    for path in sorted(root.glob("requirements*.txt")):
        dev = path.name != "requirements.txt"
        for line in _read_text(path).splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "-")):
                continue
            if (dep := _pep508(line, path.name, optional=dev)) is not None:
                yield dep


def _package_json(root: Path) -> Iterator[Dependency]:
    path = root / "package.json"
    if not path.is_file():
        return
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError:
        return
    for key, dev in (("dependencies", False), ("devDependencies", True)):
        for name, version in (data.get(key) or {}).items():
            yield Dependency(name=name, version=str(version), source="package.json", optional=dev)


def _cargo(root: Path) -> Iterator[Dependency]:
    path = root / "Cargo.toml"
    if not path.is_file():
        return
    try:
        data = tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError:
        return
    for key, dev in (("dependencies", False), ("dev-dependencies", True)):
        for name, value in (data.get(key) or {}).items():
            version = value.get("version", "") if isinstance(value, dict) else str(value)
            yield Dependency(name=name, version=str(version), source="Cargo.toml", optional=dev)


_GO_REQUIRE = re.compile(r"^\s*(?:require\s+)?([\w.\-/]+\.[\w.\-/]+)\s+(v[\w.\-+]+)")


def _go_mod(root: Path) -> Iterator[Dependency]:
    path = root / "go.mod"
    if not path.is_file():
        return
    for line in _read_text(path).splitlines():
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

    Falls back to the folder's name.
    """
    readers: tuple[tuple[str, Callable[[str], Any]], ...] = (
        ("pyproject.toml", lambda t: tomllib.loads(t).get("project", {}).get("name")),
        ("package.json", lambda t: json.loads(t).get("name")),
        ("Cargo.toml", lambda t: tomllib.loads(t).get("package", {}).get("name")),
    )
    for name, read in readers:
        path = root / name
        if path.is_file():
            try:
                declared = read(_read_text(path))
            except (tomllib.TOMLDecodeError, json.JSONDecodeError, AttributeError):
                continue
            if isinstance(declared, str) and declared.strip():
                return declared.strip()
    go_mod = root / "go.mod"
    if go_mod.is_file():
        for line in _read_text(go_mod).splitlines():
            if line.startswith("module "):
                return line.split()[1]
    return root.name


def read_dependencies(root: Path) -> tuple[Dependency, ...]:
    """Dependencies declared in the root's manifests, as declared.

    Reads ``pyproject.toml``, ``requirements*.txt``, ``package.json``, ``Cargo.toml`` and
    ``go.mod``, in that order.

    A manifest that does not parse is skipped, not an error.
    """
    found: list[Dependency] = []
    for reader in (_pyproject, _requirements, _package_json, _cargo, _go_mod):
        found.extend(reader(root))
    return tuple(found)


_STATUS = re.compile(r"^\s*(?:[*_]*status[*_]*\s*:?[*_]*)\s*(.*)$", re.IGNORECASE)


def _adr(root: Path, path: Path) -> AdrSummary:
    lines = _read_text(path).splitlines()
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
        path=path.relative_to(root).as_posix(),
        title=title or path.stem,
        status=status,
        summary=summary,
    )


def read_adrs(root: Path, *, max_adrs: int = 20) -> tuple[AdrSummary, ...]:
    """Summaries of the ADRs (``*.md``) in ``docs/adr``, ``docs/decisions``, ``adr/``.

    Args:
        root: The project root (resolved).
        max_adrs: Most records returned, in file-name order.
    """
    found: list[AdrSummary] = []
    for folder in ADR_DIRS:
        base = root / folder
        if not base.is_dir() or not _inside(root, base):
            continue
        for path in sorted(base.glob("*.md")):
            if path.name.lower() in ("readme.md", "index.md", "template.md"):
                continue
            if _inside(root, path) and len(found) < max_adrs:
                found.append(_adr(root, path))
    return tuple(found)


def read_conventions(root: Path) -> tuple[str, ...]:
    """Naming and style conventions stated by ruff, ``.editorconfig`` and ``CONTRIBUTING``.

    Returns:
        One line per convention found, each naming its source.
    """
    out: list[str] = []
    ruff: dict[str, Any] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            ruff = tomllib.loads(_read_text(pyproject)).get("tool", {}).get("ruff", {})
        except tomllib.TOMLDecodeError:
            ruff = {}
    for name in ("ruff.toml", ".ruff.toml"):
        if (root / name).is_file():
            with contextlib.suppress(tomllib.TOMLDecodeError):
                ruff = tomllib.loads(_read_text(root / name))
    if ruff:
        if "line-length" in ruff:
            out.append(f"ruff: line length {ruff['line-length']}")
        lint: dict[str, Any] = ruff.get("lint", ruff)
        select = lint.get("select")
        if select:
            out.append(f"ruff: lint rules {', '.join(map(str, select))}")
            if "N" in select:
                out.append("ruff: pep8-naming (snake_case functions, CapWords classes)")
        convention = lint.get("pydocstyle", {}).get("convention")
        if convention:
            out.append(f"ruff: {convention}-style docstrings")
    editorconfig = root / ".editorconfig"
    if editorconfig.is_file():
        section = ""
        for line in _read_text(editorconfig).splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line
            elif "=" in line and not line.startswith(("#", ";")):
                key, _, value = line.partition("=")
                out.append(f"editorconfig {section}: {key.strip()} = {value.strip()}")
    for name in ("CONTRIBUTING.md", "CONTRIBUTING.rst", "CONTRIBUTING", "docs/CONTRIBUTING.md"):
        path = root / name
        if path.is_file():
            for line in _read_text(path).splitlines():
                low = line.lower()
                if any(w in low for w in ("naming", "name ", "names ", "snake_case", "camelcase")):
                    text = line.strip().lstrip("-*# ").strip()
                    if text:
                        out.append(f"{name}: {text[:200]}")
            break
    return tuple(out)
