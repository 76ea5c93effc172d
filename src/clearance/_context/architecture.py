"""`ArchitecturalContext`: what a subagent should know about the project, computed from it.

Computed once per controller (see `ContextIsolationManager`) from the project directory:
its structure (respecting ``.gitignore``), declared dependencies and versions, ADR summaries,
detected patterns (language, test framework, web and CLI frameworks) and stated naming
conventions. Every subagent of the controller receives the same text, so a server-side
prefix cache can reuse it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clearance._context.project_scan import (
    MAX_SCANNED_ENTRIES,
    AdrSummary,
    Dependency,
    read_adrs,
    read_conventions,
    read_dependencies,
    read_project_name,
    root_files,
    walk_structure,
)
from clearance._core.confined import escape_controls
from clearance._core.errors import ConfigError
from clearance._core.names import check_count
from clearance._core.workspace_reach import state_prefixes

__all__ = ["DEFAULT_TASK_ID_FORMAT", "AdrSummary", "ArchitecturalContext", "Dependency"]

MAX_TREE_DEPTH = 100
"""Deepest ``max_depth`` of `ArchitecturalContext.from_project` (the listing recurses)."""

DEFAULT_TASK_ID_FORMAT = "task-{n:03d}"
"""Default task id format: ``str.format`` with ``n``, the task's number (from 1)."""

