"""`clearance run` keeps what came before the run out of the garbage collector's sight."""

from __future__ import annotations

import gc

import pytest
import typer
from rich.console import Console

from clearance.cli._progress import RunProgress
from clearance.cli._run import _run_until_interrupted


def test_a_run_holds_what_came_before_it_out_of_the_collectors_sight_and_gives_it_back():
    """`clearance run` freezes the objects made before the run (`gc.freeze`) and unfreezes
    them after it, whether the run returns, fails or is interrupted."""
    seen: list[int] = []
    progress = RunProgress(Console(record=True))

    async def work(outcome: BaseException | None) -> str:
        seen.append(gc.get_freeze_count())
        if outcome is not None:
            raise outcome
        return "done"

    assert gc.get_freeze_count() == 0
    assert _run_until_interrupted(work(None), progress, "sqlite:///x.db", heartbeat=True) == "done"  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        _run_until_interrupted(
            work(RuntimeError("boom")), progress, "sqlite:///x.db", heartbeat=True
        )  # type: ignore[arg-type]
    with pytest.raises(typer.Exit):
        _run_until_interrupted(
            work(KeyboardInterrupt()), progress, "sqlite:///x.db", heartbeat=True
        )  # type: ignore[arg-type]
    assert len(seen) == 3 and all(count > 0 for count in seen)  # frozen during each run
    assert gc.get_freeze_count() == 0  # and given back after each
