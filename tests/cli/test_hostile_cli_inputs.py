"""Hostile input to init, plan, graph, schema, inspect, verify and view: one line, exit 2.

Each case was a traceback, a half-written file or a clobbered one: a write cut short by a
full disk or a file-size limit, a file name the system refuses, standard output on a full
disk or in an encoding that cannot hold the text, a YAML number Python will not read, and
command-line text that is not UTF-8.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

runner = CliRunner()
SRC = str(Path(__file__).resolve().parents[2] / "src")
TEAM = (
    "name: t\nagents: [{name: a, instructions: x}]\n"
    "tasks:\n  - {id: t, title: T, description: d, assignee: a}\n"
)


def one_line_exit_2(result: Any) -> str:
    """The one error line of a command that refused its input (exit 2, no traceback)."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def cli(
    *args: str | bytes, cwd: Path, stdout: Any = subprocess.PIPE, limit_bytes: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """``python -m clearance ARGS`` in a real process (optionally with a file-size limit)."""

    def limit() -> None:  # a write past it fails with EFBIG (Python ignores SIGXFSZ)
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SRC, **(env or {})},
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=limit,
        timeout=60,
        check=False,
    )


def error_line(done: subprocess.CompletedProcess[bytes]) -> str:
    """The one line a process wrote on stderr, after checking it exited 2."""
    text = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, text
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def a_run(tmp_path: Path) -> tuple[str, str]:
    """A ledger with one run on the fake model: ``(db URL, run id)``."""
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path}/runs.db"
    result = runner.invoke(app, ["run", str(tmp_path / "team.yaml"), "--model", "fake:x",
                                 "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output
    with RunLedger(db) as ledger:
        (run,) = ledger.list_runs()
    return db, run.run_id


# -- files written whole or not at all -------------------------------------------------------


def test_init_cut_short_by_a_file_size_limit_leaves_no_half_written_file(tmp_path: Path) -> None:
    done = cli("init", "team.yaml", cwd=tmp_path, limit_bytes=1000)
    line = error_line(done)
    assert line == "error: path: cannot write 'team.yaml': File too large"
    assert not (tmp_path / "team.yaml").exists()
    assert os.listdir(tmp_path) == []


def test_init_force_cut_short_keeps_the_file_it_would_have_replaced(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text("MY TEAM\n")
    os.chmod(tmp_path / "team.yaml", 0o640)
    done = cli("init", "team.yaml", "--force", cwd=tmp_path, limit_bytes=1000)
    assert error_line(done) == "error: path: cannot write 'team.yaml': File too large"
    assert (tmp_path / "team.yaml").read_text() == "MY TEAM\n"
    assert os.listdir(tmp_path) == ["team.yaml"]  # no temporary file left beside it
    done = cli("init", "team.yaml", "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "agents:" in (tmp_path / "team.yaml").read_text()
    assert (tmp_path / "team.yaml").stat().st_mode & 0o777 == 0o640  # its mode is kept


def test_view_over_a_file_on_a_full_disk_keeps_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id = a_run(tmp_path)
    page = tmp_path / "page.html"
    page.write_text("my notes\n")

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    line = one_line_exit_2(runner.invoke(app, ["view", run_id, "-o", str(page), "--db", db]))
    assert line == f"error: --output: cannot write '{page}': No space left on device"
    assert page.read_text() == "my notes\n"
    assert [p.name for p in tmp_path.iterdir() if "clearance-tmp" in p.name] == []


def test_init_into_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for force in ([], ["--force"]):
        line = one_line_exit_2(runner.invoke(app, ["init", str(tmp_path / "d"), *force]))
        assert line == f"error: path: '{tmp_path / 'd'}' is a folder; give a file name"
    assert list((tmp_path / "d").iterdir()) == []


@pytest.mark.parametrize("command", ["init", "view", "plan"])
def test_a_file_name_the_system_refuses_is_one_line(command: str, tmp_path: Path) -> None:
    name = str(tmp_path / ("x" * 300))
    args = {
        "init": ["init", name],
        "view": ["view", "run_x", "-o", name, "--db", f"sqlite:///{tmp_path}/none.db"],
        "plan": ["plan", str(tmp_path / "team.yaml"), "--goal", "G", "-o", name],
    }[command]
    (tmp_path / "team.yaml").write_text(TEAM)
    if command == "view":
        db, run_id = a_run(tmp_path)
        args = ["view", run_id, "-o", name, "--db", db]
    line = one_line_exit_2(runner.invoke(app, args))
    assert line.endswith(f"cannot write '{name}': File name too long")


def test_plan_never_replaces_a_file_that_appears_while_it_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clearance import runs
    from clearance.testing import FunctionModel

    plan = {"tasks": [{"id": "d", "title": "D", "description": "d", "assignee": "a",
                       "depends_on": []}]}  # fmt: skip
    model = FunctionModel(lambda request: json.dumps(plan), model_id="fake:planner")
    monkeypatch.setattr("clearance.cli._plan.configured_models", lambda options: {
        "fake:planner": model})  # fmt: skip
    output = tmp_path / "plan.yaml"
    planning = runs.plan_only

    async def someone_writes_meanwhile(*args: Any, **kwargs: Any) -> Any:
        output.write_text("written by someone else\n")
        return await planning(*args, **kwargs)

    monkeypatch.setattr(runs, "plan_only", someone_writes_meanwhile)
    (tmp_path / "team.yaml").write_text(TEAM.replace("name: t\n", "name: t\nmodel: fake:planner\n"))
    db = f"sqlite:///{tmp_path}/runs.db"
    result = runner.invoke(app, ["plan", str(tmp_path / "team.yaml"), "--goal", "G",
                                 "-o", str(output), "--db", db])  # fmt: skip
    line = one_line_exit_2(result)
    assert line.startswith(f"error: --output: '{output}' exists: choose another file; the plan")
    assert output.read_text() == "written by someone else\n"


# -- standard output ---------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["schema"], ["graph", "team.yaml"]])
def test_output_to_a_full_disk_is_one_line(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    with open("/dev/full", "wb") as full:
        done = cli(*args, cwd=tmp_path, stdout=full)
    assert error_line(done) == "error: cannot write the output: No space left on device"


def test_text_the_output_encoding_cannot_hold_is_escaped(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(TEAM.replace("title: T", "title: Café 中"))
    done = cli("graph", "team.yaml", cwd=tmp_path, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    assert b"t  [a]  Caf\\xe9 \\u4e2d" in done.stdout
    name = os.fsencode("\udcffteam.yaml")  # a file name that is not UTF-8
    done = cli("init", name, cwd=tmp_path, env={"PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 0, done.stderr
    assert b"wrote \\udcffteam.yaml" in done.stdout
    assert (tmp_path / os.fsdecode(name)).read_text().startswith("# yaml-language-server")


# -- team files --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    [
        "9" * 5000,  # past Python's 4,300-digit limit: was ValueError
        "1" + "_0" * 3000,
        "1" + ":59" * 200_000,  # base 60: quadratic time, then a ValueError
        "1" + ":59" * 300 + ".5",  # base 60 float: was OverflowError
    ],
)
def test_a_number_python_will_not_read_is_one_line(number: str, tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(f"max_concurrency: {number}\n" + TEAM)
    started = time.monotonic()
    line = one_line_exit_2(runner.invoke(app, ["graph", str(team)]))
    assert time.monotonic() - started < 5
    assert line == f"error: {team}: the number on line 1 is over 400 characters long"


# -- text that is not UTF-8 --------------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "verify", "view"])
def test_a_run_id_that_is_not_utf8_is_one_line(command: str, tmp_path: Path) -> None:
    db, run_id = a_run(tmp_path)
    done = cli(command, os.fsencode(run_id[:6] + "\udcff"), "--db", db, cwd=tmp_path)
    assert error_line(done).startswith(
        f"error: Invalid value for 'run_id': '{run_id[:6]}\\udcff' is not UTF-8 text (see "
    )


def test_a_goal_that_is_not_utf8_is_refused_before_any_run(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path}/runs.db"
    done = cli("plan", "team.yaml", "--goal", b"\xff", "--model", "fake:x", "--db", db,
               cwd=tmp_path)  # fmt: skip
    line = error_line(done)
    assert line.startswith("error: Invalid value for '--goal': '\\udcff' is not UTF-8 text")
    assert not (tmp_path / "runs.db").exists()
    assert not (tmp_path / "plan.yaml").exists()


# -- environment -------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_base_url_with_a_line_break_in_the_environment_is_one_line(
    provider: str, tmp_path: Path
) -> None:
    (tmp_path / "team.yaml").write_text(
        TEAM.replace("name: t\n", f"name: t\nmodel: {provider}:m\n")
    )
    prefix = provider.upper()
    env = {f"{prefix}_API_KEY": "k", f"{prefix}_BASE_URL": "http://127.0.0.1:1/v1\n"}
    done = cli("graph", "--estimate", "team.yaml", cwd=tmp_path, env=env)
    assert error_line(done) == (
        f"error: base_url: {prefix}_BASE_URL 'http://127.0.0.1:1/v1\\n' holds a control "
        "character: not a URL"
    )


def test_memory_at_a_name_the_system_refuses_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/{'m' * 300}.db"
    line = one_line_exit_2(runner.invoke(app, ["memory", "--memory", url]))
    assert line == f"error: no memory store at {url}: the file does not exist"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["verify", "RUN", "--store", "sqlite:///{long}"],
         "error: the run's store at sqlite:///{long} is unreachable: no such file; give it "
         "with --store URL"),
        (["verify", "RUN", "--memory", "sqlite:///{long}"],
         "error: the run's memory at sqlite:///{long} is unreachable: no such file; give it "
         "with --memory URL"),
        (["plan", "{team}", "--goal", "G", "--db", "sqlite:///{long}/r.db"],
         "error: --db: folder '{long}' does not exist"),
        (["graph", "{team}", "--input", "{long}"],
         "error: {team}: input: input folder '{long}' does not exist"),
        (["graph", "{team}", "--input", "~no-such-user-here/in"],
         "error: {team}: input: input folder '~no-such-user-here/in' does not exist"),
    ],
)  # fmt: skip
def test_names_the_system_refuses_in_options_are_one_line(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    db, run_id = a_run(tmp_path)
    fill = {"long": str(tmp_path / ("n" * 300)), "team": str(tmp_path / "team.yaml")}
    argv = [a.format(**fill).replace("RUN", run_id) for a in args]
    if args[0] == "verify":
        argv += ["--db", db]
    line = one_line_exit_2(runner.invoke(app, argv))
    assert line == expected.format(**fill)


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_init_never_writes_the_team_file_where_its_schema_goes(
    force: list[str], tmp_path: Path
) -> None:
    target = tmp_path / "team-file.schema.json"
    line = one_line_exit_2(runner.invoke(app, ["init", str(target), *force]))
    assert line == (
        "error: path: team-file.schema.json is the schema file init writes beside the team "
        "file; give the team file another name"
    )
    assert list(tmp_path.iterdir()) == []
