"""Item 1: files the project reads on a user's behalf never follow a link out of the project.

Each attack plants a link in the project to a secret outside it (or to the process's own
environment) and checks that the secret reaches neither the architectural context, nor the
prompt of an isolated subagent, nor a task's prompt. Each test first shows the same content
as a real file *does* get through, so a scan that stopped reading would not pass silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clearance import (
    Agent,
    ContextBuilder,
    Orchestrator,
    PathEscapeError,
    RunOptions,
    Task,
    TaskStatus,
    Team,
)
from clearance._orchestration.files import read_task_files
from clearance.subagents import ArchitecturalContext, ContextIsolationManager
from clearance.testing import FunctionModel

AGENT = Agent(name="worker", instructions="You work.")

# Each manifest, written so that the scan would quote the canary if it read the file.
MANIFESTS = {
    ".editorconfig": "[*]\nindent_style = {canary}\n",
    "requirements.txt": "{canary}==1.0\n",
    "requirements-dev.txt": "{canary}-dev==2.0\n",
    "CONTRIBUTING.md": "# Contributing\n\nNaming: use {canary} everywhere.\n",
    "pyproject.toml": '[project]\nname = "{canary}"\ndependencies = ["{canary}-dep"]\n'
    '[tool.ruff]\nline-length = 100\n[tool.ruff.lint]\nselect = ["{canary}"]\n',
    "ruff.toml": 'line-length = 99\n[lint]\nselect = ["{canary}"]\n',
    "package.json": '{{"name": "{canary}", "dependencies": {{"{canary}-js": "1"}}}}',
    "Cargo.toml": '[package]\nname = "{canary}"\n[dependencies]\n{canary}-rs = "1"\n',
    "go.mod": "module example.com/{canary}\nrequire github.com/{canary}/x v1.0.0\n",
}


def everything_a_subagent_sees(project: Path) -> str:
    """The architectural context and a full isolated prompt, as one text."""
    arch = ArchitecturalContext.from_project(project)
    manager = ContextIsolationManager(project)
    context = manager.create_isolated_context("t", "Do the task.", [])
    prompt = ContextBuilder(count_tokens=len).build_isolated_prompt(context, agent=AGENT)
    return "\n".join([arch.to_text(), repr(arch), *(m.content for m in prompt.messages)])


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_a_linked_manifest_never_reaches_the_context(
    name: str, project: Path, outside: Path, canary: str
) -> None:
    content = MANIFESTS[name].format(canary=canary)
    (project / name).write_text(content)
    assert canary in everything_a_subagent_sees(project)  # read when it is a real file

    (project / name).unlink()
    (outside / name).write_text(content)
    (project / name).symlink_to(outside / name)
    assert canary not in everything_a_subagent_sees(project)


def test_linked_folders_of_adrs_and_docs_are_not_read(
    project: Path, outside: Path, canary: str
) -> None:
    adr = f"# Use {canary}\n\nStatus: Accepted\n\nWe decided on {canary}.\n"
    (outside / "adr").mkdir()
    (outside / "adr" / "0001-secret.md").write_text(adr)
    (outside / "CONTRIBUTING.md").write_text(f"Naming: {canary}\n")
    (project / "docs").mkdir()
    (project / "docs" / "adr").symlink_to(outside / "adr")
    (project / "adr").symlink_to(outside / "adr", target_is_directory=True)
    (project / "docs" / "CONTRIBUTING.md").symlink_to(outside / "CONTRIBUTING.md")
    (project / "linked-tree").symlink_to(outside)
    seen = everything_a_subagent_sees(project)
    assert canary not in seen and "0001-secret" not in seen and "linked-tree" not in seen


def test_a_link_to_the_process_environment_is_refused(project: Path) -> None:
    environ = Path("/proc/self/environ")
    if not environ.is_file():
        pytest.skip("no /proc/self/environ on this system")
    values = [
        entry.partition(b"=")[2].decode("utf-8", "replace")
        for entry in environ.read_bytes().split(b"\0")
    ]
    secrets = [v for v in values if len(v) >= 12]
    assert secrets, "the test needs some environment value to look for"
    for name in (".editorconfig", "requirements.txt", "CONTRIBUTING.md", "environ.txt"):
        (project / name).symlink_to(environ)
    seen = everything_a_subagent_sees(project)
    assert not [v for v in secrets if v in seen]
    with pytest.raises(PathEscapeError):
        ContextIsolationManager(project).create_isolated_context("t", "x", ["environ.txt"])
    with pytest.raises(PathEscapeError):
        read_task_files(project, ["environ.txt"])


@pytest.mark.parametrize("via", ["file", "folder", "relative", "chain"])
def test_task_and_isolated_files_refuse_every_way_out(
    via: str, project: Path, outside: Path, canary: str
) -> None:
    (outside / "secret.txt").write_text(f"KEY={canary}\n")
    if via == "file":
        (project / "notes.txt").symlink_to(outside / "secret.txt")
        rel = "notes.txt"
    elif via == "folder":
        (project / "data").symlink_to(outside)
        rel = "data/secret.txt"
    elif via == "relative":
        (project / "src" / "notes.txt").symlink_to("../../outside/secret.txt")
        rel = "src/notes.txt"
    else:  # a link to a link inside the project that leads out
        (project / "hop").symlink_to(outside / "secret.txt")
        (project / "src" / "notes.txt").symlink_to(project / "hop")
        rel = "src/notes.txt"
    with pytest.raises(PathEscapeError):
        read_task_files(project, [rel])
    with pytest.raises(PathEscapeError):
        ContextIsolationManager(project).create_isolated_context("t", "x", [rel])


async def test_a_run_with_a_linked_task_file_fails_the_task_and_never_sends_the_secret(
    project: Path, outside: Path, canary: str, ledger: object
) -> None:
    (outside / "secret.txt").write_text(f"KEY={canary}\n")
    (project / "notes.txt").symlink_to(outside / "secret.txt")
    (project / "plain.txt").write_text("PLAIN-NOTES\n")
    team = Team(agents=(AGENT,), name="t")
    model = FunctionModel(lambda request: "done")
    orch = Orchestrator(team, model=model, ledger=ledger, options=RunOptions(input_root=project))  # type: ignore[arg-type]
    tasks = [
        Task(id="leak", title="Leak", description="Read.", assignee="worker",
             files=("notes.txt",)),
        Task(id="fine", title="Fine", description="Read.", assignee="worker",
             files=("plain.txt",)),
    ]  # fmt: skip
    result = await orch.run_tasks(tasks)
    assert result.tasks["leak"].status is TaskStatus.FAILED
    assert "escapes" in (result.tasks["leak"].error or "")
    assert result.tasks["fine"].status is TaskStatus.COMPLETED
    sent = "\n".join(m.content for r in model.requests for m in r.prompt.messages)
    assert "PLAIN-NOTES" in sent and canary not in sent


def test_inside_links_still_work_for_named_files(project: Path) -> None:
    (project / "src" / "alias.py").symlink_to("app.py")
    (project / "top.py").symlink_to(project / "src" / "app.py")
    (project / "src" / "up.py").symlink_to("../src/../src/app.py")
    files = read_task_files(project, ["src/alias.py", "top.py", "src/up.py"])
    assert set(files.values()) == {"print('hello')\n"}


def test_link_loops_and_bad_names_are_one_line_errors(project: Path) -> None:
    (project / "a").symlink_to("b")
    (project / "b").symlink_to("a")
    for rel in ("a", "src/\x00x", "/etc/passwd", "src/../../x", "C:/x", "\udcff.txt"):
        with pytest.raises(PathEscapeError) as info:
            read_task_files(project, [rel])
        assert "\n" not in str(info.value)
    assert os.path.islink(project / "a")  # the loop itself is left alone
