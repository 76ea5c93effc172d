"""A new user's first hour: ``clearance init``, edit the starter as docs/team-file.md says, run.

Run as a user runs it: the installed ``clearance`` command (a script outside the project, so
the current folder is not on ``sys.path`` the way it is for ``python -m``), from the folder
that holds the team file and its tool module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

EDITS = """\
  - id: review
    title: Review the note
    description: Check the draft; count its words with the word_count tool.
    assignee: critic
    depends_on: [draft]
"""

CRITIC = """\
  - name: critic
    instructions: You check a note for mistakes and say what to fix, in three lines.
    tools: [word_count]
    memory: {recall: 2, record: result}

tools:
  word_count: mytools:word_count

coordinator:"""

TOOL = '''\
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())
'''


def clearance(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``clearance ARGS`` as the installed command runs it, in ``project``."""
    launcher = project.parent / "bin" / "clearance"
    launcher.parent.mkdir(exist_ok=True)
    launcher.write_text("import sys\nfrom clearance.cli import main\nsys.exit(main())\n")
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200")
    return subprocess.run(
        [sys.executable, str(launcher), *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the starter team, edited: a third agent with a tool and memory."""
    folder = tmp_path / "project"
    folder.mkdir()
    assert clearance(folder, "init").returncode == 0
    team = (folder / "team.yaml").read_text()
    team = team.replace("coordinator:", CRITIC, 1) + EDITS
    (folder / "team.yaml").write_text(team)
    (folder / "mytools.py").write_text(TOOL)
    return folder


def test_a_tool_module_in_the_current_folder_imports_from_the_installed_command(
    project: Path,
) -> None:
    done = clearance(project, "run", "team.yaml", "--model", "fake:try", "--db", "sqlite:///r.db")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "status: completed" in done.stdout


def test_the_current_folder_never_shadows_an_installed_module(project: Path) -> None:
    (project / "yaml.py").write_text("raise SystemExit('the yaml in the folder was imported')\n")
    done = clearance(project, "run", "team.yaml", "--model", "fake:try", "--db", "sqlite:///r.db")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_current_folder_is_never_searched_for_other_modules(project: Path) -> None:
    """Only the module the team file names comes from the folder, which may be under review.

    A file there named like an optional dependency is never imported in its place: the
    folder is not on ``sys.path`` (the tool module checks when it is imported, at load).
    """
    probe = """
import os, sys
on_path = [p for p in sys.path if os.path.abspath(p or os.curdir) == os.getcwd()]
if on_path:
    raise SystemExit(f"the current folder is on sys.path: {on_path}")

def word_count(text: str) -> int:
    return len(text.split())
"""
    (project / "mytools.py").write_text(probe)
    optional = project / "sentence_transformers.py"
    optional.write_text("raise SystemExit('imported from the folder')\n")
    done = clearance(project, "run", "team.yaml", "--model", "fake:try", "--db", "sqlite:///r.db")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "status: completed" in done.stdout
    # ``python -m clearance`` too, though ``-m`` puts the current folder first on sys.path.
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200")
    args = ["run", "team.yaml", "--model", "fake:try", "--db", "sqlite:///m.db"]
    module = subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert module.returncode == 0, module.stdout + module.stderr
    assert "status: completed" in module.stdout


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("assignee: critic", "assignee: critc"),
         "error: bad.yaml: tasks.review.assignee: task 'review' is assigned to unknown agent "
         "'critc' (agents: critic, researcher, writer)"),
        (("tools: [word_count]", "tools: [word_cnt]"),
         "error: bad.yaml: agents.critic.tools: unknown tool 'word_cnt'"),
    ],
)  # fmt: skip
def test_a_mistake_in_the_team_file_names_the_file_and_the_key(
    project: Path, edit: tuple[str, str], expected: str
) -> None:
    (project / "bad.yaml").write_text((project / "team.yaml").read_text().replace(*edit))
    done = clearance(project, "run", "bad.yaml", "--model", "fake:try", "--db", "sqlite:///r.db")
    assert done.returncode == 2, done.stdout + done.stderr
    assert expected in " ".join((done.stdout + done.stderr).split())
    assert "Traceback" not in done.stderr


def test_a_bad_model_names_the_option_or_the_file_it_came_from(project: Path) -> None:
    given = clearance(project, "run", "team.yaml", "--model", "fak:try", "--db", "sqlite:///r.db")
    assert given.returncode == 2
    assert "error: --model: model: unknown model provider 'fak'" in given.stderr
    team = (project / "team.yaml").read_text()
    (project / "m.yaml").write_text(team.replace("model: llama-cpp:smollm2", "model: fak:x", 1))
    named = clearance(project, "run", "m.yaml", "--db", "sqlite:///r.db")
    assert named.returncode == 2
    assert "error: m.yaml: model: unknown model provider 'fak'" in named.stderr
