"""Item 2: swapping a folder for a link while a path is being opened never escapes the root.

Two kinds of attack per boundary (task files, isolated files, the project scan, workspace
writes):

- deterministic: the swap happens exactly between the moment the path was checked and the
  moment the folder is opened (the attacker is given control at each ``open`` call);
- a second thread flips the folder and the link in a loop while the reads or writes run.

In every case the secret outside is never read and nothing is written outside.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from clearance import ClearanceError, PathEscapeError
from clearance._orchestration.files import read_task_files
from clearance.subagents import ArchitecturalContext, ContextIsolationManager, Workspace

ITERATIONS = 400


def swap_to_link(folder: Path, target: Path) -> None:
    """Replace ``folder`` by a link to ``target``; the real folder is kept aside."""
    folder.rename(folder.with_name(folder.name + ".real"))
    folder.symlink_to(target, target_is_directory=True)


@contextmanager
def attacker_at_open(
    monkeypatch: pytest.MonkeyPatch, name: str, attack: Callable[[], None]
) -> Iterator[list[str]]:
    """Run ``attack`` once, just before the first ``open`` of a path ending in ``name``.

    Yields the names opened, so the test can show the attack point was reached.
    """
    real_open = os.open
    opened: list[str] = []

    def hooked(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(os.fspath(path))
        if os.fspath(path).endswith(name) and opened.count(os.fspath(path)) == 1:
            attack()
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", hooked)
    yield opened
    monkeypatch.undo()


@contextmanager
def flipper(folder: Path, target: Path) -> Iterator[None]:
    """A thread that keeps swapping ``folder`` between the real folder and a link."""
    real = folder.with_name(folder.name + ".real")
    link = folder.with_name(folder.name + ".link")
    link.symlink_to(target, target_is_directory=True)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for src, dst in ((folder, real), (link, folder), (folder, link), (real, folder)):
                with suppress(OSError):
                    os.rename(src, dst)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


@pytest.fixture
def layout(project: Path, outside: Path, canary: str) -> tuple[Path, Path]:
    """``project/data/notes.txt`` (harmless) and ``outside/notes.txt`` (the secret)."""
    (project / "data").mkdir()
    (project / "data" / "notes.txt").write_text("HARMLESS\n")
    (outside / "notes.txt").write_text(f"KEY={canary}\n")
    return project, outside


READERS: dict[str, Callable[[Path], str]] = {
    "task files": lambda root: read_task_files(root, ["data/notes.txt"])["data/notes.txt"],
    "isolated files": lambda root: (
        ContextIsolationManager(root)
        .create_isolated_context("t", "x", ["data/notes.txt"])
        .file_contents["data/notes.txt"]
    ),
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("moment", ["data", "notes.txt"])
def test_a_swap_just_before_an_open_never_reads_outside(
    reader: str, moment: str, layout: tuple[Path, Path], canary: str, monkeypatch: Any
) -> None:
    project, outside = layout
    attack = lambda: swap_to_link(project / "data", outside)  # noqa: E731
    with attacker_at_open(monkeypatch, moment, attack) as opened:
        try:
            text = READERS[reader](project)
        except ClearanceError as exc:
            text = str(exc)
            assert isinstance(exc, PathEscapeError)  # swapped before "data" was opened
    assert any(name.endswith(moment) for name in opened), "the attack point was never reached"
    assert os.path.islink(project / "data")  # the swap did happen
    assert canary not in text
    if moment == "notes.txt":
        assert text == "HARMLESS\n"  # the folder was already open: the real file is read


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_folder_flipping_with_a_link_never_leaks(
    reader: str, layout: tuple[Path, Path], canary: str
) -> None:
    project, outside = layout
    outcomes: set[str] = set()
    with flipper(project / "data", outside):
        for i in range(ITERATIONS * 10):
            try:
                text = READERS[reader](project)
            except ClearanceError as exc:
                text = type(exc).__name__
            assert canary not in text
            outcomes.add(text)
            if i >= ITERATIONS and len(outcomes) > 1:
                break
    assert outcomes - {"HARMLESS\n"}, "the flipping never interfered; the test proves nothing"


def test_the_project_scan_never_reads_a_swapped_folder(
    project: Path, outside: Path, canary: str, monkeypatch: Any
) -> None:
    adr = project / "docs" / "adr"
    adr.mkdir(parents=True)
    (adr / "0001-real.md").write_text("# Real decision\n\nStatus: Accepted\n\nReal.\n")
    (outside / "0001-real.md").write_text(f"# {canary}\n\nStatus: Accepted\n\n{canary}\n")
    attack = lambda: swap_to_link(adr, outside)  # noqa: E731
    with attacker_at_open(monkeypatch, "adr", attack) as opened:
        arch = ArchitecturalContext.from_project(project)
    assert "adr" in opened and os.path.islink(adr)
    assert canary not in arch.to_text()

    os.unlink(adr)
    os.rename(adr.with_name("adr.real"), adr)
    with flipper(adr, outside):
        for _ in range(ITERATIONS // 4):
            assert canary not in ArchitecturalContext.from_project(project).to_text()


def test_a_workspace_write_never_lands_outside(
    tmp_path: Path, outside: Path, monkeypatch: Any
) -> None:
    ws = Workspace(tmp_path / "agent-a")
    ws.write_output("sub/first.txt", "one")
    sub = ws.outputs_dir / "sub"
    attack = lambda: swap_to_link(sub, outside)  # noqa: E731
    with attacker_at_open(monkeypatch, "sub", attack) as opened, pytest.raises(PathEscapeError):
        ws.write_output("sub/planted.txt", "PLANTED")
    assert "sub" in opened
    assert list(outside.iterdir()) == []

    os.unlink(sub)
    os.rename(sub.with_name("sub.real"), sub)
    with flipper(sub, outside):
        for i in range(ITERATIONS):
            with suppress(ClearanceError):
                ws.write_output(f"sub/out-{i}.txt", "OUT")
    assert list(outside.iterdir()) == []
