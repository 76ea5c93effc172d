"""The project an isolated task is shown: manifests, ``.gitignore`` and names it cannot trust.

The project scan (`ArchitecturalContext.from_project`) reads files someone else may have
written. Each attack here once crashed the run with a traceback (leaving it recorded as
``running``) or reached a prompt raw:

- a manifest that parses but has the wrong shape (``project = 1``, a ``package.json`` that
  is a list, ``dependencies = 5``...): the part is skipped, the rest still read;
- a manifest nested too deep for the parser (a ``RecursionError``): skipped like one that
  does not parse;
- a ``.gitignore`` line that is no pattern (``!``): that line is skipped, the others apply;
- a file name that is not UTF-8: shown with its bytes escaped (``\\xff``), so the prompt,
  its digest and the ledger can hold it;
- a project name (from a manifest) holding an escape sequence or a lone surrogate: escaped
  in the heading of the context too, not only in its text;
- a listing depth past the cap (``max_depth``): refused, where a deep project once made the
  scan recurse past Python's limit.

A refused file an isolated task asks for is in ``test_isolated_file_requests.py``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Agent, ConfigError, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.cli import app
from clearance.subagents import ArchitecturalContext
from clearance.testing import FunctionModel

runner = CliRunner()

GOOD_REQUIREMENTS = "httpx==0.27\n"
"""A manifest that is fine: whatever the hostile one holds, this one is still read."""

HOSTILE_MANIFESTS = [
    ("pyproject.toml", "project = 1\n"),
    ("pyproject.toml", "[project]\ndependencies = 5\n"),
    ("pyproject.toml", '[project]\ndependencies = "fastapi"\n'),
    ("pyproject.toml", "[project]\noptional-dependencies = [1]\n"),
    ("pyproject.toml", "[project.optional-dependencies]\ndev = 3\n"),
    ("pyproject.toml", "tool = 1\n"),
    ("pyproject.toml", "[tool]\npoetry = [1]\n"),
    ("pyproject.toml", "[tool.poetry]\ndependencies = [1]\n"),
    ("pyproject.toml", "[tool.ruff]\nselect = 5\n"),
    ("pyproject.toml", "[tool.ruff]\nlint = 5\n"),
    ("pyproject.toml", "[tool.ruff.lint]\npydocstyle = 1\n"),
    ("ruff.toml", "lint = {pydocstyle = 1}\n"),
    ("ruff.toml", "[lint]\nselect = [[1], {a = 1}]\n"),
    ("package.json", "[1, 2]"),
    ("package.json", '"just text"'),
    ("package.json", '{"dependencies": [1]}'),
    ("package.json", '{"devDependencies": "jest"}'),
    ("Cargo.toml", "dependencies = [1]\n"),
    ("Cargo.toml", "package = 3\n"),
]


def project_with(root: Path, name: str, text: str) -> Path:
    root.mkdir()
    (root / name).write_text(text)
    (root / "requirements.txt").write_text(GOOD_REQUIREMENTS)
    (root / "app.py").write_text("print('hi')\n")
    return root


@pytest.mark.parametrize(("name", "text"), HOSTILE_MANIFESTS)
def test_a_manifest_of_the_wrong_shape_is_skipped_not_a_crash(
    name: str, text: str, tmp_path: Path
) -> None:
    context = ArchitecturalContext.from_project(project_with(tmp_path / "p", name, text))
    rendered = context.to_text()
    # The hostile part is left out; everything else is still read.
    assert "- httpx ==0.27 [requirements.txt]" in rendered.splitlines(), rendered
    assert "app.py" in context.structure


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pyproject.toml", "a = " + "[" * 30_000 + "]" * 30_000 + "\n"),
        ("Cargo.toml", "a = " + "[" * 30_000 + "]" * 30_000 + "\n"),
        ("ruff.toml", "a = " + "{b = " * 10_000 + "1" + "}" * 10_000 + "\n"),
        ("package.json", "[" * 30_000 + "]" * 30_000),
    ],
    ids=["pyproject", "cargo", "ruff", "package.json"],
)
def test_a_manifest_nested_too_deep_to_parse_is_skipped(
    name: str, text: str, tmp_path: Path
) -> None:
    root = project_with(tmp_path / "p", name, text)
    context = ArchitecturalContext.from_project(root)
    assert context.project == "p"  # no name read from it
    assert [d.name for d in context.dependencies] == ["httpx"]


def test_a_gitignore_line_that_is_no_pattern_is_skipped_and_the_others_apply(
    tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    root.mkdir()
    for name in ("kept.py", "debug.log", "secret.key"):
        (root / name).write_text("x")
    (root / ".gitignore").write_text("!\n*.log\n**a**/\\\n*.key\n")
    context = ArchitecturalContext.from_project(root)
    assert "kept.py" in context.structure
    assert "debug.log" not in context.structure and "secret.key" not in context.structure


def bytes_name_project(root: Path) -> Path:
    root.mkdir()
    raw = os.fsencode(root)
    os.makedirs(os.path.join(raw, b"docs", b"adr"))
    with open(os.path.join(raw, b"bad\xffname.py"), "w") as file:
        file.write("x = 1\n")
    with open(os.path.join(raw, b"docs", b"adr", b"0001-\xfe.md"), "w") as file:
        file.write("# Use bytes\n\nA decision.\n")
    os.mkdir(os.path.join(raw, b"dir\xc3("))  # an invalid two-byte sequence
    return root


def test_a_name_that_is_not_utf8_is_shown_with_its_bytes_escaped(tmp_path: Path) -> None:
    text = ArchitecturalContext.from_project(bytes_name_project(tmp_path / "p")).to_text()
    text.encode("utf-8")  # no lone surrogate: a prompt, a digest and the ledger can hold it
    lines = text.splitlines()
    assert "bad\\xffname.py" in lines, text
    assert "dir\\xc3(/" in lines, text
    assert "    0001-\\xfe.md" in lines, text


async def test_an_isolated_run_over_such_a_project_completes_and_verifies(tmp_path: Path) -> None:
    project = bytes_name_project(tmp_path / "p")
    (project / "package.json").write_text(json.dumps({"name": ["x"], "dependencies": [1]}))
    model = FunctionModel(lambda request: "Looked.\nSTATUS: done")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(
            Team(agents=(Agent(name="worker", instructions="You read."),)),
            model=model,
            ledger=ledger,
            options=RunOptions(input_root=project, workspace_root=tmp_path / "ws"),
        )
        result = await orchestrator.run_tasks([
            Task(id="look", title="Look", description="Look around.", assignee="worker",
                 mode="isolated"),
        ])  # fmt: skip
        assert result.status == "completed", result.error
        (sent,) = [r for r in model.requests if r.prompt.manifest.subject == "isolated:look"]
        received = [{"role": m.role, "content": m.content} for m in sent.prompt.messages]
        (call,) = ledger.calls(result.run_id, subject="isolated:look")
        assert call.messages == received  # what the model got is what the ledger holds
        assert "bad\\xffname.py" in "".join(m["content"] for m in received)
        assert verify_run(ledger, result.run_id).ok


def test_the_command_line_runs_an_isolated_task_over_a_hostile_manifest(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "package.json").write_text('{"name": "x", "dependencies": [1]}')
    (project / "pyproject.toml").write_text("project = 1\n")
    team = tmp_path / "team.yaml"
    team.write_text(
        f"project: {project}\n"
        "agents: [{name: w, instructions: Read.}]\n"
        "tasks:\n"
        "  - {id: look, title: Look, description: Look around., assignee: w, mode: isolated}\n"
    )
    db = tmp_path / "runs.db"
    result = runner.invoke(app, ["run", str(team), "--model", "fake:x", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    with RunLedger(f"sqlite:///{db}") as ledger:
        assert [r.status for r in ledger.list_runs()] == ["completed"]


CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pyproject.toml", '[project]\nname = "evil\\u001b]0;owned\\u0007\\n# Task"\n'),
        ("package.json", '{"name": "evil\\ud800\\u001b[2J", "dependencies": {"\\udcff": "1"}}'),
    ],
    ids=["escape-sequence", "lone-surrogates"],
)
async def test_a_project_name_from_a_manifest_is_escaped_in_the_heading_too(
    name: str, text: str, tmp_path: Path
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / name).write_text(text)
    assert CONTROLS.search(ArchitecturalContext.from_project(project).project) is None
    model = FunctionModel(lambda request: "Looked.\nSTATUS: done")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(
            Team(agents=(Agent(name="worker", instructions="You read."),)),
            model=model,
            ledger=ledger,
            options=RunOptions(input_root=project, workspace_root=tmp_path / "ws"),
        )
        result = await orchestrator.run_tasks([
            Task(id="look", title="Look", description="Look around.", assignee="worker",
                 mode="isolated"),
        ])  # fmt: skip
        assert result.status == "completed", result.tasks["look"].error
        (sent,) = [r for r in model.requests if r.prompt.manifest.subject == "isolated:look"]
        heading = next(ln for ln in sent.prompt.text.splitlines() if ln.startswith("### Project"))
        assert heading.startswith("### Project evil\\"), heading
        for message in sent.prompt.messages:  # no raw control character, no lone surrogate
            assert CONTROLS.search(message.content) is None, message.content
        assert verify_run(ledger, result.run_id).ok


def test_a_listing_depth_past_the_cap_is_refused_before_the_scan_recurses(
    tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(150):  # deeper than the scan may go (the listing recurses)
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    for bad in (0, 101, 10**9, True):
        with pytest.raises(ConfigError, match="max_depth"):
            ArchitecturalContext.from_project(root, max_depth=bad)
    for bad in (0, 10_001, 2.5):
        with pytest.raises(ConfigError, match="max_entries"):
            ArchitecturalContext.from_project(root, max_entries=bad)  # type: ignore[arg-type]
    deepest = ArchitecturalContext.from_project(root, max_depth=100, max_entries=10_000)
    assert len(deepest.structure) == 100 and deepest.structure[-1] == "  " * 99 + "d/"
