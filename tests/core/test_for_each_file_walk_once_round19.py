"""``for_each_file`` walks the input folder once, however many templates a team file holds.

Each template walked the whole input folder again: 64 templates over a 200,000-file folder
read it 64 times (over a minute for ``clearance graph``). The folder is now listed once, with
the same confined walk and caps, and every template's pattern is matched against that one
listing: the same files per template, in the same order, and the same one-line refusals.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import ConfigError
from clearance._core import for_each_file
from clearance._core.confined import TreeEntry, walk_confined
from clearance._core.teamfile import load_team_file
from clearance._core.workspace_reach import is_state_path, state_prefixes
from clearance.cli import app

HEAD = "name: t\nagents: [{name: a, instructions: Do it.}]\n"


def template(k: int, pattern: str) -> str:
    fields = {"id": f"t{k}_{{slug}}", "title": f"T{k} {{name}}", "description": "Read {path}.",
              "assignee": "a", "files": ["{path}"], "for_each_file": pattern}  # fmt: skip
    return f"  - {json.dumps(fields)}\n"


def write_team(
    tmp_path: Path,
    patterns: list[str],
    extra: str = "input: {default: in}\n",
    lead: str = "",
    head: str = HEAD,
) -> Path:
    path = tmp_path / "team.yaml"
    tasks = "".join(template(k, p) for k, p in enumerate(patterns))
    path.write_text(head + extra + "tasks:\n" + lead + tasks, encoding="utf-8")
    return path


class Walks:
    """Counts the walks of the input folder and the entries they read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.walks = 0
        self.entries = 0
        real = walk_confined

        def counted(*args: Any, **kwargs: Any) -> Iterator[TreeEntry]:
            self.walks += 1
            for entry in real(*args, **kwargs):
                self.entries += 1
                yield entry

        monkeypatch.setattr(for_each_file, "walk_confined", counted)


