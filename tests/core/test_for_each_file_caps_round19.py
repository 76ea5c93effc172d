"""``for_each_file`` expansion is bounded before it is made: templates, tasks, dependencies, text.

Attacks, each a team file far under the 1 MiB a team file may be:

- a description holding ``{path}`` 150,000 times, over files with long names: every copy
  filled in whole made gigabytes of task text before anything was checked (2,000 files:
  3 GB and a minute for ``clearance graph``);
- two templates over different files, one depending on the other: every copy depended on
  every copy of the other (10,000 files each: 100,000,000 dependencies);
- many templates over one folder: their copies made any number of tasks, and each template
  walked the whole input folder again.

Each is now one line naming the cap and the field (exit 2 on the command line), before the
memory is spent; at each cap the file still loads.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from clearance import ConfigError
from clearance._core import for_each_file
from clearance._core.for_each_file import (
    MAX_EXPANDED_DEPENDENCIES,
    MAX_FILLED_CHARS,
    MAX_FOR_EACH_FILE_TASKS,
)
from clearance._core.teamfile import load_team_file

HEAD = "name: t\nagents: [{name: a, instructions: Do it.}]\ninput: {default: in}\ntasks:\n"


def template(task_id: str, title: str, pattern: str, **extra: object) -> str:
    fields = {"id": task_id, "title": title, "description": "Read {path}.", "assignee": "a"}
    fields.update(extra, for_each_file=pattern)
    return f"  - {json.dumps(fields)}\n"


def write_team(tmp_path: Path, *tasks: str) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(HEAD + "".join(tasks), encoding="utf-8")
    return path


def files(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text("x = 1\n")
    return folder


def test_text_filled_in_is_refused_before_it_is_made(tmp_path: Path) -> None:
    # 150,000 placeholders x 200-character paths x 300 files: 9 GB once filled in. The
    # command runs with 1.5 GB of address space: it must refuse before filling anything.
    stem = "n" * 190
    files(tmp_path, [f"{stem}{i:05d}.txt" for i in range(300)])
    team = write_team(
        tmp_path, template("t_{slug}", "Review {name}", "*.txt", description="{path}" * 150_000)
    )
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, *sys.path])}

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    done = subprocess.run(
        [sys.executable, "-m", "clearance", "graph", str(team)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
        preexec_fn=limited,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    assert "tasks.0.description: filling in {path}, {name}, {stem} and {slug}" in lines[0]
    assert f"would add over {MAX_FILLED_CHARS:,} characters to the tasks in all" in lines[0]
    assert done.stdout == ""


def test_filled_text_at_the_cap_loads_and_one_character_more_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files(tmp_path, ["a.txt", "b.txt"])  # {path} (6) becomes "a.txt" (5): one less; {slug}: 1
    team = write_team(tmp_path, template("t_{slug}", "Review {name}", "*.txt",
                                          description="{path} {name} {slug}" * 10))  # fmt: skip
    # Each copy: 10 x (-1 - 1 - 5) is negative, so nothing is added: even a cap of 0 holds.
    monkeypatch.setattr(for_each_file, "MAX_FILLED_CHARS", 0)
    loaded = load_team_file(team, input_dir=tmp_path / "in")
    assert [t.description for t in loaded.tasks] == [
        "a.txt a.txt a" * 10, "b.txt b.txt b" * 10,
    ]  # fmt: skip
    files(tmp_path, ["long-name-here.txt"])
    # "long-name-here.txt": +12 for {path} and {name}, +8 for {slug}: 320 in the description;
    # the title (+12) and the id (+8) are each filled twice (checked, then made): 360 in all.
    team = write_team(tmp_path, template("t_{slug}", "Review {name}", "long*.txt",
                                          description="{path} {name} {slug}" * 10))  # fmt: skip
    monkeypatch.setattr(for_each_file, "MAX_FILLED_CHARS", 360)
    (task,) = load_team_file(team, input_dir=tmp_path / "in").tasks
    assert task.description == "long-name-here.txt long-name-here.txt long-name-here" * 10
    monkeypatch.setattr(for_each_file, "MAX_FILLED_CHARS", 359)
    with pytest.raises(ConfigError) as info:
        load_team_file(team, input_dir=tmp_path / "in")
    assert str(info.value).startswith(f"{team}: tasks.0.description: filling in {{path}}")
    assert "'long-name-here.txt' would add over 359 characters" in str(info.value)


def test_dependencies_between_templates_are_capped(tmp_path: Path) -> None:
    # 1,000 copies of b, each depending on all 1,001 copies of a: 1,001,000 dependencies.
    files(tmp_path, [f"f{i:04d}.txt" for i in range(1001)] + [f"g{i:04d}.md" for i in range(1000)])
    team = write_team(
        tmp_path,
        template("a_{slug}", "A {name}", "*.txt"),
        template("b_{slug}", "B {name}", "*.md", depends_on=["a_{slug}"]),
    )
    with pytest.raises(ConfigError) as info:
        load_team_file(team, input_dir=tmp_path / "in")
    assert str(info.value) == f"{team}: " + (
        f"tasks.1.depends_on: the tasks would have more than {MAX_EXPANDED_DEPENDENCIES:,} "
        "dependencies once for_each_file is expanded (a copy of 'b_{slug}' depends on 1,001 "
        "copies of 'a_{slug}'): narrow the patterns"
    )


def test_dependencies_at_the_cap_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files(tmp_path, ["a1.txt", "a2.txt", "a3.txt", "b1.md", "b2.md", "b3.md"])
    team = write_team(
        tmp_path,
        template("a_{slug}", "A {name}", "*.txt"),
        template("b_{slug}", "B {name}", "*.md", depends_on=["a_{slug}"]),
        '  - {id: all, title: All, description: Sum up., assignee: a, depends_on: ["b_{slug}"]}\n',
    )
    monkeypatch.setattr(for_each_file, "MAX_EXPANDED_DEPENDENCIES", 12)  # 3 x 3 + 3
    tasks = {t.id: t for t in load_team_file(team, input_dir=tmp_path / "in").tasks}
    assert tasks["b_b2"].depends_on == ("a_a1", "a_a2", "a_a3")
    assert tasks["all"].depends_on == ("b_b1", "b_b2", "b_b3")
    monkeypatch.setattr(for_each_file, "MAX_EXPANDED_DEPENDENCIES", 11)
    refused = r"team\.yaml: tasks\.2\.depends_on: the tasks would have more "
    with pytest.raises(ConfigError, match=refused):
        load_team_file(team, input_dir=tmp_path / "in")


def test_tasks_once_expanded_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files(tmp_path, [f"f{i:02d}.txt" for i in range(30)])
    team = write_team(
        tmp_path,
        template("a_{slug}", "A {name}", "*.txt"),
        template("b_{slug}", "B {name}", "*.txt"),
        "  - {id: last, title: Last, description: Sum up., assignee: a}\n",
    )
    monkeypatch.setattr(for_each_file, "MAX_EXPANDED_TASKS", 61)
    assert len(load_team_file(team, input_dir=tmp_path / "in").tasks) == 61
    monkeypatch.setattr(for_each_file, "MAX_EXPANDED_TASKS", 60)
    with pytest.raises(ConfigError) as info:
        load_team_file(team, input_dir=tmp_path / "in")
    assert str(info.value) == f"{team}: " + (
        "tasks.2: the tasks would be 61 once for_each_file is expanded, more than the 60 a run "
        "may hold: narrow the patterns or the input folder"
    )
    monkeypatch.setattr(for_each_file, "MAX_EXPANDED_TASKS", 59)
    refused = r"team\.yaml: tasks\.1\.for_each_file: the tasks would be 60 "
    with pytest.raises(ConfigError, match=refused):
        load_team_file(team, input_dir=tmp_path / "in")


def test_for_each_file_templates_are_capped_on_the_command_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from clearance.cli import app

    files(tmp_path, ["one.txt"])
    many = [template(f"t{k}_{{slug}}", f"T{k} {{name}}", "*.txt") for k in range(64)]
    team = write_team(tmp_path, *many)
    assert len(load_team_file(team, input_dir=tmp_path / "in").tasks) == MAX_FOR_EACH_FILE_TASKS
    team = write_team(tmp_path, *many, template("t64_{slug}", "T64 {name}", "*.txt"))
    result = CliRunner().invoke(app, ["graph", str(team), "--input", str(tmp_path / "in")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        f"error: {team}: tasks.64.for_each_file: the team file has 65 for_each_file tasks, "
        f"more than the {MAX_FOR_EACH_FILE_TASKS} it may hold: match several kinds of file "
        "with one pattern"
    ]


def test_the_team_file_reference_states_the_expansion_caps() -> None:
    from clearance._core.teamfile_descriptions import DESCRIPTIONS

    text = DESCRIPTIONS["TaskSpec"]["for_each_file"]
    for cap in ("64 such tasks", "100,000 tasks", "1,000,000 dependencies", "16 MiB"):
        assert cap in text, cap


def test_a_template_named_again_and_again_in_synthesis_from_is_expanded_once(
    tmp_path: Path,
) -> None:
    # 3,000 copies x 80,000 mentions: 240,000,000 ids listed before duplicates were dropped
    # (about 2 GB). The loading runs with 1.5 GB of address space.
    files(tmp_path, [f"f{i:04d}.txt" for i in range(3000)] + ["z.md"])
    team = write_team(
        tmp_path,
        template("a_{slug}", "A {name}", "*.txt"),
        "  - {id: last, title: Last, description: Sum up., assignee: a}\n",
    )
    mentions = ", ".join(['"last"'] + ['"a_{slug}"'] * 80_000)
    team.write_text(team.read_text() + f"synthesis_from: [{mentions}]\n", encoding="utf-8")
    assert team.stat().st_size < 1 << 20
    script = (
        "import sys\n"
        "from clearance._core.teamfile import load_team_file\n"
        "ids = load_team_file(sys.argv[1], input_dir=sys.argv[2]).synthesis_from\n"
        "print(len(ids), ids[0], ids[1], ids[-1])\n"
    )
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, *sys.path])}

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    done = subprocess.run(
        [sys.executable, "-c", script, str(team), str(tmp_path / "in")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
        preexec_fn=limited,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # Every task once, in the order first named: "last", then the copies in path order.
    assert done.stdout.split() == ["3001", "last", "a_f0000", "a_f2999"]
