"""Item 14: caps apply while reading; huge files, FIFOs and devices cost nothing and never hang.

A 2 GiB sparse file (no disk used) is refused or truncated after reading at most the cap,
checked with ``tracemalloc`` (memory) and a deadline (time); a FIFO or a link to
``/dev/zero`` in the project is refused without blocking.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from clearance import ConfigError, FileCaps, LimitExceeded, PathEscapeError
from clearance._core.confined import read_bytes_confined
from clearance._orchestration.files import read_task_files
from clearance.subagents import ArchitecturalContext, ContextIsolationManager, Workspace

HUGE = 2 * 1024**3


@pytest.fixture
def huge(project: Path) -> str:
    """``big.txt`` in the project: 16 KiB of text, then sparse zeros up to 2 GiB (no disk)."""
    path = project / "big.txt"
    path.write_bytes(b"line of text\n" * 1300)
    os.truncate(path, HUGE)
    return "big.txt"


def cheaply(fn: Callable[[], object]) -> object:
    """Run ``fn``; assert it took under 2 s and peaked under 8 MiB of Python memory."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        try:
            outcome: object = fn()
        except Exception as exc:  # handed back to the test
            outcome = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 2.0
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes: the file was read past its cap"
    return outcome


def test_a_2gib_file_is_refused_at_its_true_size_without_reading_it(
    project: Path, huge: str
) -> None:
    manager = ContextIsolationManager(project, file_caps=FileCaps(max_file_bytes=1000))
    error = cheaply(lambda: manager.create_isolated_context("t", "x", [huge]))
    assert isinstance(error, LimitExceeded)
    assert (error.limit, error.value, error.maximum) == ("max_file_bytes", HUGE, 1000)

    error = cheaply(lambda: read_task_files(project, [huge], max_file_bytes=4096))
    assert isinstance(error, LimitExceeded) and error.value == HUGE


def test_a_2gib_file_is_truncated_to_its_cap(project: Path, huge: str) -> None:
    caps = FileCaps(max_file_bytes=2000, on_oversize="truncate")
    manager = ContextIsolationManager(project, file_caps=caps)
    context = cheaply(lambda: manager.create_isolated_context("t", "x", [huge]))
    text = context.file_contents[huge]  # type: ignore[attr-defined]
    assert text.startswith("line of text\n") and len(text.encode()) <= 2000
    assert f"of {HUGE} bytes]" in text


def test_the_confined_reader_never_reads_past_the_cap(project: Path, huge: str) -> None:
    read = cheaply(lambda: read_bytes_confined(project, huge, max_bytes=100))
    assert (len(read.data), read.size, read.truncated) == (100, HUGE, True)  # type: ignore[attr-defined]


def test_a_workspace_read_is_capped(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "agent")
    ws.write_output("log.txt", "x")
    os.truncate(ws.outputs_dir / "log.txt", HUGE)
    error = cheaply(lambda: ws.read_text("outputs/log.txt", max_bytes=1024))
    assert isinstance(error, LimitExceeded) and error.value == HUGE


def test_a_fifo_in_the_project_is_refused_without_hanging(
    project: Path, no_hang: Callable[..., object]
) -> None:
    for name in ("pipe.txt", ".editorconfig", "requirements.txt", "CONTRIBUTING.md"):
        os.mkfifo(project / name)
    error = no_hang(lambda: read_task_files(project, ["pipe.txt"]))
    assert isinstance(error, ConfigError) and "FIFO" in str(error)
    error = no_hang(
        lambda: ContextIsolationManager(project).create_isolated_context("t", "x", ["pipe.txt"])
    )
    assert isinstance(error, ConfigError) and "FIFO" in str(error)
    arch = no_hang(lambda: ArchitecturalContext.from_project(project))
    assert isinstance(arch, ArchitecturalContext)  # the scan skips them


def test_a_link_to_dev_zero_is_refused_without_hanging(
    project: Path, no_hang: Callable[..., object]
) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this system")
    (project / "zero.txt").symlink_to("/dev/zero")
    (project / "requirements.txt").symlink_to("/dev/zero")
    error = no_hang(lambda: read_task_files(project, ["zero.txt"]))
    assert isinstance(error, PathEscapeError)
    assert isinstance(no_hang(lambda: ArchitecturalContext.from_project(project)),
                      ArchitecturalContext)  # fmt: skip
    # A device met beneath the root itself is refused as not a regular file.
    error = no_hang(lambda: read_bytes_confined("/dev", "zero", max_bytes=10))
    assert isinstance(error, ConfigError) and "device" in str(error)


def test_a_fifo_is_never_overwritten_by_a_workspace_write(
    tmp_path: Path, no_hang: Callable[..., object]
) -> None:
    ws = Workspace(tmp_path / "agent")
    os.mkfifo(ws.outputs_dir / "pipe.txt")
    error = no_hang(lambda: ws.write_output("pipe.txt", "data"))
    assert isinstance(error, ConfigError)