_EXTENSIONS = {
    ".py": "Python",
    ".js": "JavaScript",
    ".ts": "TypeScript",
    ".tsx": "TypeScript",
    ".rs": "Rust",
    ".go": "Go",
    ".java": "Java",
    ".rb": "Ruby",
    ".c": "C",
    ".cpp": "C++",
}
_TEST_FRAMEWORKS = {
    "pytest": "pytest",
    "hypothesis": "hypothesis (property-based tests)",
    "jest": "jest",
    "vitest": "vitest",
    "mocha": "mocha",
}
_WEB_FRAMEWORKS = {
    "fastapi": "FastAPI",
    "flask": "Flask",
    "django": "Django",
    "starlette": "Starlette",
    "aiohttp": "aiohttp",
    "express": "Express",
    "react": "React",
    "next": "Next.js",
    "vue": "Vue",
    "actix-web": "actix-web",
    "axum": "axum",
    "github.com/gin-gonic/gin": "Gin",
}
_CLI_FRAMEWORKS = {
    "typer": "Typer",
    "click": "Click",
    "clap": "clap",
    "commander": "commander",
    "yargs": "yargs",
    "github.com/spf13/cobra": "Cobra",
}
_OTHER = {
    "pydantic": "pydantic models",
    "sqlalchemy": "SQLAlchemy",
    "tokio": "tokio async runtime",
    "mypy": "mypy type checking",
    "ruff": "ruff lint/format",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ArchitecturalContext:
    """The project knowledge every subagent of a controller receives.

    Attributes:
        project: The project's name as its manifest declares it, else its folder's name.
        structure: The directory listing, one entry per line, two spaces per level.
        structure_omitted: Entries left out of ``structure`` by the entry limit.
        dependencies: Declared dependencies with their version constraints (the first 200).
        dependencies_omitted: Dependencies declared past those, counted in the text.
        adrs: Architecture decision record summaries.
        patterns: Detected patterns (``"language: Python"``, ``"tests: pytest"``...).
        conventions: Naming and style conventions, each naming its source.
        task_id_format: ``str.format`` pattern of task ids, with field ``n``.
    """

    project: str
    structure: tuple[str, ...] = ()
    structure_omitted: int = 0
    dependencies: tuple[Dependency, ...] = ()
    dependencies_omitted: int = 0
    adrs: tuple[AdrSummary, ...] = ()
    patterns: tuple[str, ...] = ()
    conventions: tuple[str, ...] = ()
    task_id_format: str = DEFAULT_TASK_ID_FORMAT

    def __post_init__(self) -> None:
        try:
            self.task_id_format.format(n=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"task_id_format {self.task_id_format!r} must be a format string with the "
                f"single field {{n}}: {exc}",
                field="task_id_format",
            ) from exc

    @classmethod
    def from_project(
        cls,
        root: str | Path,
        *,
        max_depth: int = 3,
        max_entries: int = 150,
        task_id_format: str = DEFAULT_TASK_ID_FORMAT,
        leave_out: Sequence[Path] = (),
    ) -> ArchitecturalContext:
        """Compute the context from a project directory.

        Reads only the root's manifests (``pyproject.toml``, ``requirements*.txt``,
        ``package.json``, ``Cargo.toml``, ``go.mod``), ADR folders (``docs/adr``,
        ``docs/decisions``, ``adr/``), ``ruff.toml``/``pyproject.toml``,
        ``.editorconfig`` and ``CONTRIBUTING``; reads at most 64 KiB of each file. Every
        file and folder is opened beneath ``root`` without following symbolic links (a link
        is skipped, wherever it points), and only regular files are read.

        Args:
            root: The project directory.
            max_depth: Deepest directory level listed in ``structure`` (1: root entries),
                1 to `MAX_TREE_DEPTH`.
            max_entries: Most entries listed in ``structure``, 1 to 10,000 (the most the
                scan reads); the rest are counted in ``structure_omitted``.
            task_id_format: ``str.format`` pattern of task ids, with field ``n``.
            leave_out: Folders ``structure`` never lists when they lie in ``root`` (the
                run's workspace root: agents' outputs are no part of the project).

        Raises:
            ConfigError: ``root`` is not a directory, a limit is out of its range, or
                ``task_id_format`` is not a format string with field ``n``.
        """
        check_count("max_depth", max_depth, least=1, most=MAX_TREE_DEPTH)
        check_count("max_entries", max_entries, least=1, most=MAX_SCANNED_ENTRIES)
        base = Path(root).resolve()
        if not base.is_dir():
            raise ConfigError(f"project root {str(root)!r} is not a directory", field="root")
        structure, omitted = walk_structure(base, max_depth=max_depth, max_entries=max_entries,
                                            leave_out=state_prefixes(base, leave_out))  # fmt: skip
        dependencies, dependencies_omitted = read_dependencies(base)
        return cls(
            project=read_project_name(base),
            structure=structure,
            structure_omitted=omitted,
            dependencies=dependencies,
            dependencies_omitted=dependencies_omitted,
            adrs=read_adrs(base),
            patterns=_detect_patterns(base, structure, dependencies),
            conventions=read_conventions(base),
            task_id_format=task_id_format,
        )

    def task_id(self, n: int) -> str:
        """The id of the ``n``-th task (from 1) in this project's task id format."""
        return self.task_id_format.format(n=n)

    def to_text(self) -> str:
        r"""The context as plain text, one titled part per kind (empty parts left out).

        Every value is kept on its own line: a control character in it (a newline in a
        file's name or a manifest's field) is shown as its escape (``\n``), so no project
        can add a line, a convention or a section of its own.
        """
        e = escape_controls
        parts = [f"Project: {e(self.project)}"]
        if self.patterns:
            parts.append("Patterns:\n" + "\n".join(f"- {e(p)}" for p in self.patterns))
        if self.dependencies:
            lines = [
                e(f"- {d.name} {d.version}".rstrip())
                + (" (optional)" if d.optional else "")
                + f" [{e(d.source)}]"
                for d in self.dependencies
            ]
            if self.dependencies_omitted:
                lines.append(f"... {self.dependencies_omitted} more dependencies")
            parts.append("Dependencies:\n" + "\n".join(lines))
        if self.conventions:
            parts.append("Conventions:\n" + "\n".join(f"- {e(c)}" for c in self.conventions))
        if self.adrs:
            lines = [
                e(f"- {a.title}")
                + (f" [{e(a.status)}]" if a.status else "")
                + f" ({e(a.path)})"
                + (f": {e(a.summary)}" if a.summary else "")
                for a in self.adrs
            ]
            parts.append("Architecture decisions:\n" + "\n".join(lines))
        if self.structure:
            more = f"\n... {self.structure_omitted} more entries" if self.structure_omitted else ""
            parts.append("Structure:\n" + "\n".join(map(e, self.structure)) + more)
        parts.append(f"Task ids look like: {e(self.task_id(1))}")
        return "\n\n".join(parts)


def _detect_patterns(
    root: Path, structure: tuple[str, ...], dependencies: tuple[Dependency, ...]
) -> tuple[str, ...]:
    counts = Counter(
        _EXTENSIONS[Path(line.strip()).suffix]
        for line in structure
        if not line.endswith("/") and Path(line.strip()).suffix in _EXTENSIONS
    )
    manifests = {
        "pyproject.toml": "Python",
        "requirements.txt": "Python",
        "package.json": "JavaScript",
        "Cargo.toml": "Rust",
        "go.mod": "Go",
    }
    files = root_files(root)
    for name, language in manifests.items():
        if name in files:
            counts[language] += 1
    if "tsconfig.json" in files:
        counts["TypeScript"] += 1
    patterns = [f"language: {lang}" for lang, _ in counts.most_common(3)]
    names = {d.name.lower() for d in dependencies}
    tests = [label for key, label in _TEST_FRAMEWORKS.items() if key in names]
    if "pytest" not in names and "conftest.py" in files:
        tests.insert(0, "pytest")
    if "Cargo.toml" in files:
        tests.append("cargo test")
    if "go.mod" in files:
        tests.append("go test")
    patterns.extend(f"tests: {t}" for t in tests)
    patterns.extend(f"web: {v}" for k, v in _WEB_FRAMEWORKS.items() if k in names)
    patterns.extend(f"cli: {v}" for k, v in _CLI_FRAMEWORKS.items() if k in names)
    patterns.extend(f"uses: {v}" for k, v in _OTHER.items() if k in names)
    layout = [p for p in ("src/", "tests/", "docs/", "examples/") if p in structure]
    if layout:
        patterns.append("layout: " + ", ".join(layout))
    return tuple(dict.fromkeys(patterns))