def tricky_tree(tmp_path: Path) -> Path:
    """Files, nested folders, Clearance's state, a workspace inside the input, links, a FIFO."""
    root = tmp_path / "in"
    for rel in ("top.py", "notes.md", "pkg/a.py", "pkg/sub/b.py", "pkg/sub/c.md",
                "pkg/deep/er/d.py", "docs/x.md", "docs/y.txt", ".clearance/old.md",
                "docs/.Clearance/stores/s.md", "work/old/writer/outputs/o.md", "z.py"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n", encoding="utf-8")
    (root / "link.py").symlink_to(root / "pkg" / "a.py")
    (root / "to_state.md").symlink_to(root / ".clearance" / "old.md")
    (root / "to_work.md").symlink_to(root / "work" / "old" / "writer" / "outputs" / "o.md")
    (root / "dangling.py").symlink_to(root / "gone.py")
    (root / "folder_link").symlink_to(root / "pkg", target_is_directory=True)
    os.mkfifo(root / "pipe.py")
    return root


PATTERNS = ["**/*.py", "*.py", "pkg", "pkg/**", "**/*.md", "*link*", "docs/*", "**/sub/*",
            "[tz]*.py", "**/*.py"]  # fmt: skip


def test_many_templates_walk_the_input_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tricky_tree(tmp_path)
    expected = {
        f"t{k}": [str(p.relative_to(root).as_posix()) for p in for_each_file.matching_files(
            root, pattern, ["*.py", "*.md"], "f",
            state_prefixes(root, [tmp_path / "in" / "work"]))]
        for k, pattern in enumerate(PATTERNS)
    }  # fmt: skip
    assert expected["t0"] == ["link.py", "pkg/a.py", "pkg/deep/er/d.py", "pkg/sub/b.py",
                              "top.py", "z.py"]  # fmt: skip
    assert expected["t4"] == ["docs/x.md", "notes.md", "pkg/sub/c.md"]
    walks = Walks(monkeypatch)
    head = "agents: [{name: a, instructions: Do it., tools: [write_output]}]\n"
    extra = "workspace: in/work\ninput: {default: in, include: ['*.py', '*.md']}\n"
    team = write_team(tmp_path, PATTERNS, extra=extra, head=head)
    monkeypatch.chdir(tmp_path)
    loaded = load_team_file(team, input_dir=root)
    assert walks.walks == 1
    # Every entry of the folder read once; the state and workspace folders not at all.
    everything = list(walk_confined(root, max_depth=101))
    unread = [e.path for e in everything if is_state_path(e.path) or e.path.startswith("work")]
    assert len(unread) == 10, unread
    assert walks.entries == len(everything) - len(unread)
    got: dict[str, list[str]] = {f"t{k}": [] for k in range(len(PATTERNS))}
    for task in loaded.tasks:
        got[task.id.split("_", 1)[0]].append(task.files[0])
    assert got == expected


def test_a_cap_passed_while_walking_names_the_first_template_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "in"
    root.mkdir()
    for i in range(30):
        (root / f"m{i:02d}.py").touch()
    monkeypatch.setattr(for_each_file, "MAX_FILES_SCANNED", 10)
    walks = Walks(monkeypatch)
    plain = "  - {id: first, title: First, description: Go., assignee: a}\n"
    team = write_team(tmp_path, ["m0*.py", "m1*.py", "*.py"], lead=plain)
    with pytest.raises(ConfigError) as info:
        load_team_file(team, input_dir=root)
    assert str(info.value) == (
        f"{team}: tasks.1.for_each_file: the input folder {str(root)!r} holds more than 10 "
        "files: give a narrower --input (or input.default)"
    )
    assert (walks.walks, walks.entries) == (1, 11)
    monkeypatch.setattr(for_each_file, "MAX_FILES_SCANNED", 10_000)
    monkeypatch.setattr(for_each_file, "MAX_ENTRIES_SCANNED", 20)
    with pytest.raises(ConfigError) as info:
        load_team_file(team, input_dir=root)
    assert str(info.value) == (
        f"{team}: tasks.1.for_each_file: the input folder {str(root)!r} holds more than 20 "
        "files and folders: give a narrower --input (or input.default)"
    )
    assert walks.walks == 2


def test_the_match_cap_holds_for_each_template_on_the_one_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "in"
    root.mkdir()
    for i in range(12):
        (root / f"m{i:02d}.py").touch()
    monkeypatch.setattr(for_each_file, "MAX_FILES_MATCHED", 10)
    walks = Walks(monkeypatch)
    team = write_team(tmp_path, ["m0*.py", "m1*.py", "*.py"])
    with pytest.raises(ConfigError) as info:
        load_team_file(team, input_dir=root)
    assert str(info.value) == (
        f"{team}: tasks.2.for_each_file: '*.py' matches 12 files under {str(root)!r}, more "
        "than the 10 one task may stand for: narrow the pattern or the input folder"
    )
    assert walks.walks == 1


def test_a_pattern_that_cannot_be_used_is_refused_before_the_folder_is_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "in"
    root.mkdir()
    for i in range(30):
        (root / f"m{i:02d}.py").touch()
    monkeypatch.setattr(for_each_file, "MAX_FILES_SCANNED", 10)  # the folder is too large
    walks = Walks(monkeypatch)
    team = write_team(tmp_path, ["m\\", "*.py"])
    with pytest.raises(ConfigError) as info:
        load_team_file(team, input_dir=root)
    assert str(info.value).startswith(f"{team}: tasks.0.for_each_file: cannot match 'm\\\\': ")
    assert walks.walks == 0
    monkeypatch.setattr(for_each_file, "MAX_FILES_SCANNED", 200_000)
    team = write_team(tmp_path, ["*.py", "m\\"])  # the second one, after the walk
    with pytest.raises(ConfigError, match=r"tasks\.1\.for_each_file: cannot match 'm\\\\': "):
        load_team_file(team, input_dir=root)
    assert walks.walks == 1


def test_a_reversed_character_range_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.py").touch()
    team = write_team(tmp_path, ["[z-a].py"])
    result = CliRunner().invoke(app, ["graph", str(team), "--input", str(root)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        f"error: {team}: tasks.0.for_each_file: cannot match '[z-a].py': bad character range "
        "z-a at position 2"
    ]


def test_a_template_sees_files_the_listing_holds_for_every_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two templates with one pattern: the same copies, in path order, from the one walk.
    root = tmp_path / "in"
    (root / "b").mkdir(parents=True)
    for rel in ("b/z.py", "a.py", "b/a.py", "c.py"):
        (root / rel).touch()
    walks = Walks(monkeypatch)
    loaded = load_team_file(write_team(tmp_path, ["**/*.py", "**/*.py"]), input_dir=root)
    assert [t.files[0] for t in loaded.tasks] == ["a.py", "b/a.py", "b/z.py", "c.py"] * 2
    assert [t.id for t in loaded.tasks][:4] == ["t0_a", "t0_b.a", "t0_b.z", "t0_c"]
    assert walks.walks == 1
