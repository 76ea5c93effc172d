"""Hostile input folders and patterns: one error line (exit 2), nothing recorded, no traceback.

Attacks: a file whose name is not valid UTF-8 matched by ``for_each_file`` (``run``,
``graph``, and ``resume`` of a run recorded with such a name), and ``for_each_file``
patterns that are absolute or climb out with ``..``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from clearance import ConfigError, RunLedger
from clearance._core.confined import EntryKind
from clearance._core.teamfile import load_team_file

BAD_NAME = b"caf\xe9.py"  # Latin-1, not UTF-8


def team(folder: Path, pattern: str, task_id: str = "r-{slug}") -> Path:
    path = folder / "team.yaml"
    path.write_text(
        "name: t\n"
        "agents: [{name: a, instructions: Do it.}]\n"
        "input: {default: in}\n"
        "tasks:\n"
        f'  - {{id: "{task_id}", title: "Review {{name}}", description: "Review {{path}}",\n'
        f"     assignee: a, for_each_file: {json.dumps(pattern)}}}\n",
        encoding="utf-8",
    )
    return path


def input_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "ok.py").write_text("x = 1\n")
    with open(os.fsencode(folder) + b"/" + BAD_NAME, "wb") as f:
        f.write(b"y = 2\n")
    return folder


def clearance(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=cwd,
    )  # fmt: skip


def assert_one_line_exit_2(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def run_count(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0] if "runs" in tables else 0


# One task for the bad file only ("r"): the id holds no part of the name, so only the
# title and description carry it.
@pytest.mark.parametrize(("pattern", "task_id"), [("*.py", "r-{slug}"), ("caf*.py", "r")])
def test_non_utf8_file_name_is_one_line_before_the_run_is_recorded(
    tmp_path: Path, pattern: str, task_id: str
) -> None:
    input_folder(tmp_path)
    path = team(tmp_path, pattern, task_id)
    db = tmp_path / "runs.db"
    for args in (["graph", str(path)], ["run", str(path), "--model", "fake:m",
                                         "--db", f"sqlite:///{db}"]):  # fmt: skip
        done = clearance(*args, cwd=tmp_path)
        assert_one_line_exit_2(done, "caf\\xe9.py", "not valid UTF-8", "tasks.0.for_each_file")
    assert run_count(db) == 0
    with pytest.raises(ConfigError) as info:
        load_team_file(path, input_dir=tmp_path / "in")
    assert "tasks.0.for_each_file" in str(info.value)
    assert "not valid UTF-8" in str(info.value)


def test_resume_of_a_run_recorded_with_a_non_utf8_name_is_one_line(tmp_path: Path) -> None:
    """A run recorded by an earlier version, its graph holding the name's lone surrogate."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "ok.py").write_text("x = 1\n")
    path = team(tmp_path, "ok.py", "r")
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    done = clearance("run", str(path), "--model", "fake:m", "--db", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    with RunLedger(url) as ledger:
        (clean,) = ledger.list_runs()
        assert clean.graph is not None
        graph = [dict(t) for t in clean.graph]
        graph[0]["description"] = "Review " + os.fsdecode(BAD_NAME)
        ledger.start_run(run_id="run_bad", team=clean.team, goal=None, graph=graph,
                         config=clean.config)  # fmt: skip
    done = clearance("resume", "run_bad", "--model", "fake:m", "--db", url, cwd=tmp_path)
    assert_one_line_exit_2(done, "run_bad", "not valid UTF-8")


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("/etc/*", "is absolute"),
        ("/*", "is absolute"),
        ("\\\\etc\\\\*", "is absolute"),
        ("C:/x/*", "is absolute"),
        ("../*", "'..' part"),
        ("sub/../../*", "'..' part"),
        ("**/../../*", "'..' part"),
        ("..\\\\*", "'..' part"),
    ],
)
def test_for_each_file_outside_the_input_folder_is_one_line(
    tmp_path: Path, pattern: str, problem: str
) -> None:
    input_folder(tmp_path)
    (tmp_path / "in" / "sub").mkdir()
    path = team(tmp_path, pattern)
    with pytest.raises(ConfigError) as info:
        load_team_file(path, input_dir=tmp_path / "in")
    assert "tasks.0.for_each_file" in str(info.value)
    assert problem in str(info.value)
    done = clearance("graph", str(path), cwd=tmp_path)
    assert_one_line_exit_2(done, "tasks.0.for_each_file", problem)


def many_files(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "in"
    (folder / "deep").mkdir(parents=True)
    for i in range(count):
        (folder / ("deep" if i % 2 else ".") / f"m{i}.py").write_text("x = 1\n")
    return folder


def test_a_pattern_matching_more_files_than_one_task_may_stand_for_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clearance._core import for_each_file

    many_files(tmp_path, 30)
    monkeypatch.setattr(for_each_file, "MAX_FILES_MATCHED", 20)
    with pytest.raises(ConfigError) as info:
        load_team_file(team(tmp_path, "**/*.py"), input_dir=tmp_path / "in")
    assert "tasks.0.for_each_file: '**/*.py' matches 30 files" in str(info.value)
    assert "more than the 20 one task may stand for" in str(info.value)
    # At the cap, every file is a task.
    monkeypatch.setattr(for_each_file, "MAX_FILES_MATCHED", 30)
    assert len(load_team_file(team(tmp_path, "**/*.py"), input_dir=tmp_path / "in").tasks) == 30


def test_an_input_folder_too_large_to_scan_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk stops at the cap, even when the pattern matches few of the files.
    from clearance._core import for_each_file

    many_files(tmp_path, 30)
    walked: list[str] = []
    real_walk = for_each_file.walk_confined

    def counted(*args: object, **kwargs: object) -> object:
        for entry in real_walk(*args, **kwargs):  # type: ignore[arg-type]
            if entry.kind == EntryKind.FILE:
                walked.append(entry.path)
            yield entry

    monkeypatch.setattr(for_each_file, "walk_confined", counted)
    monkeypatch.setattr(for_each_file, "MAX_FILES_SCANNED", 10)
    with pytest.raises(ConfigError, match="holds more than 10 files: give a narrower --input"):
        load_team_file(team(tmp_path, "m0.py"), input_dir=tmp_path / "in")
    assert len(walked) == 11


def test_the_command_line_names_the_cap_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from clearance._core import for_each_file
    from clearance.cli import app

    many_files(tmp_path, 3)
    monkeypatch.setattr(for_each_file, "MAX_FILES_MATCHED", 2)
    path = team(tmp_path, "**/*.py")
    result = CliRunner().invoke(app, ["graph", str(path), "--input", str(tmp_path / "in")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "tasks.0.for_each_file: '**/*.py' matches 3 files" in lines[0]


def test_the_team_file_reference_states_the_caps() -> None:
    from clearance._core.for_each_file import MAX_FILES_MATCHED, MAX_FILES_SCANNED
    from clearance._core.teamfile_descriptions import DESCRIPTIONS

    text = DESCRIPTIONS["TaskSpec"]["for_each_file"]
    assert f"{MAX_FILES_MATCHED:,}" in text and f"{MAX_FILES_SCANNED:,}" in text
