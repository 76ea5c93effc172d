"""A hostile project folder against the project scan: bounded in time, whatever it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance._context import project_ignore, project_scan
from clearance._context.architecture import ArchitecturalContext
from cpu_time import cpu_timer


def _project(tmp_path: Path, gitignore: str, names: list[str]) -> Path:
    root = tmp_path / "p"
    root.mkdir()
    (root / ".gitignore").write_text(gitignore)
    for name in names:
        (root / name).write_text("")
    return root


@pytest.mark.parametrize(
    "pattern", ["*a*a*a*a*a*a*a*a*b", "?*?*?*?*?*?*?*?*b", "a*[a-z]*a*a*a*a*b"]
)
def test_a_gitignore_pattern_that_backtracks_is_skipped_and_the_scan_ends_fast(
    tmp_path: Path, pattern: str
) -> None:
    # Before: one such line and one file named "aaa...a" held the scan for minutes
    # (the pattern's regular expression backtracks over every split of the name).
    root = _project(tmp_path, f"{pattern}\nsecret.env\n", ["a" * 200, "secret.env", "main.py"])
    with cpu_timer() as cpu:
        arch = ArchitecturalContext.from_project(root)
    assert cpu.seconds < 2.0
    assert "a" * 200 in arch.structure and "main.py" in arch.structure
    assert "secret.env" not in arch.structure  # the other patterns still apply


def test_an_ordinary_pattern_with_few_wildcards_still_applies(tmp_path: Path) -> None:
    root = _project(tmp_path, "**/build/*.o\n*.py[cod]\n", ["x.pyc", "x.py"])
    (root / "build").mkdir()
    (root / "build" / "m.o").write_text("")
    arch = ArchitecturalContext.from_project(root)
    assert "x.py" in arch.structure and "x.pyc" not in arch.structure
    assert "  m.o" not in arch.structure


def test_a_pattern_longer_than_its_cap_is_skipped(tmp_path: Path) -> None:
    long = "x" * (project_ignore.MAX_IGNORE_PATTERN_CHARS + 1)
    root = _project(tmp_path, f"{long}\nhidden.txt\n", [long[:200], "hidden.txt"])
    arch = ArchitecturalContext.from_project(root)
    assert "hidden.txt" not in arch.structure and long[:200] in arch.structure


def test_matching_past_its_deadline_stops_the_listing_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path, "*.log\n", [f"f{i:03d}.txt" for i in range(50)])
    (root / "sub").mkdir()
    (root / "sub" / "deep.txt").write_text("")
    clock = iter(range(0, 10_000))  # each reading of the clock is one second later
    monkeypatch.setattr(project_scan, "_clock", lambda: float(next(clock)))
    arch = ArchitecturalContext.from_project(root)
    stop = "[not listed: the scan stops after 2 s of matching .gitignore]"
    assert arch.structure[-1].strip() == stop
    # sub/ and its file are matched at seconds 1 and 2 (the deadline), none after
    assert arch.structure == ("sub/", "  deep.txt", stop)
    assert stop in arch.to_text()


def test_a_deep_tree_of_long_names_under_many_wildcard_patterns_ends_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: one entry 100 folders deep cost 15 s against 500 such patterns.
    # The cost alone, in CPU seconds: the scan's own 2 s deadline (a wall clock, which a
    # loaded machine stretches) is held off here; the test above checks it.
    monkeypatch.setattr(project_scan, "_clock", lambda: 0.0)
    root = tmp_path / "p"
    root.mkdir()
    (root / ".gitignore").write_text("\n".join(f"*a*a{i}" for i in range(500)) + "\n")
    folder = root
    for _ in range(12):
        folder = folder / ("a" * 250)
        folder.mkdir()
    (folder / "deepest.txt").write_text("")
    with cpu_timer() as cpu:
        arch = ArchitecturalContext.from_project(root, max_depth=20)
    assert cpu.seconds < 3.0
    assert len(arch.structure) == 5  # four folders, then ".gitignore"; the rest is too long
    assert arch.structure_omitted == 1
    assert not any("deepest" in line for line in arch.structure)


def test_a_flood_of_declared_dependencies_and_conventions_is_capped_and_counted(
    tmp_path: Path,
) -> None:
    # Before: 700 KB of one-letter requirements and editorconfig lines made an 18 MB
    # architecture text, recorded whole and put at the head of every isolated prompt.
    root = tmp_path / "p"
    root.mkdir()
    for i in range(10):
        (root / f"requirements-{i}.txt").write_text("x\n" * 30_000)
    (root / ".editorconfig").write_text("[*]\n" + "a = b\n" * 10_000)
    long = "n" * 5000
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{long}"\ndependencies = ["{long}>=1"]\n'
    )
    adr = root / "docs" / "adr"
    adr.mkdir(parents=True)
    (adr / "0001-x.md").write_text(f"# {'T' * 5000}\n\nStatus: {'S' * 5000}\n\nWhy.\n")
    arch = ArchitecturalContext.from_project(root)
    text = arch.to_text()
    assert len(text) < 100_000
    assert len(arch.dependencies) == project_scan.MAX_DEPENDENCIES
    assert arch.dependencies_omitted == 300_001 - project_scan.MAX_DEPENDENCIES
    assert f"... {arch.dependencies_omitted} more dependencies" in text
    assert len(arch.dependencies[0].name) <= project_scan.MAX_FIELD_CHARS
    assert len(arch.project) <= project_scan.MAX_FIELD_CHARS
    title, status = arch.adrs[0].title, arch.adrs[0].status
    assert len(title) <= project_scan.MAX_FIELD_CHARS and title.startswith("TTT")
    assert len(status) <= project_scan.MAX_FIELD_CHARS and status.startswith("SSS")
    assert len(arch.conventions) == project_scan.MAX_CONVENTIONS + 1
    assert arch.conventions[-1] == f"... {10_000 - project_scan.MAX_CONVENTIONS} more conventions"
