import json
from pathlib import Path

import pytest

from clearance import ConfigError
from clearance.subagents import ArchitecturalContext

PYPROJECT = """
[project]
name = "shop"
dependencies = ["fastapi>=0.110", "click==8.1.7", "sqlalchemy[asyncio]>=2.0 ; python_version>'3.8'"]
[project.optional-dependencies]
dev = ["pytest>=8"]
[tool.ruff]
line-length = 88
[tool.ruff.lint]
select = ["E", "N"]
[tool.ruff.lint.pydocstyle]
convention = "numpy"
"""

ADR = """# 1. Use PostgreSQL for orders

## Status

Accepted

## Context

Orders need transactions across tables. We picked PostgreSQL
because the team knows it.

## Decision

Use it.
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    (root / "src" / "shop" / "api" / "deep" / "deeper").mkdir(parents=True)
    (root / "src" / "shop" / "__init__.py").write_text("")
    (root / "src" / "shop" / "api" / "routes.py").write_text("")
    (root / "src" / "shop" / "api" / "deep" / "deeper" / "hidden.py").write_text("")
    (root / "tests").mkdir()
    (root / "tests" / "test_routes.py").write_text("")
    (root / "build").mkdir()
    (root / "build" / "artifact.bin").write_text("x")
    (root / "debug.log").write_text("noise")
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "requirements-dev.txt").write_text("# tools\nhypothesis==6.100.0\n-e .\n")
    (root / "package.json").write_text(
        json.dumps({"dependencies": {"react": "^18.2.0"}, "devDependencies": {"jest": "^29"}})
    )
    (root / "Cargo.toml").write_text('[dependencies]\nserde = { version = "1.0" }\nclap = "4"\n')
    (root / "go.mod").write_text(
        "module example.com/shop\n\ngo 1.22\n\nrequire (\n"
        "\tgithub.com/spf13/cobra v1.8.0\n\tgolang.org/x/text v0.14.0 // indirect\n)\n"
    )
    (root / "docs" / "adr").mkdir(parents=True)
    (root / "docs" / "adr" / "0001-postgres.md").write_text(ADR)
    (root / "docs" / "adr" / "0002-short.md").write_text("# 2. No status here\n\nJust a note.\n")
    (root / ".editorconfig").write_text("root = true\n[*.py]\nindent_size = 4\n")
    (root / "CONTRIBUTING.md").write_text(
        "# Contributing\n\n- Module names are snake_case, classes CamelCase.\n- Be kind.\n"
    )
    return root


def test_from_project_reports_structure_respecting_gitignore_and_depth(project: Path) -> None:
    arch = ArchitecturalContext.from_project(project, max_depth=3)
    assert arch.project == "shop"
    listing = "\n".join(arch.structure)
    assert "src/" in arch.structure and "tests/" in arch.structure
    assert "    api/" in arch.structure  # third level, indented
    assert "routes.py" not in [line.strip() for line in arch.structure]  # below max_depth
    assert "build" not in listing and "debug.log" not in listing  # .gitignore
    assert ".gitignore" in arch.structure


def test_from_project_bounds_entries_and_counts_the_rest(project: Path) -> None:
    arch = ArchitecturalContext.from_project(project, max_entries=3)
    assert len(arch.structure) == 3
    assert arch.structure_omitted > 0
    assert f"... {arch.structure_omitted} more entries" in arch.to_text()


def test_from_project_reads_dependencies_and_versions(project: Path) -> None:
    deps = {(d.name, d.source): d for d in ArchitecturalContext.from_project(project).dependencies}
    assert deps["fastapi", "pyproject.toml"].version == ">=0.110"
    assert deps["click", "pyproject.toml"].version == "==8.1.7"
    assert deps["sqlalchemy", "pyproject.toml"].version == ">=2.0"
    assert deps["pytest", "pyproject.toml"].optional
    assert deps["hypothesis", "requirements-dev.txt"].version == "==6.100.0"
    assert deps["react", "package.json"].version == "^18.2.0"
    assert deps["jest", "package.json"].optional
    assert deps["serde", "Cargo.toml"].version == "1.0"
    assert deps["clap", "Cargo.toml"].version == "4"
    assert deps["github.com/spf13/cobra", "go.mod"].version == "v1.8.0"
    assert deps["golang.org/x/text", "go.mod"].optional
    assert not any(d.name == "example.com/shop" for d in deps.values())


def test_from_project_summarizes_adrs(project: Path) -> None:
    adrs = ArchitecturalContext.from_project(project).adrs
    assert [a.path for a in adrs] == ["docs/adr/0001-postgres.md", "docs/adr/0002-short.md"]
    first, second = adrs
    assert first.title == "1. Use PostgreSQL for orders"
    assert first.status == "Accepted"
    assert first.summary == (
        "Orders need transactions across tables. We picked PostgreSQL because the team knows it."
    )
    assert second.status == "" and second.summary == "Just a note."


def test_from_project_detects_patterns_and_conventions(project: Path) -> None:
    arch = ArchitecturalContext.from_project(project)
    for expected in (
        "language: Python",
        "tests: pytest",
        "tests: jest",
        "web: FastAPI",
        "web: React",
        "cli: Click",
        "cli: clap",
        "cli: Cobra",
    ):
        assert expected in arch.patterns, expected
    conventions = "\n".join(arch.conventions)
    assert "ruff: line length 88" in conventions
    assert "pep8-naming" in conventions
    assert "numpy-style docstrings" in conventions
    assert "editorconfig [*.py]: indent_size = 4" in conventions
    assert "CONTRIBUTING.md: Module names are snake_case, classes CamelCase." in conventions
    assert "Be kind" not in conventions


def test_task_id_format_is_configurable(project: Path) -> None:
    arch = ArchitecturalContext.from_project(project, task_id_format="SHOP-{n}")
    assert arch.task_id(7) == "SHOP-7"
    assert "Task ids look like: SHOP-1" in arch.to_text()
    with pytest.raises(ConfigError, match="task_id_format"):
        ArchitecturalContext.from_project(project, task_id_format="{id}")


def test_symlinked_folder_outside_the_project_is_not_listed(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secrets"
    outside.mkdir()
    (outside / "key.txt").write_text("k")
    (project / "linked").symlink_to(outside)
    arch = ArchitecturalContext.from_project(project)
    assert not any("linked" in line or "key.txt" in line for line in arch.structure)


def test_not_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        ArchitecturalContext.from_project(tmp_path / "missing")


def test_from_project_on_this_repository_is_sensible() -> None:
    repo = Path(__file__).resolve().parents[2]
    arch = ArchitecturalContext.from_project(repo)
    assert "language: Python" in arch.patterns
    assert "tests: pytest" in arch.patterns
    assert "cli: Typer" in arch.patterns
    assert {"pydantic", "sqlalchemy", "typer", "pathspec"} <= {d.name for d in arch.dependencies}
    assert "src/" in arch.structure and "tests/" in arch.structure
    assert not any(".venv" in line or "__pycache__" in line for line in arch.structure)
    assert "ruff: line length 100" in arch.conventions
    assert arch.project == "clearance"  # from pyproject.toml, not the checkout's folder name
