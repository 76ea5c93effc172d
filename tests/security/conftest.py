"""Shared pieces of the attack tests: a project folder and a secret outside it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def canary() -> str:
    """Written only in files outside the project; must never reach a prompt or a result."""
    return "CANARY-7f3a9c"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small project: one source file and a README."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n")
    (root / "README.md").write_text("# Demo\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the project, holding secrets (every file mentions the canary)."""
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def _run_with_timeout(fn: Callable[[], object], timeout_s: float = 5.0) -> object:
    box: list[object] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"still running after {timeout_s} s (a read blocked)"
    return box[0]


@pytest.fixture
def no_hang() -> Callable[..., object]:
    """Run a callable in a daemon thread; fail the test if it does not return in time.

    The callable's return value, or the exception it raised (not re-raised), is returned.
    """
    return _run_with_timeout
